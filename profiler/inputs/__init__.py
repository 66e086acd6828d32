"""One reader per input format, behind one small interface (inputs layer; docs/inputs.md).

Each format module declares a ``FORMAT`` (its name, and ``sniff``: a test of the first 64 KiB,
decompressed when gzip) and functions that open a :class:`~profiler.inputs.source.Source` and
stream its records. :func:`detect` is the only place that guesses formats; the tuples below say
which formats a request accepts, in the order they are tried (the first that claims the head
wins, so the most specific come first and perf script text, the text fallback, last).

May import profiler.bundle, profiler.errors and profiler.knowledge only.
"""

from __future__ import annotations

from profiler.inputs import (
    biosnoop,
    blocktrace,
    bundles,
    folded,
    pairs,
    perfdata,
    perfscript,
    perfstat,
    pprof,
)
from profiler.inputs.source import Format, Source, detect
from profiler.inputs.window import TimeWindow

__all__ = ["Format", "Source", "TimeWindow", "detect", "STACKS", "BLOCK_EVENTS", "SAMPLE_TIMES", "COUNTERS"]

# What a flame graph is drawn from.
STACKS: tuple[Format, ...] = (bundles.FORMAT, perfdata.FORMAT, pprof.FORMAT, folded.FORMAT, perfscript.FORMAT)
# What an IO latency heatmap is drawn from.
BLOCK_EVENTS: tuple[Format, ...] = (bundles.FORMAT, perfdata.FORMAT, blocktrace.FORMAT, biosnoop.FORMAT, pairs.FORMAT)
# Timestamped CPU samples (the sub-second heatmap).
SAMPLE_TIMES: tuple[Format, ...] = (bundles.FORMAT, perfdata.FORMAT, perfscript.FORMAT)
# Standalone perf stat output (`profiler stat`).
COUNTERS: tuple[Format, ...] = (perfstat.CSV, perfstat.TABLE)
