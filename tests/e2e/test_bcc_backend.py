"""The bcc backend end to end on real processes (privileged): agreement with perf and tracefs, nothing left behind.

Each test starts its own workload (tests/bcc/workload.py, fio), captures with the bcc
collectors, and checks the result against an independent count taken at the same time:
perf stat on the same tracepoints for syscalls, a private tracefs instance with its own
clock-aligned per-IO lines for block IO latency. Then the capture is killed three ways and
the kernel is asked (bpftool) whether any of its programs or attachments survived.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from profiler.analyzers.io import histograms as bh
from profiler.analyzers.views.blockio import read_block_hist
from profiler.collectors.base import CaptureContext, CaptureOptions
from profiler.collectors.bcc.blockio import BccBlockIO
from profiler.collectors.bcc.common import bcc_status
from profiler.collectors.bcc.futex import BccFutex
from profiler.collectors.bcc.offcpu import BccOffCpu
from profiler.collectors.bcc.syscalls import HEADER, BccSyscalls

from profiler.bundle import Bundle, BundleWriter, ClockInfo, Manifest
from profiler.capture.targets import target_from_pid
from tests.conftest import TESTS

HERE = TESTS
WORKLOAD = HERE / "bcc" / "workload.py"
DRIVER = HERE / "bcc" / "driver.py"
TRACEFS = "/sys/kernel/tracing"

pytestmark = [pytest.mark.privileged]


def _bcc_ok() -> tuple[bool, str]:
    if os.geteuid() != 0:
        return False, "needs root (CI runs as root)"
    ok, reason, fix = bcc_status()
    return ok, f"bcc cannot run here: {reason} ({fix})"


_OK, _WHY = _bcc_ok()
requires_bcc = pytest.mark.skipif(not _OK, reason=_WHY)


def start_workload(*args: str) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([sys.executable, str(WORKLOAD), *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    assert line and line[0] == "ready", line
    return proc, int(line[1])


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


def context(tmp_path: Path, pid: int, interval: float = 0.5) -> CaptureContext:
    writer = BundleWriter(tmp_path / "cap", Manifest(clock=ClockInfo.now()))
    return CaptureContext(writer=writer, targets=[target_from_pid(pid)], options=CaptureOptions(interval=interval))


# --------------------------------------------------------------------------- syscalls


@requires_bcc
def test_syscall_counts_agree_with_perf_stat(tmp_path):
    """N getppid calls: bcc counts exactly N, as perf stat does; all syscalls within a few percent."""
    n = 20000
    proc, pid = start_workload("getppid", str(n))
    perf = subprocess.Popen(["perf", "stat", "-x,", "-e", "syscalls:sys_enter_getppid,raw_syscalls:sys_enter",
                             "-p", str(pid)], stderr=subprocess.PIPE, text=True)
    ctx = context(tmp_path, pid)
    col = BccSyscalls()
    try:
        col.start(ctx)
        assert col.wait_attached(60)
        time.sleep(0.5)  # perf stat attached too
        assert proc.stdin and proc.stdout
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "done"
        time.sleep(0.3)
        rec = col.stop(ctx)
    finally:
        perf.send_signal(signal.SIGINT)
        _, err = perf.communicate(timeout=20)
        proc.stdin.close()  # type: ignore[union-attr]
        proc.wait(timeout=10)
    counts = {}
    for line in err.splitlines():
        f = line.split(",")
        if len(f) > 2 and f[0].isdigit():
            counts[f[2]] = int(f[0])
    assert counts.get("syscalls:sys_enter_getppid") == n, err

    assert rec.status == "ok", rec.reason
    text = (tmp_path / "cap" / "syscalls.csv").read_text()
    assert text.startswith(HEADER)
    rows = list(csv.DictReader(text.splitlines()))
    assert {r["tid"] for r in rows} >= {str(pid)}
    getppid = sum(int(r["count"]) for r in rows if r["syscall"] == "getppid")
    assert getppid == n
    total = sum(int(r["count"]) for r in rows)
    assert total == pytest.approx(counts["raw_syscalls:sys_enter"], rel=0.03)
    assert rec.stats["syscalls"] == total and rec.stats["dropped"] == 0
    # times are on the monotonic clock, inside the capture window, intervals in order
    times = [float(r["time"]) for r in rows]
    assert times == sorted(times)
    assert rec.started is not None and rec.ended is not None
    assert all(rec.started - 1e-6 <= t < rec.ended for t in times)
    assert all(int(r["total_ns"]) >= 0 for r in rows)
    assert all(r["comm"] == "python3" or r["comm"].startswith("python") for r in rows)


# --------------------------------------------------------------------------- block IO


def _tracefs_instance(name: str) -> Path:
    inst = Path(TRACEFS) / "instances" / name
    inst.mkdir()
    (inst / "buffer_size_kb").write_text("32768")
    (inst / "trace_clock").write_text("mono")
    for ev in ("block_rq_issue", "block_rq_complete"):
        (inst / "events" / "block" / ev / "enable").write_text("1")
    return inst


def _pairs_from_trace(text: str, t_from: float, t_to: float) -> dict[tuple[str, str], list[float]]:
    """(dev, op) -> latencies in us of IOs issued and completed inside [t_from, t_to]; flushes paired by device."""
    inflight: dict[tuple[str, str], float] = {}
    out: dict[tuple[str, str], list[float]] = {}
    for line in text.splitlines():
        if "block_rq_" not in line or line.startswith("#"):
            continue
        head, _, rest = line.partition(": block_rq_")
        t = float(head.rsplit(None, 1)[-1])
        event, _, args = rest.partition(": ")
        f = args.split()
        dev, rwbs = f[0], f[1]
        # issue: "254,0 WS 4096 () 123 + 8 ..."; complete: "254,0 WS () 123 + 8 ..."
        i = f.index("+") if "+" in f else -1
        sector, nsec = (f[i - 1], int(f[i + 1])) if i > 0 else ("0", 0)
        flush = rwbs.startswith("F") and nsec == 0
        key = (dev, "flush" if flush else sector)
        if event == "issue":
            inflight[key] = t
        elif event == "complete":
            t_issue = inflight.pop(key, None)
            if t_issue is None or nsec == 0 and not rwbs.startswith("F"):
                continue
            if t_issue >= t_from and t <= t_to:
                majmin = dev.replace(",", ":")
                out.setdefault((majmin, rwbs[0]), []).append((t - t_issue) * 1e6)
    return out


class _PipeReader(threading.Thread):
    """Drains a tracefs instance's trace_pipe while the test runs, so a busy host cannot overwrite it."""

    def __init__(self, inst: Path) -> None:
        super().__init__(daemon=True)
        self.fd = os.open(inst / "trace_pipe", os.O_RDONLY | os.O_NONBLOCK)
        self.chunks: list[bytes] = []
        self.done = threading.Event()

    def run(self) -> None:
        idle = 0
        while True:
            try:
                data = os.read(self.fd, 1 << 20)
            except BlockingIOError:
                data = b""
            if data:
                self.chunks.append(data)
                idle = 0
                continue
            if self.done.is_set():
                idle += 1
                if idle > 3:
                    break
            time.sleep(0.02)
        os.close(self.fd)

    def text(self) -> str:
        self.done.set()
        self.join(timeout=30)
        return b"".join(self.chunks).decode("utf-8", "replace")


