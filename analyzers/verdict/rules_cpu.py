"""The CPU rule (analyzers layer): is the target held back by the CPU, and what keeps more CPU from it.

CPU-bound: the target uses, or wants, the CPU it may have. Demand counts, not only use: a work
thread running or runnable nearly all the time is CPU-bound even when neighbours take half its
core; who takes it is the sub-cause (issue 14).

Two steps, each small:

1. :func:`cpu_scores`: every piece of CPU evidence scored against its threshold (cores used,
   cores wanted, the busiest thread, run-queue share, cgroup throttling, each pool), the
   finding's score being the strongest;
2. the sub-cause rules (:data:`SUB_CAUSES`), tried in order, most specific first: the first
   that applies names what keeps more CPU from the target, with its advice: the cgroup quota,
   a pin or quota below what it wants (a container's limits: ``LimitsEvidence``), a named pool at
   its size, neighbours on the host, the host's CPUs saturated by the capture's targets together,
   the host's CPUs saturated by other processes while the server's requests wait for them (host
   contention, read from its own request time), all of its cores busy, one hot thread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from profiler.analyzers.server.requests import RequestTime
from profiler.analyzers.verdict.findings import (
    PRIMARY,
    THRESHOLDS,
    Evidence,
    Finding,
    evidence,
    ramp,
)
from profiler.analyzers.verdict.model import Metrics, TargetMetrics
from profiler.analyzers.verdict.target import cpu_list

from profiler.knowledge import TIDB_ADVICE, TIKV_POOLS


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{100 * x:.0f}%"


def wants_cpu(busy: float) -> float:
    """How much CPU demand and run-queue delay count: as much as the work threads want a CPU
    (running or runnable) "nearly all the time" (issue 14): none at half their time, full at 90%."""
    return min(1.0, max(0.0, (busy - 0.5) / 0.4))


def others_on_host(m: Metrics) -> tuple[float | None, str]:
    """Cores the host's other processes used, and who they are (the sampler's top records)."""
    sysm = m.system
    if sysm is None or sysm.cpu_util is None or not sysm.ncpu:
        return None, ""
    ours = sum(t.process.cpu_cores or 0.0 for t in m.targets)  # the capture's targets are not "other processes"
    others = max(0.0, sysm.cpu_util * sysm.ncpu - ours)
    names = ", ".join(f"{comm} (pid {pid}) {cores:.2f} core" for comm, pid, cores in sysm.neighbours[:3])
    return others, names


@dataclass(frozen=True)
class PoolCause:
    score: float
    sub_cause: str
    advice: str


@dataclass(frozen=True)
class CpuScores:
    """Each piece of CPU evidence's strength (0..1), and the evidence rows."""

    util: float = 0.0
    demand: float = 0.0
    thread: float = 0.0
    starved: float = 0.0  # run-queue share, weighted by how much the work threads want a CPU
    throttle: float = 0.0
    pool: PoolCause | None = None
    evidence: list[Evidence] = field(default_factory=list)
    host: float = 0.0  # the host's CPUs saturated by the capture's targets, this one queueing for them
    contended: float = 0.0  # the host's CPUs taken by other processes, this server's requests queueing for them

    @property
    def score(self) -> float:
        return min(1.0, max(self.util, self.demand, self.thread, self.throttle,
                            self.pool.score if self.pool else 0.0, self.starved, self.host, self.contended))


