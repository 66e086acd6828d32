"""Heatmap model, HeatMap-compatible pairs, sub-second CPU heatmap, the SVG, and `profiler heatmap`."""

from __future__ import annotations

import gzip
import html
import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from profiler.analyzers.io import heatmap
from profiler.analyzers.io import pairing as blockio
from profiler.analyzers.io import stats as iostats
from profiler.analyzers.stacks import subsecond

from profiler.bundle import OK, BundleWriter, CollectorRecord, Manifest, TargetInfo
from profiler.cli import main
from profiler.inputs import pairs
from profiler.renderers import heatmap_svg
from profiler.renderers.registry import REGISTRY
from tests.conftest import ROOT

SAMPLES = ROOT / "samples" / "block"
CPU_SAMPLE = ROOT / "samples" / "perf-script" / "mariadb-sysbench.txt"


def test_counts_add_up_to_completed_ios() -> None:
    for name in ("merges.txt", "two-devices.txt", "flush-discard.txt", "cut-off-edges.txt"):
        bio = blockio.read_block_trace(SAMPLES / name)
        for log in (False, True):
            h = heatmap.latency_heatmap(bio.ios["t_complete"], bio.ios["latency"], log=log, max_lat=0.0005)
            assert h.total == len(bio.ios) == bio.counts.paired
            assert h.above_max == int(np.count_nonzero(bio.ios["latency"] > 0.0005))
        for by in ("op", "device", "issuer"):
            ps = heatmap.panels(bio.ios["t_complete"], bio.ios["latency"], iostats.split(bio, by), log=True)
            assert sum(p.total for p in ps) == bio.counts.paired
            assert len({p.ncols for p in ps}) == 1 and len({tuple(p.row_edges) for p in ps}) == 1


def test_cells_hold_the_right_ios() -> None:
    t = np.array([0.0, 0.1, 0.95, 1.2, 2.5])
    lat = np.array([1e-4, 2.5e-4, 9.5e-4, 5e-3, 1e-5])
    h = heatmap.latency_heatmap(t, lat, step=1.0, rows=10, min_lat=0.0, max_lat=1e-3)
    assert h.counts.shape == (3, 10)
    assert h.counts[0, 1] == 1 and h.counts[0, 2] == 1 and h.counts[0, 9] == 1
    assert h.counts[1, 9] == 1  # 5 ms is above the top row: counted in it
    assert h.counts[2, 0] == 1
    assert h.above_max == 1 and h.total == 5
    assert h.p50[0] == pytest.approx(np.percentile(lat[:3], 50))


def test_log_rows_cover_whole_decades() -> None:
    e = heatmap.row_edges(np.array([3e-5, 2e-3]), rows=30, log=True)
    assert e[0] == pytest.approx(1e-5) and e[-1] == pytest.approx(1e-2)
    assert np.allclose(np.diff(np.log10(e)), 0.1)


def test_pairs_like_trace2heatmap() -> None:
    p = pairs.read_pairs(SAMPLES / "pairs-us.txt", units_time="us", units_latency="us")
    raw = np.loadtxt(SAMPLES / "pairs-us.txt")
    assert np.allclose(p.t, raw[:, 0] * 1e-6) and np.allclose(p.lat, raw[:, 1] * 1e-6)
    text = b"time latency\n1.0 250\n1.5 4000\n\n2.25 10\n"
    q = pairs.parse_pairs([text], units_time="s", units_latency="ms")
    assert q.lat.tolist() == [0.25, 4.0, 0.01]
    assert pairs.looks_like_pairs(text) and not pairs.looks_like_pairs(b"fio-1 [000] 1.0: block_rq_issue: x")


def test_subsecond_bins() -> None:
    t = np.array([100.0, 100.019, 100.021, 100.5, 101.999, 103.0])
    h = subsecond.subsecond_heatmap(t, rows=50, t0=100.0)
    assert h.counts.shape == (4, 50) and h.total == 6
    assert h.counts[0, 0] == 2 and h.counts[0, 1] == 1 and h.counts[0, 25] == 1
    assert h.counts[1, 49] == 1 and h.counts[3, 0] == 1


def test_subsecond_from_perf_script() -> None:
    st = subsecond.read_sample_times(CPU_SAMPLE)
    assert len(st.t) > 0 and (np.diff(st.t) >= 0).all()
    h = subsecond.subsecond_heatmap(st.t)
    assert h.total == len(st.t)


def _svg_ok(text: str) -> ET.Element:
    root = ET.fromstring(text.encode())
    assert root.tag.endswith("svg")
    return root


