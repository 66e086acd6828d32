"""The verdict's rules (analyzers layer): small named rules over the metrics, one per cause.

Each rule is a function ``TargetMetrics (+ capture Metrics) -> Finding | None`` over the
thresholds of findings.py. A rule's score is its strongest evidence (``ramp``), scaled by a
weight when the evidence is indirect (a system-wide figure on a shared host). When nothing
reaches ``PRIMARY`` the target is not saturated (``rule_not_saturated``). The ranking of the
findings into a verdict, its confidence and runner-up are ranking.py's.
"""

from __future__ import annotations

from collections.abc import Callable

from profiler.analyzers.verdict import rules_server
from profiler.analyzers.verdict.findings import (
    PRIMARY,
    THRESHOLDS,
    Evidence,
    Finding,
    evidence,
    ramp,
)
from profiler.analyzers.verdict.metrics import Metrics, TargetMetrics

from profiler.knowledge import TIDB_ADVICE, TIKV_ADVICE, TIKV_POOLS
from profiler.knowledge.waits import BY_KEY


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
        ev.append(evidence("cpu_util", tm.cpu_util, "cpu.util", f"{tm.cpu_cores:.2f} of {tm.cpu_available:.2f} cores ({tm.cpu_available_why})"))
    if tm.demand_util is not None:
        # Many threads that each queue a little (every wake-up of a lock convoy waits for a CPU)
        # add up to cores of "demand" without any of them being CPU-bound: the demand counts as
        # much as the work threads want a CPU for most of their time (none below 30%, full from 70%).
        busy = (tm.active_states.get("cpu", 0.0) + tm.active_states.get("runnable", 0.0)) if tm.active_states else 0.0
        demand_s = ramp(tm.demand_util, "cpu.demand") * _wants_cpu(busy)
        ev.append(evidence("cpu_demand", tm.demand_util, "cpu.demand",
                      f"wants {tm.demand_cores or 0:.2f} of {tm.cpu_available or 0:g} cores, gets {tm.cpu_cores or 0:.2f}"))
    if tm.max_thread_demand is not None and tm.threads > 0:
        # One thread can hold a single-threaded server (redis, an event loop) at its core's limit.
        # In a program with many busy threads a hot one may be a background job: weighed x0.8.
        single = tm.threads == 1 or tm.active_threads <= 1
        thread_s = ramp(tm.max_thread_demand, "cpu.thread_demand") * (1.0 if single else 0.8)
        ev.append(evidence("thread_demand", tm.max_thread_demand, "cpu.thread_demand", tm.demand_thread or ""))
    starved_s = 0.0
    if tm.runq_share is not None:
        # Threads that want a CPU nearly all their time and wait for a good part of it are held
        # back by the CPU, whoever takes it (neighbours are the sub-cause, never a discount: issue
        # 14); a light target that queues now and then on a busy host wants a CPU too little to count.
        busy = (tm.active_states.get("cpu", 0.0) + tm.active_states.get("runnable", 0.0)) if tm.active_states else 0.0
        starved_s = ramp(tm.runq_share, "cpu.runq") * _wants_cpu(busy)
        ev.append(evidence("run_queue_share", tm.runq_share, "cpu.runq", "schedstat run delay / (CPU + run delay): "
                      f"how much of what it asks for it waits for; the work threads want a CPU {_pct(busy)} of their time"))
    if tm.cpu_throttled_share is not None:
        throttle_s = ramp(tm.cpu_throttled_share, "cpu.throttled")
        ev.append(evidence("cgroup_throttled_periods", tm.cpu_throttled_share, "cpu.throttled",
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
        ev.append(evidence(f"pool_demand[{p.pool}]", load, "cpu.pool",
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
        ev.append(evidence("io_blocked_share", blocked, "io.blocked", "D state or IO syscalls, work-path threads"))
    if aio > 0:
        scores.append(ramp(aio, "io.blocked") if at_limit >= PRIMARY else 0.0)
        ev.append(evidence("completion_wait_share", aio, "io.blocked",
                      "work threads waiting for IO completions (io_uring_enter/io_getevents); counts only when "
                      "a device or blkio throttle is at its limit" + ("" if at_limit >= PRIMARY else ": none is")))
    own = (blocked is not None and blocked >= THRESHOLDS["io.blocked"].value * 0.5) or (
        aio >= THRESHOLDS["io.blocked"].value * 0.5 and at_limit >= PRIMARY)
    if tm.blkio_delay_share is not None:
        # delay accounting counts every iowait sleep, completion waits included: full weight only
        # when the work path is seen waiting on IO itself
        scores.append(ramp(tm.blkio_delay_share, "io.delayacct") * (1.0 if own else 0.5))
        ev.append(evidence("blkio_delay_share", tm.blkio_delay_share, "io.delayacct", "delay accounting"))
    if disk is not None and (own or (tm.disk_share or 0) > 0.3):
        scores.append(ramp(disk.util, "io.disk_util") * 0.6)
        ev.append(evidence(f"disk_util[{disk.name}]", disk.util, "io.disk_util",
                      f"{disk.iops:.0f} IOPS, await {disk.await_ms or 0:.1f} ms, queue {disk.queue_depth:.1f}"))
    if m.io is not None and m.io.p99_ms is not None and (own or (m.io.target_share or 0) > 0.3):
        scores.append(ramp(m.io.p99_ms, "io.p99") * 0.7)
        ev.append(evidence("io_p99_ms", m.io.p99_ms, "io.p99", f"{m.io.total} IOs, p50 {m.io.p50_ms:.2f} ms"))
    if m.system is not None and "io_some" in m.system.psi and own:
        scores.append(ramp(m.system.psi["io_some"], "io.psi") * 0.5)
        ev.append(evidence("psi_io_some", m.system.psi["io_some"], "io.psi", "system-wide"))
    if throttle_use is not None:
        # a throttle at its limit holds the target back when its work path waits for it
        scores.append(ramp(throttle_use, "io.blkio_limit") * (1.0 if own else 0.6))
        ev.append(evidence("blkio_limit_use", throttle_use, "io.blkio_limit", "IOs or bytes per second done / the cgroup's blkio limit"))
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
        ev.append(evidence("major_faults_per_s", majflt, "mem.majflt", "target process or its cgroup"))
    if tm.mem_failcnt_rate is not None and tm.mem_limit:
        pressure.append(ramp(tm.mem_failcnt_rate, "mem.failcnt") * 0.8)
        ev.append(evidence("cgroup_failcnt_per_s", tm.mem_failcnt_rate, "mem.failcnt"))
    # Host-wide pressure (PSI, swap) counts fully only when the target shows a sign of its own
    # (faults, a full cgroup, its own swap): on a shared host it is often someone else's.
    own = ((majflt or 0.0) >= 10 or (tm.mem_usage_share or 0.0) >= 0.9 or (tm.swap or 0.0) > 0)
    w = 0.7 if own else 0.3
    if m.system is not None:
        if "memory_some" in m.system.psi:
            pressure.append(ramp(m.system.psi["memory_some"], "mem.psi") * w)
            ev.append(evidence("psi_memory_some", m.system.psi["memory_some"], "mem.psi", "system-wide"))
        if m.system.swap_io_rate is not None:
            pressure.append(ramp(m.system.swap_io_rate, "mem.swap") * w)
            ev.append(evidence("swap_pages_per_s", m.system.swap_io_rate, "mem.swap", "system-wide"))
    usage = 0.0
    if tm.mem_usage_share is not None:
        usage = ramp(tm.mem_usage_share, "mem.usage")
        ev.append(evidence("cgroup_memory_usage", tm.mem_usage_share, "mem.usage", f"limit {_mib(tm.mem_limit)}"))
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
    ev = [evidence("futex_wait_share", fut, "lock.futex", f"{tm.active_threads} busy threads")]
    score = ramp(fut, "lock.futex")
    if tm.busy_vcsw_rate is not None:
        # A pool handing out rare work also waits in futex, but wakes seldom; a contended lock
        # makes its waiters block and wake constantly.
        ev.append(evidence("busy_thread_switches_per_s", tm.busy_vcsw_rate, "lock.switches"))
        score *= 0.4 + 0.6 * ramp(tm.busy_vcsw_rate, "lock.switches")
    # One thread cannot contend with itself (a futex wait there is a handoff), but single-threaded
    # processes of one program (PostgreSQL backends, nginx workers) contend with each other.
    peers = sum(t.active_threads for t in m.targets if (t.kind or t.comm) == (tm.kind or tm.comm))
    if max(tm.active_threads, peers) < 2:
        score *= 0.5
    if tm.vcsw_rate is not None and tm.active_threads:
        ev.append(evidence("voluntary_switches_per_s", tm.vcsw_rate, None, "context switches (seed 001: high = IO or lock waits)", "/s"))
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
        ev.append(evidence("futex_waiting_threads", tm.futex_wait_s / m.window, None,
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


def server_findings(tm: TargetMetrics) -> list[Finding]:
    """Findings from what the target's status port and the Go runtime say (analyzers.verdict.rules_server)."""
    found = rules_server.findings(tm, tm.server)
    for f in found:
        f.target = tm.label
    return found


def rule_not_saturated(tm: TargetMetrics, m: Metrics, others: list[Finding]) -> Finding:
    worst = max((f.score for f in others), default=0.0)
    ev = []
    if tm.cpu_util is not None:
        ev.append(evidence("cpu_util", tm.cpu_util, "idle.cpu", f"{tm.cpu_cores or 0:.2f} of {tm.cpu_available or 0:g} cores"))
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
        ev.extend(go_idle[0])
        sub += f"; {go_idle[1]}"
    rec = "raise the load generator's concurrency, or profile the other tiers (TiDB, TiKV, PD, the client)"
    if tm.kind == "tikv":
        rec = TIKV_ADVICE["not_saturated"]
    elif tm.kind == "tidb":
        rec = TIDB_ADVICE["not_saturated"]
    return Finding("not_saturated", "not_saturated", score, "not saturated", sub, ev, rec, tm.label)
