"""What a target's own status port and the Go runtime say, as verdict evidence (analyzers layer).

One :class:`ServerEvidence` per target that the server-status collector reached, or whose
runtime is Go (the on-CPU stacks then tell the garbage collector's share even without a status
port). Read by analyzers.verdict.rules_server's rules:

- goroutines by kind over the snapshots (start, middle, end): how many wait on locks, on the
  network, in syscalls, on channels, how many run; the largest lock wait site;
- lock waiting in goroutine-seconds per second, from the best source there is: the block
  profile's waits in sync.Mutex/RWMutex over the window, else the mutex profile's, else the
  runtime's own ``/sync/mutex/wait/total`` metric, else the mean of the goroutine snapshots;
  and where the lock is held (the mutex profile's release site);
- the Go garbage collector's share of the process's CPU (runtime metrics, else the on-CPU
  stacks' GC frames), the heap against GOMEMLIMIT and against the cgroup limit;
- the Grafana metrics the server exports (query and gRPC durations...), for the findings' notes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from profiler.analyzers.server import goroutines as G
from profiler.analyzers.server.requests import RequestTime, request_time
from profiler.analyzers.server.view import ServerStatusView, TargetStatus
from profiler.analyzers.views.stacks import CpuStacksView

from profiler.knowledge import goroutines as kg
from profiler.knowledge import pool_of

# On-CPU frames of the Go garbage collector: its background mark workers, mark assists
# charged to allocating goroutines, and sweeping.
GC_FRAMES = ("runtime.gcBgMarkWorker", "runtime.gcAssistAlloc", "runtime.gcDrain", "runtime.markroot",
             "runtime.bgsweep", "runtime.sweepone", "runtime.gcMarkDone", "runtime.gcMarkTermination")
NO_LIMIT = 2**62  # GOMEMLIMIT above this is "not set" (math.MaxInt64 by default)
# The Go runtime metrics (profiler.knowledge.servers keys) the rules read, besides the request
# phases of profiler.knowledge.requests; docs/verdict.md#server-metrics-the-rules-read lists both,
# and tests/unit/test_verdict_metric_list.py checks that list against this table and the code.
RULE_READS = ("go.mutex_wait", "go.gc_cpu", "process.cpu", "go.heap_inuse", "go.memory_limit", "go.heap_goal")


@dataclass
class ServerEvidence:
    pid: int
    server: str | None = None  # tidb | tikv | pd | etcd | None
    go: bool = False
    endpoint: str | None = None
    snapshots: int = 0
    goroutines: float | None = None  # mean over snapshots
    by_kind: dict[str, float] = field(default_factory=dict)  # mean goroutines per kind
    lock_site: str = ""  # the largest lock wait site (state, op <- caller)
    lock_site_goroutines: float = 0.0
    lock_wait_key: str = ""  # the profiler.knowledge.goroutines entry naming that wait, "" for a Go sync lock
    lock_what: str = ""  # what that wait is, as the entry says it
    app_lock_waits: float = 0.0  # goroutines in lock or slot waits the program's own frames name, on average
    rpc_by_tier: dict[str, float] = field(default_factory=dict)  # tier -> goroutines waiting for its answer
    top_sites: list[tuple[str, str, float]] = field(default_factory=list)  # (kind, site, mean goroutines)
    lock_wait: float | None = None  # goroutines waiting on Go locks, on average (s/s)
    lock_wait_source: str = ""
    lock_holder: str = ""  # where the contended lock is released (mutex profile)
    gc_cpu_share: float | None = None  # GC CPU / process CPU
    gc_cpu_source: str = ""
    heap_inuse: float | None = None
    memory_limit: float | None = None  # GOMEMLIMIT when set
    heap_goal: float | None = None
    notes: dict[str, str] = field(default_factory=dict)  # metric key -> "title: value" (Grafana metrics)
    requests: RequestTime | None = None  # where its requests' time goes, by its own histograms
    storage: str | None = None  # a tidb-server's store by its command line: tikv (another tier), unistore, None

    @property
    def working(self) -> float:
        """Goroutines that are not idle by design: running, in syscalls, or queued on locks or for slots."""
        return sum(self.by_kind.get(k, 0.0) for k in (G.LOCK, G.QUEUE, G.RUN, G.SYSCALL))

    @property
    def lock_share(self) -> float | None:
        w = self.working
        return (self.by_kind.get(G.LOCK, 0.0) + self.by_kind.get(G.QUEUE, 0.0)) / w if w > 0 else None

    @property
    def heap_limit_share(self) -> float | None:
        if self.heap_inuse is None or not self.memory_limit:
            return None
        return self.heap_inuse / self.memory_limit


def _gc_from_stacks(cpu: CpuStacksView | None, pools: set[str]) -> float | None:
    if cpu is None or not cpu.folded or not pools:
        return None
    total = gc = 0
    for stack, n in cpu.folded.items():
        root, _, rest = stack.partition(";")
        if pool_of(root) not in pools and root not in pools:
            continue
        total += n
        if any(f in rest for f in GC_FRAMES):
            gc += n
    return gc / total if total >= 50 else None


def _fmt(v: float, unit: str) -> str:
    if unit == "s":
        return f"{v * 1000:.1f} ms" if v < 1 else f"{v:.2f} s"
    if unit == "ratio":
        return f"{100 * v:.0f}%"
    if unit == "bytes":
        return f"{v / 1048576:.0f} MiB"
    return f"{v:.3g} {unit}"


def _goroutine_evidence(ev: ServerEvidence, ts: TargetStatus) -> None:
    snaps = ts.goroutines
    if not snaps:
        return
    ev.snapshots = len(snaps)
    ev.goroutines = sum(s.total for s in snaps) / len(snaps)
    kinds: dict[str, float] = {}
    sites: dict[tuple[str, str], float] = {}
    whats: dict[str, str] = {}
    for s in snaps:
        for k, n in s.by_kind.items():
            kinds[k] = kinds.get(k, 0.0) + n / len(snaps)
        for g in s.groups:
            if g.state.startswith("running (this profile)"):
                continue
            key = (g.kind, f"{g.state}: {g.site}" if g.site else g.state)
            sites[key] = sites.get(key, 0.0) + g.count / len(snaps)
            w = kg.BY_KEY.get(g.wait)
            if w is not None and g.kind in (G.LOCK, G.QUEUE):
                ev.app_lock_waits += g.count / len(snaps)
                whats[key[1]] = w.key
            if w is not None and g.kind == G.RPC and w.tier:
                ev.rpc_by_tier[w.tier] = ev.rpc_by_tier.get(w.tier, 0.0) + g.count / len(snaps)
    # the profile request itself runs a goroutine: not part of the server's work
    selfrun = sum(g.count for s in snaps for g in s.groups if g.state.startswith("running (this profile)")) / len(snaps)
    if selfrun:
        kinds[G.RUN] = max(0.0, kinds.get(G.RUN, 0.0) - selfrun)
    ev.by_kind = kinds
    ev.top_sites = sorted(((k, site, n) for (k, site), n in sites.items()), key=lambda x: (-x[2], x[1]))[:8]
    locks = [(site, n) for (k, site), n in sites.items() if k in (G.LOCK, G.QUEUE)]
    if locks:
        ev.lock_site, ev.lock_site_goroutines = max(locks, key=lambda x: (x[1], x[0]))
        ev.lock_wait_key = whats.get(ev.lock_site, "")
        ev.lock_what = kg.BY_KEY[ev.lock_wait_key].what if ev.lock_wait_key else ""


def _lock_wait(ev: ServerEvidence, ts: TargetStatus) -> None:
    block = ts.block
    if block is not None and block.enabled and block.seconds > 0 and block.lock_delay_s > 0:
        ev.lock_wait = block.lock_delay_s / block.seconds
        ev.lock_wait_source = "block profile (waits in sync.Mutex/RWMutex)"
    if ev.lock_wait is None and ts.mutex is not None and ts.mutex.enabled and ts.mutex.seconds > 0 and ts.mutex.delay_s > 0:
        ev.lock_wait, ev.lock_wait_source = ts.mutex.delay_per_s, "mutex profile (delay)"
    if ev.lock_wait is None:
        kv = ts.key("go.mutex_wait")
        if kv is not None and kv.total is not None:
            ev.lock_wait, ev.lock_wait_source = kv.total, "runtime metric /sync/mutex/wait/total"
    if ev.lock_wait is None and ev.snapshots:
        ev.lock_wait = ev.by_kind.get(G.LOCK, 0.0) + ev.by_kind.get(G.QUEUE, 0.0)
        ev.lock_wait_source = "goroutine snapshots"
    elif ev.lock_wait is not None and ev.app_lock_waits > 0:
        # the profiles and the runtime metric count sync.Mutex/RWMutex waits only; the lock and slot
        # waits the program's own frames name (a row lock waiter in select) come from the snapshots
        named = f"{ev.app_lock_waits:.1f} in lock waits the program names (goroutine snapshots)"
        if ev.lock_wait < 0.05:
            ev.lock_wait, ev.lock_wait_source = ev.app_lock_waits, named
        else:
            ev.lock_wait += ev.app_lock_waits
            ev.lock_wait_source += f" + {named}"
    if ts.mutex is not None and ts.mutex.top:
        top = ts.mutex.top[0]
        ev.lock_holder = f"{top.site} (released in {top.leaf}; {top.delay_s / max(ts.mutex.seconds, 1e-9):.2f} s of waiting per s)"


def _memory(ev: ServerEvidence, ts: TargetStatus | None, cpu_cores: float | None, cpu: CpuStacksView | None,
            pools: set[str]) -> None:
    if ts is not None:
        gc = ts.key("go.gc_cpu")
        proc = ts.key("process.cpu")
        used = (proc.total if proc is not None else None) or cpu_cores
        if gc is not None and gc.total is not None and used:
            if gc.total <= used:
                ev.gc_cpu_share = gc.total / used
                ev.gc_cpu_source = "runtime metrics (GC CPU / process CPU)"
            else:
                # The runtime's GC "CPU" is its own accounting of wall time: a stop-the-world pause
                # counts x GOMAXPROCS, a dedicated mark worker for as long as it is scheduled. A process
                # the kernel starves stretches both (idle TiDB beside a CPU burner: 0.25 "GC cores" from
                # one 1.3 s pause, in a process that used 0.05 core): more than the process used is not
                # CPU, so the on-CPU stacks (real samples) say, or nothing does.
                ev.gc_cpu_source = (f"runtime metrics discarded: {gc.total:.2f} GC cores against {used:.2f} cores "
                                    "the process used (the runtime counts wall time, stretched when the CPU is "
                                    "scarce)")
        heap = ts.key("go.heap_inuse")
        limit = ts.key("go.memory_limit")
        goal = ts.key("go.heap_goal")
        ev.heap_inuse = heap.total if heap is not None else None
        ev.heap_goal = goal.total if goal is not None else None
        if limit is not None and limit.total is not None and 0 < limit.total < NO_LIMIT:
            ev.memory_limit = limit.total
    if ev.gc_cpu_share is None and ev.go:
        share = _gc_from_stacks(cpu, pools)
        if share is not None:
            why = f" ({ev.gc_cpu_source})" if ev.gc_cpu_source else ""
            ev.gc_cpu_share, ev.gc_cpu_source = share, f"on-CPU stacks in the Go garbage collector{why}"


def server_evidence(view: ServerStatusView | None, cpu: CpuStacksView | None, pid: int, runtime: str | None,
                    cpu_cores: float | None, pools: set[str]) -> ServerEvidence | None:
    """The evidence for one target (``cpu_cores``: the process's CPU by /proc, when its own metrics
    do not say), or None when there is none (no status port and not Go)."""
    ts = view.targets.get(pid) if view is not None else None
    is_go = runtime == "go" or (ts is not None and ts.go)
    if ts is None and not is_go:
        return None
    ev = ServerEvidence(pid=pid, go=is_go)
    if ts is not None:
        ev.server = ts.server
        ev.endpoint = ts.metrics_url or ts.pprof_url
        _goroutine_evidence(ev, ts)
        _lock_wait(ev, ts)
        ev.requests = request_time(ts.server, ts.scrapes)
        for kv in ts.keys:
            if kv.info.server == "go" or kv.total is None or math.isnan(kv.total):
                continue
            top = max(kv.window.items(), key=lambda x: x[1]) if kv.window else None
            where = f" ({top[0]})" if top is not None and top[0] != "all" and len(kv.window) > 1 else ""
            ev.notes[kv.info.key] = f"{kv.info.title}: {_fmt(kv.total, kv.info.unit)}{where}"
    _memory(ev, ts, cpu_cores, cpu, pools)
    return ev
