"""The metrics model (analyzers layer): the one object the verdict's rules read.

``Metrics`` holds the capture's figures: one ``TargetMetrics`` per target, the host's
``SystemMetrics``, the block IO's ``IOMetrics``, and which evidence sources were there.
analyzers.verdict.metrics computes it from the bundle views; docs/report-json.md lists the
fields as the JSON report shows them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from profiler.bundle import members


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
    source: str  # the member read: block.events.bin (block.trace.gz before v4) or block.hist.jsonl.gz
    total: int
    groups: list[IOGroup]
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    target_share: float | None
    top_issuers: list[tuple[str, float]]  # (comm, share of IOs)
    unpaired: int = 0

    @property
    def histograms(self) -> bool:
        """From the bcc backend's in-kernel histograms (percentiles interpolated), not per-IO events."""
        return self.source == members.BLOCK_HIST


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
    # the processes other than the targets that used the most CPU (comm, pid, cores over the window)
    neighbours: list[tuple[str, int, float]] = field(default_factory=list)


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
    demand_cores: float | None = None  # cores the threads wanted: (CPU + run-queue time) / window
    demand_util: float | None = None  # demand_cores / cpu_available
    max_thread_demand: float | None = None  # the work thread most often running or runnable: share of its span
    demand_thread: str | None = None
    demand_thread_cpu: float | None = None  # that thread's running share (cores it got)
    roles: dict[str, int] = field(default_factory=dict)  # threads by role: work, reaper, poller, parked, timer, idle
    idle_by_design: list[tuple[str, float]] = field(default_factory=list)  # (knowledge.waits key, share of thread time)
    stack_share: float | None = None  # share of blocked thread time whose class the off-CPU stacks decided
    lock_acquire_share: float | None = None  # of the busy threads' futex time: lock acquires, not condition waits
    lock_wait_stacks: list[tuple[str, int]] = field(default_factory=list)  # (who waits, switch-outs) of busy threads' futex-class stacks
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
    blkio_iops_use: float | None = None  # IOs/s done vs the tightest iops limit
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
    # what the target's status port and the Go runtime say (analyzers.verdict.server.ServerEvidence)
    server: Any = None


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
        out: dict[str, Any] = jsonable(asdict(self))
        return out


def jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if isinstance(obj, float | np.floating):
        f = float(obj)
        return None if not np.isfinite(f) else round(f, 6)
    if isinstance(obj, np.integer):
        return int(obj)
    return obj