def test_svg_is_valid_deterministic_and_escaped() -> None:
    bio = blockio.read_block_trace(SAMPLES / "flush-discard.txt")
    groups = {"<script>&x": np.ones(len(bio.ios), bool)}
    ps = heatmap.panels(bio.ios["t_complete"], bio.ios["latency"], groups, log=True)
    model = heatmap.LatencyHeatmap(ps, subtitle="a<b", totals={"paired": len(bio.ios)})
    a = heatmap_svg.LATENCY.render(model)
    assert a == heatmap_svg.LATENCY.render(model)
    root = _svg_ok(a)
    assert "<script>&x" not in a and "&lt;script&gt;&amp;x" in a
    ns = "{http://www.w3.org/2000/svg}"
    assert root.findall(f".//{ns}polyline")  # p50/p99 lines
    data = a.split("})(", 1)[1].rsplit(', "latency", ', 1)[0]
    doc = json.loads(data)
    assert sum(sum(c) for c in doc["panels"][0]["counts"]) == len(bio.ios)


@pytest.mark.parametrize("scale", heatmap_svg.COLOUR_SCALES)
def test_one_hot_cell_does_not_hide_the_rest(scale: str) -> None:
    c = np.array([[1, 2, 5000]])
    lv = heatmap_svg.colour_levels(c, scale)
    assert lv[0, 2] == 1.0 and (lv[0, :2] >= 0.08).all()
    if scale != "linear":
        assert lv[0, 1] > 0.15  # a 2 among 5000 still shows


def test_subsecond_svg() -> None:
    h = subsecond.subsecond_heatmap(np.array([1.0, 1.5, 2.25, 5.0]), t0=1.0)
    text = heatmap_svg.SUBSECOND.render(h, heatmap_svg.HeatmapOptions(source="cap/"))
    _svg_ok(text)
    assert '"source": "cap/"' in text and "profiler flamegraph" in text


# --------------------------------------------------------------------------- CLI


def _bundle(tmp_path: Path) -> Path:
    root = tmp_path / "cap"
    m = Manifest(status=OK)
    m.targets = [TargetInfo(pid=10670, comm="mariadbd")]
    w = BundleWriter(root, m)
    with w.open_member("block.trace.gz") as fh:
        fh.write((SAMPLES / "perf-script.txt").read_bytes())
    with w.open_member("cpu.perf.txt.gz") as fh:
        fh.write(CPU_SAMPLE.read_bytes())
    w.record(CollectorRecord(name="block-io", status=OK, files=["block.trace.gz"]))
    w.record(CollectorRecord(name="cpu-stacks", status=OK, files=["cpu.perf.txt.gz"]))
    w.finish(OK)
    return root


