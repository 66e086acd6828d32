"""The verdict (analyzers layer): small named rules over the metrics, a ranked result, a confidence.

Each rule is a function ``TargetMetrics (+ capture Metrics) -> Finding | None``. Thresholds live
in one table, ``THRESHOLDS``, each with its source (USE method; PingCAP's TiKV inspection
ratios; our own measurements on the samples/ workloads); docs/verdict.md explains them.

Scoring: each piece of evidence is turned into 0..1 by ``ramp``: 0 below half the threshold,
0.5 at the threshold, 1 at the "full" value. A rule's score is its strongest evidence, scaled
by a weight when the evidence is indirect (a system-wide figure on a shared host). A finding
with score >= ``PRIMARY`` can be the primary bottleneck; >= ``CONTRIBUTING`` is listed as
contributing. When nothing reaches ``PRIMARY`` the target is not saturated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from profiler.analyzers.verdict import rules_server
from profiler.analyzers.verdict.metrics import Metrics, TargetMetrics

from profiler.knowledge import TIDB_ADVICE, TIKV_ADVICE, TIKV_POOLS
from profiler.knowledge.waits import BY_KEY

CATEGORIES = ("cpu", "io_wait", "memory", "lock_contention", "not_saturated")
# On equal scores the more specific cause wins: a memory limit explains its own IO waits and run-queue
# delay, a lock its own switches; plain CPU demand is the least specific.
TIE_ORDER = ("memory", "lock_contention", "io_wait", "cpu", "not_saturated")
PRIMARY = 0.5
CONTRIBUTING = 0.35


@dataclass(frozen=True)
class Threshold:
    value: float
    full: float  # the value at which the evidence scores 1.0
    unit: str
    source: str
    meaning: str


THRESHOLDS: dict[str, Threshold] = {
    # CPU (USE method: utilization and saturation of the CPU resource)
    "cpu.util": Threshold(0.80, 1.0, "of available cores", "USE method (utilization); PingCAP inspection CPU usage > 80%",
                          "cores the target used / cores it may use (host, cpuset, cgroup quota)"),
    "cpu.runq": Threshold(0.25, 0.6, "of CPU demand", "USE method (saturation); our measurements: 0.8 on a 2-CPU host with 14 runnable tasks",
                          "time runnable but not running (schedstat run delay) / time wanting a CPU, of threads that want a CPU most of their time"),
    "cpu.throttled": Threshold(0.20, 0.6, "of CFS periods", "cgroup v1 cpu.stat; USE method (saturation of a software limit)",
                               "periods in which the cgroup ran out of quota / all periods"),
    "cpu.demand": Threshold(0.80, 1.0, "of available cores", "USE method (saturation): demand, not only use; issue 14 (a starved target uses little)",
                            "cores the threads wanted (running + run-queue time) / cores the target may use"),
    "cpu.thread_demand": Threshold(0.90, 0.98, "of one thread's time", "our rule: a thread running or runnable nearly all the time is CPU-bound, whoever takes its CPU",
                                   "the busiest work thread's running + runnable share of its time"),
    "cpu.pool": Threshold(0.80, 0.95, "of pool size", "PingCAP TiKV inspection: thread pool CPU > 80-90% of its thread count",
                          "a pool's cores used / its thread count"),
    # IO
    "io.blocked": Threshold(0.25, 0.6, "of busy-thread time", "our measurements (fio fsync: 0.8; CPU hogs: 0)",
                            "time the target's busy threads sleep in D state or in IO syscalls (fsync, pread...)"),
    "io.delayacct": Threshold(0.25, 0.6, "of busy-thread time", "kernel delay accounting (stat field 42, task_delayacct)",
                              "block-IO delay of the busy threads / their time"),
    "io.disk_util": Threshold(0.80, 1.0, "busy", "USE method (device utilization, /proc/diskstats io_ticks)",
                              "share of the window the device had IO in flight"),
    "io.p99": Threshold(20.0, 100.0, "ms", "our rule; seed 001 read 'most under 5 ms with jitter' off a heatmap",
                        "99th percentile block IO latency (issue to completion)"),
    "io.psi": Threshold(20.0, 60.0, "% of time", "PSI (Documentation/accounting/psi.rst): some tasks stalled on IO",
                        "share of time some task was stalled on IO (system-wide)"),
    "io.blkio_limit": Threshold(0.80, 0.98, "of the cgroup limit", "cgroup v1 blkio.throttle.*_{bps,iops}_device",
                                "bytes/s or IOs/s done / the tightest blkio limit of that direction"),
    # memory
    "mem.usage": Threshold(0.90, 0.99, "of the cgroup limit", "cgroup v1 memory.usage_in_bytes vs limit_in_bytes",
                           "peak memory use / limit"),
    "mem.majflt": Threshold(50.0, 500.0, "faults/s", "USE method (memory saturation: paging); our measurements (thrash: >1000/s)",
                            "major page faults per second of the target (or its cgroup)"),
    "mem.psi": Threshold(10.0, 40.0, "% of time", "PSI memory some", "share of time some task stalled on memory"),
    "mem.swap": Threshold(100.0, 2000.0, "pages/s", "USE method (swapping)", "pages swapped in+out per second"),
    "mem.failcnt": Threshold(1.0, 100.0, "per s", "cgroup v1 memory.failcnt", "times per second the cgroup hit its limit"),
    # locks
    "lock.futex": Threshold(0.25, 0.6, "of busy-thread time", "our measurements (sysbench threads/mutex); bcc futexctn's premise",
                            "time the target's busy threads sleep in futex (user-space locks, condition variables)"),
    "lock.switches": Threshold(50.0, 500.0, "switches/s per busy thread", "our measurements (sysbench one lock: ~15000/s; idle pool workers: < 5/s)",
                               "voluntary context switches of the busy threads: contended locks block and wake often"),
    "lock.kernel": Threshold(0.25, 0.6, "of busy-thread time", "our rule", "time busy threads wait on kernel locks (rwsem, mutex wchan)"),
    # not saturated
    "idle.cpu": Threshold(0.50, 0.2, "of available cores", "seed 002: TiKV at 50-60% CPU was not the bottleneck",
                          "below this, with little waiting, the target is not the bottleneck"),
}

# What servers and the Go runtime say about themselves: rules_server's thresholds, listed with ours.
THRESHOLDS.update({k: Threshold(t.value, t.full, t.unit, t.source, t.meaning)
                   for k, t in rules_server.THRESHOLDS.items()})


def ramp(value: float | None, key: str) -> float:
    """Evidence strength 0..1: 0 below half the threshold, 0.5 at it, 1 at ``full``."""
    if value is None:
        return 0.0
    th = THRESHOLDS[key]
    return rules_server.strength(float(value), th.value, th.full)


@dataclass
class Evidence:
    metric: str
    value: float | None
    threshold: float | None
    unit: str
    note: str = ""
    crossed: bool | None = None  # past its threshold (in the threshold's direction); None: no threshold


@dataclass
class Finding:
    category: str
    rule: str
    score: float
    title: str
    sub_cause: str
    evidence: list[Evidence] = field(default_factory=list)
    recommendation: str = ""
    target: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["score"] = round(self.score, 3)
        for e in d["evidence"]:
            if isinstance(e["value"], float):
                e["value"] = round(e["value"], 4)
        return d


@dataclass
class RunnerUp:
    """The second explanation when the evidence is mixed, and what would tell the two apart."""

    category: str
    score: float
    sub_cause: str
    tell_apart: str


@dataclass
class Verdict:
    category: str
    score: float
    headline: str
    primary: Finding
    contributing: list[Finding]
    findings: list[Finding]  # every rule's result, best first
    confidence: float
    confidence_label: str
    confidence_reasons: list[str]
    target: str | None = None
    runner_up: RunnerUp | None = None

    @property
    def evidence(self) -> list[Evidence]:
        return self.primary.evidence

    def to_dict(self) -> dict[str, Any]:
        return {
            "category": self.category, "score": round(self.score, 3), "headline": self.headline,
            "sub_cause": self.primary.sub_cause, "target": self.target,
            "evidence": [asdict(e) for e in self.primary.evidence],
            "recommendation": self.primary.recommendation,
            "primary": self.primary.to_dict(), "contributing": [f.to_dict() for f in self.contributing],
            "findings": [f.to_dict() for f in self.findings],
            "confidence": round(self.confidence, 3), "confidence_label": self.confidence_label,
            "confidence_reasons": list(self.confidence_reasons),
            "runner_up": asdict(self.runner_up) if self.runner_up is not None else None,
        }


def _ev(metric: str, value: float | None, key: str | None, note: str = "", unit: str = "") -> Evidence:
    th = THRESHOLDS[key] if key else None
    crossed = None
    if th is not None and value is not None:
        # most thresholds are floors (worse above); a few are ceilings (idle.cpu: worse below)
        crossed = bool(value <= th.value) if th.full < th.value else bool(value >= th.value)
    return Evidence(metric=metric, value=None if value is None else float(value), threshold=th.value if th else None,
                    unit=th.unit if th else unit, note=note, crossed=crossed)


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{100 * x:.0f}%"


def _mib(x: float | None) -> str:
    return "?" if x is None else f"{x / 1048576:.0f} MiB"


# --------------------------------------------------------------------------- rules


def _others(tm: TargetMetrics, m: Metrics) -> tuple[float | None, str]:
    """Cores the host's other processes used, and who they are (the sampler's top records)."""
    sysm = m.system
    if sysm is None or sysm.cpu_util is None or not sysm.ncpu:
        return None, ""
    ours = sum(t.cpu_cores or 0.0 for t in m.targets)  # the capture's targets are not "other processes"
    others = max(0.0, sysm.cpu_util * sysm.ncpu - ours)
    names = ", ".join(f"{comm} (pid {pid}) {cores:.2f} core" for comm, pid, cores in sysm.neighbours[:3])
    return others, names


def _wants_cpu(busy: float) -> float:
    """How much CPU demand and run-queue delay count: as much as the work threads want a CPU
    (running or runnable) "nearly all the time" (issue 14): none at half their time, full at 90%."""
    return min(1.0, max(0.0, (busy - 0.5) / 0.4))


def rule_cpu(tm: TargetMetrics, m: Metrics) -> Finding | None:
    """CPU-bound: the target uses, or wants, the CPU it may have.

    Demand counts, not only use: a work thread running or runnable nearly all the time is
    CPU-bound even when neighbours take half its core; who takes it is the sub-cause (issue 14).
    The sub-cause names what keeps the CPU from it, most specific first: the cgroup quota, a
    named pool at its size, neighbours on the host, all of its cores busy, one hot thread.
    """
    ev: list[Evidence] = []
    util_s = demand_s = thread_s = throttle_s = 0.0
    if tm.cpu_util is not None:
        util_s = ramp(tm.cpu_util, "cpu.util")
        ev.append(_ev("cpu_util", tm.cpu_util, "cpu.util", f"{tm.cpu_cores:.2f} of {tm.cpu_available:.2f} cores ({tm.cpu_available_why})"))
    if tm.demand_util is not None:
        # Many threads that each queue a little (every wake-up of a lock convoy waits for a CPU)
        # add up to cores of "demand" without any of them being CPU-bound: the demand counts as
        # much as the work threads want a CPU for most of their time (none below 30%, full from 70%).
        busy = (tm.active_states.get("cpu", 0.0) + tm.active_states.get("runnable", 0.0)) if tm.active_states else 0.0
        demand_s = ramp(tm.demand_util, "cpu.demand") * _wants_cpu(busy)
        ev.append(_ev("cpu_demand", tm.demand_util, "cpu.demand",
                      f"wants {tm.demand_cores or 0:.2f} of {tm.cpu_available or 0:g} cores, gets {tm.cpu_cores or 0:.2f}"))
    if tm.max_thread_demand is not None and tm.threads > 0:
        # One thread can hold a single-threaded server (redis, an event loop) at its core's limit.
        # In a program with many busy threads a hot one may be a background job: weighed x0.8.
        single = tm.threads == 1 or tm.active_threads <= 1
        thread_s = ramp(tm.max_thread_demand, "cpu.thread_demand") * (1.0 if single else 0.8)
        ev.append(_ev("thread_demand", tm.max_thread_demand, "cpu.thread_demand", tm.demand_thread or ""))
    starved_s = 0.0
    if tm.runq_share is not None:
        # Threads that want a CPU nearly all their time and wait for a good part of it are held
        # back by the CPU, whoever takes it (neighbours are the sub-cause, never a discount: issue
        # 14); a light target that queues now and then on a busy host wants a CPU too little to count.
        busy = (tm.active_states.get("cpu", 0.0) + tm.active_states.get("runnable", 0.0)) if tm.active_states else 0.0
        starved_s = ramp(tm.runq_share, "cpu.runq") * _wants_cpu(busy)
        ev.append(_ev("run_queue_share", tm.runq_share, "cpu.runq", "schedstat run delay / (CPU + run delay): "
                      f"how much of what it asks for it waits for; the work threads want a CPU {_pct(busy)} of their time"))
    if tm.cpu_throttled_share is not None:
        throttle_s = ramp(tm.cpu_throttled_share, "cpu.throttled")
        ev.append(_ev("cgroup_throttled_periods", tm.cpu_throttled_share, "cpu.throttled",
                      f"throttled {tm.cpu_throttled_time_share or 0:.2f} s per s"))
    pool_best: tuple[float, str, str] | None = None
    for p in tm.pools:
        if p.threads < 2 and not p.knob:
            continue  # a lone unnamed thread is the thread-demand rule's business
        if p.cpu_cores < 0.05 and p.demand * p.threads < 0.5:
            continue
        load = max(p.util, p.demand)
        ps = ramp(load, "cpu.pool")
        if ps <= 0:
            continue
        ev.append(_ev(f"pool_demand[{p.pool}]", load, "cpu.pool",
                      f"{p.cpu_cores:.2f} cores over {p.threads} threads; running {_pct(p.states.get('cpu'))}, queued {_pct(p.states.get('runnable'))}"))
        rec = (TIKV_POOLS[p.pool].advice if p.knob and p.pool in TIKV_POOLS
               else f"the {p.pool} pool is saturated: give it more threads if its work is parallel")
        if p.states.get("runnable", 0.0) > p.states.get("cpu", 0.0):
            rec = (f"{p.pool} waits for a CPU more than it runs: the host's CPUs are oversubscribed, so "
                   f"{'raising ' + p.knob if p.knob else 'more threads'} will not help until it gets CPU time "
                   f"(dedicate cores, move other work off the host); then: {rec}")
        knob = f" (knob: {p.knob})" if p.knob else ""
        queued = f", {_pct(p.states.get('runnable'))} of it queued for a CPU" if p.states.get("runnable", 0) > 0.2 else ""
        sub = (f"pool {p.pool} saturated: its {p.threads} thread{'s want' if p.threads > 1 else ' wants'} a CPU "
               f"{_pct(load)} of the time{queued}{knob}")
        if pool_best is None or ps > pool_best[0]:
            pool_best = (ps, sub, rec)
    pool_s = pool_best[0] if pool_best else 0.0
    if not ev:
        return None
    score = min(1.0, max(util_s, demand_s, thread_s, throttle_s, pool_s, starved_s))
    # the sub-cause: what keeps more CPU from it, most specific first
    others, names = _others(tm, m)
    starved = (tm.runq_share or 0.0) >= 0.2
    if throttle_s >= PRIMARY:
        sub = f"cgroup CPU quota: throttled in {_pct(tm.cpu_throttled_share)} of periods ({tm.cpu_available_why})"
        if tm.demand_cores is not None and tm.cpu_cores is not None:
            sub += f"; wants {tm.demand_cores:.2f} cores, gets {tm.cpu_cores:.2f}"
        rec = "raise the cgroup CPU quota (cpu.cfs_quota_us / the container's CPU limit)"
        score = min(1.0, max(score, throttle_s + 0.01))  # the quota is the root cause of the queueing it creates
    elif pool_best is not None and pool_s >= PRIMARY and pool_s >= score - 0.05:
        _, sub, rec = pool_best
        score = min(1.0, score + 0.02)  # a named pool is a more precise cause than the run queue
    elif starved and others is not None and others >= 0.3 and max(demand_s, thread_s, starved_s) >= PRIMARY:
        want, got = _want_got(tm, thread_s > demand_s)
        who = names or f"the host's CPUs are {_pct(m.system.cpu_util if m.system else None)} busy"
        sub = (f"CPU starvation: wants {want:.2f} core{'s' if want >= 1.5 else ''}, gets {got:.2f}: "
               f"other processes on the host take the CPU ({who})")
        rec = ("the target is CPU-bound and its CPU goes to other processes: move them off the host or lower "
               "their priority/quota, pin the target to dedicated cores (cpuset), or add cores")
    elif util_s >= PRIMARY or demand_s >= PRIMARY:
        sub = f"all {tm.cpu_available:g} available cores busy ({_pct(tm.cpu_util)}; {tm.cpu_available_why})"
        if starved:
            sub += f"; {_pct(tm.runq_share)} of its CPU demand is run-queue delay"
        rec = "give the process more CPU (cores, cpuset, quota) or reduce the work per request (see the on-CPU flame graph)"
    elif thread_s > 0:
        sub = f"one thread is at a core's limit: {tm.demand_thread or tm.hottest_thread}"
        rec = "a single thread caps throughput: spread its work (more pool threads, partitions) or make it cheaper"
        if starved and others is not None and others >= 0.3:
            want, got = _want_got(tm, True)
            sub = (f"CPU starvation: wants {want:.2f} core, gets {got:.2f}: other processes on the host take the CPU "
                   f"({names or 'the host is busy'})")
    else:
        sub = f"CPU at {_pct(tm.cpu_util)} of {tm.cpu_available or 0:g} cores"
        rec = "the CPU is not the limit"
    if tm.kind == "tidb":
        rec = TIDB_ADVICE["cpu"]
    return Finding("cpu", "cpu_saturation", score, "CPU-bound", sub, ev, rec, tm.label)


def _want_got(tm: TargetMetrics, thread: bool) -> tuple[float, float]:
    """(cores wanted, cores got): of the hottest work thread, or of the whole target."""
    if thread and tm.max_thread_demand is not None and tm.demand_thread_cpu is not None:
        return tm.max_thread_demand, min(tm.max_thread_demand, tm.demand_thread_cpu)
    return tm.demand_cores or 0.0, tm.cpu_cores or 0.0


def rule_io_wait(tm: TargetMetrics, m: Metrics) -> Finding | None:
    ev: list[Evidence] = []
    scores: list[float] = []
    # The work path waits on storage when its threads block in IO (D state, fsync, pread...),
    # or wait for completions of IOs they submitted while a device or a cgroup throttle is at
    # its limit. A reaper waiting for completions (io_uring_enter, io_getevents) is idle by
    # design and is not a work thread (analyzers.verdict.threads.assign_roles); a completion
    # wait with nothing at its limit is waiting for work, not for IO (issue 14).
    blocked = tm.active_states.get("io") if tm.active_states else None
    aio = tm.active_states.get("aio", 0.0) if tm.active_states else 0.0
    disk = m.system.disks[0] if m.system and m.system.disks else None
    throttle_use = max((u for u in (tm.blkio_limit_use, tm.blkio_iops_use) if u is not None), default=None)
    at_limit = max(ramp(throttle_use, "io.blkio_limit"),
                   ramp(disk.util, "io.disk_util") if disk is not None and (tm.disk_share or 0) > 0.3 else 0.0)
    if blocked is not None:
        scores.append(ramp(blocked, "io.blocked"))
        ev.append(_ev("io_blocked_share", blocked, "io.blocked", "D state or IO syscalls, work-path threads"))
    if aio > 0:
        scores.append(ramp(aio, "io.blocked") if at_limit >= PRIMARY else 0.0)
        ev.append(_ev("completion_wait_share", aio, "io.blocked",
                      "work threads waiting for IO completions (io_uring_enter/io_getevents); counts only when "
                      "a device or blkio throttle is at its limit" + ("" if at_limit >= PRIMARY else ": none is")))
    own = (blocked is not None and blocked >= THRESHOLDS["io.blocked"].value * 0.5) or (
        aio >= THRESHOLDS["io.blocked"].value * 0.5 and at_limit >= PRIMARY)
    if tm.blkio_delay_share is not None:
        # delay accounting counts every iowait sleep, completion waits included: full weight only
        # when the work path is seen waiting on IO itself
        scores.append(ramp(tm.blkio_delay_share, "io.delayacct") * (1.0 if own else 0.5))
        ev.append(_ev("blkio_delay_share", tm.blkio_delay_share, "io.delayacct", "delay accounting"))
    if disk is not None and (own or (tm.disk_share or 0) > 0.3):
        scores.append(ramp(disk.util, "io.disk_util") * 0.6)
        ev.append(_ev(f"disk_util[{disk.name}]", disk.util, "io.disk_util",
                      f"{disk.iops:.0f} IOPS, await {disk.await_ms or 0:.1f} ms, queue {disk.queue_depth:.1f}"))
    if m.io is not None and m.io.p99_ms is not None and (own or (m.io.target_share or 0) > 0.3):
        scores.append(ramp(m.io.p99_ms, "io.p99") * 0.7)
        ev.append(_ev("io_p99_ms", m.io.p99_ms, "io.p99", f"{m.io.total} IOs, p50 {m.io.p50_ms:.2f} ms"))
    if m.system is not None and "io_some" in m.system.psi and own:
        scores.append(ramp(m.system.psi["io_some"], "io.psi") * 0.5)
        ev.append(_ev("psi_io_some", m.system.psi["io_some"], "io.psi", "system-wide"))
    if throttle_use is not None:
        # a throttle at its limit holds the target back when its work path waits for it
        scores.append(ramp(throttle_use, "io.blkio_limit") * (1.0 if own else 0.6))
        ev.append(_ev("blkio_limit_use", throttle_use, "io.blkio_limit", "IOs or bytes per second done / the cgroup's blkio limit"))
    if not scores:
        return None
    score = max(scores)
    # sub-cause: which syscall dominates IO-blocked time, which device/op is slow, which limit
    bits = []
    if tm.io_syscalls:
        name, share = tm.io_syscalls[0]
        bits.append(f"{name} {_pct(share)} of IO-blocked time")
    if m.io is not None and m.io.groups:
        g = max(m.io.groups, key=lambda g: (g.p99_ms * g.count, g.count))
        bits.append(f"{g.dev} {g.op} p99 {g.p99_ms:.1f} ms over {g.count} IOs")
    elif disk is not None and disk.await_ms is not None:
        bits.append(f"{disk.name} await {disk.await_ms:.1f} ms, {disk.util * 100:.0f}% busy")
    if tm.blkio_limits:
        lim = "; ".join(f"{k} {', '.join(f'{d}={v}' for d, v in devs.items())}" for k, devs in sorted(tm.blkio_limits.items()))
        use = f" at {_pct(throttle_use)} of its limit" if throttle_use is not None else ""
        bits.append(f"cgroup blkio throttle ({lim}){use}")
    if aio > 0 and at_limit >= PRIMARY:
        bits.append(f"work threads wait for IO completions {_pct(aio)} of their time")
    if tm.majflt_rate and tm.majflt_rate > THRESHOLDS["mem.majflt"].value:
        bits.append(f"{tm.majflt_rate:.0f} major faults/s: part of this IO is paging")
    sub = "; ".join(bits) or "threads blocked on IO"
    rec = "faster storage or fewer synchronous writes (group commits, larger writes); check the IO heatmap for latency outliers"
    if tm.blkio_limits:
        rec = "the cgroup's blkio throttle caps the IO: raise blkio.throttle.* (or the container's IO limit)"
    if tm.kind == "tikv":
        rec = TIKV_ADVICE["io_wait"]
    return Finding("io_wait", "io_wait", score, "IO wait dominates", sub, ev, rec, tm.label)


def rule_memory(tm: TargetMetrics, m: Metrics) -> Finding | None:
    ev: list[Evidence] = []
    pressure: list[float] = []
    majflt = max(tm.majflt_rate or 0.0, tm.cg_majflt_rate or 0.0) if (tm.majflt_rate is not None or tm.cg_majflt_rate is not None) else None
    if majflt is not None:
        pressure.append(ramp(majflt, "mem.majflt"))
        ev.append(_ev("major_faults_per_s", majflt, "mem.majflt", "target process or its cgroup"))
    if tm.mem_failcnt_rate is not None and tm.mem_limit:
        pressure.append(ramp(tm.mem_failcnt_rate, "mem.failcnt") * 0.8)
        ev.append(_ev("cgroup_failcnt_per_s", tm.mem_failcnt_rate, "mem.failcnt"))
    # Host-wide pressure (PSI, swap) counts fully only when the target shows a sign of its own
    # (faults, a full cgroup, its own swap): on a shared host it is often someone else's.
    own = ((majflt or 0.0) >= 10 or (tm.mem_usage_share or 0.0) >= 0.9 or (tm.swap or 0.0) > 0)
    w = 0.7 if own else 0.3
    if m.system is not None:
        if "memory_some" in m.system.psi:
            pressure.append(ramp(m.system.psi["memory_some"], "mem.psi") * w)
            ev.append(_ev("psi_memory_some", m.system.psi["memory_some"], "mem.psi", "system-wide"))
        if m.system.swap_io_rate is not None:
            pressure.append(ramp(m.system.swap_io_rate, "mem.swap") * w)
            ev.append(_ev("swap_pages_per_s", m.system.swap_io_rate, "mem.swap", "system-wide"))
    usage = 0.0
    if tm.mem_usage_share is not None:
        usage = ramp(tm.mem_usage_share, "mem.usage")
        ev.append(_ev("cgroup_memory_usage", tm.mem_usage_share, "mem.usage", f"limit {_mib(tm.mem_limit)}"))
    if not ev:
        return None
    # Being at the limit alone is not a bottleneck (page cache fills any limit); it is when paging follows.
    p = max(pressure, default=0.0)
    score = max(p, min(usage, p + 0.2)) if usage else p
    bits = []
    if tm.mem_limit and tm.mem_usage_share is not None:
        bits.append(f"cgroup memory limit {_mib(tm.mem_limit)}: usage {_pct(tm.mem_usage_share)}")
    if majflt:
        bits.append(f"{majflt:.0f} major faults/s (working set does not fit: page cache thrash)")
    if m.system is not None and m.system.swap_io_rate and m.system.swap_io_rate > THRESHOLDS["mem.swap"].value:
        bits.append(f"swapping {m.system.swap_io_rate:.0f} pages/s")
    if m.system is not None and m.system.mem_available_share is not None and m.system.mem_available_share < 0.05:
        bits.append(f"host memory available {_pct(m.system.mem_available_share)}")
    sub = "; ".join(bits) or "memory pressure"
    rec = "raise the memory limit or shrink the working set (caches sized to the limit)"
    if tm.kind == "tikv":
        rec = TIKV_ADVICE["memory"]
    return Finding("memory", "memory_pressure", score, "memory pressure", sub, ev, rec, tm.label)


def rule_lock(tm: TargetMetrics, m: Metrics) -> Finding | None:
    if not tm.active_states:
        return None
    fut = tm.active_states.get("futex", 0.0)
    ev = [_ev("futex_wait_share", fut, "lock.futex", f"{tm.active_threads} busy threads")]
    score = ramp(fut, "lock.futex")
    if tm.busy_vcsw_rate is not None:
        # A pool handing out rare work also waits in futex, but wakes seldom; a contended lock
        # makes its waiters block and wake constantly.
        ev.append(_ev("busy_thread_switches_per_s", tm.busy_vcsw_rate, "lock.switches"))
        score *= 0.4 + 0.6 * ramp(tm.busy_vcsw_rate, "lock.switches")
    # One thread cannot contend with itself (a futex wait there is a handoff), but single-threaded
    # processes of one program (PostgreSQL backends, nginx workers) contend with each other.
    peers = sum(t.active_threads for t in m.targets if (t.kind or t.comm) == (tm.kind or tm.comm))
    if max(tm.active_threads, peers) < 2:
        score *= 0.5
    if tm.vcsw_rate is not None and tm.active_threads:
        ev.append(_ev("voluntary_switches_per_s", tm.vcsw_rate, None, "context switches (seed 001: high = IO or lock waits)", "/s"))
    bits = [f"{tm.active_threads} busy thread{'s spend' if tm.active_threads != 1 else ' spends'} {_pct(fut)} "
            f"of {'their' if tm.active_threads != 1 else 'its'} time waiting on locks (futex and lock waits)"]
    if tm.lock_acquire_share is not None:
        bits.append(f"{_pct(tm.lock_acquire_share)} of it acquiring a mutex or rwlock (off-CPU stacks), "
                    "the rest condition waits")
    if tm.lock_wait_stacks:
        frames, n = tm.lock_wait_stacks[0]
        bits.append(f"top lock wait stack: {frames} ({n} switches)")
    elif tm.offcpu_futex_stacks:
        frames, n = tm.offcpu_futex_stacks[0]
        bits.append(f"top futex wait stack: {frames} ({n} switches)")
    elif tm.futex_wait_stacks:
        frames, secs = tm.futex_wait_stacks[0]
        bits.append(f"top futex wait stack: {frames} ({secs:.2f} s waited)")
    if tm.futex_wait_s is not None and m.window > 0:
        # bcc's in-kernel futex totals: threads waiting at once (thread-seconds per second)
        ev.append(_ev("futex_waiting_threads", tm.futex_wait_s / m.window, None,
                      f"{tm.futex_waits or 0} futex waits, {tm.futex_wait_s:.2f} thread-s (bcc futex-waits)", "threads"))
    if len(tm.futex_threads) > 1 or (tm.futex_threads and tm.futex_threads[0][0] != tm.comm):
        bits.append("futex time by pool: " + ", ".join(f"{p} {_pct(s)}" for p, s in tm.futex_threads))
    kernel_locks = [w for w, _ in tm.wchans if "rwsem" in w or "mutex" in w]
    if kernel_locks:
        bits.append(f"kernel lock waits in {kernel_locks[0]}")
    sub = "; ".join(bits) or "threads wait on futexes"
    rec = ("find the contended lock in the off-CPU flame graph (futex stacks) and shorten its critical section "
           "or shard it")
    if tm.kind == "tikv":
        rec = TIKV_ADVICE["lock_contention"]
    elif tm.kind == "tidb":
        rec = TIDB_ADVICE["lock_contention"]
    return Finding("lock_contention", "lock_contention", score, "lock contention", sub, ev, rec, tm.label)


RULES: list[Callable[[TargetMetrics, Metrics], Finding | None]] = [rule_cpu, rule_io_wait, rule_memory, rule_lock]


def _server_ev(e: rules_server.ServerEv) -> Evidence:
    return _ev(e.metric, e.value, e.threshold, e.note, e.unit)


def server_findings(tm: TargetMetrics) -> list[Finding]:
    """Findings from what the target's status port and the Go runtime say (analyzers.verdict.rules_server)."""
    return [Finding(f.category, f.rule, f.score, f.title, f.sub_cause, [_server_ev(e) for e in f.evidence],
                    f.recommendation, tm.label) for f in rules_server.findings(tm, tm.server)]


