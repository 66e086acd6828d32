"""A bcc bundle's report is as complete as a perf bundle's: IO metrics and heatmap from
block.hist.jsonl.gz, the off-CPU flame graph from offcpu.folded.gz, futex stacks and totals from
futex.folded.gz/futex.summary.json, off-CPU states from offcpu.summary.json.

Unit tests read the committed samples (samples/bcc/); the privileged test captures a real
process with `profiler attach --backend bcc` and reads its report.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from profiler.analyzers import analysis as anmod
from profiler.analyzers.io import hist_heatmap as histheatmap
from profiler.analyzers.io import histograms as bh
from profiler.analyzers.verdict import metrics as metmod
from profiler.analyzers.verdict.io import io_metrics_from_hist
from profiler.analyzers.views import read_views
from profiler.analyzers.views.blockio import read_block_hist

from profiler.bundle import Bundle, BundleWriter, ClockInfo, Manifest
from profiler.cli import main
from profiler.renderers.report_html import RENDERER as htmlmod
from profiler.renderers.report_json import RENDERER as jsonmod
from tests.conftest import ROOT, TESTS

SAMPLES = ROOT / "samples" / "bcc"
LOCK = SAMPLES / "lock-contend-python"
FIO = SAMPLES / "io-fsync-fio"
HIST = SAMPLES / "block-hist-fsync-contend.jsonl.gz"
GOLDEN = SAMPLES / "block-hist-fsync-contend.summary.json"
WORKLOAD = TESTS / "bcc" / "workload.py"


def _hist_only_bundle(tmp_path: Path, sample: Path = HIST) -> Bundle:
    w = BundleWriter(tmp_path / "cap", Manifest(clock=ClockInfo.now()))
    shutil.copy(sample, w.path(bh.MEMBER))
    w.finish("ok")
    return Bundle.open(tmp_path / "cap")


def _evidence(report: dict, category: str) -> dict[str, float]:
    for f in report["targets"][0]["verdict"]["findings"]:
        if f["category"] == category:
            return {e["metric"]: e["value"] for e in f["evidence"]}
    raise AssertionError(f"no {category} finding")


# --------------------------------------------------------------------------- histograms -> IOMetrics


def test_io_metrics_from_histograms_match_the_golden_percentiles(tmp_path: Path) -> None:
    h = read_block_hist(_hist_only_bundle(tmp_path))
    assert h is not None
    iom = io_metrics_from_hist(h, set(), 15.0)
    assert iom is not None and iom.source == "block.hist.jsonl.gz"
    golden = {(s["dev"], bh.OP_NAMES[s["op"]]): s for s in json.loads(GOLDEN.read_text())["summary"]}
    assert {(g.dev, g.op) for g in iom.groups} == set(golden)  # ops named as block.trace.gz names them
    assert iom.total == sum(s["count"] for s in golden.values())
    for g in iom.groups:
        want = golden[(g.dev, g.op)]
        assert g.count == want["count"] and g.bytes == want["bytes"]
        assert g.p50_ms == pytest.approx(want["percentiles_us"]["p50"] / 1000, rel=1e-6)
        assert g.p99_ms == pytest.approx(want["percentiles_us"]["p99"] / 1000, rel=1e-6)
        assert g.max_ms == pytest.approx(want["max_us"] / 1000, rel=1e-6)
        assert g.p50_ms <= g.p95_ms <= g.p99_ms <= g.max_ms
        assert g.iops == pytest.approx(g.count / 15.0)
    # without target tids, the collector's own target flag decides the share
    assert iom.target_share == pytest.approx(bh.target_share(h))
    assert iom.unpaired == 107


def test_compute_takes_io_metrics_from_histograms_when_there_is_no_trace(tmp_path: Path) -> None:
    m = metmod.compute(read_views(_hist_only_bundle(tmp_path)))
    golden = json.loads(GOLDEN.read_text())["summary"]
    assert m.io is not None and m.io.source == "block.hist.jsonl.gz"
    assert m.io.total == sum(s["count"] for s in golden)
    assert m.sources["block-io"] == "ok"
    assert "block-io" not in m.missing


# --------------------------------------------------------------------------- histograms -> heatmap panels


def test_heatmap_panels_keep_every_io_in_one_cell() -> None:
    h = bh.parse_block_hist(_lines(HIST))
    model = histheatmap.from_hist(h)
    assert model is not None
    by_op: dict[str, int] = {}
    for s in h.slots:
        by_op[bh.OP_NAMES[s.op]] = by_op.get(bh.OP_NAMES[s.op], 0) + s.count
    assert {p.label: p.total for p in model.panels} == by_op
    first = model.panels[0]
    assert first.ncols == len({s.t for s in h.slots}) and first.step == h.slot_seconds
    for p in model.panels:  # one shared grid, log rows a quarter of a power of two wide
        assert p.counts.shape == first.counts.shape and np.array_equal(p.row_edges, first.row_edges)
        ratios = p.row_edges[1:] / p.row_edges[:-1]
        assert np.all(ratios > 1.0) and np.all(ratios <= 2 ** 0.5 + 1e-9)
        ok = ~np.isnan(p.p50)
        assert np.all(p.p50[ok] <= p.p99[ok])
        assert np.all((p.p99[ok] >= p.row_edges[0]) & (p.p99[ok] <= p.row_edges[-1]))
    # the column's p99 is the histogram's, interpolated in its bucket
    write = next(p for p in model.panels if p.label == "write")
    col0 = [s for s in h.slots if s.op == "W" and s.t == h.slots[0].t][0]
    assert write.p99[0] == pytest.approx(bh.quantile_ns(col0.buckets, 99, h.sub_bits, col0.max_ns) / 1e9)


def test_heatmap_of_a_cut_off_capture_still_draws(tmp_path: Path) -> None:
    h = read_block_hist(_hist_only_bundle(tmp_path, SAMPLES / "block-hist-truncated.jsonl.gz"))
    assert h is not None and not h.complete
    model = histheatmap.from_hist(h)
    assert model is not None and sum(p.total for p in model.panels) == sum(s.count for s in h.slots)


def _lines(path: Path) -> list[str]:
    import gzip

    with gzip.open(path, "rt") as fh:
        return fh.read().splitlines()


# --------------------------------------------------------------------------- whole sample bundles


def test_lock_sample_names_the_futex_stack_and_draws_the_offcpu_flame_graph() -> None:
    a = anmod.analyze(Bundle.open(LOCK))
    d = json.loads(jsonmod.render(a))
    assert d["verdict"]["category"] == "lock_contention"
    assert "top futex wait stack: __futex_abstimed_wait_common" in d["verdict"]["sub_cause"] + d["verdict"]["headline"]
    ev = _evidence(d, "lock_contention")
    assert ev["futex_waiting_threads"] > 1.0  # 4 threads fighting: nearly 2 waiting at any time
    tm = d["targets"][0]["metrics"]
    assert tm["futex_waits"] > 1000 and tm["futex_wait_s"] > 5.0
    assert tm["futex_wait_stacks"][0][0] == "__futex_abstimed_wait_common"
    assert set(tm["offcpu_states"]) == {"runnable", "sleep", "disk", "other"} and tm["offcpu_states"]["sleep"] > 5.0
    # the sources read as captured, not "other format"
    assert d["sources"]["offcpu"] == "ok" and d["sources"]["block-io"].startswith("partial")
    assert not any("other format" in v for v in d["sources"].values())
    assert d["io"]["source"] == "block.hist.jsonl.gz" and d["io"]["total"] == 4984
    flame = a.artifacts["offcpu_flame"]  # folded stacks; the report draws them by range
    assert flame.unit == "us"
    lock = sum(n for k, n in flame.counts.items() if k.split(";")[0] == "lock (futex)")  # wait reason roots
    assert lock > 0.5 * flame.total
    assert set(a.artifacts) >= {"offcpu_flame", "io_heatmap", "cpu_flame"} and not a.missing_artifacts
    # the timeline draws IO and syscall rates from the aggregates (no per-IO events, no syscalls-rate.csv)
    tl = d["timeline"]["panels"]
    assert {"io_iops", "io_latency", "syscalls"} <= set(tl)
    iops = [v for v in tl["io_iops"]["series"]["IOPS"] if v is not None]
    assert sum(iops) * a.timeline.step == pytest.approx(d["io"]["total"])  # every histogram IO is in one bucket


def test_fio_sample_verdict_has_io_evidence_from_the_histograms() -> None:
    a = anmod.analyze(Bundle.open(FIO))
    d = a.to_dict()
    assert d["verdict"]["category"] == "io_wait"
    ev = _evidence(d, "io_wait")
    assert "io_p99_ms" in ev and 0 < ev["io_p99_ms"] < 20
    assert d["io"]["total"] > 10000 and any(g["op"] == "write" for g in d["io"]["groups"])
    assert "write p99" in d["verdict"]["sub_cause"] + d["verdict"]["headline"]
    assert not any("no block IO trace" in r for r in d["verdict"]["confidence_reasons"])
    assert d["targets"][0]["metrics"]["offcpu_states"]["disk"] > 0


@pytest.mark.parametrize("sample", [LOCK, FIO], ids=["lock", "fio"])
def test_html_of_a_bcc_bundle_has_the_pictures_not_placeholders(sample: Path) -> None:
    html = htmlmod.render(anmod.analyze(Bundle.open(sample)))
    assert 'class="placeholder"' not in html
    assert "Off-CPU" in html and "bcc: summed in the kernel" in html  # the off-CPU flame graph
    # the IO latency heatmap is drawn by the page from the histograms' counts, per second
    assert '<div id="io-heatmap">' in html and '"source": "histograms"' in html and '"column": 1.0' in html
    assert "other format" not in html


def test_cli_report_json_of_a_bcc_sample(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    assert main(["report", str(LOCK), "--format", "json", "-o", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["io"]["source"] == "block.hist.jsonl.gz"


# --------------------------------------------------------------------------- a real capture


def _bcc_ok() -> tuple[bool, str]:
    if os.geteuid() != 0:
        return False, "needs root (CI runs as root)"
    from profiler.collectors.bcc.common import bcc_status

    ok, reason, fix = bcc_status()
    return ok, f"bcc cannot run here: {reason} ({fix})"


# 4 threads fight over one lock, 2 more write 4 KiB and fdatasync in a loop: both lock and IO evidence
LOCKS_AND_IO = r"""
import ctypes, ctypes.util, os, sys, tempfile, threading, time
libc = ctypes.CDLL(ctypes.util.find_library("c"))
lock = threading.Lock()
end = time.monotonic() + float(sys.argv[1])
fd, path = tempfile.mkstemp(prefix="profiler-bccint-", dir="/var/tmp")
os.unlink(path)
def locker(i):
    libc.prctl(15, f"locker-{i}".encode(), 0, 0, 0)
    while time.monotonic() < end:
        with lock:
            time.sleep(0.001)
