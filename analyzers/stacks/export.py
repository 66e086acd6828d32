"""Stacks to hand to other tools: one sample type of folded stacks and its unit (analyzers layer).

The model the stack exporters (profiler/renderers/pprof_out.py, speedscope.py) write: folded
stacks (root first, ``;``-separated, as every stack input folds to) with one value each, and
what the values are (``cpu``/nanoseconds from perf's cpu-clock periods, ``offcpu``/microseconds
of blocked time, ``samples``/count, or a pprof input's own sample type).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# our units -> pprof's (type, unit) when the input did not name them
_PPROF_TYPES = {"ns": ("cpu", "nanoseconds"), "us": ("offcpu", "microseconds"), "samples": ("samples", "count"),
                "goroutines": ("goroutine", "count"), "events": ("events", "count")}


@dataclass
class StackProfile:
    counts: dict[str, int]  # folded stack -> value
    sample_type: str = "samples"  # cpu | offcpu | samples | goroutine | a pprof input's type
    unit: str = "count"  # nanoseconds | microseconds | count | bytes ...
    name: str = ""  # what it is, for the file's title (the input and its event)
    duration_ns: int = 0
    period: int = 0  # the sampling period in ``unit`` (0: unknown)
    comments: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def stacks(self) -> list[tuple[list[str], int]]:
        """(frames root first, value), largest first, ties by stack text (deterministic output)."""
        rows = sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))
        return [(stack.split(";"), n) for stack, n in rows if n > 0]


def sample_type_of(unit: str, event: str | None) -> tuple[str, str]:
    """(type, unit) for an export: a pprof input's ``cpu/nanoseconds`` kept, else from our unit."""
    if event and "/" in event and " " not in event:
        t, _, u = event.partition("/")
        return t, u
    return _PPROF_TYPES.get(unit, (unit or "samples", "count"))