def rule_not_saturated(tm: TargetMetrics, m: Metrics, others: list[Finding]) -> Finding:
    worst = max((f.score for f in others), default=0.0)
    ev = []
    if tm.cpu_util is not None:
        ev.append(_ev("cpu_util", tm.cpu_util, "idle.cpu", f"{tm.cpu_cores or 0:.2f} of {tm.cpu_available or 0:g} cores"))
    idle = tm.states.get("idle", 0.0) + tm.states.get("sleep", 0.0) if tm.states else None
    if idle is not None:
        ev.append(Evidence("idle_wait_share", float(idle), None, "of thread time", "waiting for work (epoll, recv, sleep)"))
    score = max(0.0, 1.0 - worst) if worst < PRIMARY else max(0.0, 0.5 - worst / 2)
    sub = (f"CPU at {_pct(tm.cpu_util)} of {tm.cpu_available or 0:g} cores and little waiting on IO, locks or memory: "
           "the bottleneck is elsewhere (the client's concurrency, another tier, the network)")
    if tm.idle_by_design:
        by = ", ".join(f"{BY_KEY[k].kind} {k} {_pct(v)}" if k in BY_KEY else f"{k} {_pct(v)}"
                       for k, v in tm.idle_by_design[:3])
        sub += f"; threads wait by design (idle, not held back): {by} of thread time"
        ev.append(Evidence("idle_by_design_share", float(sum(v for _, v in tm.idle_by_design)), None, "of thread time",
                           "pollers, reapers, parked runtime/pool threads, timers (profiler.knowledge.waits)"))
    go_idle = rules_server.idle_goroutines(tm, tm.server)
    if go_idle is not None:
        ev.extend(_server_ev(e) for e in go_idle[0])
        sub += f"; {go_idle[1]}"
    rec = "raise the load generator's concurrency, or profile the other tiers (TiDB, TiKV, PD, the client)"
    if tm.kind == "tikv":
        rec = TIKV_ADVICE["not_saturated"]
    elif tm.kind == "tidb":
        rec = TIDB_ADVICE["not_saturated"]
    return Finding("not_saturated", "not_saturated", score, "not saturated", sub, ev, rec, tm.label)


