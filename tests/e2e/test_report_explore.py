"""Exploring the HTML report in a real browser (headless Chromium over the DevTools protocol, no
mocks): one selection reaches every view, a thread filter narrows every view, the URL restores a
view, the flame graph views (inverted, callers/callees, the difference of two ranges), and no
element overflows the page at 900 or 1400 pixels (checked from element boxes).

Each view's figure for a range is checked against the bundle's raw members, read here without
the profiler: the perf script text (CPU samples by time and thread), syscalls.csv (calls by
time and thread), the ftrace block trace (IOs paired here by device and sector). Screenshots go
to $PROFILER_SCREENSHOTS (default: the test's tmp dir) for a person to look at.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from profiler.analyzers.analysis import analyze

from profiler.bundle import Bundle
from profiler.renderers.report_html import RENDERER as html
from tests.browser import CHROMIUM, Browser
from tests.conftest import SAMPLES

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (install.sh --dev installs it)")

CONVOY = SAMPLES / "perf" / "fsync-writer-and-lock-convoy"
FIO_TID = 13008  # a fio worker: the writes and their fsyncs
LOCKER = "p:12963:locker"  # the python3 lock convoy's four locker threads


def shots(tmp_path: Path) -> Path:
    d = Path(os.environ.get("PROFILER_SCREENSHOTS") or tmp_path)
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("explore") / "report.html"
    out.write_text(html.render(analyze(Bundle.open(CONVOY))), encoding="utf-8")
    return out


@pytest.fixture
def browser() -> Iterator[Browser]:
    with Browser(width=1400, height=1000) as b:
        yield b


# --------------------------------------------------------------------------- the raw members


def _t0(b: Browser) -> float:
    return float(b.js("JSON.parse(document.getElementById('profiler-analysis').textContent).timeline.t0"))


def _page(b: Browser) -> dict:  # type: ignore[type-arg]
    return json.loads(b.js("document.getElementById('profiler-page').textContent"))


def _cpu_samples() -> list[tuple[float, int]]:
    """(time, tid) of every on-CPU sample, from the perf script text."""
    text = gzip.decompress((CONVOY / "cpu.perf.txt.gz").read_bytes()).decode()
    return [(float(m.group(2)), int(m.group(1)))
            for m in re.finditer(r"^\S.*?\s(?:\d+/)?(\d+)\s+(?:\[\d+\]\s+)?(\d+\.\d+):\s+\d+\s+cpu-clock", text, re.M)]


def _syscalls() -> list[tuple[float, int, float]]:
    with open(CONVOY / "syscalls.csv", newline="") as fh:
        return [(float(r["time"]), int(r["tid"]), float(r["count"])) for r in csv.DictReader(fh)]


def _writes() -> list[tuple[float, int]]:
    """(issue time, tid) of every write IO that completed, paired by device and sector."""
    text = gzip.decompress((CONVOY / "block.trace.gz").read_bytes()).decode()
    line = re.compile(r"-(\d+)\s+\[\d+\]\s+\S+\s+(\d+\.\d+): (block_rq_issue|block_rq_complete): (\d+,\d+) (\S+) .*?\(\) (\d+) \+")
    issued: dict[tuple[str, str], tuple[float, int]] = {}
    out = []
    for m in line.finditer(text):
        tid, t, ev, dev, rwbs, sector = m.groups()
        if "W" not in rwbs or "F" in rwbs:
            continue
        if ev == "block_rq_issue":
            issued[(dev, sector)] = (float(t), int(tid))
        elif (dev, sector) in issued:
            out.append(issued.pop((dev, sector)))
    return out


def _span(b: Browser, lo: float, hi: float, t0_rel: float, width: float) -> tuple[float, float]:
    """A range widened to whole buckets of ``width`` seconds from ``t0_rel`` (as the page does)."""
    b0, b1 = math.floor((lo - t0_rel) / width), math.ceil((hi - t0_rel) / width)
    return t0_rel + b0 * width, t0_rel + b1 * width


def _drag_timeline(b: Browser, a: float, z: float) -> tuple[float, float]:
    """Drag across the CPU chart from fraction ``a`` to ``z`` of its plot: the range selected."""
    x, y, w, h = b.box('#charts .panel[data-panel="cpu"] svg.chart')
    pl, pr = 56, 14
    b.drag(x + pl + (w - pl - pr) * a, y + h / 2, x + pl + (w - pl - pr) * z, y + h / 2)
    lo, hi = b.js("window.profilerReport.state.range")
    return float(lo), float(hi)


def _views(b: Browser) -> dict[str, str]:
    return b.js("""(() => { const t = s => (document.querySelector(s) || {}).textContent || null;
      return {cpu: t('#flame-cpu .flame-info'), cpu_top: t('#flame-cpu .flame-top table'), off: t('#flame-offcpu .flame-info'),
              io: t('#io-stats'), sys: t('#syscall-stats'), bar: t('#explore-bar .eb-sum'), cli: t('#explore-bar .cli'),
              heat: [...document.querySelectorAll('#cpu-heatmap .hm-sel')].filter(r => r.getAttribute('visibility') === 'visible').length,
              iosel: (document.querySelector('#io-heatmap svg .sel') || {getAttribute: () => null}).getAttribute('visibility'),
              tracksel: (document.querySelector('#tracks svg .sel') || {getAttribute: () => null}).getAttribute('visibility')}; })()""")


def _count(text: str, pattern: str) -> int:
    m = re.search(pattern, text)
    assert m, (pattern, text)
    return int(m.group(1).replace(",", ""))


def _write_row(b: Browser) -> int:
    """The IOs of the IO statistics' write row (0 when there is none)."""
    n = b.js("(() => { const r = [...document.querySelectorAll('#io-stats tr')].find(tr => / write$/.test(tr.cells[0].textContent));"
             " return r ? r.cells[1].textContent : '0'; })()")
    return int(str(n).replace(",", ""))