def writer(i):
    libc.prctl(15, f"syncer-{i}".encode(), 0, 0, 0)
    buf = os.urandom(4096)
    n = 0
    while time.monotonic() < end:
        os.pwrite(fd, buf, ((n * 2 + i) % 512) * 4096)
        os.fdatasync(fd)
        n += 1
ts = [threading.Thread(target=locker, args=(i,)) for i in range(4)]
ts += [threading.Thread(target=writer, args=(i,)) for i in range(2)]
for t in ts: t.start()
print("ready", flush=True)
for t in ts: t.join()
"""


@pytest.mark.privileged
@pytest.mark.slow
def test_attach_with_bcc_gives_a_complete_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ok, why = _bcc_ok()
    if not ok:
        pytest.skip(why)
    proc = subprocess.Popen([sys.executable, "-c", LOCKS_AND_IO, "60"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        out = tmp_path / "cap"
        rc = main(["attach", "--backend", "bcc", "--pid", str(proc.pid), "--duration", "4s", "-o", str(out)])
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert rc == 0, capsys.readouterr()
    assert (out / "block.hist.jsonl.gz").exists() and not (out / "block.trace.gz").exists()
    assert (out / "offcpu.folded.gz").exists() and (out / "futex.folded.gz").exists()
    rj = tmp_path / "r.json"
    assert main(["report", str(out), "--format", "json", "-o", str(rj)]) == 0
    d = json.loads(rj.read_text())
    # IO metrics from the histograms, the workload's own fdatasync writes among them
    assert d["io"] is not None and d["io"]["source"] == "block.hist.jsonl.gz" and d["io"]["total"] > 0
    assert any(g["op"] == "write" and g["count"] > 0 and g["target_share"] > 0 for g in d["io"]["groups"])
    assert d["sources"]["offcpu"] == "ok" and not d["sources"]["block-io"].startswith(("missing", "other"))
    # the verdict's evidence comes from them: the IO p99 for IO wait, futex totals and stacks for the lock
    io_ev = _evidence(d, "io_wait")
    assert io_ev["io_p99_ms"] == pytest.approx(d["io"]["p99_ms"], rel=2e-3)  # evidence keeps 4 digits
    lock = _evidence(d, "lock_contention")
    assert lock["futex_waiting_threads"] > 0.5
    tm = d["targets"][0]["metrics"]
    assert tm["futex_waits"] > 100 and tm["futex_wait_stacks"] and tm["offcpu_states"]["sleep"] > 0
    # the HTML has the off-CPU flame graph and the IO heatmap, not placeholders
    html = (out / "report.html").read_text()
    assert 'class="placeholder"' not in html
    assert "bcc: summed in the kernel" in html and '"source": "histograms"' in html
    assert "locker" in html and "syncer" in html
