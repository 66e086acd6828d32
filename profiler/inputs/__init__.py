"""One reader per input format, behind one small interface (inputs layer; docs/inputs.md).

Each format module declares a ``FORMAT`` (its name, and ``sniff``: a test of the first 64 KiB,
decompressed when gzip) and functions that open a :class:`~profiler.inputs.source.Source` and
stream its records. :func:`detect` is the only place that guesses formats, among those a request
accepts, in the order given (the first that claims the head wins, so the most specific come first
and perf script text, the text fallback, last). Which formats a verb accepts, and how each is
read into its model, is one table in its use case, a row per format: profiler/usecases/
flamegraph.py ``STACK_READERS`` and ``OFFCPU_READERS``, export.py ``EXPORT_READERS`` and
``OFFCPU_EXPORT_READERS``, heatmap.py ``LATENCY_READERS`` and ``TIMES_READERS``; ``COUNTERS``
below for `profiler stat` (perfstat.read_source reads both). What a format cannot give is its
Format's to say (``untimed``, ``labels``), never a use case's test of which format it is.

May import profiler.bundle, profiler.errors and profiler.knowledge only.
"""

from __future__ import annotations

from profiler.inputs import perfstat
from profiler.inputs.source import Format, Source, detect
from profiler.inputs.window import TimeWindow

__all__ = ["Format", "Source", "TimeWindow", "detect", "COUNTERS"]

# Standalone perf stat output (`profiler stat`).
COUNTERS: tuple[Format, ...] = (perfstat.CSV, perfstat.TABLE)
