"""Per-target metrics from the procfs samples (analyzers layer): CPU used and available, thread
states, thread pools, process counters and cgroup limits."""

from __future__ import annotations

import numpy as np
from profiler.analyzers.series import procfs as procmod
from profiler.analyzers.stacks import waits
from profiler.analyzers.verdict.model import PoolMetrics, TargetMetrics
from profiler.analyzers.verdict.threads import (
    ThreadTime,
    assign_roles,
    shares,
    sum_secs,
    thread_time,
    top,
)

from profiler.bundle import TargetInfo
from profiler.knowledge import pool_info, runtime_from_threads, target_kind


def _available_cpu(target: TargetInfo, host_cpus: int) -> tuple[float | None, str]:
    cands: list[tuple[float, str]] = []
    if host_cpus:
        cands.append((float(host_cpus), f"{host_cpus} CPUs on the host"))
    allowed = target.cpus_allowed or []
    if allowed and len(allowed) < (host_cpus or 1 << 30):
        cands.append((float(len(allowed)), f"cpuset/affinity allows {len(allowed)} CPUs"))
    cg = target.cgroup or {}
    q, p = cg.get("cpu_quota_us"), cg.get("cpu_period_us")
    if isinstance(q, int | float) and isinstance(p, int | float) and q > 0 and p > 0:
        cands.append((q / p, f"cgroup CPU quota {q / p:.2f} cores"))
    if not cands:
        return None, ""
    return min(cands, key=lambda c: c[0])


def _process_cpu(ps: procmod.Series, clk: int) -> tuple[float | None, float | None]:
    u, s = ps.get("utime"), ps.get("stime")
    if u is None or s is None or len(ps.t) < 2:
        return None, None
    cpu = (u + s) / clk
    ok = ~np.isnan(cpu)
    t, cpu = ps.t[ok], cpu[ok]
    if len(t) < 2 or t[-1] <= t[0]:
        return None, None
    mean = float((cpu[-1] - cpu[0]) / (t[-1] - t[0]))
    # per-second buckets for a p95
    edges = np.arange(t[0], t[-1] + 1e-9, 1.0)
    if len(edges) >= 3:
        c = np.interp(edges, t, cpu)
        per = np.diff(c) / np.diff(edges)
        p95 = float(np.percentile(per, 95))
    else:
        p95 = mean
    return mean, p95


