"""Warm-up, steady state and throughput dips of a load run (analyzers layer).

The rules (docs/load.md):

- **Steady level**: the median throughput of the second half of the run's intervals (at
  least ``MIN_INTERVALS`` of them; fewer and no phase is judged).
- **Warm-up**: the intervals before the first one, in the first half of the run (its middle
  interval included), that reaches
  ``WARMUP_REACH`` (90%) of the steady level. None reaching it in the first half means the run
  never settled: the whole run is used and the report says so.
- **Verdict window**: from the end of the warm-up to the end of the last interval, inside the
  capture. A window shorter than ``MIN_WINDOW_S`` seconds or ``MIN_WINDOW_SHARE`` of the
  capture is not used (the verdict keeps the whole capture, and says why).
- **Dip**: inside the window, consecutive intervals below ``DIP_BELOW`` (70%) of the window's
  median throughput; each dip names its time range and how deep it went.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from profiler.analyzers.load.align import Point

MIN_INTERVALS = 4
WARMUP_REACH = 0.9
DIP_BELOW = 0.7
MIN_WINDOW_S = 3.0
MIN_WINDOW_SHARE = 0.25


@dataclass
class Dip:
    start: float  # CLOCK_MONOTONIC seconds
    end: float
    lowest: float  # lowest interval throughput in it
    mean: float
    level: float  # the window's median throughput
    intervals: int

    @property
    def drop(self) -> float:
        """How far below the level the dip's mean went (0.45 = 45% below)."""
        return 1.0 - self.mean / self.level if self.level > 0 else 0.0


@dataclass
class Phases:
    level: float | None = None  # steady throughput (per s): the window's median (else the second half's)
    warmup_end: float | None = None  # CLOCK_MONOTONIC end of the warm-up (None: no warm-up found)
    warmup_intervals: int = 0
    window: tuple[float, float] | None = None  # the verdict window (monotonic), None: the whole capture
    reason: str = ""  # one sentence: how the window was chosen
    dips: list[Dip] = field(default_factory=list)


def _rates(points: list[Point]) -> list[tuple[Point, float]]:
    return [(p, p.interval.tps) for p in points if p.interval.tps is not None]


def find_phases(points: list[Point], capture: tuple[float, float] | None) -> Phases:
    """Warm-up, window and dips of placed intervals; ``capture``: its (start, end), monotonic."""
    rated = _rates(points)
    out = Phases()
    if len(rated) < MIN_INTERVALS:
        out.reason = (f"the load printed {len(rated)} timed interval{'s' if len(rated) != 1 else ''} "
                      f"(at least {MIN_INTERVALS} are needed to find a warm-up): the whole capture is used")
        return out
    half = len(rated) // 2
    level = statistics.median(r for _, r in rated[half:])
    out.level = level
    # the first half, its middle interval included when the count is odd
    first = next((i for i, (_, r) in enumerate(rated[: (len(rated) + 1) // 2]) if r >= WARMUP_REACH * level), None)
    if first is None:
        out.reason = (f"throughput never reached {WARMUP_REACH:.0%} of its steady level ({level:,.0f}/s) in the "
                      "first half of the run (no steady state): the whole capture is used")
        return out
    start = rated[first][0].start
    end = rated[-1][0].end
    if first > 0:
        out.warmup_end, out.warmup_intervals = start, first
        what = (f"warm-up: the first {first} interval{'s' if first != 1 else ''} stayed below "
                f"{WARMUP_REACH:.0%} of the steady {level:,.0f}/s and {'are' if first != 1 else 'is'} left out")
    else:
        what = "no warm-up: throughput was at its steady level from the first interval"
    if capture is not None:
        start, end = max(start, capture[0]), min(end, capture[1])
    span = (capture[1] - capture[0]) if capture is not None else end - start
    if end - start < max(MIN_WINDOW_S, MIN_WINDOW_SHARE * span):
        out.reason = (f"{what}; the steady part inside the capture is {max(end - start, 0):.1f} s, too short "
                      f"for a verdict (at least {MIN_WINDOW_S:g} s and {MIN_WINDOW_SHARE:.0%} of the capture): "
                      "the whole capture is used")
        return out
    out.window = (start, end)
    out.reason = f"{what}; the verdict covers the steady load"
    inside = [p for p in points if p.start >= start - 1e-6 and p.end <= end + 1e-6]
    steady = [r for _, r in _rates(inside)]
    if steady:
        out.level = statistics.median(steady)  # the level the dips are measured against
    out.dips = find_dips(inside)
    return out


def find_dips(points: list[Point]) -> list[Dip]:
    """Runs of consecutive intervals below DIP_BELOW of these points' median throughput."""
    rated = _rates(points)
    if len(rated) < MIN_INTERVALS:
        return []
    level = statistics.median(r for _, r in rated)
    if level <= 0:
        return []
    dips: list[Dip] = []
    run: list[tuple[Point, float]] = []
    for p, r in rated + [(rated[-1][0], float("inf"))]:
        if r < DIP_BELOW * level:
            run.append((p, r))
            continue
        if run:
            rates = [x for _, x in run]
            dips.append(Dip(start=run[0][0].start, end=run[-1][0].end, lowest=min(rates),
                            mean=statistics.fmean(rates), level=level, intervals=len(run)))
            run = []
    return dips