@requires_bcc
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed")
def test_io_latency_percentiles_agree_with_tracefs(tmp_path):
    """fio sync 4k IO: the in-kernel histograms give the percentiles per-IO tracefs lines give."""
    name = f"profiler-bcc-{os.getpid()}"
    inst = _tracefs_instance(name)
    fio = None
    data = Path("/var/tmp") / f"profiler-bcc-fio-{os.getpid()}"
    reader = _PipeReader(inst)
    try:
        reader.start()
        (inst / "tracing_on").write_text("1")
        ctx = context(tmp_path, os.getpid())
        col = BccBlockIO()
        col.start(ctx)
        assert col.wait_attached(60)
        data.mkdir(exist_ok=True)
        fio = subprocess.run(["fio", "--name=agree", f"--directory={data}", "--rw=randrw", "--bs=4k", "--size=32m",
                              "--direct=1", "--ioengine=psync", "--fdatasync=8", "--time_based", "--runtime=4",
                              "--numjobs=1", "--output-format=terse"], capture_output=True, text=True, timeout=60)
        rec = col.stop(ctx)
        time.sleep(0.2)
        (inst / "tracing_on").write_text("0")
        text = reader.text()
        overrun = sum(int(line.split()[1]) for cpu in (inst / "per_cpu").iterdir()
                      for line in (cpu / "stats").read_text().splitlines() if line.startswith("overrun:"))
    finally:
        reader.done.set()
        reader.join(timeout=30)
        for ev in ("block_rq_issue", "block_rq_complete"):
            (inst / "events" / "block" / ev / "enable").write_text("0")
        inst.rmdir()
        shutil.rmtree(data, ignore_errors=True)
    assert fio is not None and fio.returncode == 0, fio.stderr if fio else ""
    assert overrun == 0, "the tracefs reference lost events: its buffer is too small"
    assert rec.status == "ok", rec.reason
    assert rec.started is not None and rec.ended is not None
    ref = _pairs_from_trace(text, rec.started, rec.ended)
    h = read_block_hist(Bundle.open(tmp_path / "cap"))
    assert h is not None and h.complete
    compared = 0
    for s in bh.latency_summary(h, quantiles=(50, 90, 99)):
        lat = ref.get((s.dev, s.op))
        if s.op not in "RW" or not lat or len(lat) < 500:
            continue
        compared += 1
        # completions the kernel did not run our program for (another BPF program was running on
        # that CPU: the shared host has several) are missing from bcc's count, and reported
        missed = rec.stats.get("missed_events", 0)
        assert abs(s.count - len(lat)) <= 0.01 * len(lat) + missed, (s.dev, s.op, s.count, len(lat), missed)
        for q in (50, 90, 99):
            exact = float(np.percentile(lat, q))
            got = s.percentiles_us[f"p{q}"]
            # within 5% (+ 8 us: the BPF program and the tracefs event read the clock at different
            # instants of the same tracepoint; a preempted handler on a loaded host shifts one of them
            # by a few us, which at a 70 us median is 7%: seen once in a CI run at load 15), or
            # (where the distribution has a gap at that rank) between the exact percentiles one
            # rank-percent either side, widened by one bucket (1/16)
            lo = float(np.percentile(lat, max(0, q - 1))) * (1 - 1 / 16)
            hi = float(np.percentile(lat, min(100, q + 1))) * (1 + 1 / 16)
            assert got == pytest.approx(exact, rel=0.05, abs=8.0) or lo <= got <= hi, (s.dev, s.op, q, got, exact)
    assert compared >= 1, f"fio's IOs were not seen: {[(k, len(v)) for k, v in ref.items()]}"
    assert rec.stats["dropped"] == 0


