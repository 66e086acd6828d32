"""The verdict's rules over where the servers' requests spend their time (analyzers layer).

A server that times its requests (TiDB, TiKV, PD and etcd: profiler.knowledge.requests) says
where their time goes; analyzers.server.requests turns the window's scrapes into the requests
waiting in each phase on average and each phase's share of the whole request's time
(``ServerEvidence.requests``). These rules read that beside the resource view (the other
rules score CPU, IO, memory and locks from the OS), so the best explanation wins on score:

- ``request_lock_wait`` (lock_contention): requests wait for locks or latches (TiDB's
  pessimistic lock acquisition, TiKV's lock manager and scheduler latches, txnLock backoffs).
  When the goroutines of the server show where they wait (a lock waiter in TiDB's embedded
  storage, or an RPC to TiKV), the sub-cause says so: a TiDB whose sessions wait in RPCs to
  TiKV points at the TiKV tier (``Finding.tier``), where the locks are held.
- ``request_queue_wait`` (lock_contention): requests wait for a slot (TiDB's execution tokens).
- ``request_io_wait`` (io_wait): the write path waits on the disk (etcd's WAL fsync and
  backend commit busy most of the window).

Each server metric read becomes evidence rows (requests waiting, share of the request time, p99)
with its threshold (``req.*`` in findings.THRESHOLDS; a p99 against the vendor's alert where there
is one, shown but not scored) and the Grafana panel users know it from.
"""

from __future__ import annotations

from profiler.analyzers.server.requests import PhaseTime, RequestTime
from profiler.analyzers.verdict.findings import Evidence, Finding, evidence, p99_key, ramp
from profiler.analyzers.verdict.model import Metrics, TargetMetrics
from profiler.analyzers.verdict.rules_cpu import cpu_scores
from profiler.analyzers.verdict.rules_server import short_site
from profiler.analyzers.verdict.server import ServerEvidence

from profiler.knowledge import TIDB_ADVICE, TIKV_ADVICE
from profiler.knowledge import goroutines as kg
from profiler.knowledge import requests as kr


def _ms(x: float | None) -> str:
    if x is None:
        return "?"
    return f"{x * 1000:.1f} ms" if x < 1 else f"{x:.2f} s"


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{100 * x:.0f}%"


def requests_of(t: TargetMetrics) -> RequestTime | None:
    ev: ServerEvidence | None = t.server
    return ev.requests if ev is not None else None


def phase_rows(p: PhaseTime, waiting_key: str | None, share_key: str | None) -> list[Evidence]:
    """One phase as evidence rows: requests waiting in it (or how busy it was), its share of the
    request time, its p99; each with the histogram read and the Grafana panel."""
    where = f"{p.metric}: {p.per_s:.1f}/s, mean {_ms(p.mean)}" + (f"; most in {p.top}" if p.top else "")
    rows = []
    if p.serial:
        rows.append(evidence(f"{p.key}.busy", p.waiting, waiting_key, f"{p.title} in progress: {where}",
                             unit="of the window", panel=p.panel))
    else:
        rows.append(evidence(f"{p.key}.waiting", p.waiting, waiting_key,
                             f"{p.title}: requests in it on average; {where}", unit="requests waiting", panel=p.panel))
    if p.share is not None:
        rows.append(evidence(f"{p.key}.share", p.share, share_key, f"{p.title}: share of the request time",
                             unit="of request time", panel=p.panel))
    if p.p99 is not None:
        key = p99_key(p.key)
        rows.append(evidence(f"{p.key}.p99", p.p99, key, f"{p.title} p99 ({p.metric})"
                             + ("" if key else "; no vendor alert for it: shown without a threshold"),
                             unit="s", panel=p.panel))
    return rows


def total_rows(rt: RequestTime) -> list[Evidence]:
    """The whole request (TiDB's statement, TiKV's gRPC message duration) the phases' shares are of:
    requests in it on average and its p99, as evidence rows."""
    return phase_rows(rt.total, None, None) if rt.total is not None else []


def _score(p: PhaseTime, waiting_key: str, share_key: str) -> float:
    w = ramp(p.waiting, waiting_key)
    return min(w, ramp(p.share, share_key)) if p.share is not None else w