# --------------------------------------------------------------------------- the tests


def test_a_drag_on_the_timeline_updates_every_view(browser: Browser, page: Path, tmp_path: Path) -> None:
    browser.open(page)
    assert browser.errors() == []
    whole = _views(browser)
    lo, hi = _drag_timeline(browser, 0.05, 0.30)
    assert 0 < lo < hi
    part = _views(browser)
    for k in ("cpu", "cpu_top", "off", "io", "sys", "bar", "cli"):
        assert part[k] != whole[k], k  # every view follows the selection
    assert part["heat"] >= 1 and part["iosel"] == "visible" and part["tracksel"] == "visible"
    t0, pg = _t0(browser), _page(browser)
    # on-CPU samples: the range widened to whole buckets of the page's data, against perf script
    g = pg["flames"]["cpu"]
    a, z = _span(browser, lo, hi, g["t0"], g["bucket"])
    assert _count(part["cpu"], r"([\d,]+) samples? in the range") == sum(1 for t, _ in _cpu_samples() if a <= t - t0 < z)
    # IOs: the block trace's writes issued in the range (whole IO columns), paired here
    io = pg["explore"]["io"]
    a, z = _span(browser, lo, hi, io["t0"], io["column"])
    assert _write_row(browser) == sum(1 for t, _ in _writes() if a <= t - t0 < z) > 0
    # syscalls: syscalls.csv rows in the range's timeline buckets; the page says what was measured
    step = json.loads(browser.js("document.getElementById('profiler-analysis').textContent"))["timeline"]["step"]
    a, z = _span(browser, lo, hi, 0.0, step * pg["explore"]["syscalls"]["step"])
    calls = round(sum(n for t, _, n in _syscalls() if a <= t - t0 < z))
    assert f"{calls:,} syscalls" in part["bar"] and ("measured" in part["sys"])
    # the command line for the range counts from the capture's start
    off = pg["cli"]["offset"]
    assert f"--from {lo + off:.2f}s --to {hi + off:.2f}s" in part["cli"]
    browser.screenshot(shots(tmp_path) / "explore-range.png", full_page=True)


def test_unmeasured_parts_of_a_range_are_said_not_drawn_as_zero(browser: Browser, page: Path) -> None:
    browser.open(page)
    wins = json.loads(browser.js("document.getElementById('profiler-analysis').textContent"))["timeline"]["coverage"]["syscalls"]["windows"]
    assert wins and wins[0][1] < 3  # the duty cycle traced one window near the start
    browser.js("window.profilerReport.setRange([4, 8])")
    v = _views(browser)
    assert "not measured in this range" in v["sys"] and "syscalls not measured" in v["bar"]
    assert "not measured" in v["off"]
    # the syscall chart: its buckets outside the windows are gaps (null), shaded as not measured
    series = json.loads(browser.js("document.getElementById('profiler-analysis').textContent"))["timeline"]["panels"]["syscalls"]["series"]["calls"]
    assert series[6] is None and browser.js("document.querySelectorAll('[data-panel=syscalls] rect.unmeasured').length") >= 1


