"""Record real bundles with the procfs sampler against real workloads (test helper, and the samples/ maker).

Each workload is a real program from Debian's packages given a known bottleneck, with cgroup v1
limits where the cause must be deterministic. The bundle is written through BundleWriter
exactly as a capture session would, so analyzers see what `profiler attach` writes.

    .venv/bin/python -m tests.recorder cpu-bound-stress-ng samples/cpu-bound-stress-ng --seconds 4 --hz 10

Cgroups are named ``profiler-verdict-<pid>-<n>`` and removed afterwards; every process started
is stopped by pid.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from profiler.collectors.base import CaptureContext, CaptureOptions
from profiler.collectors.host import host_info, target_info
from profiler.collectors.procfs.sampler import ProcfsCollector

from profiler.bundle import OK, BundleWriter, ClockInfo, Manifest
from profiler.capture.targets import Target, target_from_pid

CG_ROOT = Path("/sys/fs/cgroup")
_counter = 0


@dataclass
class Workload:
    name: str
    argv: list[str]
    expect: str  # the right verdict category
    sub_cause: str  # what the right sub-cause says
    what: str  # one line for the samples README
    cgroup: dict[str, dict[str, str]] = field(default_factory=dict)  # controller -> {file: value}
    warmup: float = 1.0
    target: str = "child"  # "child": the started process; "children": its children (stress-ng workers)
    setup: list[str] | None = None  # a command run before (e.g. creating a file)


def _cg_name() -> str:
    global _counter
    _counter += 1
    return f"profiler-verdict-{os.getpid()}-{_counter}"


@contextlib.contextmanager
def cgroup(limits: dict[str, dict[str, str]]) -> Iterator[list[Path]]:
    """Create a v1 cgroup in each controller with the given files set; remove it afterwards."""
    name = _cg_name()
    dirs: list[Path] = []
    try:
        for ctrl, files in limits.items():
            d = CG_ROOT / ctrl / name
            d.mkdir()
            dirs.append(d)
            for f, v in files.items():
                (d / f).write_text(v)
        yield dirs
    finally:
        for d in dirs:
            for _ in range(50):
                try:
                    procs = (d / "cgroup.procs").read_text().split()
                except OSError:
                    procs = []
                for p in procs:
                    with contextlib.suppress(OSError):
                        (d.parent / "cgroup.procs").write_text(p)
                try:
                    d.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    try:
        kids = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        kids = []
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for k in kids:
        with contextlib.suppress(psutil.Error):
            k.kill()
    psutil.wait_procs(kids, timeout=3)


def record(out: Path, targets: list[Target], seconds: float, hz: float, force: bool = True) -> Path:
    """Run the procfs collector on ``targets`` for ``seconds`` into a new bundle at ``out``."""
    manifest = Manifest(clock=ClockInfo.now(), host=host_info(), duration=seconds,
                        options={"proc_hz": hz, "interval": 1.0})
    for t in targets:
        manifest.targets.append(target_info(t.pid, t.comm, t.exe, list(t.cmdline), t.kind))
    writer = BundleWriter(out, manifest, force=force)
    ctx = CaptureContext(writer=writer, targets=targets, options=CaptureOptions(duration=seconds, proc_hz=hz))
    col = ProcfsCollector()
    delayacct = Path("/proc/sys/kernel/task_delayacct")
    old = delayacct.read_text().strip() if delayacct.exists() else None
    if old == "0" and os.geteuid() == 0:
        delayacct.write_text("1")  # as the capture session does; put back below
    try:
        return _record(col, ctx, writer, seconds, out)
    finally:
        if old == "0" and os.geteuid() == 0:
            delayacct.write_text(old)


def _record(col: ProcfsCollector, ctx: CaptureContext, writer: BundleWriter, seconds: float, out: Path) -> Path:
    probe = col.probe(ctx)
    if not probe.ok:
        raise RuntimeError(probe.reason)
    col.start(ctx)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.05)
    rec = col.stop(ctx)
    writer.record(rec)
    writer.finish(OK if rec.status == OK else rec.status, rec.reason)
    return out


def run_workload(w: Workload, out: Path, seconds: float, hz: float) -> Path:
    with tempfile.TemporaryDirectory(prefix="profiler-verdict-") as tmp, cgroup(w.cgroup) as dirs:
        argv = [a.replace("{tmp}", tmp) for a in w.argv]
        if w.setup:
            subprocess.run([a.replace("{tmp}", tmp) for a in w.setup], check=True, capture_output=True)

        def enter() -> None:
            for d in dirs:
                (d / "cgroup.procs").write_text(str(os.getpid()))

        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp,
                                preexec_fn=enter if dirs else None)
        try:
            time.sleep(w.warmup)
            if proc.poll() is not None:
                raise RuntimeError(f"{w.name}: {argv[0]} exited early with {proc.returncode}")
            pids = [proc.pid]
            if w.target == "children":
                pids = sorted(c.pid for c in psutil.Process(proc.pid).children())
            elif w.target.startswith("descendants:"):
                comm = w.target.split(":", 1)[1]
                pids = sorted(c.pid for c in psutil.Process(proc.pid).children(recursive=True) if c.name() == comm)
            targets = [target_from_pid(p) for p in pids]
            return record(out, targets, seconds, hz)
        finally:
            _stop(proc)


MB = 1024 * 1024
WORKLOADS = {w.name: w for w in [
    Workload("cpu-bound-stress-ng", ["stress-ng", "--cpu", "2", "--cpu-method", "matrixprod", "--timeout", "120"],
             "cpu", "all cores busy", "stress-ng --cpu 2 (two CPU hogs on a 2-CPU host)", target="children"),
    Workload("cpu-quota-throttled", ["stress-ng", "--cpu", "2", "--timeout", "120"], "cpu",
             "cgroup CPU quota (throttled)", "stress-ng --cpu 2 in a cgroup with cpu.cfs_quota_us=20000 (0.2 core)",
             cgroup={"cpu": {"cpu.cfs_quota_us": "20000", "cpu.cfs_period_us": "100000"}}, target="children"),
    Workload("io-fsync-fio", ["fio", "--name=w", "--rw=randwrite", "--bs=4k", "--size=32M", "--fsync=1",
                              "--numjobs=2", "--time_based", "--runtime=120", "--filename={tmp}/f", "--thread"],
             "io_wait", "fsync / fdatasync", "fio randwrite 4k with fsync after every write (2 jobs), writes throttled to 200 IOPS",
             cgroup={"blkio": {"blkio.throttle.write_iops_device": "254:0 200"}}),
    Workload("lock-contention-sysbench-threads", ["sysbench", "threads", "--threads=16", "--thread-locks=1",
                                                  "--thread-yields=100", "--time=120", "run"],
             "lock_contention", "futex", "sysbench threads, 16 threads on one mutex (--thread-locks=1)"),
    Workload("memory-thrash-cgroup", ["fio", "--name=m", "--ioengine=mmap", "--rw=randread", "--bs=4k",
                                      "--size=192M", "--time_based", "--runtime=120", "--filename={tmp}/m", "--thread"],
             "memory", "cgroup memory limit", "fio mmap random reads over a 192 MiB file in a 64 MiB memory cgroup (page cache thrash, major faults)",
             cgroup={"memory": {"memory.limit_in_bytes": str(64 * MB)}}, warmup=3.0),
    Workload("idle-not-saturated", ["stress-ng", "--cpu", "1", "--cpu-load", "10", "--timeout", "120"],
             "not_saturated", "CPU well under capacity", "stress-ng --cpu 1 --cpu-load 10 (a light, mostly sleeping load)",
             target="children"),
    Workload("tikv-shaped-raftstore-hot", [sys.executable, str(Path(__file__).parent / "workloads" / "tikv_shaped.py"),
                                           "--duration", "120"],
             "cpu", "pool raftstore saturated (raftstore.store-pool-size)",
             "a TiKV-shaped process (tikv-server name, TiKV pool thread names) whose one raftstore thread burns CPU",
             warmup=1.5),
    Workload("imbalance-three-peers", ["sh", "-c", "stress-ng --cpu 1 --cpu-load 40 --timeout 120 & "
                                       "stress-ng --cpu 1 --cpu-load 40 --timeout 120 & "
                                       "stress-ng --cpu 1 --cpu-load 8 --timeout 120 & wait"],
             "not_saturated", "one peer does much less than the others",
             "three stress-ng --cpu 1 peers, two at 40% load and one at 8% (seed 002: one TiKV lower than its peers)",
             target="descendants:stress-ng-cpu", warmup=1.5),
]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("workload", choices=sorted(WORKLOADS))
    ap.add_argument("out", type=Path)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--hz", type=float, default=20.0)
    args = ap.parse_args(argv)
    if shutil.which(WORKLOADS[args.workload].argv[0]) is None:
        print(f"{WORKLOADS[args.workload].argv[0]} is not installed", file=sys.stderr)
        return 2
    run_workload(WORKLOADS[args.workload], args.out, args.seconds, args.hz)
    print(f"{args.out}: {WORKLOADS[args.workload].what} -> expect {WORKLOADS[args.workload].expect}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