def served_by(t: TargetMetrics, p: PhaseTime) -> str | None:
    """The tier where this wait is served: the phase's own (an RPC to TiKV), or for a lock wait,
    TiKV when the server stores its data there (a tidb-server started with ``--store tikv``: its
    locks live in TiKV's lock manager), or when its sessions wait in RPCs to TiKV rather than in a
    lock waiter of their own (the goroutines say so where the command line does not)."""
    if p.tier is not None:
        return p.tier
    ev: ServerEvidence | None = t.server
    if ev is None or p.kind != kr.LOCK:
        return None
    if ev.storage == "tikv":
        return "tikv"
    if ev.storage == "unistore" or not ev.rpc_by_tier:
        return None
    tier, n = max(ev.rpc_by_tier.items(), key=lambda kv: (kv[1], kv[0]))
    return tier if n > ev.app_lock_waits else None


def client_rows(t: TargetMetrics, m: Metrics) -> tuple[list[Evidence], str]:
    """The load client's own latency (the outermost request time) as evidence, and, when it says
    how many threads it ran, how many of them were inside this server's requests on average."""
    c = m.client
    if c is None or c.latency_ms is None:
        return [], ""
    rows = [evidence("client_latency_ms", c.latency_ms, None,
                     f"{c.tool} {c.latency_key} over {c.source}" + (f", {c.tps:.0f}/s" if c.tps else ""), unit="ms")]
    rt = requests_of(t)
    if not c.threads or rt is None or rt.total is None:
        return rows, ""
    inside = min(1.0, rt.total.waiting / c.threads)
    rows.append(evidence("client_threads_inside", inside, None,
                         f"{rt.total.waiting:.1f} of the client's {c.threads} threads are in {rt.total.title.lower()} "
                         "on average", unit="of the client's threads"))
    return rows, (f"of {c.tool}'s {c.threads} threads, {rt.total.waiting:.1f} are inside its requests on average "
                  f"({_pct(inside)}); the client sees {c.latency_key} {c.latency_ms:.1f} ms")


def _total_text(rt: RequestTime) -> str:
    if rt.total is None:
        return ""
    return f" of {rt.total.waiting:.1f} in {rt.total.title.lower()} (p99 {_ms(rt.total.p99)})"


def _waiters_text(ev: ServerEvidence | None) -> str:
    """Where the goroutines wait, when they show it (the waiting function, the runtime state a detail)."""
    if ev is None or not ev.lock_site or not ev.lock_site_goroutines:
        return ""
    text = f"; {ev.lock_site_goroutines:.0f} goroutines wait in {short_site(ev.lock_site)}"
    return text + (f" ({ev.lock_what})" if ev.lock_what else "")


def cpu_weight(t: TargetMetrics, m: Metrics) -> tuple[float, Evidence | None]:
    """How much the server's own timings count: as much as it gets the CPU it asks for.

    A phase is timed from its start to the moment the thread that timed it runs again, so a
    process held back by its CPU (a cgroup quota that throttles it, threads that want a CPU
    nearly all the time and queue for it) times its CPU waits into every phase: etcd under a
    0.2-core quota "fsyncs its WAL 62% of the time" at 4 ms each, p99 103 ms, on a disk that
    answers in 1 ms. Slow requests on a saturated CPU are the CPU's (rules_cpu): the timings
    count x (1 - the CPU rule's throttling and starvation strengths)."""
    s = cpu_scores(t, m)
    if s is None:
        return 1.0, None
    held = max(s.throttle, s.starved)
    if held <= 0:
        return 1.0, None
    w = 1.0 - held
    return w, evidence("request_timing_weight", w, None,
                       f"the server's timings count {w:.0%}: they include its waits for a CPU (cgroup throttling "
                       f"{s.throttle:.2f}, run queue {s.starved:.2f})", unit="weight")