def test_a_thread_filter_narrows_every_view(browser: Browser, page: Path, tmp_path: Path) -> None:
    browser.open(page)
    whole = _views(browser)
    browser.js(f"(() => {{ const s = document.getElementById('filter'); s.value = 'th:{FIO_TID}'; s.dispatchEvent(new Event('change')); }})()")
    v = _views(browser)
    assert v["cpu"] != whole["cpu"] and v["io"] != whole["io"] and v["sys"] != whole["sys"]
    assert _count(v["cpu"], r"([\d,]+) samples?") == sum(1 for _, tid in _cpu_samples() if tid == FIO_TID)
    assert _write_row(browser) == sum(1 for _, tid in _writes() if tid == FIO_TID) > 0
    calls = round(sum(n for _, tid, n in _syscalls() if tid == FIO_TID))
    assert f"{calls:,} syscalls" in v["bar"]
    assert f"--tid {FIO_TID}" in v["cli"]
    # the tracks show the thread, the CPU chart its own line, host-wide charts say they are not narrowed
    assert browser.js(f"[...document.querySelectorAll('#tracks g.track')].some(g => g.dataset.key === 'th:{FIO_TID}')")
    assert "not narrowed" in browser.js("document.querySelector('[data-panel=host_cpu] .panel-note').textContent")
    # a pool of threads that issue no IO: the IO views say so; the flame graph keeps only its stacks
    browser.js(f"window.profilerReport.setFilter('{LOCKER}')")
    v = _views(browser)
    assert "No IO issued by pool locker" in browser.js("document.getElementById('io-heatmap').textContent")
    lockers = [f.split(";")[0] for f in browser.js("[...document.querySelectorAll('#flame-cpu g.fr text')].map(t => t.textContent)")]
    assert "locker" in lockers and "spinner" not in lockers and "fio" not in lockers
    browser.screenshot(shots(tmp_path) / "explore-filter.png", full_page=True)
    # a click on a track row filters to it; a second click shows every thread again
    browser.js("window.profilerReport.setFilter('')")
    x, y, w, h = browser.box("#tracks svg")
    browser.click(x + 250, y + 8)  # the first row, a press without a drag
    assert browser.js("window.profilerReport.state.filter") != ""
    browser.click(x + 250, y + 8)
    assert browser.js("window.profilerReport.state.filter") == ""


def test_the_url_restores_a_view(browser: Browser, page: Path) -> None:
    browser.open(page)
    browser.js(f"(() => {{ const R = window.profilerReport; R.setRange([1.5, 4.25]); R.setFilter('{LOCKER}');"
               " R.setView([1, 6]); R.flames.cpu.setMode('inverted');"
               " const s = document.querySelector('#flame-cpu .flame-search'); s.value = 'futex'; s.dispatchEvent(new Event('input')); })()")
    time.sleep(0.2)  # the fragment is written a moment after the last change
    url = browser.js("location.href")
    before = _views(browser)
    assert "range=1.5-4.25" in url and "filter=" in url and "zoom=1-6" in url and "cpu.view=inverted" in url and "cpu.q=futex" in url
    browser.call("Page.navigate", url="about:blank")
    browser.call("Page.navigate", url=url)
    for _ in range(100):
        if browser.js("document.readyState") == "complete":
            break
        time.sleep(0.05)
    assert browser.js("window.profilerReport.state.range") == [1.5, 4.25]
    assert browser.js("document.getElementById('filter').value") == LOCKER
    assert browser.js("window.profilerReport.state.view") == [1, 6]
    assert browser.js("document.querySelector('#flame-cpu .flame-search').value") == "futex"
    assert browser.js("document.querySelector('#flame-cpu button.mode.on').dataset.mode") == "inverted"
    after = _views(browser)
    assert after["cpu"] == before["cpu"] and after["io"] == before["io"] and after["sys"] == before["sys"]


