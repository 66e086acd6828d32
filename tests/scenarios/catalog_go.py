"""The Go scenarios (test layer): our Go workload in its modes, and etcd under our Go load client.

Go servers are what the users run (tidb-server, pd-server), and what the OS alone misreads: idle
runtime threads park in futex, every thread carries the process's name, and goroutines that
queue on a ``sync.Mutex`` leave their threads asleep. Each scenario's label is confirmed without
the profiler: by the cgroup's own counters (CPU quota throttling, blkio IOs), by the program's
own account of its work (the workload's ``/stats``: operations, time spent waiting for its
lock; etcd's /metrics: puts), by /proc, and for the lock case by the goroutine dump itself
(``/debug/pprof/goroutine?debug=2``, read here with plain text matching).

The workload is built with the Go toolchain on the machine (tests/workloads/gobuild.py, cached).
catalog.py adds these to the suite.
"""

from __future__ import annotations

import contextlib
import os
import re
import urllib.request
from collections.abc import Callable
from pathlib import Path

from tests.scenarios.catalog import cg, cpu_quota_checks, idle_checks
from tests.scenarios.model import Check, Ctx, Scenario, Started
from tests.scenarios.sampler import Observation
from tests.workloads.goservers import Etcd, GoWorkload

# --------------------------------------------------------------------------------------
# independent evidence from the program itself


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=15) as r:  # noqa: S310 - our own server on 127.0.0.1
        return bytes(r.read())


def goroutines_in(url: str, frame: str) -> int:
    """Goroutines in the server's own text dump (?debug=2) whose stack holds ``frame``, or, for
    ``[state]``, whose header says that state (Go's tracebacks hide runtime frames such as
    runtime.chanrecv: the header's ``[chan receive]`` says it)."""
    text = _get(f"{url}/debug/pprof/goroutine?debug=2").decode("utf-8", "replace")
    blocks = [b for b in text.split("\n\n") if b.startswith("goroutine ")]
    if frame.startswith("["):
        return sum(1 for b in blocks if f" {frame[:-1]}" in b.split("\n", 1)[0])
    return sum(1 for b in blocks if f"\n{frame}(" in b)


def stats_probe(w: GoWorkload, frame: str | None = None) -> Callable[[], dict[str, float]]:
    """The workload's own counters (cumulative: the runner takes end minus start); with ``frame``,
    the goroutines in it at the window's end (the first call, at the start, reports 0)."""
    calls = [0]

    def probe() -> dict[str, float]:
        s = w.stats()
        out = {"ops": float(s["ops"]), "lock_wait_seconds": float(s["lock_wait_seconds"]),
               "errors": float(s["errors"]), "gc_cycles": float(s["gc_cycles"]),
               # levels, reported at the window's end (the runner subtracts the start's 0)
               "heap_inuse": float(s["heap_inuse"]) if calls[0] else 0.0,
               "gc_cpu_fraction": float(s["gc_cpu_fraction"]) if calls[0] else 0.0}
        if frame is not None:
            out["goroutines_in_frame"] = float(goroutines_in(w.url, frame)) if calls[0] else 0.0
        calls[0] += 1
        return out

    return probe


# --------------------------------------------------------------------------------------
# cpu


def go_cpu_quota(ctx: Ctx) -> Started:
    g = ctx.group()
    g.cpu_limit(0.3)
    g.write("cpu", "cpu.shares", 8192)
    w = GoWorkload("cpu", "-workers", "2")
    pid = w.start(ctx.procs.spawn, join=g.join_self)
    return Started(pid, probe=stats_probe(w), workers=2)


def go_cpu_checks(obs: Observation, st: Started) -> list[Check]:
    return [*cpu_quota_checks(0.3)(obs, st),
            Check("workload operations/s (its own counter)", obs.extra.get("ops", 0.0) / max(obs.seconds, 1e-6), ">=",
                  10.0, "/stats ops: the CPU-bound goroutines run")]


# --------------------------------------------------------------------------------------
# lock contention between goroutines


WORKERS_MUTEX = 16


def go_mutex(ctx: Ctx) -> Started:
    # 16 goroutines take one sync.Mutex; the holder sleeps 2 ms inside it (a slow call under a lock),
    # so 15 queue in sync.(*Mutex).Lock while the process uses little CPU and its threads sleep.
    w = GoWorkload("mutex", "-workers", str(WORKERS_MUTEX), "-hold", "2ms")
    pid = w.start(ctx.procs.spawn)
    return Started(pid, probe=stats_probe(w, "sync.(*Mutex).Lock"), workers=WORKERS_MUTEX)


