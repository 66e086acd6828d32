#!/usr/bin/env python3
"""Seconds from the end of a capture to the report, on event-heavy workloads it starts itself (bench, not a test).

For each workload: start it (the known-cause scenarios' own code, tests/scenarios, plus an
unthrottled high-IOPS fio), let it warm up, run

    profiler attach --pid PID --duration 20s -o BUNDLE --keep-perf-data

and print, side by side:
  - events captured: cpu-clock samples, sched_switch events (off-CPU), syscall enter/exit
    events, block events (from the perf.data files and the manifest);
  - after capture: the seconds from the end of the capture (the first collector to stop) to
    the report written (attach exits once report.html is written), and the CPU seconds the
    attach process tree used in that time (sampled from /proc: load-independent);
  - the floor: `perf script` alone over the same perf.data files (CPU and wall seconds), what
    any perf-script-based tool pays before doing anything with the text;
  - the host's load average: on a shared host the wall figures are inflated by it, the CPU
    figures hardly.

    sudo .venv/bin/python bench/report_latency.py [--duration 20s] [--only mariadb-hot-row] [--scale 1,4] \
        [--neighbour both] [--rounds 3]

``--neighbour on|off|both`` runs each capture beside a process that keeps one CPU busy (a
Python busy loop, started before the workload, stopped after the report), without it, or both
(interleaved: quiet, busy, quiet, busy...); the "nbr" column says which. ``--rounds N`` repeats
the whole set N times, interleaved, for medians. The real TiDB workloads need the servers'
binaries in TIDB_SERVER (and PD_SERVER, TIKV_SERVER for the cluster one), as the scenario tests do.

``--scale 1,4`` captures each workload for 1x and 4x the duration (4x the events at the same
rate) and prints both rows: processing should grow no faster than the events, and the
attach process's peak memory should stay flat.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from profiler.formats import perfdata as pd  # noqa: E402
from tests.scenarios.catalog import BY_NAME  # noqa: E402
from tests.scenarios.model import Ctx, Started  # noqa: E402
from tests.scenarios.procs import Procs  # noqa: E402
from tests.scenarios.runner import skip_reason, teardown  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def fio_high_iops(ctx: Ctx) -> Started:
    """Unthrottled 4 KiB O_DIRECT random reads, 4 jobs at queue depth 16: as many IOPS as the disk gives."""
    f = ctx.tmp / "fio.dat"
    ctx.procs.run("fio-layout", ["fio", "--name=layout", f"--filename={f}", "--size=256M", "--rw=write", "--bs=1M",
                                 "--direct=1"], timeout=300)
    p = ctx.procs.spawn("fio", ["fio", "--name=iops", f"--filename={f}", "--size=256M", "--rw=randread", "--bs=4k",
                                "--direct=1", "--ioengine=libaio", "--iodepth=16", "--numjobs=4", "--thread",
                                "--group_reporting", "--time_based", f"--runtime={ctx.load_seconds}"])
    return Started(p.pid, workers=4)


def mariadb_myisam_mem_thrash(ctx: Ctx) -> Started:
    """MariaDB serving random point selects from MyISAM tables (320 MB of rows, an 8 MB key
    buffer) inside a 128 MiB memory cgroup: its data file's pages are evicted and read again."""
    from tests.scenarios.catalog import MiB, drop_file_cache
    from tests.scenarios.servers import MariaDB

    g = ctx.group()
    g.memory_limit(128 * MiB)
    db = MariaDB(ctx.procs, ctx.tmp, **{"key-buffer-size": "8M", "innodb-buffer-pool-size": "16M"})
    pid = db.start(join=g.join_self)
    args = ["--tables=4", "--table-size=400000", "--mysql-storage-engine=MyISAM"]
    ctx.procs.run("sysbench-prepare", db.sysbench("oltp_read_only", *args, "prepare"), timeout=900)
    drop_file_cache(db.datadir)
    ctx.procs.spawn("sysbench", db.sysbench("oltp_point_select", *args, "--threads=8", f"--time={ctx.load_seconds}", "run"))
    return Started(pid, workers=8)


@dataclass
class Workload:
    name: str
    what: str
    start: object  # Callable[[Ctx], Started]
    warmup: float
    programs: tuple[str, ...]
    target: str = "pid"  # "pid": Started.pid; "tikv": the cluster's tikv-server (Started.more_pids[0])
    scenario: str = ""  # the scenario it comes from (its skip reasons), when not its own name