def test_flame_graph_views(browser: Browser, page: Path, tmp_path: Path) -> None:
    browser.open(page)
    top = browser.js("document.querySelector('#flame-cpu .flame-top td.fn').textContent")
    graph_rows = browser.js("document.querySelectorAll('#flame-cpu g.fr').length")
    # inverted: the root's children are the functions that ran, the widest one first
    browser.click(*browser.center('#flame-cpu button.mode[data-mode="inverted"]'))
    kids = browser.js("[...document.querySelectorAll('#flame-cpu svg.flame-svg g.fr')].filter(g => g.querySelector('rect').getAttribute('y') === '17')"
                      ".map(g => [g.querySelector('text') ? g.querySelector('text').textContent : '', +g.querySelector('rect').getAttribute('width')])")
    assert max(kids, key=lambda k: k[1])[0].startswith(top[:10])
    # callers / callees of the top function (the table's sandwich link)
    browser.click(*browser.center("#flame-cpu .flame-top td.sw"))
    heads = browser.js("[...document.querySelectorAll('#flame-cpu .sandwich-head')].map(h => h.textContent)")
    assert heads == [f"Callers of {top} (it on top, who calls it below)", f"Callees of {top} (every call of it merged)"]
    assert browser.js("document.querySelectorAll('#flame-cpu svg.flame-svg').length") == 2
    # a tooltip follows the mouse over a frame
    browser.click(*browser.center('#flame-cpu button.mode[data-mode="graph"]'))
    assert browser.js("document.querySelectorAll('#flame-cpu g.fr').length") == graph_rows
    x, y = browser.center('#flame-cpu g.fr[data-node="1"] rect')
    browser.mouse("mouseMoved", x, y)
    tip = browser.js("(() => { const t = document.querySelector('#flame-cpu .flame-tip'); return [t.style.display, t.textContent]; })()")
    assert tip[0] == "block" and "% of this range" in tip[1] and "self" in tip[1]
    # the difference of two ranges: a drag, then "compare" and a second drag
    _drag_timeline(browser, 0.05, 0.4)
    browser.click(*browser.center("#explore-bar .eb-compare"))
    _drag_timeline(browser, 0.6, 0.95)
    st = browser.js("window.profilerReport.state")
    assert st["range"] and st["compare"] and st["compare"][0] > st["range"][1]
    fills = browser.js("[...document.querySelectorAll('#flame-cpu g.fr rect')].map(r => r.getAttribute('fill'))")
    assert any(f.startswith("rgb(245,") and f != "rgb(245,245,245)" for f in fills)  # red: grew
    assert any(f.endswith(",245)") and not f.startswith("rgb(245,") for f in fills)  # blue: shrank
    assert "compared range" in browser.js("document.querySelector('#flame-cpu .flame-legend').textContent")
    browser.center("#cpu-flame-section")
    browser.screenshot(shots(tmp_path) / "explore-diff.png")


def test_the_io_heatmap_is_log_scaled_and_selects(browser: Browser, page: Path) -> None:
    browser.open(page)
    assert browser.js("document.querySelector('#io_heatmap button.mode.on').dataset.scale") == "log"
    labels = browser.js("[...document.querySelectorAll('#io-heatmap svg text')].map(t => t.textContent)")
    assert any(x.endswith("us") for x in labels) and any(x.endswith("ms") for x in labels)  # decades
    x, y, w, h = browser.box("#io-heatmap svg .hit")
    browser.drag(x + w * 0.2, y + h / 2, x + w * 0.5, y + h / 2)
    lo, hi = browser.js("window.profilerReport.state.range")
    assert 0 < lo < hi
    assert "in the range" in browser.js("document.querySelector('#flame-cpu .flame-info').textContent")
    browser.click(*browser.center('#io_heatmap button.mode[data-scale="linear"]'))
    assert browser.js("document.querySelector('#io_heatmap button.mode.on').dataset.scale") == "linear"


@pytest.mark.parametrize("width", [900, 1400])
def test_nothing_overflows(width: int, tmp_path: Path) -> None:
    """Element boxes, not pixels: at either width no element (outside a scroll box made for wide
    tables) reaches past the page's right edge, on a perf, a bcc and a procfs-only bundle, with
    a range and a filter picked."""
    pages = []
    for bundle in (CONVOY, SAMPLES / "bcc" / "lock-contend-python", SAMPLES / "tikv-shaped-raftstore-hot"):
        out = tmp_path / f"{bundle.name}.html"
        out.write_text(html.render(analyze(Bundle.open(bundle))), encoding="utf-8")
        pages.append(out)
    with Browser(width=width, height=900) as b:
        for p in pages:
            b.open(p)
            b.js("(() => { const R = window.profilerReport; R.setRange([1, 2.5]); "
                 "const o = document.querySelector('#filter optgroup option'); if (o) R.setFilter(o.value); })()")
            over = b.js("""(() => { const W = document.documentElement.clientWidth, bad = [];
              for (const e of document.querySelectorAll('main *')) { const r = e.getBoundingClientRect();
                if (r.width && r.right > W + 1 && !e.closest('.wide')) bad.push(e.tagName + ' ' + Math.round(r.right)); }
              return [document.documentElement.scrollWidth, W, bad.slice(0, 5)]; })()""")
            assert over[0] <= over[1] and over[2] == [], (p.name, over)
            ticks = b.js("[...document.querySelectorAll('svg.chart text.tick')].map(t => t.getBoundingClientRect().height)")
            assert ticks and min(ticks) >= 10  # tick labels stay readable (they shrank to 7 px)
            assert b.errors() == []
            b.screenshot(shots(tmp_path) / f"explore-{p.stem}-{width}.png", full_page=True)