def go_mutex_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    return [
        Check("goroutines in sync.(*Mutex).Lock at the window's end", obs.extra.get("goroutines_in_frame", 0.0), ">=",
              st.workers / 2, "the server's own goroutine dump (?debug=2), text-matched"),
        Check("goroutines waiting for the lock, on average", obs.extra.get("lock_wait_seconds", 0.0) / secs, ">=",
              st.workers / 2, "/stats lock_wait_seconds: the workload times its own mu.Lock() calls"),
        Check("lock sections/s (the work is serialized: 1 / 2 ms at most)", obs.extra.get("ops", 0.0) / secs, "<=",
              600.0, "/stats ops"),
        Check("target CPU cores (the OS sees idle threads)", obs.cpu_cores, "<=", 0.5, "/proc/PID/stat"),
        Check("target threads in D state (mean)", obs.io_blocked, "<=", 0.5),
    ]


# --------------------------------------------------------------------------------------
# idle: goroutines waiting on channels for work


def go_idle(ctx: Ctx) -> Started:
    w = GoWorkload("idle", "-workers", "32", "-rate", "20")
    pid = w.start(ctx.procs.spawn)
    return Started(pid, probe=stats_probe(w, "[chan receive]"), workers=1)


def go_idle_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    return [
        *idle_checks(0.15)(obs, st),
        Check("jobs/s (the 20/s asked for are done)", obs.extra.get("ops", 0.0) / secs, ">=", 15.0, "/stats ops"),
        Check("goroutines waiting on a channel receive", obs.extra.get("goroutines_in_frame", 0.0), ">=", 24.0,
              "the server's own goroutine dump (?debug=2), text-matched"),
    ]


# --------------------------------------------------------------------------------------
# io_wait: fsync-heavy writes under a blkio write limit


def go_fsync_throttle(ctx: Ctx) -> Started:
    g = ctx.group()
    g.blkio_limit(write_iops=40)
    d = ctx.tmp / "fsync"
    d.mkdir()
    w = GoWorkload("fsync", "-workers", "4", "-size", "4096", "-dir", str(d))
    pid = w.start(ctx.procs.spawn, join=g.join_self)
    return Started(pid, probe=stats_probe(w), workers=4)


def go_fsync_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    writes = cg(obs, "main", "blkio.ios.write") / secs
    return [
        Check("throttled write IOPS / limit", writes / 40, ">=", 0.5, "blkio.throttle.io_serviced, limit 40"),
        Check("throttled write IOPS / limit (upper)", writes / 40, "<=", 1.3),
        Check("target threads in D state (mean)", obs.io_blocked, ">=", 1.0, "/proc/TID/stat: threads in fsync"),
        Check("fsyncs/s (its own counter)", obs.extra.get("ops", 0.0) / secs, ">=", 3.0, "/stats ops"),
        Check("target CPU cores", obs.cpu_cores, "<=", 0.5),
    ]


# --------------------------------------------------------------------------------------
# memory in Go terms: the heap at GOMEMLIMIT, the collector running constantly

MEMLIMIT = 80 << 20


def go_gc_memlimit(ctx: Ctx) -> Started:
    # 64 MiB kept live, one goroutine allocating garbage, GOMEMLIMIT 80 MiB and GOGC off: the
    # collector runs whenever the heap nears the limit, i.e. all the time.
    w = GoWorkload("gc", "-workers", "1", "-live", "64")
    pid = w.start(ctx.procs.spawn, env=dict(os.environ, GOMEMLIMIT=str(MEMLIMIT), GOGC="off"))
    return Started(pid, probe=stats_probe(w), workers=1)


def go_gc_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    gc_cores = obs.extra.get("gc_cpu_fraction", 0.0) * (os.cpu_count() or 1)
    return [
        Check("GC cycles/s (its own runtime.MemStats)", obs.extra.get("gc_cycles", 0.0) / secs, ">=", 20.0,
              "/stats gc_cycles (runtime.ReadMemStats NumGC)"),
        Check("heap in use / GOMEMLIMIT", obs.extra.get("heap_inuse", 0.0) / MEMLIMIT, ">=", 0.8,
              "/stats heap_inuse (runtime.ReadMemStats HeapInuse)"),
        Check("GC cores / process cores", gc_cores / max(obs.cpu_cores, 1e-6), ">=", 0.25,
              "runtime.MemStats GCCPUFraction x CPUs (since start: warm-up + window) / /proc CPU"),
        Check("target major faults/s", obs.majflt_per_s, "<=", 10.0, "not paging: the pressure is the Go heap's"),
    ]


# --------------------------------------------------------------------------------------
# etcd (Debian's etcd-server, a real Go server) under our Go load client


