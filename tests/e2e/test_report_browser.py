"""The HTML report in a real browser (headless Chromium over the DevTools protocol).

Real mouse input: hovering a chart shows values and one cursor on every chart, dragging across a
chart (or the CPU sub-second heatmap) selects a range and redraws the range's flame graphs, a
click on a frame zooms, the search box highlights. The range's sample count is checked against
the raw perf script text of the bundle, read here independently of the report. A screenshot of
each state is written to $PROFILER_SCREENSHOTS (default: the test's tmp dir) for a person to look at.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from profiler.analyzers.analysis import analyze
from profiler.analyzers.series.timeline import Panel

from profiler.bundle import Bundle
from profiler.cli import main
from profiler.renderers.report_html import RENDERER as html
from tests.browser import CHROMIUM, Browser
from tests.conftest import SAMPLES
from tests.workloads import gobuild
from tests.workloads.goservers import GoWorkload, children

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (install.sh --dev installs it)")

PERF = SAMPLES / "perf" / "fio-fsync-and-python-locks"
BCC = SAMPLES / "bcc" / "lock-contend-python"


def shots(tmp_path: Path) -> Path:
    d = Path(os.environ.get("PROFILER_SCREENSHOTS") or tmp_path)
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture
def browser() -> Iterator[Browser]:
    with Browser() as b:
        yield b


@pytest.fixture(scope="module")
def perf_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    a = analyze(Bundle.open(PERF))
    # a panel some other part adds (load throughput): drawn with no change to the page's markup
    n = len(a.timeline.t)
    a.timeline.panels["load_tps"] = Panel("Load throughput (test panel)", "tx/s", {"tps": [100.0 + i for i in range(n)]})
    out = tmp_path_factory.mktemp("report") / "report.html"
    out.write_text(html.render(a), encoding="utf-8")
    return out


def _perf_sample_times() -> list[float]:
    """Every on-CPU sample's time, straight from the bundle's perf script text."""
    text = gzip.decompress((PERF / "cpu.perf.txt.gz").read_bytes()).decode()
    return [float(m.group(1)) for m in re.finditer(r"^\S.*?\s(\d+\.\d+):\s+\d+\s+cpu-clock", text, re.M)]


def test_page_loads_offline_and_draws_every_panel(browser: Browser, perf_page: Path, tmp_path: Path,
                                                  record_property: pytest.RecordProperty) -> None:
    browser.open(perf_page)
    assert browser.errors() == []
    # time to first paint, as the browser measured it (a bound far above the ~0.5-2 s seen on a
    # loaded 2-CPU VM: a page that parses its data before painting anything would cross it)
    paint = None
    for _ in range(100):  # the entry appears once the frame is painted, after the load event
        paint = browser.js("(performance.getEntriesByName('first-contentful-paint')[0] || {}).startTime")
        if paint is not None:
            break
        time.sleep(0.05)
    record_property("first_contentful_paint_ms", paint)
    record_property("report_bytes", perf_page.stat().st_size)
    assert paint is not None and 0 < paint < 10000, paint
    assert [u for u in browser.requests() if not u.startswith("file:")] == []  # nothing fetched
    panels = browser.js("Object.keys(JSON.parse(document.getElementById('profiler-analysis').textContent)"
                        ".timeline.panels).length")
    drawn = browser.js("document.querySelectorAll('#charts .panel svg.chart').length")
    assert drawn == panels  # every panel, the test's load_tps panel among them
    assert browser.js("document.querySelector('#charts .panel').dataset.panel") == "load_tps"  # load first
    # flame graphs open at the root: the first row is the root frame
    assert browser.js("document.querySelector('#flame-cpu svg text').textContent").startswith("all (")
    browser.screenshot(shots(tmp_path) / "report-whole.png", full_page=True)


def test_hover_shows_values_and_one_cursor(browser: Browser, perf_page: Path) -> None:
    browser.open(perf_page)
    x, y, w, h = browser.box('#charts .panel[data-panel="cpu"] svg.chart')
    browser.mouse("mouseMoved", x + w * 0.5, y + h / 2)
    tip = browser.js("document.querySelector('#charts .panel[data-panel=\"cpu\"] .tip').textContent")
    assert "python3" in tip and "cores" in tip
    visible = browser.js("[...document.querySelectorAll('#charts svg.chart .cursor')]"
                         ".filter(c => c.getAttribute('visibility') === 'visible').length")
    charts = browser.js("document.querySelectorAll('#charts svg.chart').length")
    assert visible == charts  # one cursor across every chart


def test_drag_selects_a_range_and_redraws_the_flame_graphs(browser: Browser, perf_page: Path, tmp_path: Path) -> None:
    browser.open(perf_page)
    whole = browser.js("document.querySelector('#flame-cpu .flame-info').textContent")
    whole_top = browser.js("document.querySelector('#flame-cpu .flame-top table').textContent")
    x, y, w, h = browser.box('#charts .panel[data-panel="cpu"] svg.chart')
    browser.drag(x + w * 0.25, y + h / 2, x + w * 0.55, y + h / 2)
    lo, hi = browser.js("window.profilerReport.state.range")
    assert 0 < lo < hi
    part = browser.js("document.querySelector('#flame-cpu .flame-info').textContent")
    assert part != whole and "in the range" in part
    assert browser.js("document.querySelector('#flame-cpu .flame-top table').textContent") != whole_top
    assert "Selected" in browser.js("document.querySelector('#explore-bar .eb-range').textContent")
    # the count drawn for the range, against the raw samples (the page works in buckets: the
    # range is widened to whole buckets, as FlameScope's are)
    g = browser.js("(() => { const p = JSON.parse(document.getElementById('profiler-page').textContent).flames.cpu;"
                   " return [p.t0, p.bucket]; })()")
    t0 = browser.js("JSON.parse(document.getElementById('profiler-analysis').textContent).timeline.t0")
    b0, b1 = int((lo - g[0]) // g[1]), -int(-(hi - g[0]) // g[1])
    start, end = t0 + g[0] + b0 * g[1], t0 + g[0] + b1 * g[1]
    expected = sum(1 for t in _perf_sample_times() if start <= t < end)
    shown = int(re.match(r"([\d,]+) samples?", part).group(1).replace(",", ""))  # type: ignore[union-attr]
    assert shown == expected
    browser.screenshot(shots(tmp_path) / "report-range.png")
    # back to the whole capture
    browser.click(*browser.center("#explore-bar .clear-range"))
    assert browser.js("window.profilerReport.state.range") is None
    assert browser.js("document.querySelector('#flame-cpu .flame-info').textContent") == whole


def test_click_zooms_and_search_highlights(browser: Browser, perf_page: Path, tmp_path: Path) -> None:
    browser.open(perf_page)
    before = browser.js("document.querySelectorAll('#flame-cpu g.fr').length")
    name = browser.js("document.querySelector('#flame-cpu g.fr[data-node=\"1\"] text').textContent")
    browser.click(*browser.center('#flame-cpu g.fr[data-node="1"] rect'))
    after = browser.js("document.querySelectorAll('#flame-cpu g.fr').length")
    assert after < before  # zoomed into one pool: its frames only
    assert browser.js("document.querySelector('#flame-cpu .flame-detail').textContent").startswith(name)
    browser.js("(() => { const s = document.querySelector('#flame-cpu .flame-search'); s.value = 'fsync';"
               " s.dispatchEvent(new Event('input')); })()")
    assert re.match(r"matched \d", browser.js("document.querySelector('#flame-cpu .flame-match').textContent"))
    assert browser.js("[...document.querySelectorAll('#flame-cpu rect')].some(r => r.getAttribute('fill') === '#e040fb')")
    browser.screenshot(shots(tmp_path) / "report-zoom.png")


def test_heatmap_drag_selects_a_range(browser: Browser, perf_page: Path) -> None:
    browser.open(perf_page)
    browser.center("#cpu-heatmap")
    a = browser.center('#cpu-heatmap rect[data-c="1"][data-r="5"]', scroll=False)
    z = browser.center('#cpu-heatmap rect[data-c="1"][data-r="30"]', scroll=False)
    browser.drag(*a, *z)
    lo, hi = browser.js("window.profilerReport.state.range")
    off = browser.js("JSON.parse(document.getElementById('profiler-page').textContent).explore.cpu_cells.offset")
    assert lo == pytest.approx(off + 1 + 5 / 50) and hi == pytest.approx(off + 1 + 31 / 50)
    assert "in the range" in browser.js("document.querySelector('#flame-cpu .flame-info').textContent")


def test_bcc_report_draws_its_totals(browser: Browser, tmp_path: Path) -> None:
    out = tmp_path / "bcc.html"
    out.write_text(html.render(analyze(Bundle.open(BCC))), encoding="utf-8")
    browser.open(out)
    assert browser.errors() == []
    assert "no times" in browser.js("document.querySelector('#flame-offcpu .flame-info').textContent")
    assert browser.js("document.querySelectorAll('#flame-offcpu g.fr').length") > 10


def test_a_range_without_traced_stacks_says_where_they_are(browser: Browser, tmp_path: Path) -> None:
    out = tmp_path / "convoy.html"
    out.write_text(html.render(analyze(Bundle.open(SAMPLES / "perf" / "fsync-writer-and-lock-convoy"))), encoding="utf-8")
    browser.open(out)
    browser.js("window.profilerReport.setRange([3.8, 6.2])")  # between the duty-cycled off-CPU windows
    info = browser.js("document.querySelector('#flame-offcpu .flame-info').textContent")
    assert info.startswith("0 us in the range") and re.search(r"not measured in this range: .* traced only \d+\.\d-\d+\.\d s", info)
    assert "in the range" in browser.js("document.querySelector('#flame-cpu .flame-info').textContent")
    assert browser.errors() == []


@pytest.mark.skipif(gobuild.go() is None, reason="go is not installed (the Go workload is built by the tests)")
def test_the_goroutine_view_is_the_pages_flame_graph(browser: Browser, tmp_path: Path) -> None:
    """A real Go server (the workload's mutex mode) through attach's server-status: its goroutines
    drawn by the page's flame graph (root first, search, top functions), unmoved by a range."""
    with children(tmp_path) as kids:
        w = GoWorkload("mutex", "-workers", "8", "-hold", "2ms")
        pid = w.start(kids.spawn)
        bundle = tmp_path / "cap"
        assert main(["attach", "--pid", str(pid), "--duration", "3s", "-o", str(bundle), "--no-report",
                     "--collector", "server-status", "--collector", "procfs", "--status-interval", "1s"]) == 0
    out = tmp_path / "go.html"
    assert main(["report", str(bundle), "-o", str(out)]) == 0
    browser.open(out)
    assert browser.errors() == []
    info = browser.js("document.querySelector('#flame-goroutine .flame-info').textContent")
    assert re.match(r"\d+ goroutines \(snapshot at [\d.]+ s: the middle of the window\)", info), info
    assert browser.js("document.querySelector('#flame-goroutine svg text').textContent").startswith("all (")
    names = browser.js("[...document.querySelectorAll('#flame-goroutine g.fr text')].map(t => t.textContent)")
    assert "sync.Mutex.Lock" in names  # the root's children are the waits
    browser.js("(() => { const s = document.querySelector('#flame-goroutine .flame-search'); s.value = 'lockedWork';"
               " s.dispatchEvent(new Event('input')); })()")
    assert re.match(r"matched \d", browser.js("document.querySelector('#flame-goroutine .flame-match').textContent"))
    assert browser.js("document.querySelectorAll('#flame-goroutine .flame-top table tr').length") > 1
    # a range picks the snapshot nearest its middle (each snapshot's time, from the page's data)
    snaps = browser.js("JSON.parse(document.getElementById('profiler-page').textContent).explore.goroutines.snap_t")
    browser.js("window.profilerReport.setRange([1.0, 2.0])")
    nearest = min(snaps, key=lambda t: abs(t - 1.5))
    moved = browser.js("document.querySelector('#flame-goroutine .flame-info').textContent")
    assert f"snapshot at {nearest:.2f} s: the nearest to the range's middle" in moved, (moved, snaps)
    # the server metrics' values in the range: their timeline panel's mean over the range's buckets
    cells = browser.js("[...document.querySelectorAll('td.range-val')].map(td => [td.dataset.panel, td.textContent])")
    tl = json.loads(browser.js("document.getElementById('profiler-analysis').textContent"))["timeline"]
    checked = 0
    for key, text in cells:
        panel = tl["panels"].get(key)
        if panel is None:
            assert text == "not on the timeline"
            continue
        if len(panel["series"]) != 1:
            continue
        vals = [v for v in next(iter(panel["series"].values()))[int(1.0 // tl["step"]):-int(-2.0 // tl["step"])] if v is not None]
        if vals:
            m = re.match(r"([\d.]+)(k|M|G)?", text)
            assert m, (key, text)
            unit = {"k": 1e3, "M": 1e6, "G": 1e9}.get(m.group(2) or "", 1.0)
            shown = float(m.group(1)) * unit
            # as exact as its printed digits: "0.0014" stands for 0.00135-0.00145
            digits = len(m.group(1).partition(".")[2])
            assert shown == pytest.approx(sum(vals) / len(vals), rel=0.02, abs=0.5 * 10 ** -digits * unit) \
                and "scraped" in text, (key, text)
            checked += 1
    assert checked >= 1, cells
    browser.center("#goroutine-flame-section")
    browser.screenshot(shots(tmp_path) / "report-goroutines.png")


def test_no_picture_is_framed_and_nothing_is_drawn_twice(browser: Browser, perf_page: Path) -> None:
    """The IO heatmap and the dip flame graph were SVGs in frames (their own scripts, another
    orientation); every picture is now drawn by the page, once: no frame, no fallback copy."""
    browser.open(perf_page)
    assert browser.js("document.querySelectorAll('iframe, noscript svg').length") == 0
    assert browser.js("document.querySelectorAll('#io-heatmap canvas').length") == 1