def _pool_cause(t: TargetMetrics, ev: list[Evidence]) -> PoolCause | None:
    """The pool nearest its size (appending its evidence row), if one is at 80% of it or near."""
    best: PoolCause | None = None
    for p in t.time.pools:
        if p.threads < 2 and not p.knob:
            continue  # a lone unnamed thread is the thread-demand rule's business
        if p.cpu_cores < 0.05 and p.demand * p.threads < 0.5:
            continue
        load = max(p.util, p.demand)
        ps = ramp(load, "cpu.pool")
        if ps <= 0:
            continue
        ev.append(evidence(f"pool_demand[{p.pool}]", load, "cpu.pool",
                           f"{p.cpu_cores:.2f} cores over {p.threads} threads; running {_pct(p.states.get('cpu'))}, "
                           f"queued {_pct(p.states.get('runnable'))}"))
        rec = (TIKV_POOLS[p.pool].advice if p.knob and p.pool in TIKV_POOLS
               else f"the {p.pool} pool is saturated: give it more threads if its work is parallel")
        if p.states.get("runnable", 0.0) > p.states.get("cpu", 0.0):
            rec = (f"{p.pool} waits for a CPU more than it runs: the host's CPUs are oversubscribed, so "
                   f"{'raising ' + p.knob if p.knob else 'more threads'} will not help until it gets CPU time "
                   f"(dedicate cores, move other work off the host); then: {rec}")
        elif (t.time.demand_util or 0.0) >= 1.0:  # more threads would only queue for the CPUs it already wants
            rec = (f"the target wants {_pct(t.time.demand_util)} of the CPUs it may use, so "
                   f"{'raising ' + p.knob if p.knob else 'more threads in ' + p.pool} will not help: give it more "
                   f"cores, or make {p.pool}'s work cheaper")
        knob = f" (knob: {p.knob})" if p.knob else ""
        queued = f", {_pct(p.states.get('runnable'))} of it queued for a CPU" if p.states.get("runnable", 0) > 0.2 else ""
        sub = (f"pool {p.pool} saturated: its {p.threads} thread{'s want' if p.threads > 1 else ' wants'} a CPU "
               f"{_pct(load)} of the time{queued}{knob}")
        if best is None or ps > best.score:
            best = PoolCause(ps, sub, rec)
    return best


def cpu_scores(t: TargetMetrics, m: Metrics) -> CpuScores | None:
    """Every piece of CPU evidence scored; None when there is none."""
    ev: list[Evidence] = []
    tt, pr, lim = t.time, t.process, t.limits
    util_s = demand_s = thread_s = throttle_s = starved_s = 0.0
    if pr.cpu_util is not None:
        util_s = ramp(pr.cpu_util, "cpu.util")
        ev.append(evidence("cpu_util", pr.cpu_util, "cpu.util",
                           f"{pr.cpu_cores:.2f} of {lim.cpu_available:.2f} cores ({lim.cpu_available_why})"))
    if tt.demand_util is not None:
        # Many threads that each queue a little (every wake-up of a lock convoy waits for a CPU)
        # add up to cores of "demand" without any of them being CPU-bound: the demand counts as
        # much as the work threads want a CPU for most of their time (none at half, full from 90%).
        demand_s = ramp(tt.demand_util, "cpu.demand") * wants_cpu(tt.busy)
        ev.append(evidence("cpu_demand", tt.demand_util, "cpu.demand",
                           f"wants {tt.demand_cores or 0:.2f} of {lim.cpu_available or 0:g} cores, gets {pr.cpu_cores or 0:.2f}"))
    if tt.max_thread_demand is not None and tt.threads > 0:
        # One thread can hold a single-threaded server (redis, an event loop) at its core's limit.
        # In a program with many busy threads a hot one may be a background job: weighed x0.8.
        single = tt.threads == 1 or tt.active_threads <= 1
        thread_s = ramp(tt.max_thread_demand, "cpu.thread_demand") * (1.0 if single else 0.8)
        ev.append(evidence("thread_demand", tt.max_thread_demand, "cpu.thread_demand", tt.demand_thread or ""))
    if tt.runq_share is not None:
        # Threads that want a CPU nearly all their time and wait for a good part of it are held
        # back by the CPU, whoever takes it (neighbours are the sub-cause, never a discount: issue
        # 14); a light target that queues now and then on a busy host wants a CPU too little to count.
        starved_s = ramp(tt.runq_share, "cpu.runq") * wants_cpu(tt.busy)
        ev.append(evidence("run_queue_share", tt.runq_share, "cpu.runq", "schedstat run delay / (CPU + run delay): "
                           f"how much of what it asks for it waits for; the work threads want a CPU {_pct(tt.busy)} of their time"))
    if lim.cpu_throttled_share is not None:
        throttle_s = ramp(lim.cpu_throttled_share, "cpu.throttled")
        ev.append(evidence("cgroup_throttled_periods", lim.cpu_throttled_share, "cpu.throttled",
                           f"throttled {lim.cpu_throttled_time_share or 0:.2f} s per s"))
    pool = _pool_cause(t, ev)
    host_s = _host(t, m, ev)
    contended_s = _contended(t, m, ev)
    if not ev:
        return None
    return CpuScores(util_s, demand_s, thread_s, starved_s, throttle_s, pool, ev, host_s, contended_s)


CALM_AT, CALM_FULL = THRESHOLDS["idle.cpu"].value, THRESHOLDS["idle.cpu"].full