# --------------------------------------------------------------------------- ranking


def _confidence(tm: TargetMetrics | None, m: Metrics, primary: Finding,
                runner_up: RunnerUp | None) -> tuple[float, list[str]]:
    c = 1.0
    why: list[str] = []
    if m.sources.get("procfs") != "ok":
        c *= 0.4
        why.append(f"procfs sampler {m.sources.get('procfs')}: thread states unknown")
    if tm is not None:
        if tm.samples < 20:
            c *= 0.6
            why.append(f"only {tm.samples} samples per thread")
        elif tm.samples < 50:
            c *= 0.85
            why.append(f"{tm.samples} samples per thread (short capture)")
        if tm.exited:
            c *= 0.85
            why.append("the target exited during the capture")
    if primary.category == "lock_contention" and primary.rule != "go_lock_contention" and m.sources.get("offcpu") != "ok":
        c *= 0.85
        why.append("no off-CPU stacks: the contended lock is not named")
    if primary.category == "io_wait":
        if m.sources.get("block-io") != "ok":
            c *= 0.9
            why.append("no block IO trace: device latency from /proc/diskstats only" if m.io is None else
                       f"block IO {m.sources.get('block-io', 'missing').split(':')[0]}: some IOs are missing from the latencies")
        if m.delayacct is False:
            c *= 0.95
            why.append("task_delayacct was off: no block-IO delay accounting")
    if primary.category == "cpu" and m.sources.get("cpu-stacks") != "ok":
        c *= 0.95
        why.append("no on-CPU stacks: where the CPU goes is not shown")
    if m.sources.get("perf-stat") != "ok":
        c *= 0.95
        why.append(f"perf stat {m.sources.get('perf-stat')}")
    if m.unsupported_counters:
        why.append("hardware counters not supported here: " + ", ".join(m.unsupported_counters[:4]))
    if runner_up is not None:
        gap = primary.score - runner_up.score
        c *= 0.7 if gap < 0.1 else 0.85
        why.append(f"mixed evidence: {runner_up.category} scores {runner_up.score:.2f} against {primary.score:.2f} "
                   f"({runner_up.sub_cause.split(';')[0]}); to tell them apart: {runner_up.tell_apart}")
    return c, why