def etcd_puts_cpu_quota(ctx: Ctx) -> Started:
    g = ctx.group()
    e = Etcd(ctx.tmp / "etcd")
    pid = e.start(ctx.procs.spawn, join=g.join_self)
    g.cpu_limit(0.2)
    g.write("cpu", "cpu.shares", 8192)
    client = ctx.group("client", ("cpu",))
    client.write("cpu", "cpu.shares", 8192)
    GoWorkload("etcdload", "-endpoint", e.url, "-workers", "16", "-rate", "0").start(ctx.procs.spawn,
                                                                                  join=client.join_self)

    def probe() -> dict[str, float]:
        return e.metric_sums("etcd_mvcc_put_total", "etcd_debugging_mvcc_put_total")

    return Started(pid, probe=probe, workers=1)


def etcd_puts_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    puts = max(obs.extra.get("etcd_mvcc_put_total", 0.0), obs.extra.get("etcd_debugging_mvcc_put_total", 0.0))
    return [*cpu_quota_checks(0.2)(obs, st),
            Check("etcd puts/s (the load runs)", puts / secs, ">=", 20.0, "etcd's own /metrics: mvcc put total")]


def etcd_light_puts(ctx: Ctx) -> Started:
    e = Etcd(ctx.tmp / "etcd")
    pid = e.start(ctx.procs.spawn)
    GoWorkload("etcdload", "-endpoint", e.url, "-workers", "2", "-rate", "10").start(ctx.procs.spawn)

    def probe() -> dict[str, float]:
        return e.metric_sums("etcd_mvcc_put_total", "etcd_debugging_mvcc_put_total")

    return Started(pid, probe=probe, workers=1)


def etcd_light_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    puts = max(obs.extra.get("etcd_mvcc_put_total", 0.0), obs.extra.get("etcd_debugging_mvcc_put_total", 0.0))
    return [*idle_checks(0.2)(obs, st),
            Check("etcd puts/s (the 10/s asked for are done)", puts / secs, ">=", 7.0, "etcd's own /metrics")]


# --------------------------------------------------------------------------------------
# memory in Go terms on a second program: etcd (Go 1.19, no runtime GC-CPU metric: the profiler
# reads the GC share from its on-CPU stacks) with GOGC=10, under load and near idle. The label
# comes from the Go runtime's own account, GODEBUG=gctrace=1 on etcd's stderr: each cycle's CPU
# time ("a+b/c/d+e ms cpu": stop-the-world, assist/background/idle marking, mark termination).

ETCD_GOGC = "10"
_GCTRACE = re.compile(r"^gc \d+ @[\d.]+s \d+%: [\d.+]+ ms clock, ([\d.+/]+) ms cpu")


def gctrace_totals(log: Path) -> tuple[int, float]:
    """GC cycles and GC CPU seconds so far in a GODEBUG=gctrace=1 log."""
    cycles, ms = 0, 0.0
    with contextlib.suppress(OSError), log.open(errors="replace") as f:
        for line in f:
            m = _GCTRACE.match(line)
            if m:
                cycles += 1
                ms += sum(float(x) for x in re.split(r"[+/]", m.group(1)))
    return cycles, ms / 1000


def _etcd_gc(ctx: Ctx, workers: int, rate: float) -> Started:
    g = ctx.group()
    e = Etcd(ctx.tmp / "etcd")
    pid = e.start(ctx.procs.spawn, join=g.join_self,
                  env=dict(os.environ, GOGC=ETCD_GOGC, GODEBUG="gctrace=1"))
    g.write("cpu", "cpu.shares", 8192)
    client = ctx.group("client", ("cpu",))
    client.write("cpu", "cpu.shares", 8192)
    GoWorkload("etcdload", "-endpoint", e.url, "-workers", str(workers), "-rate", str(rate)).start(
        ctx.procs.spawn, join=client.join_self)
    log = ctx.procs.logdir / "etcd.log"

    def probe() -> dict[str, float]:
        cycles, gc_s = gctrace_totals(log)
        return {**e.metric_sums("etcd_mvcc_put_total", "etcd_debugging_mvcc_put_total"),
                "gc_cycles": float(cycles), "gc_cpu_seconds": gc_s}

    return Started(pid, probe=probe, workers=1)


def etcd_gc_busy(ctx: Ctx) -> Started:
    return _etcd_gc(ctx, 16, 0)


def etcd_gc_calm(ctx: Ctx) -> Started:
    return _etcd_gc(ctx, 2, 10)


def _puts(obs: Observation) -> float:
    return max(obs.extra.get("etcd_mvcc_put_total", 0.0), obs.extra.get("etcd_debugging_mvcc_put_total", 0.0))


