"""A target's figures from the procfs samples (analyzers layer), as pure functions, one record each:
what it may use and how near its limits it ran (``limits_evidence``), its process counters
(``process_evidence``) and how its threads spent their time (``thread_evidence``), with the
off-CPU stacks' part of the thread pass (``stack_figures``). ``procfs_evidence`` runs the
thread pass once and returns all of them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from profiler.analyzers.series import procfs as procmod
from profiler.analyzers.stacks import waits
from profiler.analyzers.verdict.model import (
    LimitsEvidence,
    PoolMetrics,
    ProcessEvidence,
    StackEvidence,
    ThreadEvidence,
)
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


def cpu_list(cpus: tuple[int, ...] | list[int]) -> str:
    """``CPU 0``, ``CPUs 0-3``, ``CPUs 0,2``: as the kernel writes CPU lists."""
    runs: list[list[int]] = []
    for c in sorted(set(cpus)):
        if runs and runs[-1][1] == c - 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    text = ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
    return f"CPU{'s' if len(set(cpus)) > 1 else ''} {text}"


def _pinned(target: TargetInfo, host_cpus: int) -> tuple[tuple[int, ...], str | None]:
    """The CPUs the target may run on when fewer than the host's, and what pins it there: its
    cgroup's cpuset (docker/podman --cpuset-cpus, a Kubernetes static CPU policy), or its own
    affinity (taskset) inside a wider cpuset."""
    allowed = tuple(sorted(set(target.cpus_allowed or [])))
    if not allowed or len(allowed) >= (host_cpus or 1 << 30):
        return (), None
    cs = (target.cgroup or {}).get("cpuset_cpus")
    if isinstance(cs, list) and all(isinstance(c, int) for c in cs) and set(allowed) >= set(cs):
        return allowed, "cpuset"
    return allowed, "affinity"


def _available_cpu(target: TargetInfo, host_cpus: int) -> tuple[float | None, str]:
    cands: list[tuple[float, str]] = []
    if host_cpus:
        cands.append((float(host_cpus), f"{host_cpus} CPUs on the host"))
    pinned, by = _pinned(target, host_cpus)
    if pinned:
        cands.append((float(len(pinned)), f"pinned to {cpu_list(pinned)} by {by}"))
    q = _quota(target)
    if q is not None:
        cands.append((q, f"cgroup CPU quota {q:.2f} cores"))
    if not cands:
        return None, ""
    return min(cands, key=lambda c: c[0])


def _quota(target: TargetInfo) -> float | None:
    cg = target.cgroup or {}
    q, p = cg.get("cpu_quota_us"), cg.get("cpu_period_us")
    if isinstance(q, int | float) and isinstance(p, int | float) and q > 0 and p > 0:
        return q / p
    return None


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


@dataclass(frozen=True)
class ProcfsEvidence:
    """What the procfs samples say about one target: its kind and runtime, whether it exited, and one record
    per idea (the off-CPU stacks' part of the thread pass in ``stacks``)."""

    kind: str | None
    runtime: str | None
    exited: bool
    time: ThreadEvidence
    process: ProcessEvidence
    limits: LimitsEvidence
    stacks: StackEvidence


def procfs_evidence(target: TargetInfo, pd: procmod.ProcData | None, host_cpus: int,
                    stacks: dict[int, dict[tuple[str, ...], int]] | None = None,
                    disk_bps: float | None = None) -> ProcfsEvidence:
    """``stacks``: every off-CPU switch-out's stack per thread (analyzers.views.stacks), if captured;
    ``disk_bps``: all disks' bytes per second (the host's diskstats), for the target's share."""
    kind = target.kind or target_kind(target.comm, target.exe, target.cmdline)
    exited = target.exited is not None
    if pd is None:
        return ProcfsEvidence(kind, target.runtime, exited, ThreadEvidence(), ProcessEvidence(),
                              LimitsEvidence(**_manifest_limits(target, host_cpus)), StackEvidence())
    series = pd.threads_of(target.pid)
    runtime = target_runtime(target, kind, series, stacks)
    tts = thread_pass(series, pd.syscall_names, runtime, stacks)
    if any(e.get("what") == "target-exited" and e.get("pid") == target.pid for e in pd.events):
        exited = True
    window = pd.t1 - pd.t0 if pd.t0 is not None and pd.t1 is not None else 0.0
    span = window or max((t.span for t in tts), default=0.0)
    ps = pd.processes.get(target.pid)
    limits = limits_evidence(target, host_cpus, pd.cgroups.get(target.pid), ps.max("rss") if ps is not None else None)
    process = process_evidence(ps, pd.clk_tck, tts, span, limits.cpu_available, disk_bps)
    time = thread_evidence(tts, kind, window, span, limits.cpu_available,
                           pd.host.get("task_delayacct") == 1, max((t.samples for t in tts), default=0))
    return ProcfsEvidence(kind, runtime, exited, time, process, limits, stack_figures(tts, stacks))


def target_runtime(target: TargetInfo, kind: str | None, series: list[procmod.ThreadSeries],
                   stacks: dict[int, dict[tuple[str, ...], int]] | None) -> str | None:
    """The manifest's runtime, else what the off-CPU stacks say, else the thread names."""
    runtime = target.runtime
    if runtime is None and stacks:
        runtime = waits.runtime_from_stacks(stacks, [s.tid for s in series])
    if runtime is None:
        runtime = _runtime_from_threads([s.comm for s in series], kind, target.comm)
    return runtime


def thread_pass(series: list[procmod.ThreadSeries], names: dict[int, str], runtime: str | None,
                stacks: dict[int, dict[tuple[str, ...], int]] | None) -> list[ThreadTime]:
    """Every sampled thread's time split (analyzers.verdict.threads), roles assigned."""
    mixes = waits.stack_mixes(stacks, [s.tid for s in series], runtime) if stacks else {}
    tts = [thread_time(s, names, runtime, mixes.get(s.tid)) for s in series]
    tts = [t for t in tts if t.samples > 0]
    assign_roles(tts)
    return tts


def process_evidence(ps: procmod.Series | None, clk_tck: int, tts: list[ThreadTime], span: float,
                     cpu_available: float | None, disk_bps: float | None) -> ProcessEvidence:
    """CPU used (process counters, else its threads'), memory, faults, IO bytes, context switches."""
    mean, p95 = _process_cpu(ps, clk_tck) if ps is not None else (None, None)
    if mean is None and tts and span > 0:
        mean = sum(t.seconds["cpu"] for t in tts) / span
        p95 = mean
    util = mean / cpu_available if mean is not None and cpu_available else None
    if ps is None:
        return ProcessEvidence(cpu_cores=mean, cpu_cores_p95=p95, cpu_util=util)
    read_bps, write_bps = ps.rate("read_bytes"), ps.rate("write_bytes")
    share = None
    if disk_bps is not None and disk_bps > 0 and read_bps is not None and write_bps is not None:
        share = min(1.0, (read_bps + write_bps) / disk_bps)
    return ProcessEvidence(cpu_cores=mean, cpu_cores_p95=p95, cpu_util=util,
                           vcsw_rate=ps.rate("vcsw"), ivcsw_rate=ps.rate("ivcsw"), read_bps=read_bps,
                           write_bps=write_bps, disk_share=share, rss=ps.last("rss"), rss_max=ps.max("rss"),
                           swap=ps.last("swap"), majflt_rate=ps.rate("majflt"), minflt_rate=ps.rate("minflt"))


def _manifest_limits(target: TargetInfo, host_cpus: int) -> dict[str, Any]:
    """The limits the manifest names: cores it may use and why, each CPU limit, blkio throttles."""
    available, why = _available_cpu(target, host_cpus)
    allowed = len(target.cpus_allowed or [])
    pinned, by = _pinned(target, host_cpus)
    ci = target.container_info
    return {"cpu_available": available, "cpu_available_why": why, "host_cpus": host_cpus,
            "cpuset_cpus": allowed if allowed and allowed < (host_cpus or 1 << 30) else None,
            "quota_cores": _quota(target), "container": target.container,
            "pinned_to": pinned, "pinned_by": by,
            "container_name": f"{ci.runtime} container {ci.name or ci.id[:12]}" if ci is not None else None,
            "blkio_limits": dict((target.cgroup or {}).get("blkio_throttle") or {})}


def limits_evidence(target: TargetInfo, host_cpus: int, cs: procmod.Series | None,
                    rss_max: float | None) -> LimitsEvidence:
    """The cores the target may use and why; its cgroup's memory, CPU and blkio limits and use
    (``cs``: its cgroup series; without one, the manifest's memory limit against the peak RSS)."""
    base = _manifest_limits(target, host_cpus)
    cg_limit = (target.cgroup or {}).get("memory_limit_bytes")
    if cs is None:
        mem_limit = float(cg_limit) if isinstance(cg_limit, int | float) else None
        return LimitsEvidence(**base, mem_limit=mem_limit,
                              mem_usage_share=rss_max / mem_limit if mem_limit and rss_max else None)
    lim = cs.last("memory.limit")
    mem_limit = lim if lim is not None and lim < (1 << 60) else float(cg_limit) if isinstance(cg_limit, int | float) else None
    use = cs.max("memory.usage")
    per, thr = cs.delta("cpu.nr_periods"), cs.delta("cpu.nr_throttled")
    tt = cs.rate("cpu.throttled_time_ns")
    blkio = base["blkio_limits"]
    return LimitsEvidence(
        **base,
        mem_limit=mem_limit,
        mem_usage_share=use / mem_limit if mem_limit and use is not None else None,
        mem_failcnt_rate=cs.rate("memory.failcnt"),
        cg_majflt_rate=(cs.rate("memory.total_pgmajfault") if cs.get("memory.total_pgmajfault") is not None
                        else cs.rate("memory.pgmajfault")),
        cpu_throttled_share=thr / per if per and per > 0 and thr is not None else None,
        cpu_throttled_time_share=tt / 1e9 if tt is not None else None,
        blkio_limit_use=_limit_use(blkio, cs, "bps", "blkio.service_bytes"),
        blkio_iops_use=_limit_use(blkio, cs, "iops", "blkio.serviced"))


def thread_evidence(tts: list[ThreadTime], kind: str | None, window: float, span: float,
                    cpu_available: float | None, delayacct: bool, samples: int) -> ThreadEvidence:
    """Thread time by state over all threads and over the work path, demand, roles, pools."""
    hot = max(tts, key=lambda t: t.cpu_share) if tts else None
    want = max(tts, key=lambda t: (t.demand_share, t.cpu_share)) if tts else None
    demand_cores = sum(t.seconds["cpu"] + t.seconds["runnable"] for t in tts) / span if tts and span > 0 else None
    roles: dict[str, int] = {}
    for t in tts:
        roles[t.role] = roles.get(t.role, 0) + 1
    all_secs = sum_secs(tts)
    active = [t for t in tts if t.active]
    act_secs = sum_secs(active)
    work = all_secs["cpu"] + all_secs["runnable"]
    total = sum(all_secs.values())
    by_key: dict[str, float] = {}
    for t in tts:
        for k, v in t.idle_by_design.items():
            by_key[k] = by_key.get(k, 0.0) + v
    # what blocked threads sit in
    blocked: dict[str, float] = {}
    io_blocked: dict[str, float] = {}
    for t in active or tts:
        for k, v in t.blocked_syscalls.items():
            blocked[k] = blocked.get(k, 0) + v
    for t in active or tts:
        for k, n in t.io_calls.items():
            io_blocked[k] = io_blocked.get(k, 0) + n
    fut_by_pool: dict[str, float] = {}
    for t in active:
        fut_by_pool[t.pool] = fut_by_pool.get(t.pool, 0) + t.seconds["futex"]
    rates = [t.vcsw_rate for t in active if t.vcsw_rate is not None]
    wch: dict[str, float] = {}
    for t in active or tts:
        for k, v in t.wchans.items():
            wch[k] = wch.get(k, 0) + v
    blkio_share = None
    if delayacct and active:
        bk = sum(a.blkio_seconds or 0.0 for a in active)
        tot = sum(a.span for a in active)
        # Threads created before task_delayacct was turned on are not accounted (seen on 6.18):
        # a zero here is "unknown", not "no IO wait".
        blkio_share = bk / tot if tot > 0 and bk > 0 else None
    return ThreadEvidence(
        window=window, samples=samples, threads=len(tts), active_threads=len(active),
        max_thread_util=hot.cpu_share if hot else None, hottest_thread=f"{hot.comm} (tid {hot.tid})" if hot else None,
        runq_share=all_secs["runnable"] / work if work > 0 else None,
        demand_cores=demand_cores,
        demand_util=demand_cores / cpu_available if demand_cores is not None and cpu_available else None,
        max_thread_demand=want.demand_share if want else None,
        demand_thread=(f"{want.comm} (tid {want.tid}): running {_pct(want.cpu_share)}, "
                       f"waiting for a CPU {_pct(want.seconds['runnable'] / want.span if want.span else 0)}")
        if want else None,
        demand_thread_cpu=want.cpu_share if want else None,
        roles=roles,
        idle_by_design=[(k, v / total) for k, v in sorted(by_key.items(), key=lambda kv: (-kv[1], kv[0]))
                        if total > 0 and v > 0][:6],
        states=shares(all_secs), active_states=shares(act_secs),
        blocked_syscalls=top(blocked), io_syscalls=top(io_blocked), futex_threads=top(fut_by_pool, 3),
        busy_vcsw_rate=float(np.mean(rates)) if rates else None, wchans=top(wch),
        blkio_delay_share=blkio_share, pools=pool_evidence(tts, kind, span))


def pool_evidence(tts: list[ThreadTime], kind: str | None, span: float) -> list[PoolMetrics]:
    """Each thread pool's cores, size, demand and states, busiest first (knobs from knowledge)."""
    pools: dict[str, list[ThreadTime]] = {}
    for t in tts:
        pools.setdefault(t.pool, []).append(t)
    out = []
    for name, group in pools.items():
        secs = sum_secs(group)
        cores = secs["cpu"] / span if span > 0 else 0.0
        info = pool_info(kind, name)
        out.append(PoolMetrics(
            pool=name, threads=len(group), cpu_cores=cores, util=cores / len(group) if group else 0.0,
            demand=(secs["cpu"] + secs["runnable"]) / max(1e-9, sum(secs.values())),
            max_thread_util=max(g.cpu_share for g in group), states=shares(secs),
            role=info.role if info else None, knob=info.knob if info else None))
    out.sort(key=lambda p: (-p.cpu_cores, p.pool))
    return out


def stack_figures(tts: list[ThreadTime], stacks: dict[int, dict[tuple[str, ...], int]] | None) -> StackEvidence:
    """The off-CPU stacks' part of the thread pass: how much blocked time they decided, how much of
    the busy threads' futex time is lock acquires, and who waits in it."""
    all_secs = sum_secs(tts)
    active = [t for t in tts if t.active]
    act_futex = sum_secs(active)["futex"]
    blocked_time = sum(all_secs[k] for k in ("io", "aio", "futex", "idle", "sleep", "other"))
    who: dict[str, int] = {}
    for t in active:
        for k, n in t.futex_frames.items():
            who[k] = who.get(k, 0) + n
    return StackEvidence(
        stack_share=min(1.0, sum(t.from_stacks for t in tts) / blocked_time) if stacks and blocked_time > 0 else None,
        lock_acquire_share=sum(t.lock_seconds for t in active) / act_futex if act_futex > 0 and stacks else None,
        lock_wait_stacks=sorted(who.items(), key=lambda kv: (-kv[1], kv[0]))[:5])


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
