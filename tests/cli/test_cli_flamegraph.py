"""`profiler flamegraph` and `profiler diff` in-process, and the perf.data path on a real process."""

from __future__ import annotations

import gzip
import io
import json
import re
import shutil
import subprocess
import sys
import xml.dom.minidom
from pathlib import Path

import pytest

from profiler.bundle import BundleWriter, ClockInfo, Manifest
from profiler.cli import main
from tests.conftest import ROOT, requires_perf, requires_root

DIR = ROOT / "samples" / "perf-script"


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_folded_output_matches_golden(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["flamegraph", str(DIR / "mariadb-sysbench.txt"), "--folded"], capsys)
    assert code == 0
    assert out == (DIR / "mariadb-sysbench.folded").read_text()
    code, out, _ = run(["flamegraph", str(DIR / "comm-with-spaces.txt"), "--folded", "--compat", "inferno"], capsys)
    assert code == 0 and out == (DIR / "comm-with-spaces.folded").read_text()


def test_svg_file_and_no_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cpu.svg"
    code, _, _ = run(["flamegraph", str(DIR / "redis-benchmark.txt"), "-o", str(out), "--title", "redis <x>"], capsys)
    assert code == 0
    svg = out.read_text()
    xml.dom.minidom.parseString(svg.encode())
    assert "redis &lt;x&gt;" in svg and "<script" in svg and "__GI___libc_write" in svg
    code, _, err = run(["flamegraph", str(DIR / "redis-benchmark.txt"), "-o", str(out)], capsys)
    assert code == 8 and "--force" in err
    code, _, _ = run(["flamegraph", str(DIR / "redis-benchmark.txt"), "-o", str(out), "--force", "--inverted"], capsys)
    assert code == 0


def test_gzip_stdin_pools_and_folded_input(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    data = gzip.compress((DIR / "comm-with-spaces.txt").read_bytes())
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    code, out, _ = run(["flamegraph", "-", "--folded", "--pools"], capsys)
    assert code == 0
    assert {ln.split(";")[0] for ln in out.splitlines()} == {"Web_Content", "rocksdb:low"}
    folded = tmp_path / "x.folded"
    folded.write_text(out)
    code, svg, _ = run(["flamegraph", str(folded)], capsys)
    assert code == 0 and svg.startswith("<?xml") and "rocksdb:low" in svg
    code, _, err = run(["flamegraph", str(folded), "--from", "1s"], capsys)
    assert code == 2 and "timestamps" in err


PPROF = ROOT / "samples" / "etcd-cpu-quota-inflated-wal-timings" / "server-19621-cpu-window.pb.gz"


@pytest.mark.parametrize(("args", "says"), [
    (["--from", "1s"], "--from/--to need timestamps: a pprof profile has none"),
    (["--from", "1s", "--format", "pprof", "-o", "/dev/null"], "--from/--to need timestamps: a pprof profile has none"),
    (["--offcpu", "--format", "pprof", "-o", "/dev/null"], "--offcpu needs sched_switch samples (a bundle or perf script text), not a pprof profile"),
    (["--offcpu"], "--offcpu needs sched_switch samples (a bundle or perf script text), not a pprof profile"),
], ids=["graph-window", "export-window", "export-offcpu", "graph-offcpu"])
def test_what_a_format_cannot_give_is_refused_alike(args: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The flame graph and the exports refuse what an input's Format says it lacks (its times;
    off-CPU evidence: no row in the off-CPU tables) with the same usage error."""
    code, _, err = run(["flamegraph", str(PPROF), *args], capsys)
    assert code == 2 and says in " ".join(err.split()), err


def test_group_by_needs_labels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--group-by roots at a pprof profile's labels: a format without them (Format.labels) is refused."""
    code, _, err = run(["flamegraph", str(DIR / "redis-benchmark.txt"), "--group-by", "x"], capsys)
    assert code == 2 and "--group-by roots stacks at a pprof profile's labels" in " ".join(err.split())
    for fmt in ("speedscope", "pprof"):  # an export is refused the same way, not written without the grouping
        out_file = tmp_path / f"out.{fmt}"
        code, _, err = run(["flamegraph", str(DIR / "redis-benchmark.txt"), "--group-by", "x",
                            "--format", fmt, "-o", str(out_file)], capsys)
        assert code == 2 and "--group-by roots stacks" in " ".join(err.split()) and not out_file.exists(), (fmt, err)
    code, out, _ = run(["flamegraph", str(PPROF), "--group-by", "x", "--folded"], capsys)
    assert code == 0 and out


def test_time_range(capsys: pytest.CaptureFixture[str]) -> None:
    src = str(DIR / "mariadb-sysbench.txt")
    _, whole, _ = run(["flamegraph", src, "--folded", "--samples"], capsys)
    _, late, _ = run(["flamegraph", src, "--folded", "--samples", "--from", "0.01s"], capsys)
    _, early, _ = run(["flamegraph", src, "--folded", "--samples", "--to", "0.01s"], capsys)
    total = lambda t: sum(int(ln.rsplit(" ", 1)[1]) for ln in t.splitlines())  # noqa: E731
    assert total(late) + total(early) == total(whole) and total(late) > 0 and total(early) > 0
    code, _, err = run(["flamegraph", src, "--from", "2s", "--to", "1s"], capsys)
    assert code == 2


def test_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["flamegraph", str(tmp_path / "missing.txt")], capsys)
    assert code == 7 and err.count("\n") == 1
    (tmp_path / "bin").write_bytes(b"\x00\x01\x02" * 100)
    code, _, err = run(["flamegraph", str(tmp_path / "bin")], capsys)
    assert code == 7 and "binary" in err
    code, _, err = run(["flamegraph", str(DIR / "mariadb-sysbench.txt"), "--compat", "nope"], capsys)
    assert code == 2


