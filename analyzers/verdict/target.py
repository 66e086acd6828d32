"""Per-target metrics from the procfs samples (analyzers layer): CPU used and available, thread
states, thread pools, process counters and cgroup limits."""

from __future__ import annotations

import numpy as np
from profiler.analyzers.series import procfs as procmod
from profiler.analyzers.verdict.model import PoolMetrics, TargetMetrics
from profiler.analyzers.verdict.threads import ThreadTime, shares, sum_secs, thread_time, top

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


def target_metrics(target: TargetInfo, pd: procmod.ProcData | None, host_cpus: int) -> TargetMetrics:
    kind = target.kind or target_kind(target.comm, target.exe, target.cmdline)
    tm = TargetMetrics(pid=target.pid, comm=target.comm, kind=kind, runtime=target.runtime,
                       label=f"{target.comm} (pid {target.pid})", exited=target.exited is not None)
    tm.cpu_available, tm.cpu_available_why = _available_cpu(target, host_cpus)
    tm.blkio_limits = dict((target.cgroup or {}).get("blkio_throttle") or {})
    cg_limit = (target.cgroup or {}).get("memory_limit_bytes")
    if pd is None:
        return tm
    series = pd.threads_of(target.pid)
    tts = [thread_time(s, pd.syscall_names) for s in series]
    tts = [t for t in tts if t.samples > 0]
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
    all_secs = sum_secs(tts)
    tm.states = shares(all_secs)
    active = [t for t in tts if t.active]
    tm.active_threads = len(active)
    act_secs = sum_secs(active)
    tm.active_states = shares(act_secs)
    work = all_secs["cpu"] + all_secs["runnable"]
    tm.runq_share = all_secs["runnable"] / work if work > 0 else None
    # what blocked threads sit in
    blocked: dict[str, float] = {}
    io_blocked: dict[str, float] = {}
    for t in active or tts:
        for k, v in t.blocked_syscalls.items():
            blocked[k] = blocked.get(k, 0) + v
    for s in series:
        if not any(t.tid == s.tid for t in (active or tts)):
            continue
        for i in np.nonzero(s.wait == procmod.DISK)[0]:
            nr = int(s.syscall[i])
            key = pd.syscall_name(nr) if nr >= 0 else "(page fault / kernel)"
            io_blocked[key] = io_blocked.get(key, 0) + 1
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
        bk = sum(max(0.0, s.delta(s.blkio)) for s in series if any(a.tid == s.tid for a in active))
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
    if tm.runtime is None:
        tm.runtime = _runtime_from_threads([t.comm for t in tts], kind, target.comm)
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
        limits = [v for kind_, devs in tm.blkio_limits.items() if kind_.endswith("bps") for v in devs.values()]
        if limits:
            done = (cs.rate("blkio.service_bytes.read") or 0.0) + (cs.rate("blkio.service_bytes.write") or 0.0)
            tm.blkio_limit_use = done / min(limits) if min(limits) > 0 else None
    elif isinstance(cg_limit, int | float):
        tm.mem_limit = float(cg_limit)
        if tm.rss_max:
            tm.mem_usage_share = tm.rss_max / tm.mem_limit
    return tm


def _runtime_from_threads(comms: list[str], kind: str | None, process_comm: str = "") -> str | None:
    if kind == "tikv":
        return "rust"
    if kind in ("tidb", "pd"):
        return "go"
    guess: str | None = runtime_from_threads(comms, process_comm)
    return guess