def test_cli_bundle_svg_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _bundle(tmp_path)
    out = tmp_path / "io.svg"
    assert main(["heatmap", str(root), "-o", str(out), "--by", "issuer", "--log", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    _svg_ok(out.read_text())
    assert doc["totals"]["paired"] == sum(p["total"] for p in doc["panels"])
    assert {p["label"] for p in doc["panels"]} <= {"target", "kernel", "other"}
    assert doc["panels"][0]["rows"]["scale"] == "log"
    assert main(["heatmap", str(root), "-o", str(out)]) == 8  # exists, no --force
    assert main(["heatmap", str(root), "-o", str(out), "--force", "--by", "op"]) == 0


def test_cli_text_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gz = tmp_path / "t.gz"
    gz.write_bytes(gzip.compress((SAMPLES / "two-devices.txt").read_bytes()))
    assert main(["heatmap", str(gz), "--json", "--by", "device"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {p["label"] for p in doc["panels"]} == {"7:0", "254:0"}
    assert main(["heatmap", str(SAMPLES / "pairs-us.txt"), "--units-time", "us", "--units-latency", "us",
                 "--maxlat", "200", "--rows", "20", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    p = doc["panels"][0]
    assert p["total"] == 1500 and len(p["rows"]["edges"]) == 21 and p["rows"]["edges"][-1] == pytest.approx(200e-6)
    assert main(["heatmap", str(SAMPLES / "merges.txt")]) == 0
    _svg_ok(capsys.readouterr().out)


def test_cli_cpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _bundle(tmp_path)
    assert main(["heatmap", str(root), "--cpu", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "cpu-subsecond" and doc["total"] > 0


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "x.txt"
    bad.write_text("hello world\n")
    assert main(["heatmap", str(bad)]) == 7
    assert main(["heatmap", str(tmp_path / "missing")]) == 7
    assert main(["heatmap", str(SAMPLES / "merges.txt"), "--by", "colour"]) == 2
    assert main(["heatmap", str(SAMPLES / "pairs-us.txt"), "--by", "op"]) == 2
    (tmp_path / "empty").mkdir()
    assert main(["heatmap", str(tmp_path / "empty")]) == 4
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("profiler: error:") == 5


@pytest.mark.slow
@pytest.mark.skipif(not (shutil.which("chromium") or shutil.which("chromium-browser")), reason="no headless chromium")
def test_svg_renders_in_headless_chromium(tmp_path: Path) -> None:
    svg = tmp_path / "io.svg"
    assert main(["heatmap", str(SAMPLES / "two-devices.txt"), "-o", str(svg), "--by", "device", "--log"]) == 0
    png = tmp_path / "io.png"
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe is not None
    subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    f"--screenshot={png}", "--window-size=1200,900", svg.as_uri()],
                   capture_output=True, timeout=90, check=False)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000  # a blank page compresses to ~5 KB


_PAGE = """<!doctype html><html><head><title>x</title></head><body>{svg}
<script>
window.addEventListener('load', function () {{
  var hit = document.querySelector('.hit'), r = hit.getBoundingClientRect();
  function at(fx, fy, type) {{
    hit.dispatchEvent(new MouseEvent(type, {{clientX: r.left + r.width * fx, clientY: r.top + r.height * fy, bubbles: true}}));
  }}
  {actions}
  document.title = 'DETAILS:' + document.querySelector('.details').textContent;
}});
</script></body></html>"""


def _chromium_title(tmp_path: Path, svg_text: str, actions: str) -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe is not None
    page = tmp_path / "page.html"
    page.write_text(_PAGE.format(svg=svg_text.split("?>", 1)[1], actions=actions))
    res = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                          "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=90, check=False)
    m = re.search(r"<title>DETAILS:(.*?)</title>", res.stdout, re.S)
    assert m, res.stderr[-500:]
    return html.unescape(m.group(1))


@pytest.mark.slow
@pytest.mark.skipif(not (shutil.which("chromium") or shutil.which("chromium-browser")), reason="no headless chromium")
def test_hover_and_range_pick_in_chromium(tmp_path: Path) -> None:
    bio = blockio.read_block_trace(SAMPLES / "merges.txt")
    ps = heatmap.panels(bio.ios["t_complete"], bio.ios["latency"], {"all": np.ones(len(bio.ios), bool)}, log=True)
    text = _chromium_title(tmp_path, heatmap_svg.LATENCY.render(heatmap.LatencyHeatmap(ps)), "at(0.02, 0.5, 'mousemove');")
    assert re.match(r"all: time [0-9.]+s-[0-9.]+s, latency .+: \d+ IOs \(", text), text
    h = subsecond.subsecond_heatmap(np.array([0.5, 1.5, 2.5, 3.5]), t0=0.0)
    text = _chromium_title(tmp_path, heatmap_svg.SUBSECOND.render(h, heatmap_svg.HeatmapOptions(source="cap/")),
                           "at(0.1, 0.0, 'click'); at(0.6, 0.5, 'click');")
    assert text == "profiler flamegraph cap/ --from 0s --to 2.52s"


def test_io_heatmap_for_the_report(tmp_path: Path) -> None:
    from profiler.analyzers.views.blockio import io_from_bundle

    from profiler.bundle import Bundle

    a = io_from_bundle(Bundle.open(_bundle(tmp_path)))
    assert a is not None
    model = heatmap.from_io(a, by="issuer")
    assert model.totals["paired"] == sum(p.total for p in model.panels) and model.subtitle.startswith(f"{len(a.block.ios)} IOs, p50 ")
    svg = heatmap_svg.LATENCY.render(model)
    assert svg.startswith("<?xml") and ">target <" in svg
    _svg_ok(svg)


def test_report_entry_points(tmp_path: Path) -> None:
    """Models from a bundle's views (what the analysis and `profiler heatmap` read), and their pictures."""
    from profiler.analyzers import views
    from profiler.analyzers.views.blockio import io_from_bundle

    from profiler.bundle import Bundle

    b = Bundle.open(_bundle(tmp_path))
    io = io_from_bundle(b)
    st = views.read_cpu_times(b)
    assert st is not None
    cpu = subsecond.subsecond_heatmap(st.t, rows=50, t0=subsecond.capture_origin(b, st.t))
    assert io is not None and cpu.total > 0
    n = len(io.block.ios)
    assert len(io.issue) == len(io.latency) == len(io.dev) == len(io.op) == len(io.bytes) == len(io.tid) == len(io.comm) == n
    assert set(io.dev) == {"254:0"} and set(io.op) <= {"read", "write", "flush", "discard", "other"}
    for model in (heatmap.from_io(io), cpu):
        renderer = REGISTRY.find(model, "svg")
        assert renderer is not None
        _svg_ok(renderer.render(model))


def test_the_latency_axis_is_log_by_default(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Linear rows squashed most IOs of a skewed trace into the bottom row (issue 28): log is the
    default, --linear asks for HeatMap's axis, and --step-lat (a linear row height) implies it."""
    src = str(SAMPLES / "two-devices.txt")
    capsys.readouterr()
    assert main(["heatmap", src, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["panels"][0]["rows"]["scale"] == "log"
    assert main(["heatmap", src, "--json", "--linear"]) == 0
    assert json.loads(capsys.readouterr().out)["panels"][0]["rows"]["scale"] == "linear"
    assert main(["heatmap", src, "--json", "--step-lat", "100"]) == 0
    assert json.loads(capsys.readouterr().out)["panels"][0]["rows"]["scale"] == "linear"
    assert main(["heatmap", src, "--json", "--log", "--step-lat", "100"]) == 2
    assert "give --linear" in capsys.readouterr().err