def target_metrics(target: TargetInfo, pd: procmod.ProcData | None, host_cpus: int,
                   stacks: dict[int, dict[tuple[str, ...], int]] | None = None) -> TargetMetrics:
    """``stacks``: every off-CPU switch-out's stack per thread (analyzers.views.stacks), if captured."""
    kind = target.kind or target_kind(target.comm, target.exe, target.cmdline)
    tm = TargetMetrics(pid=target.pid, comm=target.comm, kind=kind, runtime=target.runtime,
                       label=f"{target.comm} (pid {target.pid})", exited=target.exited is not None)
    tm.cpu_available, tm.cpu_available_why = _available_cpu(target, host_cpus)
    tm.blkio_limits = dict((target.cgroup or {}).get("blkio_throttle") or {})
    cg_limit = (target.cgroup or {}).get("memory_limit_bytes")
    if pd is None:
        return tm
    series = pd.threads_of(target.pid)
    tids = [s.tid for s in series]
    if tm.runtime is None and stacks:
        tm.runtime = waits.runtime_from_stacks(stacks, tids)
    if tm.runtime is None:
        tm.runtime = _runtime_from_threads([s.comm for s in series], kind, target.comm)
    mixes = waits.stack_mixes(stacks, tids, tm.runtime) if stacks else {}
    tts = [thread_time(s, pd.syscall_names, tm.runtime, mixes.get(s.tid)) for s in series]
    tts = [t for t in tts if t.samples > 0]
    assign_roles(tts)
    tm.threads = len(tts)
    tm.samples = max((t.samples for t in tts), default=0)
    if any(e.get("what") == "target-exited" and e.get("pid") == target.pid for e in pd.events):
        tm.exited = True
    if pd.t0 is not None and pd.t1 is not None:
        tm.window = pd.t1 - pd.t0
    window = tm.window or max((t.span for t in tts), default=0.0)
    # CPU
    ps = pd.processes.get(target.pid)
    mean, p95 = _process_cpu(ps, pd.clk_tck) if ps is not None else (None, None)
    if mean is None and tts and window > 0:
        mean = sum(t.seconds["cpu"] for t in tts) / window
        p95 = mean
    tm.cpu_cores, tm.cpu_cores_p95 = mean, p95
    if mean is not None and tm.cpu_available:
        tm.cpu_util = mean / tm.cpu_available
    if tts:
        hot = max(tts, key=lambda t: t.cpu_share)
        tm.max_thread_util, tm.hottest_thread = hot.cpu_share, f"{hot.comm} (tid {hot.tid})"
        want = max(tts, key=lambda t: (t.demand_share, t.cpu_share))
        tm.max_thread_demand, tm.demand_thread_cpu = want.demand_share, want.cpu_share
        tm.demand_thread = (f"{want.comm} (tid {want.tid}): running {_pct(want.cpu_share)}, "
                            f"waiting for a CPU {_pct(want.seconds['runnable'] / want.span if want.span else 0)}")
    if tts and window > 0:
        tm.demand_cores = sum(t.seconds["cpu"] + t.seconds["runnable"] for t in tts) / window
        if tm.cpu_available:
            tm.demand_util = tm.demand_cores / tm.cpu_available
    for t in tts:
        tm.roles[t.role] = tm.roles.get(t.role, 0) + 1
    all_secs = sum_secs(tts)
    tm.states = shares(all_secs)
    active = [t for t in tts if t.active]
    tm.active_threads = len(active)
    act_secs = sum_secs(active)
    tm.active_states = shares(act_secs)
    work = all_secs["cpu"] + all_secs["runnable"]
    tm.runq_share = all_secs["runnable"] / work if work > 0 else None
    total = sum(all_secs.values())
    by_key: dict[str, float] = {}
    for t in tts:
        for k, v in t.idle_by_design.items():
            by_key[k] = by_key.get(k, 0.0) + v
    tm.idle_by_design = [(k, v / total) for k, v in sorted(by_key.items(), key=lambda kv: (-kv[1], kv[0]))
                         if total > 0 and v > 0][:6]
    blocked_time = sum(all_secs[k] for k in ("io", "aio", "futex", "idle", "sleep", "other"))
    if stacks and blocked_time > 0:
        tm.stack_share = min(1.0, sum(t.from_stacks for t in tts) / blocked_time)
    if act_secs["futex"] > 0 and stacks:
        tm.lock_acquire_share = sum(t.lock_seconds for t in active) / act_secs["futex"]
    who: dict[str, int] = {}
    for t in active:
        for k, n in t.futex_frames.items():
            who[k] = who.get(k, 0) + n
    tm.lock_wait_stacks = sorted(who.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    # what blocked threads sit in
    blocked: dict[str, float] = {}
    io_blocked: dict[str, float] = {}
    for t in active or tts:
        for k, v in t.blocked_syscalls.items():
            blocked[k] = blocked.get(k, 0) + v
    for t in active or tts:
        for k, n in t.io_calls.items():
            io_blocked[k] = io_blocked.get(k, 0) + n
    tm.blocked_syscalls = top(blocked)
    tm.io_syscalls = top(io_blocked)
    fut_by_pool: dict[str, float] = {}
    for t in active:
        fut_by_pool[t.pool] = fut_by_pool.get(t.pool, 0) + t.seconds["futex"]
    tm.futex_threads = top(fut_by_pool, 3)
    rates = [t.vcsw_rate for t in active if t.vcsw_rate is not None]
    if rates:
        tm.busy_vcsw_rate = float(np.mean(rates))
    wch: dict[str, float] = {}
    for t in active or tts:
        for k, v in t.wchans.items():
            wch[k] = wch.get(k, 0) + v
    tm.wchans = top(wch)
    # delay accounting (only meaningful when task_delayacct was on)
    if pd.host.get("task_delayacct") == 1 and active:
        bk = sum(a.blkio_seconds or 0.0 for a in active)
        tot = sum(a.span for a in active)
        # Threads created before task_delayacct was turned on are not accounted (seen on 6.18):
        # a zero here is "unknown", not "no IO wait".
        tm.blkio_delay_share = bk / tot if tot > 0 and bk > 0 else None
    # pools
    pools: dict[str, list[ThreadTime]] = {}
    for t in tts:
        pools.setdefault(t.pool, []).append(t)
    for name, group in pools.items():
        secs = sum_secs(group)
        cores = secs["cpu"] / window if window > 0 else 0.0
        info = pool_info(kind, name)
        tm.pools.append(PoolMetrics(
            pool=name, threads=len(group), cpu_cores=cores, util=cores / len(group) if group else 0.0,
            demand=(secs["cpu"] + secs["runnable"]) / max(1e-9, sum(secs.values())),
            max_thread_util=max(g.cpu_share for g in group), states=shares(secs),
            role=info.role if info else None, knob=info.knob if info else None))
    tm.pools.sort(key=lambda p: (-p.cpu_cores, p.pool))
    # process counters
    if ps is not None:
        tm.vcsw_rate, tm.ivcsw_rate = ps.rate("vcsw"), ps.rate("ivcsw")
        tm.read_bps, tm.write_bps = ps.rate("read_bytes"), ps.rate("write_bytes")
        tm.rss, tm.rss_max, tm.swap = ps.last("rss"), ps.max("rss"), ps.last("swap")
        tm.majflt_rate, tm.minflt_rate = ps.rate("majflt"), ps.rate("minflt")
    # cgroup
    cs = pd.cgroups.get(target.pid)
    if cs is not None:
        lim = cs.last("memory.limit")
        if lim is not None and lim < (1 << 60):
            tm.mem_limit = lim
        elif isinstance(cg_limit, int | float):
            tm.mem_limit = float(cg_limit)
        use = cs.max("memory.usage")
        if tm.mem_limit and use is not None:
            tm.mem_usage_share = use / tm.mem_limit
        tm.mem_failcnt_rate = cs.rate("memory.failcnt")
        tm.cg_majflt_rate = cs.rate("memory.total_pgmajfault") if cs.get("memory.total_pgmajfault") is not None else cs.rate("memory.pgmajfault")
        per, thr = cs.delta("cpu.nr_periods"), cs.delta("cpu.nr_throttled")
        if per and per > 0 and thr is not None:
            tm.cpu_throttled_share = thr / per
        tt = cs.rate("cpu.throttled_time_ns")
        if tt is not None:
            tm.cpu_throttled_time_share = tt / 1e9
        tm.blkio_limit_use = _limit_use(tm.blkio_limits, cs, "bps", "blkio.service_bytes")
        tm.blkio_iops_use = _limit_use(tm.blkio_limits, cs, "iops", "blkio.serviced")
    elif isinstance(cg_limit, int | float):
        tm.mem_limit = float(cg_limit)
        if tm.rss_max:
            tm.mem_usage_share = tm.rss_max / tm.mem_limit
    return tm


def _limit_use(limits: dict[str, object], cs: procmod.Series, unit: str, counter: str) -> float | None:
    """The highest use of a blkio throttle: per direction, done per second / the tightest limit."""
    best: float | None = None
    for op in ("read", "write"):
        devs = limits.get(f"{op}_{unit}")
        vals = [float(v) for v in devs.values() if isinstance(v, int | float) and v > 0] if isinstance(devs, dict) else []
        if not vals:
            continue
        done = cs.rate(f"{counter}.{op}")
        if done is None:
            continue
        use = done / min(vals)
        best = use if best is None else max(best, use)
    return best


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _runtime_from_threads(comms: list[str], kind: str | None, process_comm: str = "") -> str | None:
    if kind == "tikv":
        return "rust"
    if kind in ("tidb", "pd"):
        return "go"
    guess: str | None = runtime_from_threads(comms, process_comm)
    return guess