def calm_weight(busy: float | None) -> float:
    """How much a figure of the target's own counts by how much of its cores it wants: 0 for a calm
    target (a fifth of its cores or less, the not-saturated rule's bound), 1 from half, linear
    between; 1 when unknown."""
    if busy is None:
        return 1.0
    return min(1.0, max(0.0, (busy - CALM_FULL) / (CALM_AT - CALM_FULL)))


def capture_cores(m: Metrics) -> float:
    """Cores the capture's targets used together."""
    return sum(t.process.cpu_cores or 0.0 for t in m.targets)


def _host(t: TargetMetrics, m: Metrics, ev: list[Evidence]) -> float:
    """The host's CPUs saturated by the workload the capture attached to (a cluster's tiers on one
    host: TiDB, TiKV, PD), this target queueing for them whenever it works.

    Each tier alone may use a fraction of the cores and want little more (a Go or Rust server's
    threads wait on each other's tiers between bursts), so neither its own use nor its demand
    reaches a threshold; together they fill the host, and every one of them queues. Counted when
    the host is busy, the capture's targets take most of it (not someone else's work: a light
    target on a busy host stays calm), and this target's threads, whenever they are not idle by
    design, run or queue (not block on locks or IO), weighted by their run-queue share."""
    sysm = m.system
    tt = t.time
    if sysm is None or sysm.cpu_util is None or not sysm.ncpu or tt.runq_share is None:
        return 0.0
    share = capture_cores(m) / sysm.ncpu
    working = tt.busy_when_working
    s = min(ramp(sysm.cpu_util, "cpu.host"), ramp(share, "cpu.capture_share"), ramp(tt.runq_share, "cpu.runq"))
    # as much as it works when it works, and as much as it wants a real part of its cores (the
    # not-saturated rule's bounds: none at a fifth, in full from half)
    s *= wants_cpu(working) * calm_weight(tt.demand_util)
    if s > 0:
        ev.append(evidence("host_cpu_busy", sysm.cpu_util, "cpu.host", f"{sysm.ncpu} CPUs (/proc/stat)"))
        ev.append(evidence("capture_cpu_share", share, "cpu.capture_share",
                           f"the capture's {len(m.targets)} targets use {capture_cores(m):.2f} of {sysm.ncpu} CPUs"))
        ev.append(evidence("busy_when_working", working, None,
                           "share of the work threads' time, idle-by-design waits left out, spent running or "
                           "queued for a CPU (not blocked on locks or IO)", unit="of working time"))
    return s


HOST_CONTENTION = "cpu_host_contention"  # the finding's rule when other processes take the CPU (ranking.py)
OTHERS_AT = 0.3  # cores the host's other processes use before they count as taking the CPU (starvation)


def _contended(t: TargetMetrics, m: Metrics, ev: list[Evidence]) -> float:
    """The host's CPUs taken by other processes while this server's requests wait for them (issue
    29: TiDB under 32 point-select clients got 0.39 of the 3.5 cores its threads wanted on a host
    that others kept full, run-queue share 0.89, and was called not saturated).

    A Go server's threads (its Ms) park whenever no goroutine is runnable, so "the work threads
    want a CPU nearly all the time" (``wants_cpu(busy)``) is never true of it, and its thread-level
    demand grows with the host's contention itself: idle TiDB beside a CPU burner, 0.05 core used,
    had threads runnable 1.5 cores' worth while the runtime woke them for timers. What tells a
    server that wants the CPU from one that merely waits for it on wake-up is its work in flight,
    which a server that times its requests says: its requests in its own work (in its total, not
    waiting on locks, slots, the disk or another tier: ``RequestTime.executing``) per core it may
    use, against ``cpu.executing`` (every core has a request to run). Counted when the host's CPUs
    are full, other processes take a real part of them, this server's threads queue for a CPU
    whenever they work (idle-by-design waits left out: not blocked on locks or IO), and x the
    share of the request time that is not such a wait (slow requests on a lock are the lock's)."""
    sysm, tt = m.system, t.time
    rt: RequestTime | None = t.server.requests if t.server is not None else None
    if sysm is None or sysm.cpu_util is None or not sysm.ncpu or tt.runq_share is None or rt is None:
        return 0.0
    answered = answered_by_peers(t, m)
    executing, waits = rt.executing(answered), rt.waits_share(answered)
    others, names = others_on_host(m)
    if executing is None or waits is None or rt.total is None or others is None or others < OTHERS_AT:
        return 0.0
    cores = t.limits.cpu_available or float(sysm.ncpu)
    per_core = executing / cores
    s = min(ramp(sysm.cpu_util, "cpu.host"), ramp(tt.runq_share, "cpu.runq"), ramp(per_core, "cpu.executing"))
    s *= wants_cpu(tt.busy_when_working) * (1.0 - waits)
    if s > 0:
        if not any(e.metric == "host_cpu_busy" for e in ev):  # _host may have said it
            ev.append(evidence("host_cpu_busy", sysm.cpu_util, "cpu.host", f"{sysm.ncpu} CPUs (/proc/stat)"))
        ev.append(evidence("requests_executing_per_core", per_core, "cpu.executing",
                           f"{executing:.1f} requests in its own work on average over {cores:g} cores: "
                           f"{rt.total.waiting:.1f} in {rt.total.title.lower()} ({rt.total.metric}), "
                           f"{_pct(waits)} of their time waiting on locks, slots, the disk or another tier",
                           panel=rt.total.panel))
        ev.append(evidence("other_processes_cores", others, None,
                           f"the host's busy CPUs less the capture's targets: {names or 'not named'}", unit="cores"))
        transit = in_transit(rt, answered)
        if transit is not None:
            ev.append(evidence("rpc_time_in_transit", transit[0], None,
                               f"share of its time in {transit[1]} that {transit[2]} does not account for: "
                               f"{transit[2]} has {answered[transit[2]]:.1f} requests in flight against its "
                               f"{transit[3]:.1f} waiting; on one host that is both sides queueing for a CPU",
                               unit="of the RPC time"))
    return s


