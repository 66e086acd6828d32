"""What capturing block IO, syscalls and off-CPU stacks costs the target: perf backend vs bcc backend vs nothing.

    sudo .venv/bin/python bench/bcc_overhead.py [--rounds 3] [--workload redis|fio|both]

Workloads (real, started here, 127.0.0.1 only, stopped by pid):
  redis  redis-server on a free port driven by redis-benchmark (GET/SET, 50 clients):
         syscall-heavy (read, write, epoll_wait per request); the target is redis-server.
  fio    fio --thread, 4k random writes with O_DIRECT and fdatasync after each: IO- and
         syscall-heavy; the target is fio itself.

For each round the three modes run back to back in a rotating order (interleaved, so drift on
this shared machine hits all three alike): no capture, the perf backend's collectors for the
same evidence (block-io, syscalls, offcpu-stacks), the bcc backend's (the same three plus
futex-waits). A capture runs in its own process (as `profiler attach` would) and is attached
before the workload starts; the throughput of the workload is the measure. Prints the median
per mode and the ratios. The perf side uses the project's perf collectors when they are
installed (profiler.collectors.registry) and otherwise the perf commands they run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

MODES = ("none", "perf", "bcc")
HERE = Path(__file__).resolve()


# --------------------------------------------------------------------------- capture process


def perf_collectors() -> list:
    """The perf backend's collectors for block IO, syscalls and off-CPU, or None if not installed."""
    try:
        from profiler.collectors import registry
        from profiler.collectors.base import CaptureOptions
    except ImportError:
        return []
    every = registry.default_collectors(CaptureOptions())
    return [c for c in every if c.name in ("block-io", "syscalls", "offcpu-stacks") and c.backend != "bcc"]


def perf_commands(pid: int, out: Path) -> list[list[str]]:
    """The perf commands the perf backend runs for the same evidence (used when its collectors are absent)."""
    return [
        ["perf", "record", "-e", "raw_syscalls:sys_enter,raw_syscalls:sys_exit", "-k", "CLOCK_MONOTONIC",
         "-N", "-B", "-p", str(pid), "-o", str(out / "sys.data")],
        ["perf", "stat", "-I", "1000", "-x", ",", "-e", "raw_syscalls:sys_enter", "-p", str(pid),
         "-o", str(out / "rate.csv")],
        ["perf", "record", "-e", "sched:sched_switch", "--call-graph", "fp", "--switch-events", "-k",
         "CLOCK_MONOTONIC", "--sample-cpu", "-N", "-B", "-p", str(pid), "-o", str(out / "off.data")],
        ["perf", "record", "-a", "-e", "block:block_rq_issue,block:block_rq_complete", "-k", "CLOCK_MONOTONIC",
         "-N", "-B", "-o", str(out / "block.data")],
    ]


def capture(mode: str, pid: int, out: str) -> int:
    """Child process: attach mode's collectors to pid, print "attached", stop on SIGINT."""
    from profiler.collectors.base import CaptureContext, CaptureOptions

    from profiler.bundle import BundleWriter, ClockInfo, Manifest
    from profiler.capture.targets import target_from_pid

    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    procs: list[subprocess.Popen[bytes]] = []
    collectors: list = []
    writer = BundleWriter(out, Manifest(clock=ClockInfo.now()))
    ctx = CaptureContext(writer=writer, targets=[target_from_pid(pid)], options=CaptureOptions())
    if mode == "bcc":
        from profiler.collectors.bcc.backend import bcc_collectors

        collectors = bcc_collectors()
    else:
        collectors = perf_collectors()
        if not collectors:
            for argv in perf_commands(pid, Path(out)):
                procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    started = []
    for c in collectors:
        if c.probe(ctx).ok:
            c.start(ctx)
            started.append(c)
    for c in started:
        wait = getattr(c, "wait_attached", None)  # the bcc collectors attach in their helper processes
        if wait is not None:
            wait(60)
    time.sleep(1.0)  # perf needs a moment to attach
    print("attached", flush=True)
    stop.wait()
    for c in started:
        try:
            c.stop(ctx)
        except Exception as exc:  # report, keep stopping the rest
            print(f"{c.name}: {exc}", file=sys.stderr)
    for p in procs:
        p.send_signal(signal.SIGINT)
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return 0


