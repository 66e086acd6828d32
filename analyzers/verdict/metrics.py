"""One metrics object per target and per capture, from whatever the bundle holds (analyzers layer).

Inputs, each optional: proc.jsonl.gz (procfs sampler), stat.csv (perf stat -I), syscalls.csv
and syscalls-rate.csv, block.trace.gz (block IO), offcpu.perf.txt.gz (sched_switch stacks).
A missing input leaves its fields None and is listed in ``Metrics.missing``; the verdict turns
that into lower confidence, never into a crash.

Thread time model (per thread, over its sampled span): ``cpu`` share = delta(utime+stime)/span;
``runnable`` share = delta(schedstat run delay)/span; the rest of the span is split between
the wait classes of analyzers.procfs in proportion to how often the sampler saw the thread in
each. Summed over threads, this gives thread-seconds by class, which is what "threads blocked
on IO 60% of the time" means.
"""

from __future__ import annotations

import csv
import importlib
import io
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from profiler.analyzers.series import perfstat
from profiler.analyzers.series import procfs as procmod

from profiler.knowledge import (
    TIKV_POOLS,
    pool_info,
    runtime_from_threads,
    runtime_of,
    target_kind,
)

STATE_KEYS = ("cpu", "runnable", "io", "futex", "idle", "sleep", "other")
_CLASS_TO_KEY = {procmod.DISK: "io", procmod.FUTEX: "futex", procmod.IDLE: "idle", procmod.SLEEP: "sleep",
                 procmod.OTHER: "other"}
ACTIVE_CPU_SHARE = 0.02  # a thread is "busy" if it ran at least 2% of its span...
ACTIVE_DEMAND_SHARE = 0.2  # ...or wanted a CPU (ran or queued) at least 20% of it...
ACTIVE_IO_SHARE = 0.2  # ...or sat in IO at least 20% of it...
ACTIVE_SWITCH_RATE = 20.0  # ...or blocked and woke at least 20 times a second (a thread handing work on)


@dataclass
class ThreadTime:
    """One thread's time split (seconds) over its sampled span."""

    pid: int
    tid: int
    comm: str
    pool: str
    span: float
    seconds: dict[str, float]
    samples: int
    blocked_syscalls: dict[str, int]  # syscall name -> samples blocked in it (io and futex classes)
    wchans: dict[str, int]
    vcsw_rate: float | None = None  # voluntary context switches per second

    @property
    def cpu_share(self) -> float:
        return self.seconds["cpu"] / self.span if self.span > 0 else 0.0

    @property
    def active(self) -> bool:
        if self.span <= 0:
            return False
        # Working threads, and threads stuck on IO (D state is never an idle pool parked on a
        # condvar). Run-queue time alone does not count below 20%: on a busy host an idle worker
        # that wakes up every 500 ms to re-check its condition queues for a while each time.
        # A connection thread queued on a hot row uses almost no CPU yet wakes hundreds of
        # times a second; an idle worker re-checking its condition wakes a few times, and a
        # thread polling on a timer wakes often but waits on nothing (not futex, not IO).
        span = self.span
        return (self.seconds["cpu"] / span >= ACTIVE_CPU_SHARE
                or (self.seconds["cpu"] + self.seconds["runnable"]) / span >= ACTIVE_DEMAND_SHARE
                or self.seconds["io"] / span >= ACTIVE_IO_SHARE
                or ((self.vcsw_rate or 0.0) >= ACTIVE_SWITCH_RATE
                    and (self.seconds["futex"] + self.seconds["io"]) / span >= 0.3))


@dataclass
class PoolMetrics:
    pool: str
    threads: int
    cpu_cores: float  # cores the pool used on average
    util: float  # cpu_cores / threads: PingCAP's "pool CPU vs pool size" ratio
    demand: float  # (CPU + run-queue time) / thread time: how much the pool wants a CPU
    max_thread_util: float
    states: dict[str, float]  # share of the pool's thread time by class
    role: str | None = None
    knob: str | None = None


@dataclass
class DiskMetrics:
    name: str
    util: float  # share of the window with IO in flight (io_ticks)
    iops: float
    read_iops: float
    write_iops: float
    read_bps: float
    write_bps: float
    await_ms: float | None  # mean time per completed IO (read_ms + write_ms) / ios
    queue_depth: float  # time_in_queue / window


@dataclass
class IOGroup:
    dev: str
    op: str
    count: int
    iops: float
    bytes: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    target_share: float  # share of these IOs issued by the targets' threads