def workloads() -> list[Workload]:
    out = []
    for name, what in (("mariadb-hot-row", "lock-heavy MariaDB: 32 sysbench clients updating one row"),
                       ("sysbench-threads-one-lock", "lock storm: 16 threads on one mutex"),
                       ("fio-mmap-thrash", "memory thrash: fio mmap reads over 512 MiB in 96 MiB"),
                       ("db_bench-mmap-thrash", "memory thrash: RocksDB db_bench mmap reads in 96 MiB")):
        s = BY_NAME.get(name)
        if s is not None:
            out.append(Workload(name, what, s.start, s.warmup, tuple(s.programs)))
    out.append(Workload("mariadb-myisam-mem-thrash", "memory thrash: MariaDB MyISAM point selects in 128 MiB",
                        mariadb_myisam_mem_thrash, 5.0, ("mariadbd", "sysbench")))
    out.append(Workload("fio-high-iops", "high-IOPS fio: 4 KiB O_DIRECT random reads, 4 jobs x QD16",
                        fio_high_iops, 3.0, ("fio",)))
    for name, what, target in (("tidb-pessimistic-hot-rows", "real tidb-server (unistore): 64 clients on 2 hot rows",
                                "pid"),
                               ("tidb-cluster-hot-rows", "real tikv-server (PD + TiKV + TiDB): hot rows", "tikv")):
        s = BY_NAME.get(name)
        if s is not None:
            out.append(Workload(name if target == "pid" else "tikv-server-hot-rows", what, s.start, s.warmup,
                                tuple(s.programs), target, name))
    return out


class Neighbour:
    """A process keeping one CPU busy for as long as it runs (started and stopped by pid)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def tree_cpu(root: int) -> float:
    """CPU seconds of a process and its live descendants, plus its reaped children's."""
    kids: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                f = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(d)] = f
        kids.setdefault(int(f[1]), []).append(int(d))
    total, todo = 0.0, [root]
    while todo:
        p = todo.pop()
        st = stats.get(p)
        if st is None:
            continue
        f = st
        total += (int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])) / TICK
        todo.extend(kids.get(p, []))
    return total


