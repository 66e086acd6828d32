"""The verdict's vocabulary (analyzers layer): categories, thresholds, evidence, findings, verdicts.

The rules (rules.py, rules_server.py) turn the metrics into ``Finding``s, each with its
``Evidence``; the ranking (ranking.py) turns those into a ``Verdict`` per target. Thresholds live
in one table, ``THRESHOLDS``, each with its source (USE method; PingCAP's TiKV inspection
ratios; our own measurements on the samples/ workloads); docs/verdict.md explains them.

Scoring: each piece of evidence is turned into 0..1 by ``ramp``: 0 below half the threshold,
0.5 at the threshold, 1 at the "full" value. A finding with score >= ``PRIMARY`` can be the
primary bottleneck; >= ``CONTRIBUTING`` is listed as contributing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

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
    "cpu.executing": Threshold(0.80, 1.0, "requests per available core", "as cpu.demand (every core it may use "
                               "has work to run), counted in the server's requests; issue 29",
                               "requests in the server's own work on average (its request total less its lock, slot, "
                               "disk and other-tier waits: Little's law) / cores the target may use"),
    "cpu.thread_demand": Threshold(0.90, 0.98, "of one thread's time", "our rule: a thread running or runnable nearly all the time is CPU-bound, whoever takes its CPU",
                                   "the busiest work thread's running + runnable share of its time"),
    "cpu.host": Threshold(0.90, 0.98, "of the host's CPUs", "USE method (utilization of the host's CPUs); "
                          "issue 29: a 2-CPU host 97-99% busy with TiDB, TiKV and the client",
                          "busy share of all the host's CPUs (/proc/stat)"),
    "cpu.capture_share": Threshold(0.5, 0.8, "of the host's CPUs", "our rule: the workload the capture "
                                   "attached to, not someone else's, fills the host",
                                   "cores the capture's targets used together / the host's CPUs"),
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
    "lock.waiting": Threshold(2.0, 8.0, "threads waiting", "our rule, as req.lock_waiting and go.lock_wait: a couple of "
                              "threads always blocked in lock waits is contention, however seldom they wake",
                              "busy threads blocked in lock waits on average: their futex share (as the lock rule "
                              "counts it) x the busy threads, i.e. thread-seconds blocked per second of wall time"),
    "lock.switches": Threshold(50.0, 500.0, "switches/s per busy thread", "our measurements (sysbench one lock: ~15000/s; idle pool workers: < 5/s)",
                               "voluntary context switches of the busy threads: contended locks block and wake often"),
    "lock.kernel": Threshold(0.25, 0.6, "of busy-thread time", "our rule", "time busy threads wait on kernel locks (rwsem, mutex wchan)"),
    # not saturated
    "idle.cpu": Threshold(0.50, 0.2, "of available cores", "seed 002: TiKV at 50-60% CPU was not the bottleneck",
                          "below this, with little waiting, the target is not the bottleneck"),
    # What servers and the Go runtime say about themselves (rules_server.py)
    "go.lock_wait": Threshold(
        2.0, 8.0, "goroutines waiting",
        "our measurements: goworkload -mode mutex, 8 workers: 7; its cpu, idle and fsync modes and etcd under "
        "load: below 0.5",
        "goroutine-seconds per second waiting for sync.Mutex/RWMutex: how many goroutines wait for a Go lock on "
        "average (block or mutex profile, runtime metric, goroutine snapshots)"),
    "go.lock_share": Threshold(
        0.3, 0.7, "of working goroutines", "our rule",
        "goroutines queued on Go locks / goroutines that run, sit in syscalls or queue on locks (waiting for the "
        "network, channels or timers is not work)"),
    "go.gc_cpu": Threshold(
        0.25, 0.5, "of the process's CPU",
        "Go's GC design: marking takes 25% of GOMAXPROCS while a cycle runs; well above it the collector runs "
        "constantly and mark assists slow the goroutines that allocate",
        "CPU in the Go garbage collector / the process's CPU"),
    "go.heap_limit": Threshold(
        0.9, 1.0, "of GOMEMLIMIT", "Go runtime (GOMEMLIMIT): near the soft limit the GC runs as often as it must",
        "heap in use / GOMEMLIMIT"),
    # Where the requests' time goes, by the servers' own latency histograms (rules_requests.py)
    "req.lock_waiting": Threshold(
        2.0, 8.0, "requests waiting",
        "our rule, as go.lock_wait: a couple of requests always waiting for a lock is contention",
        "requests waiting for a lock or latch on average: the rate of the phase histogram's _sum (request-seconds "
        "per second, Little's law)"),
    "req.lock_share": Threshold(
        0.3, 0.7, "of request time", "our rule, as go.lock_share; PingCAP latency-breakdown.md reads lock waits "
        "against the statement's duration",
        "the requests' time in lock and latch waits / their whole time (rates of the histograms' _sum)"),
    "req.queue_waiting": Threshold(
        2.0, 8.0, "requests waiting", "our rule, as req.lock_waiting",
        "requests waiting for a slot (execution tokens) on average"),
    "req.queue_share": Threshold(
        0.3, 0.7, "of request time", "our rule, as req.lock_share",
        "the requests' time waiting for a slot / their whole time"),
    "req.io_busy": Threshold(
        0.5, 0.9, "of the window", "our rule: a log written one sync at a time that syncs half the time makes "
        "every write wait; etcd's guidance: WAL fsync p99 under 10 ms",
        "share of the window a serial IO phase was in progress (WAL fsync, backend commit): the rate of its _sum"),
    "req.io_share": Threshold(
        0.3, 0.7, "of request time", "our rule, as req.lock_share",
        "the requests' time in disk writes (Raft log append, apply) / their whole time"),
    "req.elsewhere_share": Threshold(
        0.5, 0.8, "of request time", "our rule: most of a calm server's request time is spent waiting for another "
        "tier, so that tier is where to look",
        "the requests' time in RPCs to another tier (TiDB's KV request duration, PD TSO wait) / their whole time"),
    # A phase's p99 (seconds) against the vendor's own alert or guidance, where there is one: shown with the
    # rates above, never scored (a p99 says how slow the slowest are, not how many wait); "full" = the threshold
    "req.p99.tidb.statement": Threshold(
        1.0, 1.0, "s", "PingCAP TiDB alert rules: TiDB_query_duration (statement p99 > 1 s)",
        "p99 of the statement duration (tidb_server_handle_query_duration_seconds)"),
    "req.p99.tidb.lock_keys": Threshold(
        1.0, 1.0, "s", "TiKV pessimistic-txn.wait-for-lock-timeout, 1 s by default: a lock request that waits that "
        "long is answered with an error and TiDB retries it; TiDB_query_duration alerts at a statement p99 of 1 s",
        "p99 of pessimistic lock acquisition (tidb_tikvclient_txn_cmd_duration_seconds{type=lock_keys})"),
    "req.p99.tikv.lock_wait": Threshold(
        1.0, 1.0, "s", "TiKV pessimistic-txn.wait-for-lock-timeout, 1 s by default (the waiter's longest wait)",
        "p99 of the lock manager's waiter lifetime (tikv_lock_manager_waiter_lifetime_duration)"),
    "req.p99.tikv.latch_wait": Threshold(
        1.0, 1.0, "s", "PingCAP TiKV alert rules: TiKV_scheduler_latch_wait_duration_seconds (p99 > 1 s)",
        "p99 of the scheduler latch wait (tikv_scheduler_latch_wait_duration_seconds)"),
    "req.p99.tikv.append_log": Threshold(
        1.0, 1.0, "s", "PingCAP TiKV alert rules: TiKV_raft_append_log_duration_secs (p99 > 1 s)",
        "p99 of the Raft log append (tikv_raftstore_append_log_duration_seconds)"),
    "req.p99.tikv.apply_log": Threshold(
        1.0, 1.0, "s", "PingCAP TiKV alert rules: TiKV_raft_apply_log_duration_secs (p99 > 1 s)",
        "p99 of the Raft log apply (tikv_raftstore_apply_log_duration_seconds)"),
    "req.p99.etcd.wal_fsync": Threshold(
        0.01, 0.01, "s", "etcd's guidance (and OpenShift's recommended etcd practices): WAL fsync p99 under 10 ms",
        "p99 of the WAL fsync (etcd_disk_wal_fsync_duration_seconds)"),
    "req.p99.etcd.backend_commit": Threshold(
        0.025, 0.025, "s", "etcd operators' guidance: backend commit p99 under 25 ms",
        "p99 of the backend commit (etcd_disk_backend_commit_duration_seconds)"),
}


def p99_key(phase: str) -> str | None:
    """The THRESHOLDS key of a request phase's p99, when the vendor documents one."""
    key = f"req.p99.{phase}"
    return key if key in THRESHOLDS else None