@dataclass
class IOMetrics:
    source: str  # "block.trace.gz" or the blockio analyzer's name
    total: int
    groups: list[IOGroup]
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    target_share: float | None
    top_issuers: list[tuple[str, float]]  # (comm, share of IOs)
    unpaired: int = 0


@dataclass
class SystemMetrics:
    ncpu: int
    cpu_util: float | None = None  # busy share of all CPUs (user+system+irq+softirq+nice+steal)
    iowait: float | None = None  # share of CPU time idle with IO outstanding
    steal: float | None = None
    procs_blocked: float | None = None  # mean tasks in D state
    procs_running: float | None = None  # mean runnable tasks
    psi: dict[str, float] = field(default_factory=dict)  # e.g. io_some: % of time over the window
    mem_total: float | None = None
    mem_available_share: float | None = None
    swap_used: float | None = None
    swap_io_rate: float | None = None  # pages swapped in+out per second
    majflt_rate: float | None = None  # system-wide major faults per second
    direct_reclaim_rate: float | None = None  # pages scanned by direct reclaim per second
    disks: list[DiskMetrics] = field(default_factory=list)


@dataclass
class TargetMetrics:
    pid: int
    comm: str
    kind: str | None
    runtime: str | None
    label: str
    window: float = 0.0
    samples: int = 0  # sampler ticks that saw this target
    threads: int = 0
    active_threads: int = 0
    cpu_cores: float | None = None
    cpu_cores_p95: float | None = None
    cpu_available: float | None = None
    cpu_available_why: str = ""
    cpu_util: float | None = None  # cores used / cores available
    max_thread_util: float | None = None
    hottest_thread: str | None = None
    runq_share: float | None = None  # runnable time / (cpu + runnable) of the target's threads
    states: dict[str, float] = field(default_factory=dict)  # share of all thread time
    active_states: dict[str, float] = field(default_factory=dict)  # share of active threads' time
    blocked_syscalls: list[tuple[str, float]] = field(default_factory=list)  # share of blocked samples (io+futex)
    io_syscalls: list[tuple[str, float]] = field(default_factory=list)  # share of IO-blocked samples
    futex_threads: list[tuple[str, float]] = field(default_factory=list)  # pools with the most futex time among active
    busy_vcsw_rate: float | None = None  # voluntary switches per second per busy thread
    wchans: list[tuple[str, float]] = field(default_factory=list)
    blkio_delay_share: float | None = None  # delayacct block IO wait / active thread time
    vcsw_rate: float | None = None
    ivcsw_rate: float | None = None
    read_bps: float | None = None
    write_bps: float | None = None
    disk_share: float | None = None  # target's bytes / all disks' bytes
    rss: float | None = None
    rss_max: float | None = None
    swap: float | None = None
    majflt_rate: float | None = None
    minflt_rate: float | None = None
    mem_limit: float | None = None
    mem_usage_share: float | None = None  # cgroup usage / limit
    mem_failcnt_rate: float | None = None
    cg_majflt_rate: float | None = None
    cpu_throttled_share: float | None = None  # throttled periods / periods
    cpu_throttled_time_share: float | None = None  # throttled seconds per second
    blkio_limits: dict[str, Any] = field(default_factory=dict)
    blkio_limit_use: float | None = None  # bytes/s done vs the tightest bps limit
    pools: list[PoolMetrics] = field(default_factory=list)
    syscall_top: list[tuple[str, float, float]] = field(default_factory=list)  # (name, count/s, share of syscall time)
    syscall_rate: float | None = None
    perf: dict[str, float] = field(default_factory=dict)  # task_clock_cpus, cs_rate, migrations_rate, majflt_rate
    offcpu_futex_stacks: list[tuple[str, int]] = field(default_factory=list)  # (top frames, count)
    # the bcc backend's in-kernel totals (futex.summary.json, futex.folded.gz, offcpu.summary.json)
    futex_wait_s: float | None = None  # thread-seconds waited in futex (timed-out waits included)
    futex_waits: int | None = None
    futex_wait_stacks: list[tuple[str, float]] = field(default_factory=list)  # (top frames, seconds waited)
    offcpu_states: dict[str, float] = field(default_factory=dict)  # runnable/sleep/disk/other thread-seconds
    exited: bool = False