def make_bundle(root: Path) -> Path:
    m = Manifest(clock=ClockInfo(monotonic_start=431.6, wall_start=1.7e9, offset=1.7e9 - 431.6), status="ok")
    w = BundleWriter(root, m)
    with w.open_member("cpu.perf.txt.gz") as fh:
        fh.write((DIR / "mariadb-sysbench.txt").read_bytes())
    with w.open_member("offcpu.perf.txt.gz") as fh:
        fh.write((DIR / "sched-switch-callchain.txt").read_bytes())
    w.finish("ok")
    return root


def test_bundle_cpu_offcpu_and_diff(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b = make_bundle(tmp_path / "cap")
    code, out, _ = run(["flamegraph", str(b), "--folded"], capsys)
    assert code == 0 and out == (DIR / "mariadb-sysbench.folded").read_text()
    code, out, _ = run(["flamegraph", str(b), "--offcpu", "--folded"], capsys)
    assert code == 0 and out.startswith(("idle", "lock", "preempted", "other", "io", "sleep", "network"))
    code, svg, _ = run(["flamegraph", str(b), "--offcpu"], capsys)
    assert code == 0 and "Off-CPU" in svg and "µs" in svg
    # capture-relative time range: the bundle's clock starts at 431.6 s
    _, late, _ = run(["flamegraph", str(b), "--folded", "--from", "0.02s", "--samples"], capsys)
    assert sum(int(x.rsplit(" ", 1)[1]) for x in late.splitlines()) == 4  # samples at >= 431.62 s
    code, svg, _ = run(["diff", str(b), str(DIR / "redis-benchmark.txt")], capsys)
    assert code == 0 and "Differential" in svg
    xml.dom.minidom.parseString(svg.encode())
    code, out, _ = run(["diff", str(b), str(b), "--folded"], capsys)
    assert code == 0 and all(ln.split(" ")[-1] == ln.split(" ")[-2] for ln in out.splitlines())
    code, _, err = run(["diff", str(b), str(b), "--throughput", "x"], capsys)
    assert code == 2


@pytest.mark.privileged
@requires_root
@requires_perf
def test_perf_data_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Record a process we start ourselves, then draw from perf.data (perf script run for us)."""
    data = tmp_path / "perf.data"
    busy = "import time\nt=time.time()+0.6\nwhile time.time()<t: sum(i*i for i in range(500))\n"
    rec = subprocess.run(
        ["perf", "record", "-q", "-F", "499", "-g", "-o", str(data), "--", sys.executable, "-c", busy],
        capture_output=True, timeout=60, check=False,
    )
    if rec.returncode != 0:
        pytest.skip(f"perf record cannot run here: {rec.stderr.decode(errors='replace').strip()[-200:]}")
    code, out, _ = run(["flamegraph", str(data), "--folded"], capsys)
    assert code == 0 and out
    text = subprocess.run(["perf", "script", "-i", str(data)], capture_output=True, timeout=60, check=True).stdout
    script = tmp_path / "s.txt"
    script.write_bytes(text)
    _, expected, _ = run(["flamegraph", str(script), "--folded"], capsys)
    assert out == expected
    code, svg, _ = run(["flamegraph", str(data)], capsys)
    assert code == 0 and "python" in svg


def test_bcc_offcpu_bundle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = Manifest(clock=ClockInfo(monotonic_start=1.0, wall_start=1.7e9, offset=1.7e9), status="ok")
    w = BundleWriter(tmp_path / "bcc", m)
    with w.open_member("offcpu.folded.gz") as fh:
        fh.write(b"grpc-server-1;main;futex_wait_[k] 3000\ngrpc-server-2;main;futex_wait_[k] 2000\n")
    w.finish("ok")
    code, out, _ = run(["flamegraph", str(tmp_path / "bcc"), "--offcpu", "--folded", "--pools"], capsys)
    # microseconds, as the report's off-CPU graph and the perf backend's count (one reader: views.read_offcpu)
    assert code == 0 and out == "lock (futex);grpc-server;main;futex_wait_[k] 5\n"



def test_bcc_offcpu_at_the_rounding_edge(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A bcc stack of 500 ns rounds to no microsecond (half to even) and is left out, not drawn as
    a line of 0; 501 ns is one microsecond. One rule, in the one reader (views.fold_bcc_offcpu)."""
    m = Manifest(clock=ClockInfo(monotonic_start=1.0, wall_start=1.7e9, offset=1.7e9), status="ok")
    w = BundleWriter(tmp_path / "bcc", m)
    with w.open_member("offcpu.folded.gz") as fh:
        fh.write(b"app;main;a_[k] 500\napp;main;b_[k] 501\napp;main;c_[k] 499\napp;main;d_[k] 2500\n")
    w.finish("ok")
    code, out, _ = run(["flamegraph", str(tmp_path / "bcc"), "--offcpu", "--folded"], capsys)
    assert code == 0 and out == "other;app;main;b_[k] 1\nother;app;main;d_[k] 2\n"


@pytest.mark.parametrize("sample", sorted((ROOT / "samples" / "bcc").glob("*/manifest.json")), ids=lambda p: p.parent.name)
def test_bcc_offcpu_of_a_recorded_bundle_is_the_reports(sample: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A real bcc capture: `flamegraph --offcpu --pools` folds what the report's off-CPU graph
    holds (one reader), in microseconds: its total is the member's nanoseconds (the per-slot
    member where the capture wrote one), read here without the profiler, over 1000 (each stack
    rounded to the microsecond, so within half a microsecond a stack drawn)."""
    from profiler.analyzers.analysis import analyze
    from profiler.analyzers.stacks.flame import FoldedStacks

    from profiler.bundle import Bundle

    bundle = sample.parent
    code, out, _ = run(["flamegraph", str(bundle), "--offcpu", "--folded", "--pools"], capsys)
    assert code == 0
    verb = {k: int(v) for k, _, v in (line.rpartition(" ") for line in out.splitlines())}
    art = analyze(Bundle.open(bundle)).artifacts["offcpu_flame"]
    assert isinstance(art, FoldedStacks) and art.unit == "us"
    assert verb == art.counts
    slots = bundle / "offcpu.slots.jsonl.gz"  # per time slot (newer captures), else the totals
    if slots.exists():
        rows = [row for line in gzip.decompress(slots.read_bytes()).splitlines()
                if (x := json.loads(line)).get("kind") == "slot" for row in x["rows"]]
        raw = [int(row[5]) for row in rows]  # tid, pid, comm, state, stack, ns, switch-outs
    else:
        raw = [int(line.rpartition(b" ")[2]) for line in gzip.decompress((bundle / "offcpu.folded.gz").read_bytes()).splitlines()]
    assert len(raw) >= 20 and all(v > 0 for v in verb.values())
    assert abs(sum(verb.values()) - sum(raw) / 1000) <= 0.5 * len(raw)

@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")
def test_svg_zoom_and_search_in_headless_chromium(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The SVG's own script, run by a real browser offline: ?f= zooms, ?s= searches."""
    svg = tmp_path / "m.svg"
    code, _, _ = run(["flamegraph", str(DIR / "mariadb-sysbench.txt"), "-o", str(svg)], capsys)
    assert code == 0
    text = svg.read_text()
    m = re.search(r'<g data-i="(\d+)" data-k="[\w-]+"><title>dispatch_command ', text)
    assert m
    url = f"file://{svg}?f={m.group(1)}&s=^Prepared"
    dom = subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", url],
        capture_output=True, text=True, timeout=90, check=False,
    ).stdout
    if not dom.strip():
        pytest.skip("chromium produced no DOM here")
    assert re.search(r'id="matched" class="" [^>]*>Matched: \d+\.\d\d% \(\d+ frames\)', dom)
    assert re.search(r'id="unzoom" class=""', dom)  # zoomed: the reset button shows
    assert 'class="hide"' in dom  # frames outside the zoomed one are hidden


def test_a_sample_count_not_known_is_said_not_written_as_zero() -> None:
    """A perf.data read one sample per distinct stack keeps no count when some were not folded:
    the line said "0 samples of cpu-clock" beside thousands of stacks."""
    from profiler.cli.flamegraph import _how_many

    assert _how_many(0, "cpu-clock", False, stacks=True) == "samples of cpu-clock (how many is not known: some were not folded)"
    assert _how_many(0, "cpu-clock", False, stacks=False) == "0 samples of cpu-clock"
    assert _how_many(12345, None, True, stacks=True) == "12,345 switches"