def _label(c: float) -> str:
    return "high" if c >= 0.75 else "medium" if c >= 0.5 else "low"


def target_verdict(tm: TargetMetrics, m: Metrics) -> Verdict:
    found = [f for f in (r(tm, m) for r in RULES) if f is not None]
    found.extend(server_findings(tm))
    found.append(rule_not_saturated(tm, m, found))
    found.sort(key=lambda f: (-round(f.score, 3), TIE_ORDER.index(f.category)))
    best = found[0]
    if best.category != "not_saturated" and best.score < PRIMARY:
        best = next(f for f in found if f.category == "not_saturated")
    contributing = [f for f in found if f is not best and f.score >= CONTRIBUTING and f.category != "not_saturated"]
    runner = runner_up(best, found)
    conf, why = _confidence(tm, m, best, runner)
    return Verdict(category=best.category, score=best.score, headline=_headline(tm, best), primary=best,
                   contributing=contributing, findings=found, confidence=conf, confidence_label=_label(conf),
                   confidence_reasons=why, target=tm.label, runner_up=runner)


MIXED_GAP = 0.2  # a second cause within this of the first, or itself above PRIMARY, makes the evidence mixed

# What tells two causes apart, for the verdict to say when both have evidence.
TELL_APART: dict[frozenset[str], str] = {
    frozenset(("cpu", "io_wait")): (
        "threads that run or queue for a CPU are CPU-bound, threads blocked in D state or IO syscalls wait on "
        "storage: compare the on-CPU and off-CPU flame graphs, and see which of run-queue delay and IO latency "
        "grows with the load"),
    frozenset(("cpu", "memory")): (
        "major faults and page-cache refaults against a full memory limit point at memory, run-queue delay "
        "without faults at the CPU: raise the memory limit (or give CPU) and see which one goes away"),
    frozenset(("cpu", "lock_contention")): (
        "threads asleep in futex while using little CPU point at a lock; a lock holder short of CPU makes both: "
        "if the futex waits shrink once the host is quiet (or with more CPU), the CPU is the cause"),
    frozenset(("io_wait", "memory")): (
        "IO caused by major faults under a full memory limit is paging (memory); IO from read/write/fsync calls "
        "on a limit that is not full is storage: check major faults/s against the IO rate"),
    frozenset(("io_wait", "lock_contention")): (
        "threads queued on a lock whose holder waits on IO (a commit fsync under a mutex) show both: the "
        "off-CPU stacks of the lock waiters and of the IO waiters tell whether the lock or the device is first"),
    frozenset(("memory", "lock_contention")): (
        "faulting threads that hold a lock make others wait: major faults first, then the futex stacks"),
    frozenset(("cpu", "not_saturated")): (
        "a CPU-bound target would use all the CPU it may have or queue for it nearly all the time; re-run with a "
        "heavier load: if its CPU or run-queue delay grows, the CPU is the limit"),
    frozenset(("io_wait", "not_saturated")): (
        "the work path would block on IO most of the time, or a device or throttle would sit at its limit; "
        "re-run with a heavier load and watch the IO latency heatmap"),
    frozenset(("memory", "not_saturated")): (
        "memory pressure would show major faults growing with the load against a full limit"),
    frozenset(("lock_contention", "not_saturated")): (
        "contention would show busy threads waking and blocking in futex hundreds of times a second; re-run "
        "with more client concurrency and see whether the futex share grows"),
}