# --------------------------------------------------------------------------- off-CPU and futex


@requires_bcc
def test_lock_contention_shows_as_futex_waits_and_off_cpu_stacks(tmp_path):
    proc, pid = start_workload("contend", "4", "120")  # killed at the end; long enough for a slow attach
    ctx = context(tmp_path, pid)
    cols = [BccOffCpu(), BccFutex()]
    try:
        for c in cols:
            c.start(ctx)
        assert all(c.wait_attached(60) for c in cols)
        time.sleep(2)
        recs = [c.stop(ctx) for c in cols]
    finally:
        stop(proc)
    off, fut = recs
    assert off.status in ("ok", "partial") and fut.status in ("ok", "partial")
    cap = tmp_path / "cap"
    futex = gzip.open(cap / "futex.folded.gz", "rt").read().splitlines()
    assert futex and all(line.rsplit(" ", 1)[1].isdigit() for line in futex)
    waited = sum(int(line.rsplit(" ", 1)[1]) for line in futex)
    assert waited > 0.2e9, "4 threads fighting over one lock for 2 s wait well over 0.2 s in total"
    assert fut.stats["waits"] > 100 and fut.stats["wait_ns"] == waited
    summary = json.loads((cap / "futex.summary.json").read_text())
    assert summary["locks"] and summary["locks"][0]["wait_ns"] > 0
    offcpu = gzip.open(cap / "offcpu.folded.gz", "rt").read().splitlines()
    assert any("futex" in line and line.split(";")[-1].rsplit(" ", 1)[0].endswith("_[k]") for line in offcpu)
    osum = json.loads((cap / "offcpu.summary.json").read_text())
    assert osum["by_state"]["sleep"] > 0
    assert {t["pid"] for t in osum["threads"]} == {pid}
    for key in ("lost_user_stacks", "lost_kernel_stacks", "stack_collisions"):
        assert isinstance(off.stats[key], int)