def _gc_share(obs: Observation) -> float:
    return obs.extra.get("gc_cpu_seconds", 0.0) / max(obs.cpu_cores * obs.seconds, 1e-6)


def etcd_gc_busy_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    return [
        Check("GC CPU / etcd CPU", _gc_share(obs), ">=", 0.4,
              "etcd's own GODEBUG=gctrace=1 (per-cycle CPU ms, summed over the window) / /proc CPU"),
        Check("GC cycles/s", obs.extra.get("gc_cycles", 0.0) / secs, ">=", 10.0, "gctrace lines in the window"),
        Check("etcd CPU cores (it works: the GC's share is of real work)", obs.cpu_cores, ">=", 0.4,
              "/proc/PID/stat"),
        Check("etcd puts/s (the load runs)", _puts(obs) / secs, ">=", 500.0, "etcd's own /metrics: mvcc put total"),
        Check("target major faults/s", obs.majflt_per_s, "<=", 10.0, "not paging: the pressure is the Go heap's"),
    ]


def etcd_gc_calm_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    return [*idle_checks(0.2)(obs, st),
            Check("GC cycles/s (GOGC=10 is in effect)", obs.extra.get("gc_cycles", 0.0) / secs, ">=", 0.1,
                  "etcd's own GODEBUG=gctrace=1"),
            Check("etcd puts/s (the 10/s asked for are done)", _puts(obs) / secs, ">=", 7.0,
                  "etcd's own /metrics")]


# --------------------------------------------------------------------------------------

SCENARIOS: list[Scenario] = [
    Scenario("go-cpu-quota", "cpu", ("go",), "Go workload: 2 goroutines hashing (main.burnCPU), cfs quota 0.3 core",
             go_cpu_quota, go_cpu_checks, "cgroup CPU quota (throttled)", ("quota", "throttl", "cfs", "cgroup"),
             warmup=2),
    Scenario("go-mutex-contention", "lock_contention", ("go",),
             "Go workload: 16 goroutines on one sync.Mutex, the holder sleeping 2 ms inside it",
             go_mutex, go_mutex_checks, "goroutines queued in sync.(*Mutex).Lock under main.lockedWork",
             ("main.lockedwork", "sync.mutex.lock", "sync.(*mutex).lock"), warmup=2, fast=True),
    Scenario("go-idle-channels", "not_saturated", ("go",),
             "Go workload: 32 goroutines waiting on a channel for 20 jobs/s",
             go_idle, go_idle_checks, None, (), warmup=2),
    Scenario("go-fsync-throttle", "io_wait", ("go",),
             "Go workload: 4 goroutines writing 4 KiB and fsyncing, blkio write_iops 40 on vda",
             go_fsync_throttle, go_fsync_checks, "writes on vda (254:0) throttled",
             ("vda", "254:0", "blkio", "throttl", "write", "fsync"), warmup=2),
    Scenario("go-gc-memlimit", "memory", ("go",),
             "Go workload: 64 MiB live heap, garbage allocated constantly, GOMEMLIMIT 80 MiB, GOGC off",
             go_gc_memlimit, go_gc_checks, "memory pressure in Go terms (GC CPU, heap at GOMEMLIMIT)",
             ("go terms", "garbage collector", "gomemlimit"), warmup=2),
    Scenario("etcd-puts-cpu-quota", "cpu", ("etcd", "go"),
             "etcd (--enable-pprof) under 16 goroutines of puts from our Go client, cfs quota 0.2 core",
             etcd_puts_cpu_quota, etcd_puts_checks, "cgroup CPU quota (throttled)",
             ("quota", "throttl", "cfs", "cgroup"), warmup=3),
    Scenario("etcd-gogc10-puts", "memory", ("etcd", "go"),
             "etcd (--enable-pprof, GOGC=10) under 16 goroutines of puts from our Go client: the collector runs "
             "constantly", etcd_gc_busy, etcd_gc_busy_checks, "memory pressure in Go terms (GC CPU)",
             ("go terms", "garbage collector"), warmup=3),
    Scenario("etcd-gogc10-light-puts", "not_saturated", ("etcd", "go"),
             "etcd (--enable-pprof, GOGC=10) under 10 puts/s from our Go client",
             etcd_gc_calm, etcd_gc_calm_checks, None, (), warmup=3),
    Scenario("etcd-light-puts", "not_saturated", ("etcd", "go"),
             "etcd (--enable-pprof) under 10 puts/s from our Go client",
             etcd_light_puts, etcd_light_checks, None, (), warmup=3),
]

