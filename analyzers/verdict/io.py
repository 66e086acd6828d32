"""Block IO metrics (analyzers layer): latency percentiles, IOPS and bytes per device and op, and
the targets' share, from either backend's view: exact over per-IO events (perf), interpolated
inside histogram buckets (bcc)."""

from __future__ import annotations

import numpy as np
from profiler.analyzers.io import histograms, stats
from profiler.analyzers.verdict.model import IOGroup, IOMetrics
from profiler.analyzers.verdict.threads import top
from profiler.analyzers.views import IOEvents


def io_metrics(ev: IOEvents | None, target_tids: set[int], window: float) -> IOMetrics | None:
    if ev is None or len(ev.latency) == 0:
        return None
    lat_ms = ev.latency * 1e3
    span = window or (float(ev.t.max() - ev.t.min()) if len(ev.t) > 1 else 1.0)
    mine = np.isin(ev.tid, list(target_tids)) if target_tids else np.zeros(len(ev.tid), bool)
    # one group per (device, op), by their codes: a few groups over millions of IOs
    nop = max(len(ev.op_names), 1)
    ngroups = max(len(ev.dev_names), 1) * nop
    gid = ev.dev_code.astype(np.int64) * nop + ev.op_code
    per = stats.group_percentiles(lat_ms, gid, ngroups)
    nbytes = np.bincount(gid, weights=ev.nbytes, minlength=ngroups)
    nmine = np.bincount(gid, weights=mine, minlength=ngroups)
    groups: list[IOGroup] = []
    for g in np.flatnonzero(per["count"]).tolist():
        n = int(per["count"][g])
        groups.append(IOGroup(dev=ev.dev_names[g // nop], op=ev.op_names[g % nop], count=n, iops=n / span,
                              bytes=int(nbytes[g]), p50_ms=float(per["p50"][g]), p95_ms=float(per["p95"][g]),
                              p99_ms=float(per["p99"][g]), max_ms=float(per["max"][g]), target_share=float(nmine[g] / n)))
    groups.sort(key=lambda g: (-g.count, g.dev, g.op))
    issuers: dict[str, float] = {}
    for code, c in enumerate(np.bincount(ev.comm_code, minlength=len(ev.comm_names)).tolist()):
        if c:
            name = ev.comm_names[code]
            issuers[name] = issuers.get(name, 0.0) + float(c)
    overall = stats.group_percentiles(lat_ms, np.zeros(len(lat_ms), np.int64), 1, (50.0, 99.0))
    return IOMetrics(source=ev.source, total=len(lat_ms), groups=groups, p50_ms=float(overall["p50"][0]),
                     p99_ms=float(overall["p99"][0]), max_ms=float(overall["max"][0]),
                     target_share=float(mine.mean()) if target_tids else None,
                     top_issuers=top(dict(sorted(issuers.items()))), unpaired=ev.unpaired)


def io_metrics_from_hist(h: histograms.BlockHist, target_tids: set[int], window: float) -> IOMetrics | None:
    """IOMetrics from the bcc backend's in-kernel histograms, ops named as in the block events."""
    d = histograms.io_summary(h, target_tids or None, window or None)
    if not d["total"]:
        return None
    groups = [IOGroup(**{**g, "op": histograms.OP_NAMES.get(g["op"], g["op"])}) for g in d["groups"]]
    return IOMetrics(source=d["source"], total=d["total"], groups=groups, p50_ms=d["p50_ms"], p99_ms=d["p99_ms"],
                     max_ms=d["max_ms"], target_share=d["target_share"], top_issuers=list(d["top_issuers"]),
                     unpaired=d["unpaired"])