def runner_up(best: Finding, found: list[Finding]) -> RunnerUp | None:
    """The second explanation when the evidence is mixed: another cause that also has strong evidence
    (PRIMARY or more), or comes within MIXED_GAP of the first; for a calm target, a cause that
    reaches CONTRIBUTING. None when the first stands alone."""
    others = [f for f in found if f is not best and f.category != best.category and f.category != "not_saturated"]
    if not others:
        return None
    r = max(others, key=lambda f: (f.score, -TIE_ORDER.index(f.category)))
    if r.score < CONTRIBUTING:
        return None
    if best.category != "not_saturated" and r.score < PRIMARY and best.score - r.score >= MIXED_GAP:
        return None
    text = TELL_APART.get(frozenset((best.category, r.category)), "compare their evidence in the findings")
    return RunnerUp(category=r.category, score=round(r.score, 3), sub_cause=r.sub_cause, tell_apart=text)


def _headline(tm: TargetMetrics, f: Finding) -> str:
    who = tm.label
    if f.category == "not_saturated":
        return f"{who} is not the bottleneck: {f.sub_cause}"
    lead = {"cpu": "is CPU-bound", "io_wait": "is not CPU-bound: IO wait dominates" if (tm.cpu_util or 0) < 0.8 else "waits on IO",
            "memory": "is short of memory", "lock_contention": "is slowed by lock contention"}[f.category]
    return f"{who} {lead}: {f.sub_cause}"


