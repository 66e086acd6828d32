"""Every renderer on every recorded sample, the JSON schema, escaping, and the report/analyze CLI."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import pytest
from profiler.analyzers.analysis import SCHEMA, VERSION, analyze
from profiler.analyzers.verdict.findings import CATEGORIES

from profiler.bundle import Bundle
from profiler.cli import main
from profiler.renderers.protocol import ReportOptions
from profiler.renderers.report_html import RENDERER as html
from profiler.renderers.report_json import RENDERER as json_r
from profiler.renderers.report_markdown import RENDERER as markdown
from profiler.renderers.report_text import RENDERER as text
from tests.conftest import SAMPLES

BUNDLES = sorted(p.parent.name for p in SAMPLES.glob("*/manifest.json"))


@pytest.fixture(scope="module", params=BUNDLES)
def analysis(request: pytest.FixtureRequest):
    return analyze(Bundle.open(SAMPLES / request.param))


def test_json_schema(analysis) -> None:
    d = json.loads(json_r.render(analysis))
    assert d["schema"] == SCHEMA and d["version"] == VERSION
    v = d["verdict"]
    assert v["category"] in CATEGORIES and 0 <= v["score"] <= 1
    assert isinstance(v["evidence"], list) and v["headline"]
    for e in v["evidence"]:
        assert set(e) >= {"metric", "value", "threshold", "unit"}
    assert d["targets"] and all(t["verdict"]["category"] in CATEGORIES for t in d["targets"])
    assert {"t", "step", "panels"} <= set(d["timeline"])
    assert d["health"] and any(h["collector"] == "procfs" for h in d["health"])


def test_html_is_self_contained_and_reads_well(analysis) -> None:
    out = html.render(analysis)
    assert out.startswith("<!doctype html>")
    assert not re.search(r"""(src|href)=["']https?:""", out), "the report must not fetch anything"
    assert analysis.verdict.overall.headline.split(":")[0] in out
    # the timeline's charts are drawn by the page's script from the analysis JSON, once (no SVG copy)
    assert '<div id="charts"></div>' in out and "<polyline" not in out and "<polygon" not in out
    # a flame graph is drawn where the bundle has its stacks, and said to be missing where not: never faked
    for key, art in (("cpu", "cpu_flame"), ("offcpu", "offcpu_flame")):
        if art in analysis.artifacts:
            assert f'<div id="flame-{key}" class="flame-holder"></div>' in out, key
        else:
            assert f"flame graph: {analysis.missing_artifacts.get(art, 'not captured')}" in out, key
    data = re.search(r'<script type="application/json" id="profiler-analysis">(.*?)</script>', out, re.S)
    assert data and json.loads(data.group(1))["verdict"]["category"] == analysis.verdict.overall.category


def test_markdown_and_text(analysis) -> None:
    md = markdown.render(analysis)
    assert md.startswith("## Bottleneck: ")
    assert "| target | verdict |" in md
    t = text.render(analysis, ReportOptions(report_path="x/report.html"))
    assert "verdict:" in t and "report: x/report.html" in t


def test_untrusted_thread_names_are_escaped(tmp_path: Path) -> None:
    """A thread named like markup must not become markup in HTML or break the markdown table."""
    src = SAMPLES / "lock-contention-sysbench-threads"
    if not src.is_dir():
        pytest.skip("sample missing")
    dst = tmp_path / "b"
    shutil.copytree(src, dst)
    evil = '<img src=x onerror=alert(1)>|`'
    lines = gzip.decompress((dst / "proc.jsonl.gz").read_bytes()).decode().splitlines()
    out = []
    for ln in lines:
        r = json.loads(ln)
        if r.get("kind") == "thread":
            r["comm"] = evil
        out.append(json.dumps(r))
    (dst / "proc.jsonl.gz").write_bytes(gzip.compress("\n".join(out).encode()))
    a = analyze(Bundle.open(dst))
    page = html.render(a)
    assert "<img src=x" not in page
    md = markdown.render(a)
    assert "<img src=x onerror=alert(1)>\\|'" in md or evil not in md


def test_missing_procfs_lowers_confidence_not_crash(tmp_path: Path) -> None:
    src = SAMPLES / "io-fsync-fio"
    if not src.is_dir():
        pytest.skip("sample missing")
    dst = tmp_path / "b"
    shutil.copytree(src, dst)
    (dst / "proc.jsonl.gz").unlink()
    a = analyze(Bundle.open(dst))
    assert a.verdict.overall.confidence_label == "low"
    assert any("procfs" in r for r in a.verdict.overall.confidence_reasons)
    for r in (html.render(a), markdown.render(a), text.render(a), json_r.render(a)):
        assert r


def test_truncated_proc_file_warns(tmp_path: Path) -> None:
    src = SAMPLES / "io-fsync-fio"
    if not src.is_dir():
        pytest.skip("sample missing")
    dst = tmp_path / "b"
    shutil.copytree(src, dst)
    raw = (dst / "proc.jsonl.gz").read_bytes()
    (dst / "proc.jsonl.gz").write_bytes(raw[: len(raw) * 2 // 3])
    a = analyze(Bundle.open(dst))
    assert any("truncated" in w for w in a.warnings)
    assert a.verdict.overall.category in CATEGORIES


def test_report_cli_formats(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b = SAMPLES / "io-fsync-fio"
    if not b.is_dir():
        pytest.skip("sample missing")
    assert main(["report", str(b), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"]["category"] == "io_wait"
    out = tmp_path / "r.md"
    assert main(["report", str(b), "-o", str(out)]) == 0
    assert out.read_text().startswith("## Bottleneck: IO wait")
    assert main(["report", str(b), "-o", str(out)]) == 8  # no overwrite without --force
    assert main(["report", str(b), "-o", str(out), "--force", "--format", "html"]) == 0
    assert out.read_text().startswith("<!doctype html>")
    assert main(["report", str(b), "--format", "pdf"]) == 2
    assert main(["report", str(tmp_path / "nope")]) == 4


def test_analyze_writes_report_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = SAMPLES / "memory-thrash-cgroup"
    if not src.is_dir():
        pytest.skip("sample missing")
    dst = tmp_path / "cap"
    shutil.copytree(src, dst)
    assert main(["analyze", str(dst)]) == 0
    out = capsys.readouterr().out
    assert "verdict: MEMORY PRESSURE" in out and f"report: {dst / 'report.html'}" in out
    assert (dst / "report.html").read_text().startswith("<!doctype html>")
    assert main(["analyze", str(dst), "--no-html"]) == 0


def test_timeline_is_one_axis(analysis) -> None:
    tl = analysis.timeline
    assert tl.t and tl.t == sorted(tl.t) and tl.step >= 1.0
    for key, panel in tl.panels.items():
        for name, values in panel.series.items():
            assert len(values) == len(tl.t), (key, name)
    cpu = tl.panels["cpu"].series
    known = [v for vals in cpu.values() for v in vals if v is not None]
    assert known and all(v >= 0 for v in known)
    states = tl.panels["states"].series
    # stacked thread counts never exceed the number of threads sampled
    nthreads = sum(t.time.threads for t in analysis.metrics.targets)
    for i in range(len(tl.t)):
        total = sum(vals[i] or 0 for vals in states.values())
        assert total <= nthreads + 0.01
