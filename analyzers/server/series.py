"""Rates and histogram quantiles over a capture's /metrics scrapes (analyzers layer).

What Grafana draws from Prometheus, computed from the handful of scrapes a capture takes
(start, every interval, end), on the capture clock:

- ``rate``: a counter's per-second increase between two scrapes, summed over the labels not
  kept (``by``), with counter resets handled as Prometheus does (a drop means the counter
  restarted from zero);
- ``histogram_quantile``: the buckets' increase between two scrapes, summed the same way, and
  the quantile found by linear interpolation inside the bucket that holds it (Prometheus's
  ``histogram_quantile``: the lower bound of the first bucket is 0, a quantile in the +Inf
  bucket is the largest finite bound);
- ``level``: a gauge's value (mean, max or last over the scrapes).

Each has a window form (first scrape to last) and a per-interval form (one value per pair of
consecutive scrapes, at the pair's middle time) for the timeline.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from profiler.analyzers.server.prometheus import Labels, Snapshot

Where = Mapping[str, str | tuple[str, ...]]
_T = TypeVar("_T")


@dataclass
class Scrape:
    t: float  # capture clock (CLOCK_MONOTONIC seconds), the middle of the request
    snap: Snapshot


def _match(labels: Labels, where: Where | None) -> bool:
    if not where:
        return True
    d = dict(labels)
    for k, want in where.items():
        got = d.get(k)
        if isinstance(want, tuple):
            if got not in want:
                return False
        elif got != want:
            return False
    return True


def _group(labels: Labels, by: tuple[str, ...]) -> Labels:
    return tuple((k, v) for k, v in labels if k in by)


def _sum_by(snap: Snapshot, name: str, by: tuple[str, ...], where: Where | None,
            extra: Callable[[Labels], object] | None = None) -> dict[object, float]:
    out: dict[object, float] = {}
    for labels, v in snap.named(name):
        if not _match(labels, where) or math.isnan(v):
            continue
        key: object = _group(labels, by) if extra is None else (_group(labels, by), extra(labels))
        out[key] = out.get(key, 0.0) + v
    return out


def _increase(a: float, b: float) -> float:
    """A counter's increase from a to b; a drop is a restart from zero."""
    return b - a if b >= a else b


def _per_series(s0: Snapshot, s1: Snapshot, name: str, where: Where | None) -> dict[Labels, float]:
    """Each series' increase between two scrapes (reset-aware per series, before any summing)."""
    out: dict[Labels, float] = {}
    before = s0.samples
    isnan = math.isnan
    for labels, v1 in s1.named(name):
        if (where and not _match(labels, where)) or isnan(v1):
            continue
        v0 = before.get((name, labels))
        out[labels] = _increase(v0, v1) if v0 is not None and not isnan(v0) else 0.0
    return out


def increase(s0: Snapshot, s1: Snapshot, name: str, by: tuple[str, ...] = (),
             where: Where | None = None) -> dict[Labels, float]:
    """A counter's increase between two scrapes, summed by ``by``."""
    out: dict[Labels, float] = {}
    for labels, inc in _per_series(s0, s1, name, where).items():
        key = _group(labels, by)
        out[key] = out.get(key, 0.0) + inc
    return out


def _pairs(scrapes: list[Scrape], each: Callable[[Snapshot, Snapshot], _T]) -> list[tuple[Scrape, Scrape, _T]]:
    """``each`` of every pair of consecutive scrapes, in order, computed once for the window and
    the per-interval forms alike."""
    return [(a, b, each(a.snap, b.snap)) for a, b in zip(scrapes, scrapes[1:], strict=False)]


def _increases(scrapes: list[Scrape], name: str, by: tuple[str, ...], where: Where | None
               ) -> list[tuple[Scrape, Scrape, dict[Labels, float]]]:
    return _pairs(scrapes, lambda s0, s1: increase(s0, s1, name, by, where))


def _window_rate(scrapes: list[Scrape], incs: list[tuple[Scrape, Scrape, dict[Labels, float]]]) -> dict[Labels, float]:
    if len(scrapes) < 2 or scrapes[-1].t <= scrapes[0].t:
        return {}
    total: dict[Labels, float] = {}
    for _a, _b, inc in incs:  # pairwise, so a reset mid-window is seen
        for k, v in inc.items():
            total[k] = total.get(k, 0.0) + v
    span = scrapes[-1].t - scrapes[0].t
    return {k: v / span for k, v in total.items()}


