"""Where a server's requests spend their time, from its latency histograms (analyzers layer).

For each phase profiler.knowledge.requests names and the server's scrapes hold, over the
capture window: how many requests were in the phase on average (the rate of the histogram's
``_sum``: request-seconds per second), how many finished per second, their mean and p99, and
the phase's share of the whole request's time (its rate of ``_sum`` over the total's). For a
``serial`` phase (a WAL fsync), the rate of ``_sum`` is the share of the window it was busy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from profiler.analyzers.server import series as S

from profiler.knowledge import requests as kr

# The kinds of wait that are not for a CPU (``RequestTime.waits_share``).
NOT_CPU = (kr.LOCK, kr.QUEUE, kr.IO, kr.RPC, kr.BACKOFF)


@dataclass(frozen=True)
class PhaseTime:
    key: str  # profiler.knowledge.requests key
    kind: str
    title: str
    panel: str
    metric: str  # the family and filter read, e.g. tidb_tikvclient_txn_cmd_duration_seconds{type=lock_keys}
    waiting: float  # requests in this phase on average (request-seconds per second); serial: busy share
    per_s: float  # observations finished per second
    mean: float | None  # seconds
    p99: float | None  # seconds, over all of the phase's observations in the window
    top: str = ""  # the group with the most time (e.g. type=kv_pessimistic_lock), when broken down
    top_p99: float | None = None
    serial: bool = False
    tier: str | None = None
    share: float | None = None  # of the requests' time (waiting / the total's waiting)


@dataclass(frozen=True)
class RequestTime:
    server: str
    total: PhaseTime | None
    phases: list[PhaseTime] = field(default_factory=list)  # most time first
    present: list[str] = field(default_factory=list)  # every phase whose histogram the scrapes hold, observed or not

    def reports(self, kind: str) -> bool:
        """The server times phases of this kind (its histograms are there, whether or not any request
        went through them in the window)."""
        return any(kr.BY_KEY[k].kind == kind for k in self.present if k in kr.BY_KEY)

    def of_kind(self, *kinds: str) -> list[PhaseTime]:
        return [p for p in self.phases if p.kind in kinds]

    def phase(self, key: str) -> PhaseTime | None:
        return next((p for p in self.phases if p.key == key), None)

    def waits_share(self, answered: Mapping[str, float] | None = None) -> float | None:
        """The share of the request time the server's own histograms put in waits that are not for a
        CPU: locks, slots, the disk, another tier's answer, backoffs (nested phases may add up past
        the whole: capped at 1); a serial phase (a WAL fsync) counts with the share of the window it
        was busy, every write queueing behind it. Pool waits (a task waiting for a pool thread) are a
        queue for the CPU and do not count. None without the server's total.

        ``answered``: for a tier whose own request time the capture holds (TiKV beside TiDB on one
        host), the requests it has in flight on average. A wait for that tier counts only as far as
        the tier accounts for it (its in-flight requests / the caller's waiting in RPCs to it): the
        rest is neither side's work but transit, which on one host is both sides queueing for a CPU."""
        if self.total is None or self.total.waiting <= 0:
            return None
        shares = sum((p.share or 0.0) * self.answered_part(p, answered)
                     for p in self.phases if p.kind in NOT_CPU and not p.serial)
        serial = max((p.waiting for p in self.phases if p.kind in NOT_CPU and p.serial), default=0.0)
        return min(1.0, max(shares, serial))

    @staticmethod
    def answered_part(p: PhaseTime, answered: Mapping[str, float] | None) -> float:
        """The part of an RPC phase its serving tier accounts for (1 unless that tier's figure is known)."""
        if not answered or p.tier is None or p.tier not in answered or p.waiting <= 0:
            return 1.0
        return min(1.0, max(0.0, answered[p.tier]) / p.waiting)

    def executing(self, answered: Mapping[str, float] | None = None) -> float | None:
        """Requests in the server's own work on average: in its total, not in a wait ``waits_share``
        counts (Little's law over the total's rate of ``_sum``). None without the server's total."""
        w = self.waits_share(answered)
        return None if w is None or self.total is None else self.total.waiting * (1.0 - w)


def _metric_text(p: kr.Phase, name: str) -> str:
    if not p.where:
        return name
    parts = [f"{k}={'|'.join(v) if isinstance(v, tuple) else v}" for k, v in p.where]
    return f"{name}{{{','.join(parts)}}}"


def phase_time(p: kr.Phase, name: str, scrapes: list[S.Scrape]) -> PhaseTime | None:
    """One phase over the window, or None when nothing was observed in it."""
    where = dict(p.where)
    sums = S.rate(scrapes, f"{name}_sum", p.by, where)
    counts = S.rate(scrapes, f"{name}_count", p.by, where)
    per_s = sum(counts.values())
    waiting = sum(sums.values()) * p.scale
    if per_s <= 0 and waiting <= 0:
        return None
    p99 = S.histogram_quantile(scrapes, name, 0.99, (), where).get((), None)
    top, top_p99 = "", None
    if p.by and len(sums) > 1:
        g = max(sums, key=lambda k: (sums[k], S.label_text(k)))
        top = S.label_text(g)
        top_p99 = S.histogram_quantile(scrapes, name, 0.99, p.by, where).get(g)
        top_p99 = top_p99 * p.scale if top_p99 is not None else None
    return PhaseTime(key=p.key, kind=p.kind, title=p.title, panel=p.panel, metric=_metric_text(p, name),
                     waiting=waiting, per_s=per_s, mean=waiting / per_s if per_s > 0 else None,
                     p99=p99 * p.scale if p99 is not None else None, top=top, top_p99=top_p99, serial=p.serial,
                     tier=p.tier)


def request_time(server: str | None, scrapes: list[S.Scrape]) -> RequestTime | None:
    """The server's request time by phase over the window, or None when its scrapes hold none."""
    if server is None or len(scrapes) < 2:
        return None
    names = set().union(*(s.snap.names() for s in scrapes))
    total: PhaseTime | None = None
    phases: list[PhaseTime] = []
    present: list[str] = []
    for p in kr.for_server(server):
        name = next((n for n in (p.metric, *p.aliases) if f"{n}_sum" in names), None)
        if name is None:
            continue
        present.append(p.key)
        pt = phase_time(p, name, scrapes)
        if pt is None:
            continue
        if p.kind == kr.TOTAL:
            total = pt
        else:
            phases.append(pt)
    if total is None and not phases and not present:
        return None
    if total is not None and total.waiting > 0:
        phases = [_with_share(pt, total.waiting) for pt in phases]
    phases.sort(key=lambda pt: (-pt.waiting, pt.key))
    return RequestTime(server=server, total=total, phases=phases, present=present)


def _with_share(pt: PhaseTime, total: float) -> PhaseTime:
    from dataclasses import replace

    return replace(pt, share=min(1.0, pt.waiting / total)) if not pt.serial else pt
