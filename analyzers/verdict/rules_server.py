"""The verdict's rules over what servers and the Go runtime say about themselves (analyzers layer).

Small named rules over one target's :class:`~profiler.analyzers.verdict.server.ServerEvidence`
(goroutine snapshots, mutex/block profiles, Go runtime metrics; ``TargetMetrics.server``): each
takes what every rule takes, the target and the capture, and returns a :class:`Finding` with its
evidence, or None. They are listed in the one registry (registry.py) beside the OS-level rules,
so the best explanation wins on score:

- ``go_lock_contention``: goroutines pile up on a Go lock (``sync.Mutex``/``RWMutex``). The OS
  cannot see it: the Go scheduler parks the threads of waiting goroutines in futex, where they
  look idle (the idle-by-design wait table says so). Scored by the goroutines waiting on locks
  on average (block or mutex profile, the runtime's mutex-wait metric, or the snapshots) and
  their share of the working goroutines; named by the Go function that waits and the one that
  holds the lock.
- ``go_memory_pressure``: memory pressure in Go terms: the garbage collector takes a large share
  of the process's CPU (it runs constantly because the heap is near its goal or GOMEMLIMIT),
  or the heap is at GOMEMLIMIT.
- :func:`idle_goroutines`: not a rule but evidence for "not saturated": the goroutines wait for
  the network, for work on channels or in select, while the process uses little CPU.

Their thresholds (``go.*``) are in the one table, analyzers.verdict.findings ``THRESHOLDS``
(docs/verdict.md#go-and-server-metrics); their findings and evidence are the same types as the
other rules'.
"""

from __future__ import annotations

from profiler.analyzers.server import goroutines as G
from profiler.analyzers.verdict.findings import Evidence, Finding, evidence, ramp
from profiler.analyzers.verdict.model import Metrics, TargetMetrics
from profiler.analyzers.verdict.rules_cpu import CALM_AT, CALM_FULL, calm_weight
from profiler.analyzers.verdict.server import ServerEvidence

from profiler.knowledge import goroutines as kg
from profiler.knowledge import servers


def _panel(key: str) -> str | None:
    """The Grafana panel of a metric profiler.knowledge.servers knows."""
    info = servers.BY_KEY.get(key)
    return info.panel if info is not None else None


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{100 * x:.0f}%"


def _idle_threads(t: TargetMetrics) -> str:
    st = t.time
    if not st.active_states and not st.states:
        return ""
    parked = (st.states or {}).get("futex", 0.0) + (st.states or {}).get("idle", 0.0) + (st.states or {}).get("sleep", 0.0)
    return f"; the OS sees {st.threads} threads {_pct(parked)} of the time asleep (the Go scheduler parks them)"


def short_site(site: str) -> str:
    """A wait site with each function named after its import path's last element
    (``select: lockwaiter.(*Waiter).Wait <- tikv.(*Server).KvPessimisticLock``)."""
    state, sep, rest = site.rpartition(": ")
    return state + sep + " <- ".join(f.rsplit("/", 1)[-1] for f in rest.split(" <- "))


def rule_go_locks(t: TargetMetrics, m: Metrics) -> Finding | None:
    """Goroutines pile up on a lock: a Go sync lock, or a lock or slot the program's own frames
    name (a row lock waiter, execution tokens: profiler.knowledge.goroutines)."""
    ev: ServerEvidence | None = t.server
    if ev is None or (ev.lock_wait is None and not ev.snapshots):
        return None
    share = ev.lock_share
    wait = ev.lock_wait
    out = [evidence("goroutines_waiting_on_locks", wait, "go.lock_wait", ev.lock_wait_source,
                    panel=_panel("go.mutex_wait") if "runtime metric" in ev.lock_wait_source else None)]
    if share is not None:
        queued = ev.by_kind.get(G.LOCK, 0) + ev.by_kind.get(G.QUEUE, 0)
        out.append(evidence("lock_share_of_working_goroutines", share, "go.lock_share",
                            f"{queued:.1f} queued on locks of {ev.working:.1f} working goroutines"))
    score = min(ramp(wait, "go.lock_wait"), ramp(share, "go.lock_share") if share is not None else ramp(wait, "go.lock_wait"))
    if score <= 0:
        return None
    site = short_site(ev.lock_site) if ev.lock_site else "a Go lock"
    what = "a Go lock" if not ev.lock_what else "locks"
    sub = (f"goroutines queue on {what}: {wait or 0:.1f} wait on average ({ev.lock_wait_source}); "
           f"the largest wait: {ev.lock_site_goroutines:.0f} goroutines in {site}")
    if ev.lock_what:
        sub += f" ({ev.lock_what})"
    if ev.lock_holder and not ev.lock_wait_key:
        # the mutex profile shows sync locks only: its holder is the largest wait's when that is one
        sub += f"; the lock is held by {ev.lock_holder}"
    sub += _idle_threads(t)
    entry = kg.BY_KEY.get(ev.lock_wait_key)
    if entry is not None and entry.advice:
        rec = entry.advice
    else:
        rec = (f"shorten the critical section behind {site.split(': ', 1)[-1]} (no IO or slow calls while holding "
               "the lock), shard the lock, or use a sync.RWMutex/atomic where reads dominate; the mutex profile in "
               "the bundle (server-PID-mutex-end.pb.gz; `profiler flamegraph` draws it) shows where the lock is held")
        if ev.server == "tidb":
            rec += "; in TiDB, report the stacks with the TiDB version: internal lock contention is a TiDB issue"
    return Finding("lock_contention", "go_lock_contention", score, "lock contention between goroutines", sub,
                   out, rec, t.label)


