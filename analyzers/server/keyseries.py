"""The metrics users read in Grafana, computed from a capture's scrapes (analyzers layer).

For each metric profiler.knowledge.servers knows and the server exports, one value per group
over the window (a rate, a quantile, a level, a hit ratio, CPU by thread pool) and one value
per scrape interval for the timeline. Groups are the metric's ``by`` labels
(``type=kv_prewrite``); the largest :data:`MAX_GROUPS` are kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from profiler.analyzers.server import series as S
from profiler.analyzers.server.prometheus import Labels

from profiler.knowledge import pool_of
from profiler.knowledge.servers import (
    HIT_RATIO,
    LEVEL,
    MEAN,
    POOL_CPU,
    QUANTILE,
    RATE,
    MetricInfo,
    for_server,
)

MAX_GROUPS = 8
UNSET_LIMIT = 2**62


@dataclass
class KeyValue:
    info: MetricInfo
    metric: str  # the family found (the name or one of its aliases)
    window: dict[str, float] = field(default_factory=dict)  # group -> value over the window
    times: list[float] = field(default_factory=list)  # capture clock
    spans: list[tuple[float, float]] = field(default_factory=list)  # the interval each value stands for
    series: dict[str, list[float | None]] = field(default_factory=dict)  # group -> one value per time

    @property
    def total(self) -> float | None:
        """One number for the whole metric: the sum of rates/CPU, the max of quantiles/levels/ratios' mean."""
        vals = [v for v in self.window.values() if not math.isnan(v)]
        if not vals:
            return None
        if self.info.show in (RATE, POOL_CPU):
            return sum(vals)
        if self.info.show == HIT_RATIO:
            return sum(vals) / len(vals)
        return max(vals)


def _present(names: set[str], m: MetricInfo) -> str | None:
    for name in (m.metric, *m.aliases):
        if m.show in (QUANTILE,) and f"{name}_bucket" in names:
            return name
        if m.show == MEAN and f"{name}_count" in names:
            return name
        if m.show not in (QUANTILE, MEAN) and name in names:
            return name
    return None


def _text(groups: dict[Labels, float]) -> dict[str, float]:
    return {S.label_text(k): v for k, v in groups.items()}


def _top(window: dict[str, float], series: dict[str, list[float | None]]) -> tuple[dict[str, float],
                                                                                 dict[str, list[float | None]]]:
    """The largest groups; groups at zero (a gRPC method nobody called) go when another is not zero."""
    ranked = sorted(window, key=lambda k: (-(window[k] if not math.isnan(window[k]) else -1), k))
    live = [k for k in ranked if not math.isnan(window[k]) and window[k] != 0]
    keep = (live or ranked)[:MAX_GROUPS]
    return {k: window[k] for k in keep}, {k: series[k] for k in keep if k in series}


def _scaled(values: dict[str, float], scale: float) -> dict[str, float]:
    return {k: v * scale for k, v in values.items()} if scale != 1.0 else values


def _scaled_series(values: dict[str, list[float | None]], scale: float) -> dict[str, list[float | None]]:
    if scale == 1.0:
        return values
    return {k: [None if v is None else v * scale for v in vs] for k, vs in values.items()}


def evaluate(m: MetricInfo, name: str, scrapes: list[S.Scrape]) -> KeyValue:
    kv = KeyValue(m, name)
    where = dict(m.where)
    if m.show == RATE:
        window, kv.times, ser = S.rate_both(scrapes, name, m.by, where)
        kv.window = _text(window)
        kv.series = {S.label_text(k): v for k, v in ser.items()}
    elif m.show == QUANTILE:
        quantiles, kv.times, ser = S.histogram_quantile_both(scrapes, name, m.q, m.by, where)
        kv.window = _text(quantiles)
        kv.series = {S.label_text(k): v for k, v in ser.items()}
    elif m.show == LEVEL:
        kv.window = _text(S.level(scrapes, name, m.by, where, "max" if "max" in str(m.where) else "mean"))
        kv.times, ser = S.level_series(scrapes, name, m.by, where)
        kv.series = {S.label_text(k): v for k, v in ser.items()}
    elif m.show == MEAN:
        obs = S.observations(scrapes, name, m.by, where)
        kv.window = {S.label_text(k): mean for k, (_rate, mean) in obs.items()}
    elif m.show == HIT_RATIO:
        label, hit, miss = m.ratio
        counter = scrapes[0].snap.family_type(name) == "counter" if scrapes else True
        if counter:  # each interval's increase read once for the window and the timeline
            hits, times, hs = S.rate_both(scrapes, name, m.by, {**where, label: hit})
            misses, _t, ms = S.rate_both(scrapes, name, m.by, {**where, label: miss})
        else:
            hits = S.level(scrapes, name, m.by, {**where, label: hit})
            misses = S.level(scrapes, name, m.by, {**where, label: miss})
        for g in set(hits) | set(misses):
            h, x = hits.get(g, 0.0), misses.get(g, 0.0)
            if h + x > 0:
                kv.window[S.label_text(g)] = h / (h + x)
        if counter:
            kv.times = times
            for g in set(hs) | set(ms):
                hv: list[float | None] = hs.get(g) or [None] * len(kv.times)
                mv: list[float | None] = ms.get(g) or [None] * len(kv.times)
                ratios: list[float | None] = []
                for a, b in zip(hv, mv, strict=False):
                    ratios.append(a / (a + b) if a is not None and b is not None and a + b > 0 else None)
                kv.series[S.label_text(g)] = ratios
    elif m.show == POOL_CPU:
        per, times, ser = S.rate_both(scrapes, name, ("name",), where)
        pools: dict[str, float] = {}
        for labels, v in per.items():
            pool = pool_of(dict(labels).get("name", "?"))
            pools[pool] = pools.get(pool, 0.0) + v
        kv.window = pools
        kv.times = times
        agg: dict[str, list[float | None]] = {}
        for labels, vals in ser.items():
            pool = pool_of(dict(labels).get("name", "?"))
            acc = agg.setdefault(pool, [None] * len(vals))
            for i, val in enumerate(vals):
                if val is not None:
                    acc[i] = (acc[i] or 0.0) + val
        kv.series = agg
    if m.show == LEVEL:
        ts = [s.t for s in scrapes]
        kv.spans = list(zip(ts, ts[1:] + ts[-1:], strict=True))
    else:
        kv.spans = [(a.t, b.t) for a, b in zip(scrapes, scrapes[1:], strict=False) if b.t > a.t]
    kv.window = _scaled(kv.window, m.scale)
    kv.series = _scaled_series(kv.series, m.scale)
    kv.window, kv.series = _top(kv.window, kv.series)
    return kv


def key_values(server: str | None, scrapes: list[S.Scrape]) -> list[KeyValue]:
    """Every known metric of this server (and of the Go runtime) that its scrapes hold."""
    if len(scrapes) < 1:
        return []
    names = set().union(*(s.snap.names() for s in scrapes))
    out = []
    for m in for_server(server):
        name = _present(names, m)
        if name is None:
            continue
        kv = evaluate(m, name, scrapes)
        if m.key == "go.memory_limit" and (kv.total or 0) >= UNSET_LIMIT:
            continue  # GOMEMLIMIT not set (the runtime reports math.MaxInt64)
        if kv.window or kv.series:
            out.append(kv)
    return out