def strength(value: float, at: float, full: float) -> float:
    """Evidence strength 0..1 of a value against a threshold: 0 below half of ``at``, 0.5 at it,
    1 at ``full``, linear between (the one ramp of every verdict rule)."""
    lo = at * 0.5
    if value <= lo:
        return 0.0
    if value < at:
        return 0.5 * (value - lo) / (at - lo)
    if value >= full:
        return 1.0
    return 0.5 + 0.5 * (value - at) / (full - at)


def ramp(value: float | None, key: str) -> float:
    """Evidence strength 0..1: 0 below half the threshold, 0.5 at it, 1 at ``full``."""
    if value is None:
        return 0.0
    th = THRESHOLDS[key]
    return strength(float(value), th.value, th.full)


@dataclass
class Evidence:
    metric: str
    value: float | None
    threshold: float | None
    unit: str
    note: str = ""
    crossed: bool | None = None  # past its threshold (in the threshold's direction); None: no threshold
    panel: str | None = None  # for a server metric: the Grafana panel users know it from


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
    tier: str | None = None  # the tier where the cause lies, when not the target's own (a TiDB waiting on TiKV's locks)

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


def evidence(metric: str, value: float | None, key: str | None, note: str = "", unit: str = "",
             panel: str | None = None) -> Evidence:
    """One piece of evidence against the named threshold (None: a figure shown without one): its
    threshold, unit, and whether it is past it in the threshold's direction."""
    th = THRESHOLDS[key] if key else None
    crossed = None
    if th is not None and value is not None:
        # most thresholds are floors (worse above); a few are ceilings (idle.cpu: worse below)
        crossed = bool(value <= th.value) if th.full < th.value else bool(value >= th.value)
    return Evidence(metric=metric, value=None if value is None else float(value), threshold=th.value if th else None,
                    unit=th.unit if th else unit, note=note, crossed=crossed, panel=panel)