class Capture:
    def __init__(self, mode: str, pid: int) -> None:
        self.mode = mode
        self.proc: subprocess.Popen[str] | None = None
        self.tmp = tempfile.mkdtemp(prefix=f"profiler-bcc-bench-{mode}-")
        if mode != "none":
            self.proc = subprocess.Popen([sys.executable, str(HERE), "--capture", mode, str(pid), self.tmp + "/cap"],
                                         stdout=subprocess.PIPE, text=True)
            assert self.proc.stdout is not None
            line = self.proc.stdout.readline().strip()
            if line != "attached":
                self.close()
                raise RuntimeError(f"{mode} capture did not attach: {line!r}")

    def close(self) -> int:
        """Stop the capture; the bundle's size in bytes (what a capture leaves on disk)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        size = sum(f.stat().st_size for f in Path(self.tmp).rglob("*") if f.is_file())
        shutil.rmtree(self.tmp, ignore_errors=True)
        return size


# --------------------------------------------------------------------------- workloads


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        f = fh.read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Redis:
    name = "redis GET/SET req/s"

    def __init__(self, requests: int) -> None:
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="profiler-bcc-bench-redis-")
        self.server = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                                        "--save", "", "--appendonly", "no", "--dir", self.dir],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.pid = self.server.pid
        self.requests = requests
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)

    def run(self) -> tuple[float, float]:
        """(requests per second, redis-server CPU microseconds per request)."""
        cpu0 = _cpu_seconds(self.pid)
        out = subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(self.port), "-t", "set,get",
                              "-n", str(self.requests), "-c", "50", "-q", "--csv"],
                             capture_output=True, text=True, timeout=600).stdout
        rates = []
        for line in out.splitlines():
            f = [x.strip('"') for x in line.split(",")]
            if len(f) > 1 and f[0] in ("SET", "GET"):
                rates.append(float(f[1]))
        if not rates:
            raise RuntimeError(f"redis-benchmark printed no rates: {out[:200]!r}")
        cpu = _cpu_seconds(self.pid) - cpu0
        return statistics.fmean(rates), cpu / (len(rates) * self.requests) * 1e6

    def close(self) -> None:
        self.server.terminate()
        self.server.wait(timeout=20)
        shutil.rmtree(self.dir, ignore_errors=True)


class Fio:
    """fio --thread keeps its jobs inside one process, the target; a fresh fio per run.

    A small holder process waits on stdin and then execs fio: the capture attaches to the
    holder's pid (which fio keeps across exec) before the first IO is issued.
    """

    name = "fio 4k sync write IOPS"
    HOLD = "import os, sys; sys.stdin.readline(); os.execvp(sys.argv[1], sys.argv[1:])"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.dir = tempfile.mkdtemp(prefix="profiler-bcc-bench-fio-", dir="/var/tmp")

    def start(self) -> subprocess.Popen[str]:
        job = ["fio", "--name=bench", f"--directory={self.dir}", "--thread", "--rw=randwrite", "--bs=4k",
               "--size=64m", "--direct=1", "--ioengine=psync", "--fdatasync=1", "--numjobs=2", "--time_based",
               f"--runtime={self.seconds}", "--group_reporting", "--output-format=json"]
        return subprocess.Popen([sys.executable, "-c", self.HOLD, *job], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)

    @staticmethod
    def go(proc: subprocess.Popen[str]) -> None:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.close()

    @staticmethod
    def result(proc: subprocess.Popen[str]) -> tuple[float, float]:
        """(IOPS, fio CPU microseconds per IO), the CPU from the kernel's rusage of the fio process."""
        assert proc.stdout is not None
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        data = json.loads(out[out.index("{"):])
        write = data["jobs"][0]["write"]
        ios = max(1, int(write.get("total_ios", 0)))
        return float(write["iops"]), (usage.ru_utime + usage.ru_stime) / ios * 1e6

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


# --------------------------------------------------------------------------- driver


Result = dict[str, list[tuple[float, float]]]
SIZES: dict[str, dict[str, list[int]]] = {}  # workload -> mode -> bundle bytes per run