@dataclass
class Imbalance:
    group: str  # e.g. "tikv-server"
    metric: str
    values: dict[str, float]  # target label -> value
    outlier: str
    ratio: float  # outlier / median of its peers
    note: str


def compare_targets(m: Metrics) -> list[Imbalance]:
    """Targets of one kind (or one program) that do much less or much more than their peers."""
    groups: dict[str, list[TargetMetrics]] = {}
    for t in m.targets:
        groups.setdefault(t.kind or t.comm, []).append(t)
    out: list[Imbalance] = []
    for name, ts in sorted(groups.items()):
        if len(ts) < 2:
            continue
        for metric, floor in (("cpu_cores", 0.05), ("write_bps", float(1 << 20)), ("read_bps", float(1 << 20))):
            vals: dict[str, float] = {t.label: float(getattr(t, metric)) for t in ts if getattr(t, metric) is not None}
            if len(vals) < 2:
                continue
            xs = sorted(vals.values())
            n = len(xs)
            med = xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2
            for label, v in vals.items():
                if n == 2:
                    # two peers: no majority to compare with; flag the lower one if it does half or less
                    other = next(x for k, x in vals.items() if k != label)
                    if v >= other or max(v, other) < floor or (other > 0 and v / other > 0.5):
                        continue
                    ref = other
                else:
                    ref = med
                    if max(v, ref) < floor:
                        continue
                ratio = v / ref if ref > 0 else float("inf")
                if ratio <= 0.7 or ratio >= 1.4:
                    word = "less" if ratio < 1 else "more"
                    unit = "cores" if metric == "cpu_cores" else "MiB/s"
                    scale = 1.0 if metric == "cpu_cores" else 1 / 1048576
                    out.append(Imbalance(group=name, metric=metric, values=vals, outlier=label,
                                         ratio=ratio if ratio != float("inf") else 99.0,
                                         note=f"{label} does much {word} than its peers: {metric} {v * scale:.2f} {unit} "
                                              f"vs {'a median of ' if n > 2 else ''}{ref * scale:.2f}"))
    return out