def answered_by_peers(t: TargetMetrics, m: Metrics) -> dict[str, float]:
    """Requests in flight in each other tier the capture holds, by its own request total (TiKV's
    gRPC time beside TiDB on one host): what TiDB's waits on that tier can be checked against."""
    out: dict[str, float] = {}
    for o in m.targets:
        rt = o.server.requests if o is not t and o.server is not None else None
        if o.kind and o.kind != t.kind and rt is not None and rt.total is not None:
            out[o.kind] = out.get(o.kind, 0.0) + rt.total.waiting
    return out


def in_transit(rt: RequestTime, answered: dict[str, float]) -> tuple[float, str, str, float] | None:
    """The largest RPC phase's share that its serving tier does not account for (a fifth or more),
    with the phase's title, the tier and the caller's requests waiting in it."""
    rpcs = [p for p in rt.phases if p.tier in answered and p.waiting > 0]
    if not rpcs:
        return None
    p = max(rpcs, key=lambda x: x.waiting)
    gap = 1.0 - rt.answered_part(p, answered)
    return (gap, p.title, p.tier or "", p.waiting) if gap >= 0.2 else None


# --------------------------------------------------------------------------- the sub-causes

Cause = tuple[str, str, float]  # (sub-cause, advice, the finding's score)
SubCause = Callable[[TargetMetrics, Metrics, CpuScores], Cause | None]


def _want_got(t: TargetMetrics, thread: bool) -> tuple[float, float]:
    """(cores wanted, cores got): of the hottest work thread, or of the whole target."""
    tt = t.time
    if thread and tt.max_thread_demand is not None and tt.demand_thread_cpu is not None:
        return tt.max_thread_demand, min(tt.max_thread_demand, tt.demand_thread_cpu)
    return tt.demand_cores or 0.0, t.process.cpu_cores or 0.0


def _starved(t: TargetMetrics) -> bool:
    """It waits for a fifth or more of the CPU it asks for."""
    return (t.time.runq_share or 0.0) >= 0.2


def quota(t: TargetMetrics, m: Metrics, s: CpuScores) -> Cause | None:
    """The cgroup CPU quota throttles it: the root cause of the queueing it creates."""
    if s.throttle < PRIMARY:
        return None
    lim = t.limits
    sub = f"cgroup CPU quota: throttled in {_pct(lim.cpu_throttled_share)} of periods ({lim.cpu_available_why})"
    if lim.container_name:
        sub += f" ({lim.container_name})"
    if t.time.demand_cores is not None and t.process.cpu_cores is not None:
        sub += f"; wants {t.time.demand_cores:.2f} cores, gets {t.process.cpu_cores:.2f}"
    rec = "raise the cgroup CPU quota (cpu.cfs_quota_us / the container's CPU limit)"
    return sub, rec, min(1.0, max(s.score, s.throttle + 0.01))