def _interval_rates(incs: list[tuple[Scrape, Scrape, dict[Labels, float]]]
                    ) -> tuple[list[float], dict[Labels, list[float | None]]]:
    times: list[float] = []
    cols: list[dict[Labels, float]] = []
    for a, b, inc in incs:
        dt = b.t - a.t
        if dt <= 0:
            continue
        times.append((a.t + b.t) / 2)
        cols.append({k: v / dt for k, v in inc.items()})
    keys = sorted({k for c in cols for k in c})
    return times, {k: [c.get(k) for c in cols] for k in keys}


def rate(scrapes: list[Scrape], name: str, by: tuple[str, ...] = (), where: Where | None = None
         ) -> dict[Labels, float]:
    """Per-second increase over the window (first to last scrape), per ``by`` group."""
    if len(scrapes) < 2 or scrapes[-1].t <= scrapes[0].t:
        return {}
    return _window_rate(scrapes, _increases(scrapes, name, by, where))


def rate_series(scrapes: list[Scrape], name: str, by: tuple[str, ...] = (), where: Where | None = None
                ) -> tuple[list[float], dict[Labels, list[float | None]]]:
    """Per-interval rates: (middle times, group -> one rate per interval)."""
    return _interval_rates(_increases(scrapes, name, by, where))


def rate_both(scrapes: list[Scrape], name: str, by: tuple[str, ...] = (), where: Where | None = None
              ) -> tuple[dict[Labels, float], list[float], dict[Labels, list[float | None]]]:
    """rate() and rate_series() with each interval's increase read once."""
    incs = _increases(scrapes, name, by, where)
    return (_window_rate(scrapes, incs), *_interval_rates(incs))


# --------------------------------------------------------------------------- histograms


def _le(labels: Labels) -> float | None:
    for k, v in labels:
        if k == "le":
            try:
                return float(v) if v not in ("+Inf", "Inf", "inf") else math.inf
            except ValueError:
                return None
    return None


def bucket_increase(s0: Snapshot, s1: Snapshot, base: str, by: tuple[str, ...] = (),
                    where: Where | None = None) -> dict[Labels, dict[float, float]]:
    """The increase of each cumulative bucket ``base_bucket{le=...}`` between two scrapes, by group."""
    out: dict[Labels, dict[float, float]] = {}
    keep = tuple(b for b in by if b != "le")
    for labels, inc in _per_series(s0, s1, f"{base}_bucket", where).items():
        le = _le(labels)
        if le is None:
            continue
        group = _group(labels, keep) if keep else ()
        g = out.get(group)
        if g is None:
            g = out[group] = {}
        g[le] = g.get(le, 0.0) + inc
    return out


def quantile(buckets: Mapping[float, float], q: float) -> float | None:
    """Prometheus's histogram_quantile over cumulative bucket counts {upper bound: count}."""
    if not buckets or not 0 <= q <= 1:
        return None
    bounds = sorted(buckets)
    if bounds[-1] != math.inf:
        return None  # no +Inf bucket: not a valid histogram
    counts = [buckets[b] for b in bounds]
    for i in range(1, len(counts)):  # cumulative counts must not fall (scrapes mid-update can)
        counts[i] = max(counts[i], counts[i - 1])
    total = counts[-1]
    if total <= 0:
        return None
    rank = q * total
    i = next(i for i, c in enumerate(counts) if c >= rank)
    if bounds[i] == math.inf:
        return bounds[-2] if len(bounds) > 1 else None
    lo = 0.0 if i == 0 else bounds[i - 1]
    below = 0.0 if i == 0 else counts[i - 1]
    if i == 0 and bounds[0] <= 0:
        return bounds[0]
    inside = counts[i] - below
    if inside <= 0:
        return bounds[i]
    return lo + (bounds[i] - lo) * (rank - below) / inside


def _bucket_increases(scrapes: list[Scrape], base: str, by: tuple[str, ...], where: Where | None
                      ) -> list[tuple[Scrape, Scrape, dict[Labels, dict[float, float]]]]:
    return _pairs(scrapes, lambda s0, s1: bucket_increase(s0, s1, base, by, where))


