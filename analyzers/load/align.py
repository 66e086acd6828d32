"""Put a load's intervals on the capture's clock (analyzers layer).

Each interval ends at a CLOCK_MONOTONIC time found by the first rule that applies:

1. the time the profiler read the interval's line (``profiler run`` pipes the load's output
   and notes when each line arrived; ``profiler attach --load-log`` follows the file while it
   captures): the tool prints a report when its interval ends, so this is the interval's end;
2. the line's own absolute timestamp (a ``ts``/``date`` prefix, timestamps.py), moved to the
   monotonic clock with the manifest's wall-clock offset;
3. the load's start plus the tool's own time (``[ 10s ]``, ``Takes(s)``): the start is the
   moment ``profiler run`` spawned it, or ``--load-start``, or, when neither is known but
   some lines were timed by rules 1-2, the median of (line time - tool time) over those;
4. otherwise the interval cannot be placed (its figures still count in the summary).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from profiler.analyzers.load.model import Interval, ParsedLoad


@dataclass
class Point:
    """One interval on the capture's clock."""

    end: float  # CLOCK_MONOTONIC seconds
    duration: float | None
    interval: Interval

    @property
    def start(self) -> float:
        return self.end - (self.duration or 0.0)

    @property
    def mid(self) -> float:
        return self.end - (self.duration or 0.0) / 2


@dataclass
class Placement:
    points: list[Point] = field(default_factory=list)
    how: str | None = None  # which rule placed most of them, for the report
    start: float | None = None  # the load's start on the monotonic clock, when known or estimated
    unplaced: int = 0  # intervals no rule could place
    notes: list[str] = field(default_factory=list)


def place(parsed: ParsedLoad, *, line_times: dict[int, float] | None = None, start: float | None = None,
          wall_offset: float = 0.0) -> Placement:
    """The parsed intervals on the monotonic clock. ``line_times``: line -> monotonic arrival;
    ``start``: the load's start (monotonic) if known; ``wall_offset``: wall = monotonic + offset."""
    line_times = line_times or {}
    out = Placement(start=start)
    timed: list[tuple[Interval, float, str]] = []
    for iv in parsed.intervals:
        if iv.line in line_times:
            timed.append((iv, line_times[iv.line], "the time each report line was read"))
        elif iv.line in parsed.wall_times:
            timed.append((iv, parsed.wall_times[iv.line] - wall_offset, "the timestamps printed in the log"))
    if out.start is None:
        offsets = [t - iv.end for iv, t, _ in timed if iv.end is not None]
        if offsets:
            out.start = statistics.median(offsets)
            out.notes.append("the load's start was worked out from the report lines timed during the capture")
    elif timed:
        offsets = [t - iv.end for iv, t, _ in timed if iv.end is not None]
        if offsets and abs(statistics.median(offsets) - out.start) > 2.0:
            out.notes.append(f"the log's report lines put the load's start {statistics.median(offsets) - out.start:+.1f} s "
                             "from the start given: the lines' own times were used")
    known = {id(iv): (t, how) for iv, t, how in timed}
    rules: dict[str, int] = {}
    prev_end: float | None = None
    for iv in parsed.intervals:
        if id(iv) in known:
            end, how = known[id(iv)]
        elif out.start is not None and iv.end is not None:
            end, how = out.start + iv.end, "the load's start plus the tool's own times"
        else:
            out.unplaced += 1
            continue
        duration = iv.duration
        if duration is None and prev_end is not None and end > prev_end:
            duration = end - prev_end
        out.points.append(Point(end=end, duration=duration, interval=iv))
        rules[how] = rules.get(how, 0) + 1
        prev_end = end
    out.how = max(rules, key=lambda k: rules[k]) if rules else None
    out.points.sort(key=lambda p: p.end)
    return out
