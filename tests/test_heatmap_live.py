"""End to end on a real kernel: trace fio's IOs through a private tracefs instance and perf record,
then pair and draw them. Needs root, perf, tracefs and fio (CI has them)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from profiler.analyzers.io import pairing as blockio

from profiler.cli import main

TRACEFS = Path("/sys/kernel/tracing")
EVENTS = ("block_rq_complete", "block_rq_issue", "block_rq_requeue", "block_rq_merge")

pytestmark = pytest.mark.privileged

needs = pytest.mark.skipif(
    os.geteuid() != 0 or not (TRACEFS / "instances").is_dir() or not shutil.which("fio") or not shutil.which("perf"),
    reason="needs root, tracefs instances, fio and perf",
)


def _fio(path: Path, seconds: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["fio", "--name=heat", f"--filename={path}", "--size=16M", "--rw=randrw", "--bs=4k", "--direct=1",
         "--ioengine=psync", f"--runtime={seconds}", "--time_based", "--output=/dev/null"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


@needs
def test_tracefs_instance_trace_pairs_fio(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inst = TRACEFS / "instances" / f"profiler-heat-test-{os.getpid()}"
    inst.mkdir()
    out = tmp_path / "block.trace"
    stop = threading.Event()
    try:
        (inst / "trace_clock").write_text("mono")
        for ev in EVENTS:
            p = inst / "events" / "block" / ev / "enable"
            if p.exists():
                p.write_text("1")

        def pump() -> None:
            with open(inst / "trace_pipe", "rb", buffering=0) as src, open(out, "wb") as dst:
                os.set_blocking(src.fileno(), False)
                while True:
                    try:
                        data = src.read(1 << 16)
                    except BlockingIOError:
                        data = None
                    if data:
                        dst.write(data)
                    elif stop.is_set():
                        break
                    else:
                        time.sleep(0.02)

        th = threading.Thread(target=pump)
        th.start()
        proc = _fio(tmp_path / "fio.dat", 1.5)
        try:
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        time.sleep(0.3)
        stop.set()
        th.join(timeout=10)
    finally:
        stop.set()
        for ev in EVENTS:
            p = inst / "events" / "block" / ev / "enable"
            if p.exists():
                p.write_text("0")
        inst.rmdir()
    bio = blockio.read_block_trace(out)
    c = bio.counts
    assert c.paired > 100, c
    assert c.completions == c.paired + c.unpaired_completions + c.dataless_completions
    fio_ios = bio.ios[bio.comm_of(bio.ios["comm"]) == "fio"]
    assert int((fio_ios["bytes"] == 4096).sum()) > 100  # others may run fio too: count ours by size
    assert (bio.ios["latency"] > 0).all() and float(bio.ios["latency"].max()) < 10
    assert main(["heatmap", str(out), "--json", "--by", "op"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sum(p["total"] for p in doc["panels"]) == c.paired


@needs
def test_perf_record_to_svg(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "perf.data"
    fio = _fio(tmp_path / "fio.dat", 1.5)
    try:
        subprocess.run(
            ["perf", "record", "-q", "-a", "-k", "CLOCK_MONOTONIC", "-o", str(data), "-e", "block:block_rq_issue",
             "-e", "block:block_rq_complete", "--", "sleep", "1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60, check=True,
        )
    finally:
        fio.wait(timeout=60)
    svg = tmp_path / "io.svg"
    assert main(["heatmap", str(data), "-o", str(svg), "--log", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["totals"]["paired"] > 0 and doc["panels"][0]["total"] == doc["totals"]["paired"]
    assert svg.read_text().lstrip().startswith("<?xml")