def _window_quantile(incs: list[tuple[Scrape, Scrape, dict[Labels, dict[float, float]]]], q: float
                     ) -> dict[Labels, float]:
    total: dict[Labels, dict[float, float]] = {}
    for _a, _b, bks in incs:
        for g, bk in bks.items():
            acc = total.setdefault(g, {})
            for le, c in bk.items():
                acc[le] = acc.get(le, 0.0) + c
    out = {}
    for g, bk in total.items():
        v = quantile(bk, q)
        if v is not None:
            out[g] = v
    return out


def _interval_quantiles(incs: list[tuple[Scrape, Scrape, dict[Labels, dict[float, float]]]], q: float
                        ) -> tuple[list[float], dict[Labels, list[float | None]]]:
    times: list[float] = []
    cols: list[dict[Labels, float]] = []
    for a, b, bks in incs:
        if b.t <= a.t:
            continue
        times.append((a.t + b.t) / 2)
        col = {}
        for g, bk in bks.items():
            v = quantile(bk, q)
            if v is not None:
                col[g] = v
        cols.append(col)
    keys = sorted({k for c in cols for k in c})
    return times, {k: [c.get(k) for c in cols] for k in keys}


def histogram_quantile(scrapes: list[Scrape], base: str, q: float, by: tuple[str, ...] = (),
                       where: Where | None = None) -> dict[Labels, float]:
    """The q-quantile of the observations made during the window, per group."""
    if len(scrapes) < 2:
        return {}
    return _window_quantile(_bucket_increases(scrapes, base, by, where), q)


def histogram_quantile_series(scrapes: list[Scrape], base: str, q: float, by: tuple[str, ...] = (),
                              where: Where | None = None) -> tuple[list[float], dict[Labels, list[float | None]]]:
    return _interval_quantiles(_bucket_increases(scrapes, base, by, where), q)


def histogram_quantile_both(scrapes: list[Scrape], base: str, q: float, by: tuple[str, ...] = (),
                            where: Where | None = None
                            ) -> tuple[dict[Labels, float], list[float], dict[Labels, list[float | None]]]:
    """histogram_quantile() and histogram_quantile_series() with each interval's buckets read once."""
    incs = _bucket_increases(scrapes, base, by, where)
    return (_window_quantile(incs, q), *_interval_quantiles(incs, q))


def observations(scrapes: list[Scrape], base: str, by: tuple[str, ...] = (), where: Where | None = None
                 ) -> dict[Labels, tuple[float, float]]:
    """(observations per second, mean value) of a histogram or summary over the window, per group."""
    counts = rate(scrapes, f"{base}_count", by, where)
    sums = rate(scrapes, f"{base}_sum", by, where)
    return {g: (c, sums.get(g, 0.0) / c if c > 0 else math.nan) for g, c in counts.items()}


# --------------------------------------------------------------------------- gauges


def level(scrapes: list[Scrape], name: str, by: tuple[str, ...] = (), where: Where | None = None,
          how: str = "mean") -> dict[Labels, float]:
    """A gauge over the scrapes: ``mean``, ``max`` or ``last`` of its (summed by group) values."""
    per: dict[Labels, list[float]] = {}
    for s in scrapes:
        for k, v in _sum_by(s.snap, name, by, where).items():
            assert isinstance(k, tuple)
            per.setdefault(k, []).append(v)
    out = {}
    for k, vs in per.items():
        out[k] = max(vs) if how == "max" else vs[-1] if how == "last" else sum(vs) / len(vs)
    return out


def level_series(scrapes: list[Scrape], name: str, by: tuple[str, ...] = (), where: Where | None = None
                 ) -> tuple[list[float], dict[Labels, list[float | None]]]:
    cols = [{k: v for k, v in _sum_by(s.snap, name, by, where).items() if isinstance(k, tuple)} for s in scrapes]
    keys = sorted({k for c in cols for k in c})
    return [s.t for s in scrapes], {k: [c.get(k) for c in cols] for k in keys}


def label_text(labels: Labels) -> str:
    """``type=kv_get,store=1`` (or ``all``) for a group."""
    return ",".join(f"{k}={v}" for k, v in labels) or "all"