def container_limit(t: TargetMetrics, m: Metrics, s: CpuScores) -> Cause | None:
    """A pin (its cgroup's cpuset, or its affinity) or a CPU quota below what the target wants:
    that limit binds whatever else the host runs (seed 001: TiKV containers pinned one CPU each
    by --cpuset-cpus; docs/verdict.md#container-limits)."""
    lim, tt = t.limits, t.time
    if s.score < PRIMARY or tt.demand_cores is None:
        return None
    caps: list[tuple[float, str]] = []
    if lim.pinned_to:
        caps.append((float(len(lim.pinned_to)), f"pinned to {cpu_list(lim.pinned_to)} by {lim.pinned_by}"))
    if lim.quota_cores is not None:
        caps.append((lim.quota_cores, f"held to {lim.quota_cores:.2f} cores by its cgroup CPU quota"))
    if not caps:
        return None
    cap, what = min(caps)
    if tt.demand_cores < 0.9 * cap:
        return None  # it does not want all it may use: the limit is not what holds it
    where = f" ({lim.container_name})" if lim.container_name else ""
    got = t.process.cpu_cores or 0.0
    sub = (f"{what}{where}: wants {tt.demand_cores:.2f} core{'s' if tt.demand_cores >= 1.5 else ''} "
           f"of the {cap:g} it may use, gets {got:.2f}")
    others, names = others_on_host(m)
    if _starved(t) and others is not None and others >= 0.3 and got < 0.8 * cap:
        sub += f"; other processes on the host take CPU time too ({names or 'the host is busy'})"
    if lim.pinned_to and cap == len(lim.pinned_to):
        rec = (f"it may run on {cpu_list(lim.pinned_to)} only: give it more CPUs (--cpuset-cpus, the pod's CPU "
               "limit with the static CPU manager) or fewer busy threads (TiKV sizes its pools from the host's cores)")
    else:
        rec = "raise its CPU quota (--cpus, the pod's resources.limits.cpu, cpu.cfs_quota_us / cpu.max)"
    return sub, rec, s.score


def pool_at_size(t: TargetMetrics, m: Metrics, s: CpuScores) -> Cause | None:
    """A named pool runs at its size: a more precise cause than the run queue."""
    p = s.pool
    if p is None or p.score < PRIMARY or p.score < s.score - 0.05:
        return None
    return p.sub_cause, p.advice, min(1.0, s.score + 0.02)


def starvation(t: TargetMetrics, m: Metrics, s: CpuScores) -> Cause | None:
    """It wants the CPU and waits for it while other processes on the host take it."""
    others, names = others_on_host(m)
    if not _starved(t) or others is None or others < OTHERS_AT or max(s.demand, s.thread, s.starved) < PRIMARY:
        return None
    want, got = _want_got(t, s.thread > s.demand)
    who = names or f"the host's CPUs are {_pct(m.system.cpu_util if m.system else None)} busy"
    sub = (f"CPU starvation: wants {want:.2f} core{'s' if want >= 1.5 else ''}, gets {got:.2f}: "
           f"other processes on the host take the CPU ({who})")
    rec = ("the target is CPU-bound and its CPU goes to other processes: move them off the host or lower "
           "their priority/quota, pin the target to dedicated cores (cpuset), or add cores")
    return sub, rec, s.score


def host_saturated(t: TargetMetrics, m: Metrics, s: CpuScores) -> Cause | None:
    """The capture's targets together fill the host's CPUs, and this one queues for them."""
    if s.host < PRIMARY or s.host < max(s.util, s.demand, s.thread) - 0.05:
        return None
    sysm = m.system
    assert sysm is not None and sysm.cpu_util is not None
    ours = ", ".join(f"{o.label} {o.process.cpu_cores or 0:.2f}" for o in
                     sorted(m.targets, key=lambda o: -(o.process.cpu_cores or 0.0)))
    others, names = others_on_host(m)
    sub = (f"the host's CPUs are saturated: {sysm.ncpu} CPUs {_pct(sysm.cpu_util)} busy, the capture's targets take "
           f"{capture_cores(m):.2f} cores ({ours})")
    if others is not None and others >= 0.05:
        sub += f", other processes {others:.2f}" + (f" ({names})" if names else "")
    sub += f"; {_pct(t.time.runq_share)} of what {t.comm} asks for is run-queue delay"
    rec = ("the tiers on this host take all of its CPUs: give them more cores (or separate hosts), or lower the load; "
           "the on-CPU flame graph of each shows where its share goes")
    return sub, rec, s.score