@dataclass
class Metrics:
    window: float
    t0: float | None
    targets: list[TargetMetrics]
    system: SystemMetrics | None
    io: IOMetrics | None
    sources: dict[str, str]  # input -> "ok" | "missing" | "skipped: reason" | "failed: reason"
    missing: list[str]
    unsupported_counters: list[str]
    warnings: list[str]
    proc_hz: float | None = None
    delayacct: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = _jsonable(asdict(self))
        return out


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float | np.floating):
        f = float(obj)
        return None if not np.isfinite(f) else round(f, 6)
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


# --------------------------------------------------------------------------- thread time


def thread_time(s: procmod.ThreadSeries, names: dict[int, str]) -> ThreadTime:
    span = s.span
    secs = dict.fromkeys(STATE_KEYS, 0.0)
    n = len(s.t)
    blocked: dict[str, int] = {}
    wch: dict[str, int] = {}
    if n and span > 0:
        cpu = min(span, max(0.0, s.delta(s.cpu)))
        runq = max(0.0, s.delta(s.run_delay)) if not np.all(np.isnan(s.run_delay)) else 0.0
        runq = min(runq, span - cpu)
        secs["cpu"], secs["runnable"] = cpu, runq
        rest = span - cpu - runq
        counts = np.bincount(s.wait, minlength=6)
        off = counts[1:].sum()
        if off > 0:
            for cls, key in _CLASS_TO_KEY.items():
                secs[key] = rest * counts[cls] / off
        else:
            secs["cpu"] += rest * (cpu / (cpu + runq)) if cpu + runq > 0 else 0.0
            secs["runnable"] = span - secs["cpu"]
        for i in np.nonzero((s.wait == procmod.DISK) | (s.wait == procmod.FUTEX))[0]:
            nr = int(s.syscall[i])
            key = names.get(nr, f"syscall_{nr}") if nr >= 0 else ("(page fault / kernel)" if s.state[i] == ord("D") else "(none)")
            blocked[key] = blocked.get(key, 0) + 1
        for i in np.nonzero(s.wait != procmod.RUNNING)[0]:
            w = s.wchans[i]
            if w:
                wch[w] = wch.get(w, 0) + 1
    vc = s.vcsw[~np.isnan(s.vcsw)]
    vts = s.t[~np.isnan(s.vcsw)]
    rate = float((vc[-1] - vc[0]) / (vts[-1] - vts[0])) if len(vc) >= 2 and vts[-1] > vts[0] else None
    return ThreadTime(pid=s.pid, tid=s.tid, comm=s.comm, pool=s.pool, span=span, seconds=secs, samples=n,
                      blocked_syscalls=blocked, wchans=wch, vcsw_rate=rate)


def _shares(secs: dict[str, float]) -> dict[str, float]:
    tot = sum(secs.values())
    return {k: (v / tot if tot > 0 else 0.0) for k, v in secs.items()}


def _sum_secs(tts: list[ThreadTime]) -> dict[str, float]:
    out = dict.fromkeys(STATE_KEYS, 0.0)
    for tt in tts:
        for k, v in tt.seconds.items():
            out[k] += v
    return out


def _top(d: dict[str, float], n: int = 5) -> list[tuple[str, float]]:
    tot = sum(d.values())
    if tot <= 0:
        return []
    return [(k, v / tot) for k, v in sorted(d.items(), key=lambda kv: (-kv[1], kv[0]))[:n]]


# --------------------------------------------------------------------------- per target


def _available_cpu(target: Any, host_cpus: int) -> tuple[float | None, str]:
    cands: list[tuple[float, str]] = []
    if host_cpus:
        cands.append((float(host_cpus), f"{host_cpus} CPUs on the host"))
    allowed = getattr(target, "cpus_allowed", None) or []
    if allowed and len(allowed) < (host_cpus or 1 << 30):
        cands.append((float(len(allowed)), f"cpuset/affinity allows {len(allowed)} CPUs"))
    cg = getattr(target, "cgroup", None) or {}
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