class CpuSampler:
    """(monotonic time, CPU seconds of the attach tree) every 0.2 s while it runs."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[tuple[float, float]] = []
        self.done = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self) -> None:
        while not self.done.is_set():
            self.samples.append((time.monotonic(), tree_cpu(self.pid)))
            self.done.wait(0.2)

    def stop(self) -> None:
        self.done.set()
        self.t.join()

    def at(self, t: float) -> float:
        before = [c for s, c in self.samples if s <= t]
        return before[-1] if before else 0.0


def perf_events(path: Path) -> dict[str, int]:
    """Sample records per event name in a perf.data (read directly)."""
    out: dict[str, int] = {}
    try:
        with pd.PerfFile(path) as f:
            for rec in f.chunks():
                for idx, c in pd.samples(rec, f, f.events).items():
                    name = f.events[idx].name or str(idx)
                    out[name] = out.get(name, 0) + len(c.offs)
    except pd.PerfDataUnsupported:
        pass
    return out


def perf_script_floor(bundle: Path) -> tuple[float, float]:
    """CPU and wall seconds of plain `perf script` over every kept perf.data, one after another."""
    cpu = wall = 0.0
    for data in sorted(bundle.glob("*.perf.data")):
        t0 = time.monotonic()
        p = subprocess.Popen(["perf", "script", "-i", str(data)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, _, ru = os.wait4(p.pid, 0)
        wall += time.monotonic() - t0
        cpu += ru.ru_utime + ru.ru_stime
    return cpu, wall


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def run_one(w: Workload, duration: float, work: Path, neighbour: bool = False) -> dict[str, object]:
    tmp = Path(tempfile.mkdtemp(prefix=f"profiler-lat-{w.name}-", dir="/var/tmp"))
    procs = Procs(tmp)
    ctx = Ctx(w.name, tmp, procs, duration, int(w.warmup + duration + 60))
    busy = Neighbour() if neighbour else None
    try:
        started = w.start(ctx)  # type: ignore[operator]
        time.sleep(w.warmup)
        pid = started.pid if w.target == "pid" else started.more_pids[0]
        bundle = work / f"{w.name}-{duration:g}s{'-nbr' if neighbour else ''}"
        argv = [sys.executable, "-m", "profiler", "attach", "--pid", str(pid), "--duration", f"{duration:g}s",
                "-o", str(bundle), "--force", "--keep-perf-data"]
        la0 = load()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT)
        sampler = CpuSampler(proc.pid)
        out = proc.stdout.read() if proc.stdout else b""
        _, status, ru = os.wait4(proc.pid, 0)
        t_exit = time.monotonic()
        sampler.stop()
        la1 = load()
        if os.waitstatus_to_exitcode(status) not in (0, 6):  # 6: partial (a collector lost events), still timed
            raise RuntimeError(f"attach failed: {out.decode(errors='replace')[-600:]}")
        m = json.loads((bundle / "manifest.json").read_text())
        ended = [c["ended"] for c in m["collectors"] if c.get("ended")]
        t_end = min(ended)
        cpu_total = ru.ru_utime + ru.ru_stime
        post_cpu = cpu_total - sampler.at(t_end)
        events: dict[str, int] = {}
        for data in bundle.glob("*.perf.data"):
            events.update(perf_events(data))
        blk_c: dict[str, Any] = next((c for c in m["collectors"] if c["name"] == "block-io"), {})
        blk_stats = blk_c.get("stats", {})
        blk = blk_stats.get("events", 0)
        # the block-io reader's CPU during the capture (binary reader; the text reader of bundles
        # before v4 said only reader_cpu_seconds, its cat | gzip pair, also during the capture)
        blk_reader = blk_stats.get("reader_cpu_seconds_in_capture", blk_stats.get("reader_cpu_seconds"))
        floor_cpu, floor_wall = perf_script_floor(bundle)
        fin = {c["name"]: c["stats"].get("finish_cpu_seconds") for c in m["collectors"]
               if c["stats"].get("finish_cpu_seconds") is not None}
        return {
            "workload": w.name, "duration": duration, "load": f"{la0}/{la1}",
            "cpu_samples": events.get("cpu-clock:I", events.get("cpu-clock", 0)),
            "switches": events.get("sched:sched_switch", 0),
            "syscall_events": events.get("raw_syscalls:sys_enter", 0) + events.get("raw_syscalls:sys_exit", 0),
            "block_events": blk, "after_capture_s": t_exit - t_end, "after_capture_cpu_s": post_cpu,
            "floor_cpu_s": floor_cpu, "floor_wall_s": floor_wall, "max_rss_mb": ru.ru_maxrss / 1024,
            "finish_cpu": fin, "block_reader_cpu_s": blk_reader, "neighbour": neighbour,
        }
    finally:
        if busy is not None:
            busy.stop()
        teardown(ctx)
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", default="20s", help="capture length (default 20s)")
    ap.add_argument("--only", action="append", help="workload name (repeatable)")
    ap.add_argument("--scale", default="1", help="comma-separated multiples of the duration (e.g. 1,4)")
    ap.add_argument("--neighbour", choices=("off", "on", "both"), default="off",
                    help="beside a process keeping one CPU busy: off, on, or both (interleaved)")
    ap.add_argument("--rounds", type=int, default=1, help="repeat the whole set, interleaved (medians: read the rows)")
    ap.add_argument("--keep", type=Path, help="keep the bundles here")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench: run as root (perf, tracefs and cgroups need it)")
    m = re.fullmatch(r"(\d+(?:\.\d+)?)s?", args.duration)
    if not m:
        raise SystemExit(f"bench: cannot read --duration {args.duration!r}")
    base = float(m.group(1))
    scales = [float(x) for x in args.scale.split(",")]
    busy = {"off": (False,), "on": (True,), "both": (False, True)}[args.neighbour]
    chosen = [w for w in workloads() if not args.only or w.name in args.only]
    print(f"# report latency: profiler attach --duration {base:g}s on {os.cpu_count()} CPUs; "
          f"load average {load()} at start (shared host: wall figures inflated by it, CPU figures hardly)")
    hdr = (f"{'workload':28s} {'nbr':>3s} {'dur':>4s} {'cpu smp':>8s} {'switches':>9s} {'syscall ev':>10s} {'block ev':>9s} "
           f"{'after s':>8s} {'after CPU':>9s} {'floor CPU':>9s} {'floor s':>8s} {'CPU/floor':>9s} {'RSS MB':>7s} {'load':>10s}")
    print(hdr)
    rows = []
    with tempfile.TemporaryDirectory(prefix="profiler-lat-") as tmpd:
        work = args.keep or Path(tmpd)
        work.mkdir(parents=True, exist_ok=True)
        runnable = []
        for w in chosen:
            s = BY_NAME.get(w.scenario or w.name)
            if s is not None:  # the scenario's own check: TiDB's binaries come from TIDB_SERVER etc., not PATH
                why = skip_reason(s)
            else:
                why = next((f"{p} is not installed" for p in w.programs if shutil.which(p) is None
                            and not Path(f"/usr/sbin/{p}").exists()), None)
            if why:
                print(f"{w.name:28s} skipped: {why}")
                continue
            runnable.append(w)
        for _ in range(args.rounds):
            for w in runnable:
                for k in scales:
                    for nbr in busy:
                        try:
                            r = run_one(w, base * k, work, neighbour=nbr)
                        except Exception as exc:  # noqa: BLE001 - one workload's failure must not stop the bench
                            print(f"{w.name:28s} error: {type(exc).__name__}: {exc}")
                            continue
                        rows.append(r)
                        ratio = r["after_capture_cpu_s"] / r["floor_cpu_s"] if r["floor_cpu_s"] else float("nan")  # type: ignore[operator]
                        print(f"{w.name:28s} {'yes' if nbr else 'no':>3s} {r['duration']:4.0f} {r['cpu_samples']:8d} "
                              f"{r['switches']:9d} {r['syscall_events']:10d} {r['block_events']:9d} {r['after_capture_s']:8.1f} "
                              f"{r['after_capture_cpu_s']:9.2f} {r['floor_cpu_s']:9.2f} {r['floor_wall_s']:8.1f} {ratio:9.2f} "
                              f"{r['max_rss_mb']:7.0f} {r['load']:>10s}", flush=True)
                        print(f"{'':28s}      collectors' finish CPU s: {r['finish_cpu']}; block-io reader CPU s "
                              f"during the capture: {r['block_reader_cpu_s']}", flush=True)
    print("(after s: capture end -> report written, wall; after CPU: CPU seconds of the attach tree in that time; "
          "floor: plain perf script over the same perf.data files; nbr: beside a process keeping one CPU busy; "
          "load: 1-min load average before/after)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