def rule_go_memory(t: TargetMetrics, m: Metrics) -> Finding | None:
    ev: ServerEvidence | None = t.server
    if ev is None:
        return None
    gc = ev.gc_cpu_share
    lim = ev.heap_limit_share
    if gc is None and lim is None:
        return None
    out = []
    if gc is not None:
        out.append(evidence("go_gc_cpu_share", gc, "go.gc_cpu", ev.gc_cpu_source,
                            panel=_panel("go.gc_cpu") if ev.gc_cpu_source.startswith("runtime metrics") else None))
    if lim is not None:
        note = (f"heap in use {(ev.heap_inuse or 0) / 1048576:.0f} MiB of GOMEMLIMIT "
                f"{(ev.memory_limit or 0) / 1048576:.0f} MiB")
        out.append(evidence("go_heap_of_memory_limit", lim, "go.heap_limit", note, panel=_panel("go.heap_inuse")))
    elif ev.heap_inuse is not None and ev.heap_goal:
        out.append(evidence("go_heap_of_gc_goal", ev.heap_inuse / ev.heap_goal, None,
                            f"heap in use {ev.heap_inuse / 1048576:.0f} MiB, GC goal {ev.heap_goal / 1048576:.0f} MiB "
                            "(no GOMEMLIMIT: shown without a threshold)", unit="of the GC goal",
                            panel=_panel("go.heap_goal")))
    # The GC's share of a process that hardly runs is a share of almost nothing: a near-idle Go
    # process whose only work is a periodic or floor-sized GC cycle shows 70% "GC CPU" (and the
    # runtime's /cpu/classes figures overestimate GC time, worst when little else runs). The GC
    # holds the work back only when the process wants a real part of its CPU: the share counts
    # as much as the target wants its cores, none where the not-saturated rule calls it calm.
    busy = t.time.demand_util if t.time.demand_util is not None else t.process.cpu_util
    weight = calm_weight(busy)
    if gc is not None and weight < 1.0:
        out.append(evidence("go_gc_weight", weight, None,
                            f"the share counts {weight:.0%}: the process wants {_pct(busy)} of the cores it may use "
                            f"(none at {_pct(CALM_FULL)}, in full from {_pct(CALM_AT)})", unit="weight"))
    g = ramp(gc, "go.gc_cpu") * weight
    # at the limit alone is not a bottleneck (a cache sized to it); with the GC busy it is
    score = max(g, min(ramp(lim, "go.heap_limit"), g + 0.2)) if lim is not None else g
    if score <= 0:
        return None
    bits = []
    if gc is not None:
        bits.append(f"the Go garbage collector uses {_pct(gc)} of the process's CPU")
    if lim is not None:
        bits.append(f"the heap is at {_pct(lim)} of GOMEMLIMIT")
    elif ev.heap_inuse is not None and ev.heap_goal:
        bits.append(f"heap in use {ev.heap_inuse / 1048576:.0f} MiB, GC goal {ev.heap_goal / 1048576:.0f} MiB")
    sub = "memory pressure in Go terms: " + "; ".join(bits)
    rec = ("give the process more memory and raise GOMEMLIMIT (or GOGC) so the collector runs less often, or "
           "allocate less (the on-CPU flame graph shows runtime.mallocgc and the GC's mark assists)")
    if ev.server == "tidb":
        rec += ("; in TiDB: tidb_server_memory_limit / tidb_memory_usage_alarm_ratio, and the memory quota of "
                "large queries (tidb_mem_quota_query)")
    return Finding("memory", "go_memory_pressure", score, "Go memory pressure", sub, out, rec, t.label)


def idle_goroutines(t: TargetMetrics, ev: ServerEvidence | None) -> tuple[list[Evidence], str] | None:
    """Evidence that a Go server waits for work: most goroutines in network, channel or select waits."""
    if ev is None or not ev.snapshots or not ev.goroutines:
        return None
    waiting = sum(ev.by_kind.get(k, 0.0) for k in (G.IO, G.CHAN, G.SELECT, G.WAIT, G.SLEEP, G.RUNTIME))
    share = waiting / ev.goroutines if ev.goroutines else 0.0
    if share < 0.5:
        return None
    top = [f"{n:.0f} in {site}" for kind, site, n in ev.top_sites if kind in (G.IO, G.CHAN, G.SELECT, G.WAIT)][:3]
    text = (f"{_pct(share)} of its {ev.goroutines:.0f} goroutines wait for the network, channels or timers"
            + (f" ({'; '.join(top)})" if top else "") + ", not for locks or the CPU")
    return [evidence("goroutines_waiting_for_work", share, None, text, unit="of goroutines")], text