def target_metrics(target: Any, pd: procmod.ProcData | None, host_cpus: int) -> TargetMetrics:
    kind = getattr(target, "kind", None) or target_kind(target.comm, target.exe, target.cmdline)
    tm = TargetMetrics(pid=target.pid, comm=target.comm, kind=kind, runtime=getattr(target, "runtime", None),
                       label=f"{target.comm} (pid {target.pid})", exited=getattr(target, "exited", None) is not None)
    tm.cpu_available, tm.cpu_available_why = _available_cpu(target, host_cpus)
    tm.blkio_limits = dict((getattr(target, "cgroup", None) or {}).get("blkio_throttle") or {})
    cg_limit = (getattr(target, "cgroup", None) or {}).get("memory_limit_bytes")
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
    all_secs = _sum_secs(tts)
    tm.states = _shares(all_secs)
    active = [t for t in tts if t.active]
    tm.active_threads = len(active)
    act_secs = _sum_secs(active)
    tm.active_states = _shares(act_secs)
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
    tm.blocked_syscalls = _top(blocked)
    tm.io_syscalls = _top(io_blocked)
    fut_by_pool: dict[str, float] = {}
    for t in active:
        fut_by_pool[t.pool] = fut_by_pool.get(t.pool, 0) + t.seconds["futex"]
    tm.futex_threads = _top(fut_by_pool, 3)
    rates = [t.vcsw_rate for t in active if t.vcsw_rate is not None]
    if rates:
        tm.busy_vcsw_rate = float(np.mean(rates))
    wch: dict[str, float] = {}
    for t in active or tts:
        for k, v in t.wchans.items():
            wch[k] = wch.get(k, 0) + v
    tm.wchans = _top(wch)
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
        secs = _sum_secs(group)
        cores = secs["cpu"] / window if window > 0 else 0.0
        info = pool_info(kind, name)
        tm.pools.append(PoolMetrics(
            pool=name, threads=len(group), cpu_cores=cores, util=cores / len(group) if group else 0.0,
            demand=(secs["cpu"] + secs["runnable"]) / max(1e-9, sum(secs.values())),
            max_thread_util=max(g.cpu_share for g in group), states=_shares(secs),
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


# --------------------------------------------------------------------------- system


def system_metrics(pd: procmod.ProcData | None, host_cpus: int) -> SystemMetrics | None:
    if pd is None or pd.system is None or len(pd.system.t) < 2:
        return None
    s = pd.system
    span = float(s.t[-1] - s.t[0])
    ncpu = int(s.last("ncpu") or host_cpus or 0)
    sm = SystemMetrics(ncpu=ncpu)
    deltas = {k: s.delta(f"cpu.{k}") or 0.0 for k in
              ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")}
    tot = sum(deltas.values())
    if tot > 0:
        busy = tot - deltas["idle"] - deltas["iowait"]
        sm.cpu_util, sm.iowait, sm.steal = busy / tot, deltas["iowait"] / tot, deltas["steal"] / tot
    sm.procs_blocked, sm.procs_running = s.mean("procs_blocked"), s.mean("procs_running")
    for res in ("cpu", "io", "memory"):
        for kind_ in ("some", "full"):
            d = s.delta(f"psi.{res}.{kind_}_total")
            if d is not None and span > 0:
                sm.psi[f"{res}_{kind_}"] = 100.0 * d / 1e6 / span
    sm.mem_total = s.last("mem.total")
    av = s.mean("mem.available")
    if av is not None and sm.mem_total:
        sm.mem_available_share = av / sm.mem_total
    sm.swap_used = s.last("mem.swap_used")
    si, so = s.rate("vm.pswpin"), s.rate("vm.pswpout")
    if si is not None or so is not None:
        sm.swap_io_rate = (si or 0.0) + (so or 0.0)
    sm.majflt_rate = s.rate("vm.pgmajfault")
    sm.direct_reclaim_rate = s.rate("vm.pgscan_direct")
    disks = sorted({k.split(".")[1] for k in s.values if k.startswith("disks.")})
    for d in disks:
        def r(f: str, d: str = d) -> float:
            return s.rate(f"disks.{d}.{f}") or 0.0
        ios = r("reads") + r("writes")
        waited = r("read_ms") + r("write_ms")
        sm.disks.append(DiskMetrics(
            name=d, util=min(1.0, r("io_ticks_ms") / 1000.0), iops=ios, read_iops=r("reads"), write_iops=r("writes"),
            read_bps=r("read_sectors") * 512, write_bps=r("write_sectors") * 512,
            await_ms=(waited / ios) if ios > 0 else None, queue_depth=r("time_in_queue_ms") / 1000.0))
    sm.disks.sort(key=lambda x: (-x.iops, x.name))
    return sm


# --------------------------------------------------------------------------- IO (block trace)


@dataclass
class IOEvents:
    """The per-IO columns the verdict and the timeline read (a view of analyzers.iostats.IoAnalysis)."""

    t: np.ndarray  # issue time (monotonic s)
    latency: np.ndarray  # seconds
    dev: np.ndarray  # "254:0" per IO
    op: np.ndarray  # read | write | flush | discard | other
    nbytes: np.ndarray
    tid: np.ndarray
    comm: np.ndarray
    unpaired: int = 0


def io_events_from(res: Any) -> IOEvents | None:
    """The view of the IO engineer's analysis (analyzers.iostats.IoAnalysis), or None."""
    if res is None:
        return None
    counts = getattr(getattr(res, "block", None), "counts", None)
    unpaired = int(getattr(counts, "unpaired_issues", 0) + getattr(counts, "unpaired_completions", 0)) if counts else 0
    return IOEvents(t=np.asarray(res.issue, dtype=float), latency=np.asarray(res.latency, dtype=float),
                    dev=np.asarray(res.dev, dtype=object), op=np.asarray(res.op, dtype=object),
                    nbytes=np.asarray(res.bytes), tid=np.asarray(res.tid), comm=np.asarray(res.comm, dtype=object),
                    unpaired=unpaired)


def load_io(bundle: Any) -> tuple[Any, IOEvents | None]:
    """The bundle's block IO, paired by analyzers.blockio/iostats: (IoAnalysis, its view) or (None, None)."""
    if not bundle.has("block.trace.gz"):
        return None, None
    iostats = importlib.import_module("profiler.analyzers.io.stats")
    res = iostats.io_from_bundle(bundle)
    return res, io_events_from(res)


def io_metrics(ev: IOEvents | None, target_tids: set[int], window: float) -> IOMetrics | None:
    if ev is None or len(ev.latency) == 0:
        return None
    lat_ms = ev.latency * 1e3
    span = window or (float(ev.t.max() - ev.t.min()) if len(ev.t) > 1 else 1.0)
    mine = np.isin(ev.tid, list(target_tids)) if target_tids else np.zeros(len(ev.tid), bool)
    groups: list[IOGroup] = []
    keys = sorted(set(zip(ev.dev.tolist(), ev.op.tolist(), strict=True)))
    for dev, op in keys:
        m = (ev.dev == dev) & (ev.op == op)
        if not m.any():
            continue
        la = lat_ms[m]
        groups.append(IOGroup(dev=dev, op=op, count=int(m.sum()), iops=float(m.sum()) / span,
                              bytes=int(ev.nbytes[m].sum()), p50_ms=float(np.percentile(la, 50)),
                              p95_ms=float(np.percentile(la, 95)), p99_ms=float(np.percentile(la, 99)),
                              max_ms=float(la.max()), target_share=float(mine[m].mean())))
    groups.sort(key=lambda g: (-g.count, g.dev, g.op))
    names, counts = np.unique(ev.comm.astype(str), return_counts=True)
    issuers = {str(n): float(c) for n, c in zip(names, counts, strict=True)}
    return IOMetrics(source="block.trace.gz", total=len(lat_ms), groups=groups, p50_ms=float(np.percentile(lat_ms, 50)),
                     p99_ms=float(np.percentile(lat_ms, 99)), max_ms=float(lat_ms.max()),
                     target_share=float(mine.mean()) if target_tids else None,
                     top_issuers=_top(issuers), unpaired=ev.unpaired)


# --------------------------------------------------------------------------- syscalls and perf stat


def syscall_metrics(bundle: Any, tm: TargetMetrics, tids: set[int], window: float) -> None:
    if bundle.has("syscalls.csv"):
        counts: dict[str, float] = {}
        times: dict[str, float] = {}
        text = "\n".join(bundle.iter_lines("syscalls.csv"))
        for row in csv.DictReader(io.StringIO(text)):
            try:
                tid = int(row.get("tid") or 0)
            except ValueError:
                continue
            if tids and tid not in tids:
                continue
            name = row.get("syscall") or "?"
            try:
                counts[name] = counts.get(name, 0.0) + float(row.get("count") or 0)
                times[name] = times.get(name, 0.0) + float(row.get("total_ns") or 0)
            except ValueError:
                continue
        tot_t = sum(times.values())
        span = window or 1.0
        # A duty-cycled trace (the default) covers only its windows: rates are per traced second.
        rec = bundle.manifest.collector("syscalls")
        if rec is not None and rec.stats.get("sampled") and rec.stats.get("sampled_seconds"):
            span = float(rec.stats["sampled_seconds"]) or span
        top = sorted(counts, key=lambda k: (-(times.get(k, 0.0)), -counts[k], k))[:8]
        tm.syscall_top = [(k, counts[k] / span, (times.get(k, 0.0) / tot_t) if tot_t else 0.0) for k in top]
        if counts:
            tm.syscall_rate = sum(counts.values()) / span


def perf_metrics(bundle: Any, tm: TargetMetrics, single_target: bool) -> list[str]:
    """perf stat figures (stat.csv is for all targets together: attributed only when there is one)."""
    unsupported: list[str] = []
    if bundle.has("stat.csv"):
        ps = perfstat.parse(bundle.iter_lines("stat.csv"))
        unsupported = ps.unsupported
        if single_target:
            span = ps.span()
            tc = ps.total("task-clock")
            if tc is not None and span > 0:
                tm.perf["task_clock_cpus"] = tc / 1000.0 / span
            for ev, key in (("context-switches", "cs_rate"), ("cpu-migrations", "migrations_rate"),
                            ("page-faults", "faults_rate"), ("major-faults", "majflt_rate")):
                r = ps.rate(ev)
                if r is not None:
                    tm.perf[key] = r
    if bundle.has("syscalls-rate.csv") and single_target:
        ps = perfstat.parse(bundle.iter_lines("syscalls-rate.csv"))
        for ev in ps.events:
            if "sys_enter" in ev:
                tm.syscall_rate = ps.rate(ev)
    return unsupported


_HEADER_TID = re.compile(r"\s(\d+)(?:/(\d+))?\s+(?:\[\d+\]\s+)?\d+\.\d+:")


def _futex_blocks(lines: Any) -> Any:
    """Cut perf script text into samples and keep those whose stack passes through futex code.

    A plain substring test per sample is far cheaper than parsing every frame of every context
    switch; only the few futex samples go through the full parser.
    """
    block: list[str] = []
    hit = False
    for line in lines:
        if line.strip():
            block.append(line)
            if not hit and "futex" in line and line.startswith(("\t", " ")):
                hit = True
            continue
        if block and hit:
            yield block
        block, hit = [], False
    if block and hit:
        yield block


def futex_stacks_by_tid(bundle: Any) -> dict[int, dict[tuple[str, ...], int]]:
    """One pass over offcpu.perf.txt.gz: per thread, how often each futex stack switched out.

    Identical stacks are only counted here (a lock storm is millions of the same switch); they are
    parsed once, per target, in top_futex_stacks.
    """
    out: dict[int, dict[tuple[str, ...], int]] = {}
    if not bundle.has("offcpu.perf.txt.gz"):
        return out
    for block in _futex_blocks(bundle.iter_lines("offcpu.perf.txt.gz")):
        m = _HEADER_TID.search(block[0])
        tid = int(m.group(2) or m.group(1)) if m is not None else -1
        stacks = out.setdefault(tid, {})
        stack = tuple(block[1:])
        stacks[stack] = stacks.get(stack, 0) + 1
    return out


def top_futex_stacks(by_tid: dict[int, dict[tuple[str, ...], int]], tids: set[int],
                     limit: int = 5) -> list[tuple[str, int]]:
    """Top user frames of the given threads switching out inside futex (all threads if tids is empty)."""
    if not by_tid:
        return []
    try:
        ps = importlib.import_module("profiler.inputs.perfscript")
    except ImportError:
        return []
    stacks: dict[tuple[str, ...], int] = {}
    for tid, per in by_tid.items():
        if tids and tid != -1 and tid not in tids:
            continue
        for stack, n in per.items():
            stacks[stack] = stacks.get(stack, 0) + n
    counts: dict[str, int] = {}
    for frame_lines, n in stacks.items():
        frames = [f for f in (ps.parse_frame(x) for x in frame_lines) if f is not None]
        user = [f.symbol for f in frames if not (f.dso or "").startswith("[kernel") and f.symbol and f.symbol != "[unknown]"]
        user = [sym for sym in user if not sym.startswith(("__GI_", "syscall", "__lll_", "futex", "pthread_cond",
                                                           "__pthread", "___pthread", "__futex"))] or user
        key = " <- ".join(user[:3]) or "(kernel only)"
        counts[key] = counts.get(key, 0) + n
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]


def offcpu_futex_stacks(bundle: Any, tids: set[int], limit: int = 5) -> list[tuple[str, int]]:
    """Top user frames of the targets' threads switching out inside futex (sched_switch stacks)."""
    return top_futex_stacks(futex_stacks_by_tid(bundle), tids, limit)


# --------------------------------------------------------------------------- the bcc backend's aggregates


def io_metrics_from_hist(bundle: Any, target_tids: set[int], window: float) -> IOMetrics | None:
    """IOMetrics from the bcc backend's in-kernel histograms (block.hist.jsonl.gz), ops named as in block.trace.gz."""
    bcc_hist = importlib.import_module("profiler.analyzers.io.histograms")
    h = bcc_hist.read_block_hist(bundle)
    if h is None:
        return None
    d = bcc_hist.io_summary(h, target_tids or None, window or None)
    if not d["total"]:
        return None
    groups = [IOGroup(**{**g, "op": bcc_hist.OP_NAMES.get(g["op"], g["op"])}) for g in d["groups"]]
    return IOMetrics(source=d["source"], total=d["total"], groups=groups, p50_ms=d["p50_ms"], p99_ms=d["p99_ms"],
                     max_ms=d["max_ms"], target_share=d["target_share"], top_issuers=list(d["top_issuers"]),
                     unpaired=d["unpaired"])


def _read_json(bundle: Any, name: str) -> Any:
    return json.loads("\n".join(bundle.iter_lines(name)))


# libc/runtime frames that say "a futex wait" and not which lock: skipped when naming a stack
_FUTEX_PLUMBING = ("__GI_", "syscall", "__lll_", "futex", "pthread_cond", "__pthread", "___pthread", "__futex",
                   "[unknown]", "[lost user stack]")


def _stack_key(frames: list[str]) -> str:
    """The innermost three meaningful frames, innermost first (as offcpu_futex_stacks names them)."""
    inner = list(reversed(frames))
    user = [f for f in inner if not f.startswith(_FUTEX_PLUMBING)] or [f for f in inner if f] or []
    return " <- ".join(user[:3]) or "(no user stack)"


def bcc_lock_metrics(bundle: Any, tm: TargetMetrics, pid: int, tids: set[int], comms: set[str] | None,
                     limit: int = 5) -> None:
    """Futex waits and off-CPU state totals of one target from the bcc backend's summaries.

    The summaries list threads by tid (per-target totals are exact); the folded stacks carry
    only the thread's comm, so with several targets a stack counts for the target whose
    threads have that comm (``comms``; None: the only target, every stack is its own).
    """
    def mine(th: dict[str, Any]) -> bool:
        return int(th.get("pid", -1)) == pid or int(th.get("tid", -1)) in tids

    if bundle.has("futex.summary.json"):
        fs = _read_json(bundle, "futex.summary.json")
        ths = [th for th in fs.get("threads") or [] if mine(th)]
        if ths:
            tm.futex_wait_s = sum(float(th.get("wait_ns", 0)) for th in ths) / 1e9
            tm.futex_waits = sum(int(th.get("waits", 0)) for th in ths)
        elif comms is None:
            tm.futex_wait_s = float(fs.get("wait_ns", 0)) / 1e9
            tm.futex_waits = int(fs.get("waits", 0))
    if bundle.has("futex.folded.gz"):
        folded = importlib.import_module("profiler.inputs.folded")
        by_key: dict[str, float] = {}
        for stack, ns in folded.parse_folded(bundle.iter_lines("futex.folded.gz")).items():
            frames = stack.split(";")
            if comms is not None and frames[0] not in comms:
                continue
            key = _stack_key(frames[1:])
            by_key[key] = by_key.get(key, 0.0) + ns / 1e9
        tm.futex_wait_stacks = sorted(by_key.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
    if bundle.has("offcpu.summary.json"):
        os_ = _read_json(bundle, "offcpu.summary.json")
        scale = 1e9 if os_.get("unit", "ns") == "ns" else 1.0
        states = ("runnable", "sleep", "disk", "other")
        ths = [th for th in os_.get("threads") or [] if mine(th)]
        if ths:
            tm.offcpu_states = {k: sum(float(th.get(k, 0)) for th in ths) / scale for k in states}
        elif comms is None and isinstance(os_.get("by_state"), dict):
            tm.offcpu_states = {k: float(os_["by_state"].get(k, 0)) / scale for k in states}


# --------------------------------------------------------------------------- the whole capture


def _source_status(bundle: Any, collector: str, files: tuple[str, ...]) -> str:
    rec = bundle.manifest.collector(collector)
    if rec is not None and rec.status in ("skipped", "failed"):
        return f"{rec.status}: {rec.reason or 'no reason given'}"
    if any(bundle.has(f) for f in files):
        if rec is not None and rec.status == "partial":
            return f"partial: {rec.reason or ''}".rstrip(": ")
        return "ok"
    if rec is not None and rec.files:
        # e.g. the bcc backend's in-kernel histograms: captured, but not the files the verdict reads
        return f"other format: {rec.backend} wrote {', '.join(rec.files)} (not read by the verdict yet)"
    return "missing"


SOURCES = {
    "procfs": ("procfs", ("proc.jsonl.gz",)),
    "perf-stat": ("perf-stat", ("stat.csv",)),
    "cpu-stacks": ("cpu-stacks", ("cpu.perf.txt.gz",)),
    "offcpu": ("offcpu-stacks", ("offcpu.perf.txt.gz", "offcpu.folded.gz")),
    "block-io": ("block-io", ("block.trace.gz", "block.hist.jsonl.gz")),
    "syscalls": ("syscalls", ("syscalls.csv", "syscalls-rate.csv")),
}


def compute(bundle: Any, pd: procmod.ProcData | None = None, io_events: IOEvents | None = None) -> Metrics:
    m = bundle.manifest
    if pd is None:
        pd = procmod.load(bundle)
    host_cpus = int(m.host.cpus or (pd.host.get("ncpu") if pd else 0) or 0)
    sources = {name: _source_status(bundle, col, files) for name, (col, files) in SOURCES.items()}
    missing = [k for k, v in sources.items() if v != "ok" and not v.startswith("partial")]
    warnings: list[str] = []
    if pd is not None and pd.bad_lines:
        warnings.append(f"proc.jsonl.gz: {pd.bad_lines} malformed lines skipped")
    targets = []
    single = len(m.targets) == 1
    unsupported: list[str] = []
    all_tids: set[int] = set()
    futex_by_tid = futex_stacks_by_tid(bundle)  # read once for every target
    for t in m.targets:
        tm = target_metrics(t, pd, host_cpus)
        tids = {s.tid for s in pd.threads_of(t.pid)} if pd is not None else set()
        tids |= {th.tid for th in t.threads}
        all_tids |= tids
        syscall_metrics(bundle, tm, tids, tm.window)
        unsupported = perf_metrics(bundle, tm, single) or unsupported
        tm.offcpu_futex_stacks = top_futex_stacks(futex_by_tid, tids)
        comms = {s.comm for s in pd.threads_of(t.pid)} if pd is not None else set()
        comms |= {th.comm for th in t.threads if getattr(th, "comm", None)}
        try:
            bcc_lock_metrics(bundle, tm, t.pid, tids, comms if not single else None)
        except Exception as exc:  # noqa: BLE001 - a broken summary lowers confidence, never crashes
            warnings.append(f"futex/off-CPU summaries could not be read: {type(exc).__name__}: {exc}")
        targets.append(tm)
    window = max((t.window for t in targets), default=0.0)
    if not window and m.ended and m.clock.monotonic_start:
        window = m.ended - m.clock.monotonic_start
    sysm = system_metrics(pd, host_cpus)
    if io_events is None and bundle.has("block.trace.gz"):
        try:
            io_events = load_io(bundle)[1]
        except Exception as exc:  # noqa: BLE001 - a broken trace lowers confidence, never crashes
            warnings.append(f"block.trace.gz could not be read: {type(exc).__name__}: {exc}")
    iom = io_metrics(io_events, all_tids, window)
    if iom is None and io_events is None and bundle.has("block.hist.jsonl.gz"):
        try:
            iom = io_metrics_from_hist(bundle, all_tids, window)
        except Exception as exc:  # noqa: BLE001 - broken histograms lower confidence, never crash
            warnings.append(f"block.hist.jsonl.gz could not be read: {type(exc).__name__}: {exc}")
    if iom is not None and sysm is not None:
        pass
    # the targets' share of disk bytes (procfs IO counters vs diskstats)
    if sysm is not None and sysm.disks:
        disk_bps = sum(d.read_bps + d.write_bps for d in sysm.disks)
        for tm in targets:
            if disk_bps > 0 and tm.read_bps is not None and tm.write_bps is not None:
                tm.disk_share = min(1.0, (tm.read_bps + tm.write_bps) / disk_bps)
    warnings.extend(bundle.warnings)
    return Metrics(window=window, t0=pd.t0 if pd else None, targets=targets, system=sysm, io=iom, sources=sources,
                   missing=missing, unsupported_counters=unsupported, warnings=warnings,
                   proc_hz=float(pd.host["hz"]) if pd and pd.host.get("hz") else None,
                   delayacct=(pd.host.get("task_delayacct") == 1) if pd and pd.host else None)


__all__ = ["Metrics", "TargetMetrics", "PoolMetrics", "SystemMetrics", "IOMetrics", "compute", "TIKV_POOLS",
           "runtime_of"]
