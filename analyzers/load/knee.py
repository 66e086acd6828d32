"""Where throughput stops scaling with concurrency: the knee of a sweep (analyzers layer).

A closed-loop load (sysbench, go-ycsb, go-tpc threads each waiting for their answer) obeys
Little's law: concurrency = throughput x latency. Doubling the threads either doubles the
throughput (the system had room) or doubles the latency (the added threads only queue).
The gain per doubling between two steps of N1 and N2 threads is

    g = (X2 / X1) ** (1 / log2(N2 / N1)) - 1

(0.15 = 15% more throughput for each doubling of threads, whatever the steps' spacing).

**The knee** is the smallest thread count N_k such that
  1. its throughput is within ``NEAR_PEAK`` (90%) of the best step's (it has reached the
     plateau: a curve that dips and recovers is not cut at the dip), and
  2. no later step gains ``SCALING_MIN`` (15%) or more per doubling over it: from there, at
     least 85% of any added concurrency turns into queueing, i.e. latency grows close to
     linearly with threads while throughput stays.
No such step before the last: no knee in the range ("still scaling"). The rule is tested on
the seeds' hand-made sweeps (seed 002) and on curves with and without a knee.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

NEAR_PEAK = 0.9
SCALING_MIN = 0.15
MIN_STEPS = 3


@dataclass(frozen=True)
class CurvePoint:
    threads: float
    tps: float | None
    latency_ms: float | None = None  # the step's p95 or p99


@dataclass
class Knee:
    threads: float | None  # None: no knee in the range
    reason: str
    gain_after: float | None = None  # the largest gain per doubling past the knee
    gain_before: float | None = None  # gain per doubling over the step leading to the knee


def gain_per_doubling(n1: float, x1: float, n2: float, x2: float) -> float:
    """Throughput gain for each doubling of threads between two steps (see the module docstring)."""
    if n1 <= 0 or n2 <= n1 or x1 <= 0 or x2 < 0:
        raise ValueError("steps must have growing thread counts and positive throughput")
    if x2 == 0:
        return -1.0
    return float((x2 / x1) ** (1.0 / math.log2(n2 / n1)) - 1.0)


def _fmt_n(n: float) -> str:
    return f"{n:g}"


def find_knee(points: list[CurvePoint], *, param: str = "threads", latency_name: str = "latency") -> Knee:
    """The knee of a throughput curve (rule in the module docstring)."""
    pts = sorted((p for p in points if p.tps is not None and p.tps > 0 and p.threads > 0), key=lambda p: p.threads)
    if len(pts) < MIN_STEPS:
        return Knee(None, f"{len(pts)} step{'s' if len(pts) != 1 else ''} with a throughput: at least {MIN_STEPS} "
                          "are needed to find a knee")
    peak = max(p.tps or 0.0 for p in pts)
    for k, p in enumerate(pts[:-1]):
        x = p.tps or 0.0
        if x < NEAR_PEAK * peak:
            continue
        gains = [gain_per_doubling(p.threads, x, q.threads, q.tps or 0.0) for q in pts[k + 1:]]
        if max(gains) >= SCALING_MIN:
            continue
        nxt = pts[k + 1]
        before = gain_per_doubling(pts[k - 1].threads, pts[k - 1].tps or 0.0, p.threads, x) if k > 0 else None
        last = pts[-1]
        total = (last.tps or 0.0) / x - 1.0
        why = (f"throughput stops scaling past {_fmt_n(p.threads)} {param}: from {_fmt_n(p.threads)} to "
               f"{_fmt_n(last.threads)} it {'gained' if total >= 0 else 'lost'} {abs(total):.0%} "
               f"(at most {max(gains):+.0%} per doubling; the knee rule asks less than {SCALING_MIN:.0%})")
        if before is not None:
            why += f", after {before:+.0%} per doubling from {_fmt_n(pts[k - 1].threads)}"
        if p.latency_ms and nxt.latency_ms:
            why += (f"; {latency_name} grew {nxt.latency_ms / p.latency_ms:.1f}x from {_fmt_n(p.threads)} to "
                    f"{_fmt_n(nxt.threads)} {param} while throughput changed {(nxt.tps or 0.0) / x - 1.0:+.0%}")
        return Knee(p.threads, why, gain_after=max(gains), gain_before=before)
    a, b = pts[-2], pts[-1]
    g = gain_per_doubling(a.threads, a.tps or 0.0, b.threads, b.tps or 0.0)
    # (the best step always meets both conditions: no knee means the best is the last step)
    return Knee(None, f"no knee up to {_fmt_n(b.threads)} {param}: throughput still grows {g:+.0%} per doubling "
                      f"from {_fmt_n(a.threads)} to {_fmt_n(b.threads)} (a knee needs less than {SCALING_MIN:.0%}); "
                      "sweep further", gain_after=g)