def run_redis(rounds: int, requests: int) -> Result:
    res: Result = {m: [] for m in MODES}
    w = Redis(requests)
    try:
        w.run()  # warm-up
        for r in range(rounds):
            order = MODES[r % 3:] + MODES[: r % 3]
            for mode in order:
                cap = Capture(mode, w.pid)
                try:
                    res[mode].append(w.run())
                finally:
                    SIZES.setdefault("redis", {}).setdefault(mode, []).append(cap.close())
                rate, cpu = res[mode][-1]
                print(f"  redis round {r + 1} {mode:<4} {rate:>10.0f} req/s {cpu:6.2f} us CPU/req",
                      file=sys.stderr, flush=True)
    finally:
        w.close()
    return res


def run_fio(rounds: int, seconds: float) -> Result:
    res: Result = {m: [] for m in MODES}
    w = Fio(seconds)
    try:
        for r in range(rounds):
            order = MODES[r % 3:] + MODES[: r % 3]
            for mode in order:
                proc = w.start()  # holds until go(): the capture attaches first
                cap = Capture(mode, proc.pid)
                try:
                    w.go(proc)
                    res[mode].append(w.result(proc))
                finally:
                    SIZES.setdefault("fio", {}).setdefault(mode, []).append(cap.close())
                rate, cpu = res[mode][-1]
                print(f"  fio   round {r + 1} {mode:<4} {rate:>10.0f} IOPS  {cpu:6.2f} us CPU/IO",
                      file=sys.stderr, flush=True)
    finally:
        w.close()
    return res


def report(name: str, unit: str, res: Result, sizes: dict[str, list[int]] | None = None) -> None:
    """Medians per mode; throughput ratios and the target's CPU per operation (less noisy on a shared host)."""
    rate = {m: statistics.median(x[0] for x in v) for m, v in res.items() if v}
    cpu = {m: statistics.median(x[1] for x in v) for m, v in res.items() if v}
    print(f"{name}: medians of {len(res['none'])} interleaved runs per mode")
    for m in MODES:
        runs = ", ".join(f"{x[0]:.0f}" for x in res[m])
        print(f"  {m:<5} {rate[m]:>10.0f} {unit}   target CPU {cpu[m]:6.2f} us/op   runs: {runs}")
    print(f"  throughput ratio  perf/none {rate['perf'] / rate['none']:.3f}   bcc/none {rate['bcc'] / rate['none']:.3f}"
          f"   bcc/perf {rate['bcc'] / rate['perf']:.3f}")
    print(f"  target CPU per op perf/none {cpu['perf'] / cpu['none']:.3f}   bcc/none {cpu['bcc'] / cpu['none']:.3f}"
          f"   bcc/perf {cpu['bcc'] / cpu['perf']:.3f}")
    if sizes and sizes.get("perf") and sizes.get("bcc"):
        p, b = statistics.median(sizes["perf"]), statistics.median(sizes["bcc"])
        print(f"  bundle size       perf {p / 1e6:.2f} MB   bcc {b / 1e6:.3f} MB   bcc/perf {b / max(p, 1):.4f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workload", choices=("redis", "fio", "both"), default="both")
    ap.add_argument("--requests", type=int, default=100000, help="redis-benchmark requests per run")
    ap.add_argument("--seconds", type=float, default=6.0, help="fio seconds per run")
    ap.add_argument("--capture", nargs=3, metavar=("MODE", "PID", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.capture:
        return capture(args.capture[0], int(args.capture[1]), args.capture[2])
    if os.geteuid() != 0:
        print("bcc_overhead: run as root (perf and bcc attach to other processes)", file=sys.stderr)
        return 2
    from profiler.collectors.bcc.common import bcc_status

    ok, reason, fix = bcc_status()
    if not ok:
        print(f"bcc_overhead: the bcc backend cannot run here: {reason} ({fix})", file=sys.stderr)
        return 2
    print(f"machine: {os.cpu_count()} CPUs, shared with other users (numbers are noisy; medians of interleaved runs)")
    print(f"perf side: {'profiler perf collectors' if perf_collectors() else 'the perf commands the perf backend runs'}")
    if args.workload in ("redis", "both"):
        report("redis-server GET/SET", "req/s", run_redis(args.rounds, args.requests), SIZES.get("redis"))
    if args.workload in ("fio", "both"):
        report("fio 4k O_DIRECT write + fdatasync", "IOPS", run_fio(args.rounds, args.seconds), SIZES.get("fio"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