@dataclass
class CaptureVerdict:
    overall: Verdict
    per_target: list[Verdict]
    imbalances: list[Imbalance]

    def to_dict(self) -> dict[str, Any]:
        d = self.overall.to_dict()
        d["imbalances"] = [asdict(i) for i in self.imbalances]
        return d


def judge(m: Metrics) -> CaptureVerdict:
    """Per-target verdicts, the capture's verdict (the most severe target), and the imbalances."""
    per = [target_verdict(t, m) for t in m.targets]
    imb = compare_targets(m)
    if not per:
        nf = Finding("not_saturated", "no_targets", 0.0, "no evidence", "the bundle names no target", [], "", None)
        conf, why = 0.1, ["no target in the bundle"]
        return CaptureVerdict(Verdict("not_saturated", 0.0, "no target was captured", nf, [], [nf], conf, _label(conf), why), [], imb)
    bottlenecked = [v for v in per if v.category != "not_saturated"]
    if bottlenecked:
        top = max(bottlenecked, key=lambda v: (v.score, v.confidence))
        overall = Verdict(**{**top.__dict__})
        others = [v for v in per if v is not top]
        if others and len(m.targets) > 1:
            same = [v for v in others if v.category == top.category]
            calm = [v for v in others if v.category == "not_saturated"]
            extra = []
            if same:
                extra.append(f"{len(same)} more target(s) show the same")
            if calm:
                extra.append(", ".join(v.target or "?" for v in calm[:3]) + " not saturated")
            if extra:
                overall.headline = f"{top.headline} ({'; '.join(extra)})"
        overall.contributing = list(top.contributing) + [v.primary for v in others
                                                         if v.category != "not_saturated" and v.category != top.category]
    else:
        # Everyone is calm: the capture's verdict is not_saturated, scored by the least calm target.
        least = min(per, key=lambda v: v.score)
        overall = Verdict(**{**least.__dict__})
        if len(per) > 1:
            overall.headline = (f"none of the {len(per)} targets is saturated: the bottleneck is elsewhere "
                                f"(the client's concurrency, another tier, the network)")
            cpu_imb = [i for i in imb if i.metric == "cpu_cores"]
            if cpu_imb:
                overall.headline += f"; {cpu_imb[0].note}"
    return CaptureVerdict(overall=overall, per_target=per, imbalances=imb)
