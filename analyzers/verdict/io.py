"""Block IO metrics (analyzers layer): latency percentiles, IOPS and bytes per device and op, and
the targets' share, from either backend's view: exact over per-IO events (perf), interpolated
inside histogram buckets (bcc)."""

from __future__ import annotations

import numpy as np
from profiler.analyzers.io import histograms
from profiler.analyzers.verdict.model import IOGroup, IOMetrics
from profiler.analyzers.verdict.threads import top
from profiler.analyzers.views import IOEvents


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
    return IOMetrics(source=ev.source, total=len(lat_ms), groups=groups, p50_ms=float(np.percentile(lat_ms, 50)),
                     p99_ms=float(np.percentile(lat_ms, 99)), max_ms=float(lat_ms.max()),
                     target_share=float(mine.mean()) if target_tids else None,
                     top_issuers=top(issuers), unpaired=ev.unpaired)


def io_metrics_from_hist(h: histograms.BlockHist, target_tids: set[int], window: float) -> IOMetrics | None:
    """IOMetrics from the bcc backend's in-kernel histograms, ops named as in the block events."""
    d = histograms.io_summary(h, target_tids or None, window or None)
    if not d["total"]:
        return None
    groups = [IOGroup(**{**g, "op": histograms.OP_NAMES.get(g["op"], g["op"])}) for g in d["groups"]]
    return IOMetrics(source=d["source"], total=d["total"], groups=groups, p50_ms=d["p50_ms"], p99_ms=d["p99_ms"],
                     max_ms=d["max_ms"], target_share=d["target_share"], top_issuers=list(d["top_issuers"]),
                     unpaired=d["unpaired"])
