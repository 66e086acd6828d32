"""The evidence the verdict's rules read (analyzers layer): one record per source.

Each record is computed by one pure function from one source of the bundle and never changed
afterwards (``frozen``):

- per target (:class:`TargetMetrics` holds them side by side):
  - :class:`ThreadEvidence` (``time``): how the target's threads spent their time (the procfs sampler's
    per-thread series, refined by the off-CPU stacks: analyzers.verdict.threads, target.py);
  - :class:`ProcessEvidence`: the process's own counters (CPU used, memory, faults, IO bytes,
    context switches);
  - :class:`LimitsEvidence`: what the target may use (host CPUs, cpuset, cgroup quota, memory
    and blkio limits) and how near them it ran;
  - :class:`StackEvidence`: what the off-CPU stacks and the bcc backend's wait totals say
    about its waits (locks.py);
  - :class:`CounterEvidence`: syscalls and perf stat (syscalls.py, counters.py);
  - ``server``: what its status port and the Go runtime say (server.py, ``ServerEvidence``);
- per capture: the host (:class:`SystemMetrics`, system.py) and block IO (:class:`IOMetrics`,
  io.py).

analyzers.verdict.metrics puts them together into :class:`Metrics`. The JSON report shows a
target's records as one flat ``metrics`` object (:meth:`TargetMetrics.to_dict`;
docs/report-json.md lists the fields).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

from profiler.bundle import members


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class ThreadEvidence:
    """How the target's threads spent their sampled time (procfs sampler, off-CPU stacks)."""

    window: float = 0.0
    samples: int = 0  # sampler ticks that saw this target
    threads: int = 0
    active_threads: int = 0
    max_thread_util: float | None = None
    hottest_thread: str | None = None
    runq_share: float | None = None  # runnable time / (cpu + runnable) of the target's threads
    demand_cores: float | None = None  # cores the threads wanted: (CPU + run-queue time) / window
    demand_util: float | None = None  # demand_cores / the cores the target may use (LimitsEvidence)
    max_thread_demand: float | None = None  # the work thread most often running or runnable: share of its span
    demand_thread: str | None = None
    demand_thread_cpu: float | None = None  # that thread's running share (cores it got)
    roles: dict[str, int] = field(default_factory=dict)  # threads by role: work, reaper, poller, parked, timer, idle
    idle_by_design: list[tuple[str, float]] = field(default_factory=list)  # (knowledge.waits key, share of thread time)
    states: dict[str, float] = field(default_factory=dict)  # share of all thread time
    active_states: dict[str, float] = field(default_factory=dict)  # share of active threads' time
    blocked_syscalls: list[tuple[str, float]] = field(default_factory=list)  # share of blocked samples (io+futex)
    io_syscalls: list[tuple[str, float]] = field(default_factory=list)  # share of IO-blocked samples
    futex_threads: list[tuple[str, float]] = field(default_factory=list)  # pools with the most futex time among active
    busy_vcsw_rate: float | None = None  # voluntary switches per second per busy thread
    wchans: list[tuple[str, float]] = field(default_factory=list)
    blkio_delay_share: float | None = None  # delayacct block IO wait / active thread time
    pools: list[PoolMetrics] = field(default_factory=list)

    @property
    def busy(self) -> float:
        """How much of their time the work threads want a CPU (running or runnable)."""
        st = self.active_states
        return (st.get("cpu", 0.0) + st.get("runnable", 0.0)) if st else 0.0

    @property
    def busy_when_working(self) -> float:
        """How much of the time they are not idle by design (parked, polling, sleeping) the work
        threads want a CPU: near 1 for a server whose threads run or queue whenever they have
        work, low for threads that block on locks or IO."""
        st = self.active_states
        if not st:
            return 0.0
        working = 1.0 - st.get("idle", 0.0) - st.get("sleep", 0.0)
        return self.busy / working if working > 0 else 0.0


@dataclass(frozen=True)
class ProcessEvidence:
    """The process's own counters (procfs sampler)."""

    cpu_cores: float | None = None
    cpu_cores_p95: float | None = None
    cpu_util: float | None = None  # cores used / the cores the target may use (LimitsEvidence)
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


@dataclass(frozen=True)
class LimitsEvidence:
    """What the target may use and how near those limits it ran (manifest, cgroup series).

    ``cpu_available`` is the least of the host's CPUs, the cpuset/affinity and the cgroup CPU
    quota; ``cpu_available_why`` names which. ``cpuset_cpus``, ``quota_cores`` and ``container``
    are each limit on its own (None: not set or not known), for the CPU rule's container-limit
    sub-cause (docs/verdict.md#container-limits): they are filled from the manifest's target
    (its cpus_allowed, cgroup and container fields)."""

    cpu_available: float | None = None
    cpu_available_why: str = ""
    host_cpus: int = 0
    cpuset_cpus: int | None = None  # CPUs the cpuset/affinity allows, when fewer than the host's
    quota_cores: float | None = None  # the cgroup CPU quota in cores (quota / period), when set
    container: bool = False  # in another mount namespace than the profiler (manifest)
    pinned_to: tuple[int, ...] = ()  # those CPUs, when fewer than the host's
    pinned_by: str | None = None  # "cpuset" (its cgroup's) or "affinity" (taskset, sched_setaffinity)
    container_name: str | None = None  # "tikv1 (docker)": the manifest's container_info, when it runs in one
    mem_limit: float | None = None
    mem_usage_share: float | None = None  # cgroup usage / limit
    mem_failcnt_rate: float | None = None
    cg_majflt_rate: float | None = None
    cpu_throttled_share: float | None = None  # throttled periods / periods
    cpu_throttled_time_share: float | None = None  # throttled seconds per second
    blkio_limits: dict[str, Any] = field(default_factory=dict)
    blkio_limit_use: float | None = None  # bytes/s done vs the tightest bps limit
    blkio_iops_use: float | None = None  # IOs/s done vs the tightest iops limit