def test_screenshot_defects_stay_fixed(browser: Browser, page: Path) -> None:
    """The page-side defects of issue 28: the sticky bar covered the flame graph's search box; a
    3.13-5.75 s selection lit whole heatmap columns 3-6 s; the last time label was clipped."""
    browser.open(page)
    browser.js("window.profilerReport.setRange([3.13, 5.75])")
    # the bar's link to the on-CPU graph scrolls it below the bar, search box in sight
    browser.click(*browser.center("#explore-bar .eb-sum a[href='#cpu-flame-section']", scroll=False))
    bar = browser.box("#explore-bar", scroll=False)
    search = browser.box("#flame-cpu .flame-search", scroll=False)
    assert search[1] >= bar[1] + bar[3] and search[1] + search[3] <= 1000
    # the heatmap lights the range's own cells: from 3.13 s's row to 5.75 s's
    cells = _page(browser)["explore"]["cpu_cells"]
    off, rows = cells["offset"], cells["rows"]
    lit = browser.js("[...document.querySelectorAll('#cpu-heatmap .hm-sel')].filter(r => r.getAttribute('visibility') === 'visible')"
                     ".map(r => [+r.getAttribute('x'), +r.getAttribute('y'), +r.getAttribute('width'), +r.getAttribute('height')])")
    cw = browser.js("+document.querySelector('#cpu-heatmap rect[data-c=\"1\"]').getAttribute('x')")
    first_row = math.floor(((3.13 - off) % 1) * rows)
    last_row = math.floor(((5.75 - off - 1e-9) % 1) * rows)
    assert lit[0][0] == math.floor(3.13 - off) * cw and lit[0][1] == first_row * 6
    assert lit[-1][0] == math.floor(5.75 - off) * cw and lit[-1][3] == (last_row + 1) * 6
    # every time label inside its chart
    out = browser.js("""[...document.querySelectorAll('svg.chart')].flatMap(s => { const r = s.getBoundingClientRect();
        return [...s.querySelectorAll('text.tick')].filter(t => { const b = t.getBoundingClientRect();
          return b.right > r.right + 0.5 || b.left < r.left - 0.5; }).map(t => t.textContent); })""")
    assert out == []


def test_the_timeline_zooms_and_pans(browser: Browser, page: Path) -> None:
    browser.open(page)
    end = browser.js("window.profilerReport.T_END")
    x, y, w, h = browser.box('#charts .panel[data-panel="cpu"] svg.chart')
    # Ctrl + wheel zooms in around the pointer; the charts redraw the window, ticks and all
    browser.call("Input.dispatchMouseEvent", type="mouseWheel", x=x + w / 2, y=y + h / 2, deltaX=0, deltaY=-120, modifiers=2)
    v = browser.js("window.profilerReport.state.view")
    assert 0 < v[0] < v[1] < end and v[1] - v[0] == pytest.approx(0.8 * end, rel=0.01)
    # the buttons: pan right, zoom to a selected range, back to the whole capture
    browser.click(*browser.center('#explore-bar button[data-zoom="right"]', scroll=False))
    assert browser.js("window.profilerReport.state.view")[0] > v[0]
    browser.js("window.profilerReport.setRange([2, 3])")
    browser.click(*browser.center('#explore-bar button[data-zoom="sel"]', scroll=False))
    assert browser.js("window.profilerReport.state.view") == pytest.approx([1.9, 3.1])
    ticks = browser.js("[...document.querySelectorAll('[data-panel=cpu] svg.chart text.tick')].map(t => t.textContent).filter(t => t.endsWith('s'))")
    assert "2s" in ticks and "3s" in ticks and "8s" not in ticks
    time.sleep(0.2)  # the fragment is written a moment after the last change
    assert "zoom=1.9-3.1" in browser.js("location.hash")
    browser.click(*browser.center('#explore-bar button[data-zoom="reset"]', scroll=False))
    assert browser.js("window.profilerReport.state.view") == [0, end]