@requires_bcc
def test_tiny_stack_map_reports_lost_stacks(tmp_path):
    """A stack map too small for the workload loses stacks: it must say so, not drop them silently."""
    proc, pid = start_workload("contend", "4", "120")
    ctx = context(tmp_path, pid)
    col = BccOffCpu(user_stacks=1, kernel_stacks=1)
    try:
        col.start(ctx)
        assert col.wait_attached(60)
        time.sleep(1.5)
        rec = col.stop(ctx)
    finally:
        stop(proc)
    assert rec.stats["lost_user_stacks"] + rec.stats["lost_kernel_stacks"] > 0
    assert rec.stats["stack_collisions"] > 0
    assert rec.status == "partial" and "lost stack" in (rec.reason or "")
    folded = gzip.open(tmp_path / "cap" / "offcpu.folded.gz", "rt").read()
    assert "[lost " in folded


# --------------------------------------------------------------------------- nothing left behind


def _bpftool(*args: str) -> list[dict]:
    out = subprocess.run(["bpftool", *args, "--json"], capture_output=True, text=True, timeout=30).stdout
    return json.loads(out or "[]")


def _family(pid: int) -> set[int]:
    """The process and its descendants (the bcc collectors' programs belong to their helper processes)."""
    parents: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
                parents[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    family, grew = {pid}, True
    while grew:
        more = {p for p, pp in parents.items() if pp in family} - family
        family |= more
        grew = bool(more)
    return family


def _attachments_of(pids: set[int]) -> set[int]:
    return {a["prog_id"] for a in _bpftool("perf", "show") if a.get("pid") in pids}


@requires_bcc
@pytest.mark.skipif(shutil.which("bpftool") is None, reason="bpftool is not installed (apt-get install bpftool)")
@pytest.mark.parametrize("how", ["normal", "sigint", "sigkill"])
def test_no_probes_left_behind(tmp_path, how):
    work, pid = start_workload("contend", "2", "120")
    out = tmp_path / "cap"
    driver = subprocess.Popen([sys.executable, str(DRIVER), str(pid), str(out), "2" if how == "normal" else "30"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert driver.stdout is not None
        assert driver.stdout.readline().strip() == "attached"
        family = _family(driver.pid)
        progs = _attachments_of(family)
        # block IO 2 + syscalls 2 + off-CPU 1 + futex 2 tracepoints, each a perf event holding a program
        assert len(progs) >= 6, progs
        if how == "sigint":
            driver.send_signal(signal.SIGINT)
        elif how == "sigkill":
            driver.kill()
        code = driver.wait(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        stop(work)
    assert code == {"normal": 0, "sigint": 130, "sigkill": -signal.SIGKILL}[how]
    deadline = time.monotonic() + 5
    while True:  # the kernel frees programs once their last reference (fd, attachment) is gone
        alive = {p["id"] for p in _bpftool("prog", "show")} & progs
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not alive, f"BPF programs still loaded after {how}: {sorted(alive)}"
    assert not _attachments_of(family)
    manifest = json.loads((out / "manifest.json").read_text())
    if how == "sigkill":
        assert manifest["status"] == "running"  # killed outright: the bundle says so
    else:
        assert manifest["status"] == ("ok" if how == "normal" else "partial")
        assert {c["name"] for c in manifest["collectors"]} == {"block-io", "syscalls", "offcpu-stacks", "futex-waits"}
        assert (out / "syscalls.csv").is_file() and (out / "offcpu.folded.gz").is_file()


# --------------------------------------------------------------------------- --backend


class _Perf:
    def __init__(self, name: str) -> None:
        self.name = name
        self.backend = "perf"


def test_backend_perf_keeps_the_perf_collectors():
    from profiler.collectors.bcc.backend import with_backend

    perf = [_Perf("perf-stat"), _Perf("block-io"), _Perf("syscalls")]
    out, used, why = with_backend(perf, "perf")
    assert out == perf and used == "perf" and "perf" in why


def test_unknown_backend_is_a_usage_error():
    from profiler.collectors.bcc.backend import with_backend

    from profiler.errors import UsageError

    with pytest.raises(UsageError):
        with_backend([], "ebpf")


@requires_bcc
def test_backend_auto_swaps_in_the_bcc_collectors_in_place():
    from profiler.collectors.bcc.backend import with_backend

    perf = [_Perf("perf-stat"), _Perf("cpu-stacks"), _Perf("offcpu-stacks"), _Perf("block-io"), _Perf("syscalls")]
    out, used, why = with_backend(perf, "auto")
    assert used == "bcc" and why.startswith("auto:")
    assert [c.name for c in out] == ["perf-stat", "cpu-stacks", "offcpu-stacks", "block-io", "syscalls", "futex-waits"]
    assert [c.backend for c in out] == ["perf", "perf", "bcc", "bcc", "bcc", "bcc"]


# --------------------------------------------------------------------------- profiler attach --backend bcc


@requires_bcc
def test_attach_backend_bcc_end_to_end(tmp_path):
    from profiler.cli import main

    proc, pid = start_workload("contend", "3", "120")
    out = tmp_path / "att"
    try:
        code = main(["attach", "--backend", "bcc", "--pid", str(pid), "--duration", "3s", "-o", str(out),
                     "--no-report", "--collector", "offcpu-stacks", "--collector", "block-io",
                     "--collector", "syscalls", "--collector", "futex-waits"])
    finally:
        stop(proc)
    assert code == 0
    m = json.loads((out / "manifest.json").read_text())
    recs = {c["name"]: c for c in m["collectors"]}
    assert set(recs) == {"offcpu-stacks", "block-io", "syscalls", "futex-waits"}
    for rec in recs.values():
        assert rec["backend"] == "bcc", rec
        # partial only for a loss the collector measured and said (skipped events, lost stacks)
        assert rec["status"] == "ok" or (rec["status"] == "partial" and any(
            w in (rec["reason"] or "") for w in ("skipped our program", "lost stack"))), rec
    assert m["status"] == ("ok" if all(r["status"] == "ok" for r in recs.values()) else "partial")
    for rec in recs.values():
        assert rec["stats"]["backend_reason"] == "asked for --backend bcc"
        for f in rec["files"]:
            assert (out / f).is_file()
    assert recs["syscalls"]["stats"]["events"] > 100
    assert recs["futex-waits"]["stats"]["events"] > 10
    b = Bundle.open(out)
    assert read_block_hist(b) is not None and not b.warnings


@requires_bcc
@pytest.mark.skipif(shutil.which("bpftool") is None, reason="bpftool is not installed (apt-get install bpftool)")
@pytest.mark.parametrize("how", ["sigint", "sigkill"])
def test_attach_cli_leaves_no_probes_behind(tmp_path, how):
    work, pid = start_workload("contend", "2", "120")
    out = tmp_path / "att"
    cli = subprocess.Popen([sys.executable, "-m", "profiler", "attach", "--backend", "bcc", "--pid", str(pid),
                            "--duration", "60s", "-o", str(out), "--no-report",
                            "--collector", "syscalls", "--collector", "offcpu-stacks"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        progs: set[int] = set()
        family: set[int] = set()
        while time.monotonic() < deadline and len(progs) < 3:  # 2 syscall + 1 sched_switch attachments
            time.sleep(0.3)
            family = _family(cli.pid)
            progs = _attachments_of(family)
        assert len(progs) >= 3, "the capture never attached its programs"
        cli.send_signal(signal.SIGINT if how == "sigint" else signal.SIGKILL)
        code = cli.wait(timeout=60)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
        stop(work)
    assert code == (130 if how == "sigint" else -signal.SIGKILL)
    deadline = time.monotonic() + 5
    while True:
        alive = {p["id"] for p in _bpftool("prog", "show")} & progs
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not alive, f"BPF programs still loaded after {how}: {sorted(alive)}"
    m = json.loads((out / "manifest.json").read_text())
    if how == "sigint":
        assert m["status"] == "partial"
        assert (out / "syscalls.csv").is_file() and (out / "offcpu.folded.gz").is_file()


# --------------------------------------------------------------------------- helpers, objects, slots


@requires_bcc
def test_a_helper_that_dies_ends_only_its_own_collector(tmp_path):
    """A fault in a bcc helper (here: SIGSEGV, as libbcc once did at the end of a tidb-server
    capture) stops that collector with the reason; the others keep capturing, and what the dead
    one had sent is kept."""
    proc, pid = start_workload("contend", "4", "120")
    ctx = context(tmp_path, pid)
    victim, other = BccOffCpu(), BccSyscalls()
    try:
        for c in (victim, other):
            c.start(ctx)
        assert victim.wait_attached(60) and other.wait_attached(60)
        time.sleep(1.6)  # a few 0.5 s slots sent
        assert victim.helper_pid is not None and victim.helper_pid != other.helper_pid
        os.kill(victim.helper_pid, signal.SIGSEGV)
        deadline = time.monotonic() + 10
        while victim.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "SIGSEGV" in (victim.poll() or "")
        assert other.poll() is None
        time.sleep(1.0)
        recs = [victim.stop(ctx), other.stop(ctx)]
    finally:
        stop(proc)
    dead, alive = recs
    assert dead.status == "partial" and dead.stats["died"] is True
    assert "SIGSEGV" in (dead.reason or "") and "kept the" in (dead.reason or "")
    assert alive.status in ("ok", "partial") and not alive.stats.get("died")
    rows = list(csv.DictReader((tmp_path / "cap" / "syscalls.csv").read_text().splitlines()))
    assert max(float(r["time"]) for r in rows) > victim.end_ns / 1e9 - 1.5  # kept capturing after the death
    lines = [json.loads(x) for x in gzip.open(tmp_path / "cap" / "offcpu.slots.jsonl.gz", "rt")]
    assert any(x["kind"] == "slot" for x in lines)  # what it sent before dying


@requires_bcc
def test_prebuilt_and_compiled_programs_count_the_same(tmp_path):
    """The prebuilt object is loaded as it is (no compiler); bcc compiling the same source at
    capture time gives the same counts."""
    n = 5000
    got = {}
    for prefer in ("prebuilt", "compile"):
        proc, pid = start_workload("getppid", str(n))
        ctx = context(tmp_path / prefer, pid)
        col = BccSyscalls()
        col.prefer = prefer
        try:
            col.start(ctx)
            assert col.wait_attached(120)
            assert proc.stdin and proc.stdout
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == "done"
            rec = col.stop(ctx)
        finally:
            proc.stdin.close()  # type: ignore[union-attr]
            proc.wait(timeout=10)
        rows = list(csv.DictReader((tmp_path / prefer / "cap" / "syscalls.csv").read_text().splitlines()))
        got[prefer] = (rec.stats["program"], sum(int(r["count"]) for r in rows if r["syscall"] == "getppid"))
    assert got == {"prebuilt": ("prebuilt", n), "compile": ("compiled", n)}


@requires_bcc
def test_the_shipped_objects_are_what_bcc_compiles_here(tmp_path):
    from bcc import version
    from profiler.collectors.bcc import objects

    shipped = objects.shipped()
    if next(iter(shipped.values())).built.get("bcc") != version.__version__:
        pytest.skip("another bcc built the shipped objects")
    for name, obj in shipped.items():
        fresh = objects.compile_object(name, TRACEFS)
        assert [p.insns for p in fresh.progs] == [p.insns for p in obj.progs], name
        assert fresh.layouts == obj.layouts and [vars(m) for m in fresh.maps] == [vars(m) for m in obj.maps]


@requires_bcc
def test_off_cpu_time_is_there_for_every_slot_even_for_waits_spanning_slots(tmp_path):
    """Threads sleeping 1.3 s at a time (longer than a 0.5 s slot): every slot of the window has
    their blocked time, and the slots add up to the whole-capture totals."""
    proc, pid = start_workload("sleepers", "3", "1.3", "120")
    ctx = context(tmp_path, pid)
    col = BccOffCpu()
    try:
        col.start(ctx)
        assert col.wait_attached(60)
        time.sleep(4)
        rec = col.stop(ctx)
    finally:
        stop(proc)
    assert rec.status == "ok", rec.reason
    lines = [json.loads(x) for x in gzip.open(tmp_path / "cap" / "offcpu.slots.jsonl.gz", "rt")]
    assert lines[0]["kind"] == "header" and lines[-1]["kind"] == "end"
    per_slot: dict[int, int] = {}
    for x in lines:
        if x["kind"] == "slot":
            for _tid, tgid, _comm, _state, _stack, ns, _n in x["rows"]:
                if tgid == pid:  # asleep, or woken and waiting for a CPU on a busy host: off the CPU either way
                    per_slot[x["slot"]] = per_slot.get(x["slot"], 0) + ns
    # a thread asleep since before the capture has no switch-out in it: each appears from its
    # first sleep inside the window (within 1.3 s: by slot 2), then in every slot to the end
    last = (col.end_ns - col.t0_ns) // col.slot_ns
    first = min(per_slot)
    assert first <= 2 and sorted(per_slot) == list(range(first, last + 1)), sorted(per_slot)
    for s in range(4, last):  # whole slots once all 3 are in: 3 sleepers off the CPU nearly throughout
        assert per_slot[s] >= 3 * 0.45e9, (s, per_slot[s])
    summary = json.loads((tmp_path / "cap" / "offcpu.summary.json").read_text())
    total = sum(ns for x in lines if x["kind"] == "slot" for *_r, ns, _n in x["rows"])
    assert total == sum(summary["by_state"].values())