def host_contention(t: TargetMetrics, m: Metrics, s: CpuScores) -> Cause | None:
    """Other processes fill the host's CPUs while this server's requests queue for them."""
    if s.contended < PRIMARY or s.contended < max(s.util, s.demand, s.thread) - 0.05:
        return None
    sysm = m.system
    rt: RequestTime | None = t.server.requests if t.server is not None else None
    assert sysm is not None and sysm.cpu_util is not None and rt is not None
    others, names = others_on_host(m)
    answered = answered_by_peers(t, m)
    executing = rt.executing(answered) or 0.0
    sub = (f"host CPU contention: the host's CPUs are saturated ({sysm.ncpu} CPUs {_pct(sysm.cpu_util)} busy) and "
           f"other processes take {others or 0:.2f} cores ({names or 'not named'}); {executing:.1f} of its requests "
           f"are in its own work on average, it gets {t.process.cpu_cores or 0:.2f} cores, "
           f"{_pct(t.time.runq_share)} of what its threads ask for is run-queue delay")
    transit = in_transit(rt, answered)
    if transit is not None:
        sub += (f"; {_pct(transit[0])} of its time in {transit[1]} is not {transit[2]}'s own work "
                f"({answered[transit[2]]:.1f} in flight there against {transit[3]:.1f} waiting here): both sides "
                "queue for a CPU")
    if len(m.targets) > 1:
        sub += "; the capture's targets take " + ", ".join(
            f"{o.label} {o.process.cpu_cores or 0:.2f}" for o in sorted(m.targets, key=lambda o: -(o.process.cpu_cores or 0.0)))
    rec = ("the server's requests wait for CPUs other processes take: move those processes off the host or lower "
           "their priority/quota, pin the server to dedicated cores (cpuset), or add cores")
    return sub, rec, s.score


def all_cores(t: TargetMetrics, m: Metrics, s: CpuScores) -> Cause | None:
    """It uses, or wants, every core it may use."""
    if s.util < PRIMARY and s.demand < PRIMARY:
        return None
    lim = t.limits
    sub = f"all {lim.cpu_available:g} available cores busy ({_pct(t.process.cpu_util)}; {lim.cpu_available_why})"
    if _starved(t):
        sub += f"; {_pct(t.time.runq_share)} of its CPU demand is run-queue delay"
    rec = "give the process more CPU (cores, cpuset, quota) or reduce the work per request (see the on-CPU flame graph)"
    return sub, rec, s.score


def one_thread(t: TargetMetrics, m: Metrics, s: CpuScores) -> Cause | None:
    """One thread is at a core's limit (starved of it when others take the CPU)."""
    if s.thread <= 0:
        return None
    sub = f"one thread is at a core's limit: {t.time.demand_thread or t.time.hottest_thread}"
    rec = "a single thread caps throughput: spread its work (more pool threads, partitions) or make it cheaper"
    others, names = others_on_host(m)
    if _starved(t) and others is not None and others >= 0.3:
        want, got = _want_got(t, True)
        sub = (f"CPU starvation: wants {want:.2f} core, gets {got:.2f}: other processes on the host take the CPU "
               f"({names or 'the host is busy'})")
    return sub, rec, s.score


def not_the_limit(t: TargetMetrics, m: Metrics, s: CpuScores) -> Cause | None:
    """None of the above: the CPU figures, for the record."""
    return (f"CPU at {_pct(t.process.cpu_util)} of {t.limits.cpu_available or 0:g} cores", "the CPU is not the limit",
            s.score)


# Most specific first: the first that applies names the sub-cause.
SUB_CAUSES: tuple[SubCause, ...] = (quota, container_limit, pool_at_size, starvation, host_saturated,
                                    host_contention, all_cores, one_thread, not_the_limit)


def rule_cpu(t: TargetMetrics, m: Metrics) -> Finding | None:
    """CPU-bound: the target uses, or wants, the CPU it may have; the sub-cause says what keeps more from it."""
    s = cpu_scores(t, m)
    if s is None:
        return None
    cause = next((rule, c) for rule, c in ((rule, rule(t, m, s)) for rule in SUB_CAUSES) if c is not None)
    sub, rec, score = cause[1]
    if t.kind == "tidb" and cause[0] is not host_contention:
        rec = TIDB_ADVICE["cpu"]
    return Finding("cpu", HOST_CONTENTION if cause[0] is host_contention else "cpu_saturation", score, "CPU-bound",
                   sub, s.evidence, rec, t.label)