def rule_request_locks(t: TargetMetrics, m: Metrics) -> Finding | None:
    """Requests wait for locks or latches, by the server's own histograms."""
    rt = requests_of(t)
    phases = rt.of_kind(kr.LOCK) if rt is not None else []
    if rt is None or not phases:
        return None
    best = max(phases, key=lambda p: (_score(p, "req.lock_waiting", "req.lock_share"), p.waiting, p.key))
    w, wrow = cpu_weight(t, m)
    score = _score(best, "req.lock_waiting", "req.lock_share") * w
    if score <= 0:
        return None
    rows: list[Evidence] = [wrow] if wrow is not None else []
    for p in phases:
        rows.extend(phase_rows(p, "req.lock_waiting", "req.lock_share"))
    rows.extend(total_rows(rt))
    tier = served_by(t, best)
    sub = (f"requests wait for locks: {best.waiting:.1f} in {best.title.lower()} on average{_total_text(rt)}"
           + (f", {_pct(best.share)} of the requests' time" if best.share is not None else "")
           + f"; its p99 {_ms(best.p99)} ({best.metric})")
    if tier is None:
        sub += _waiters_text(t.server)
    else:
        n = t.server.rpc_by_tier.get(tier, 0.0) if t.server is not None else 0.0
        sub += (f"; the locks are held in the {tier} tier: the sessions wait in RPCs to {tier}"
                + (f" ({n:.0f} goroutines on average)" if n else "") + f": see {tier}'s lock waits")
    rows.extend(client_rows(t, m)[0])
    rec = (TIDB_ADVICE["lock_contention"] if t.kind == "tidb"
           else TIKV_ADVICE["lock_contention"] if t.kind == "tikv"
           else "the requests serialize on the same keys or rows: spread the hot keys, keep transactions short")
    return Finding("lock_contention", "request_lock_wait", score, "requests wait for locks", sub, rows, rec,
                   t.label, tier=tier)


def rule_request_queue(t: TargetMetrics, m: Metrics) -> Finding | None:
    """Requests wait for a slot (execution tokens) before they run."""
    rt = requests_of(t)
    phases = rt.of_kind(kr.QUEUE) if rt is not None else []
    if rt is None or not phases:
        return None
    best = max(phases, key=lambda p: (_score(p, "req.queue_waiting", "req.queue_share"), p.waiting, p.key))
    w, wrow = cpu_weight(t, m)
    score = _score(best, "req.queue_waiting", "req.queue_share") * w
    if score <= 0:
        return None
    rows = ([wrow] if wrow is not None else []) + [r for p in phases
                                                   for r in phase_rows(p, "req.queue_waiting", "req.queue_share")]
    rows.extend(total_rows(rt))
    sub = (f"requests queue for a slot: {best.waiting:.1f} wait in {best.title.lower()} on average{_total_text(rt)}"
           + (f", {_pct(best.share)} of the requests' time" if best.share is not None else "")
           + f"; its p99 {_ms(best.p99)} ({best.metric})" + _waiters_text(t.server))
    rows.extend(client_rows(t, m)[0])
    entry = kg.BY_KEY.get("tidb-token")
    rec = entry.advice if t.kind == "tidb" and entry is not None else "raise the concurrency limit if the CPU has room"
    return Finding("lock_contention", "request_queue_wait", score, "requests queue for a slot", sub, rows, rec, t.label)


def rule_request_io(t: TargetMetrics, m: Metrics) -> Finding | None:
    """The write path waits on the disk, by the server's own timing of its log syncs and commits."""
    rt = requests_of(t)
    phases = rt.of_kind(kr.IO) if rt is not None else []
    if rt is None or not phases:
        return None

    def score(p: PhaseTime) -> float:
        return ramp(p.waiting, "req.io_busy") if p.serial else _score(p, "req.lock_waiting", "req.io_share")

    best = max(phases, key=lambda p: (score(p), p.waiting, p.key))
    w, wrow = cpu_weight(t, m)
    s = score(best) * w
    if s <= 0:
        return None
    rows = ([wrow] if wrow is not None else []) + [r for p in phases
            for r in phase_rows(p, "req.io_busy" if p.serial else "req.lock_waiting", None if p.serial else "req.io_share")]
    rows.extend(total_rows(rt))
    what = (f"{best.title} in progress {_pct(best.waiting)} of the window" if best.serial
            else f"{best.waiting:.1f} requests in {best.title.lower()} on average")
    sub = (f"the write path waits on the disk: {what}, {best.per_s:.0f}/s, mean {_ms(best.mean)}, p99 {_ms(best.p99)} "
           f"({best.metric})")
    rows.extend(client_rows(t, m)[0])
    rec = (TIKV_ADVICE["io_wait"] if t.kind == "tikv"
           else "the log's disk is too slow for synchronous writes: faster storage (etcd's guidance: WAL fsync p99 "
                "under 10 ms), or fewer writers sharing it")
    return Finding("io_wait", "request_io_wait", s, "requests wait on the disk", sub, rows, rec, t.label)