@dataclass(frozen=True)
class StackEvidence:
    """What the off-CPU stacks (perf) and the in-kernel wait totals (bcc) say about the waits."""

    stack_share: float | None = None  # share of blocked thread time whose class the off-CPU stacks decided
    lock_acquire_share: float | None = None  # of the busy threads' futex time: lock acquires, not condition waits
    lock_wait_stacks: list[tuple[str, int]] = field(default_factory=list)  # (who waits, switch-outs) of busy threads' futex-class stacks
    offcpu_futex_stacks: list[tuple[str, int]] = field(default_factory=list)  # (top frames, count)
    # the bcc backend's in-kernel totals (futex.summary.json, futex.folded.gz, offcpu.summary.json)
    futex_wait_s: float | None = None  # thread-seconds waited in futex (timed-out waits included)
    futex_waits: int | None = None
    futex_wait_stacks: list[tuple[str, float]] = field(default_factory=list)  # (top frames, seconds waited)
    offcpu_states: dict[str, float] = field(default_factory=dict)  # runnable/sleep/disk/other thread-seconds


@dataclass(frozen=True)
class CounterEvidence:
    """Syscalls (syscalls.csv) and perf stat counters (stat.csv) of the target."""

    syscall_top: list[tuple[str, float, float]] = field(default_factory=list)  # (name, count/s, share of syscall time)
    syscall_rate: float | None = None
    perf: dict[str, float] = field(default_factory=dict)  # task_clock_cpus, cs_rate, migrations_rate, majflt_rate


# Fields of LimitsEvidence the JSON report does not show (yet): the single limits behind cpu_available.
_UNSHOWN = frozenset({"host_cpus", "cpuset_cpus", "quota_cores", "container", "pinned_to", "pinned_by",
                      "container_name"})


@dataclass(frozen=True)
class TargetMetrics:
    """One target: who it is, and one evidence record per source."""

    pid: int
    comm: str
    kind: str | None
    runtime: str | None
    label: str
    exited: bool = False
    time: ThreadEvidence = field(default_factory=ThreadEvidence)
    process: ProcessEvidence = field(default_factory=ProcessEvidence)
    limits: LimitsEvidence = field(default_factory=LimitsEvidence)
    stacks: StackEvidence = field(default_factory=StackEvidence)
    counters: CounterEvidence = field(default_factory=CounterEvidence)
    # what the target's status port and the Go runtime say (analyzers.verdict.server.ServerEvidence)
    server: Any = None

    def to_dict(self) -> dict[str, Any]:
        """The records as one flat object (the JSON report's ``targets[].metrics``)."""
        out: dict[str, Any] = {"pid": self.pid, "comm": self.comm, "kind": self.kind, "runtime": self.runtime,
                               "label": self.label, "exited": self.exited}
        for rec in (self.time, self.process, self.limits, self.stacks, self.counters):
            for f in fields(rec):
                if f.name not in _UNSHOWN:
                    out[f.name] = _plain(getattr(rec, f.name))
        out["server"] = asdict(self.server) if self.server is not None else None
        return out


    @classmethod
    def from_flat(cls, pid: int, comm: str, kind: str | None = None, runtime: str | None = None,
                  label: str | None = None, exited: bool = False, server: Any = None,
                  **figures: Any) -> TargetMetrics:
        """A target from flat figures, each put in the record that holds it (the inverse of
        :meth:`to_dict`, for figures made by hand: tests, a report read back)."""
        parts: dict[str, dict[str, Any]] = {attr: {} for attr in _RECORDS}
        for name, value in figures.items():
            attr = _FIELD_RECORD.get(name)
            if attr is None:
                raise TypeError(f"no evidence record has a field {name!r}")
            parts[attr][name] = value
        return cls(pid=pid, comm=comm, kind=kind, runtime=runtime, label=label or f"{comm} (pid {pid})",
                   exited=exited, server=server, **{a: _RECORDS[a](**kw) for a, kw in parts.items()})


_RECORDS: dict[str, Any] = {"time": ThreadEvidence, "process": ProcessEvidence, "limits": LimitsEvidence,
                            "stacks": StackEvidence, "counters": CounterEvidence}
_FIELD_RECORD = {f.name: attr for attr, rec in _RECORDS.items() for f in fields(rec)}


def _plain(v: Any) -> Any:
    if isinstance(v, list):
        return [asdict(x) if hasattr(x, "__dataclass_fields__") else x for x in v]
    return v


@dataclass(frozen=True)
class ClientEvidence:
    """The load client's own figures over the verdict's window (analyzers.verdict.client)."""

    tool: str
    tps: float | None
    latency_key: str | None  # the percentile it printed (p95, p99...)
    latency_ms: float | None
    threads: int | None  # its concurrency, when it says (sysbench's thds:)
    source: str = ""


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
    client: ClientEvidence | None = None  # the load client's own figures, when the capture ran the load

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "client"}
        d["targets"] = [t.to_dict() for t in self.targets]
        for k in ("system", "io"):
            d[k] = asdict(d[k]) if d[k] is not None else None
        out: dict[str, Any] = jsonable(d)
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
