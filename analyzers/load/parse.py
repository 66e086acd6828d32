"""Read a load log in one pass and tell which tool printed it (analyzers layer).

Every line goes to each tool's parser (sysbench, go-ycsb, go-tpc); each claims the lines in
its own dialect. The tool is the one whose figures (intervals, summary lines) were found, ties
going to the one that claimed more of its own lines (a banner, ``FATAL:``...); when none
printed anything of its own, the tool is unknown and the log is only kept. A line no parser
claims is counted as unknown (the first few kept for the report), never an error. A
timestamp prefix (timestamps.py) is stripped first and its time kept per line.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from profiler.analyzers.load.gotpc import GoTpcParser
from profiler.analyzers.load.goycsb import GoYcsbParser
from profiler.analyzers.load.model import Interval, ParsedLoad, Summary
from profiler.analyzers.load.sysbench import SysbenchParser
from profiler.analyzers.load.timestamps import strip_timestamp

TOOLS = ("sysbench", "go-ycsb", "go-tpc")
UNKNOWN_EXAMPLES = 3
MAX_LINE = 4096  # longer lines are cut before parsing (a binary or runaway log stays cheap)


class ToolParser(Protocol):
    tool: str
    intervals: list[Interval]
    fatal: list[str]
    version: str | None
    data_lines: int

    def feed(self, lineno: int, text: str) -> bool: ...

    def result(self) -> Summary | None: ...


def parse_lines(lines: Iterable[str], *, utc_offset: float = 0.0, year: int | None = None) -> ParsedLoad:
    """Parse a load log's lines (streaming: one pass, memory for the figures only)."""
    parsers: list[ToolParser] = [SysbenchParser(), GoYcsbParser(), GoTpcParser()]
    claimed = [0] * len(parsers)
    unclaimed = [0] * len(parsers)  # per parser: non-blank lines it did not claim
    examples: list[list[str]] = [[] for _ in parsers]  # per parser: the first few of them
    out = ParsedLoad(tool=None)
    n = 0
    for n, raw in enumerate(lines, 1):
        text = raw.rstrip("\r\n")[:MAX_LINE]
        wall, text = strip_timestamp(text, utc_offset, year)
        if wall is not None:
            out.wall_times[n] = wall
        if not text.strip():
            continue
        for i, p in enumerate(parsers):
            if p.feed(n, text):
                claimed[i] += 1
            else:
                unclaimed[i] += 1
                if len(examples[i]) < UNKNOWN_EXAMPLES:
                    examples[i].append(text.strip())
    out.lines = n
    summaries = [p.result() for p in parsers]
    best = max(range(len(parsers)), key=lambda i: (parsers[i].data_lines, claimed[i], -i))
    chosen = parsers[best]
    if chosen.data_lines == 0 and claimed[best] == 0:
        out.unknown = unclaimed[0]  # nobody claimed anything: every non-blank line is unknown
        out.unknown_examples = examples[0]
        return out
    out.tool = chosen.tool
    out.intervals = chosen.intervals
    out.summary = summaries[best]
    out.fatal = chosen.fatal
    out.version = chosen.version
    out.recognised = claimed[best]
    out.unknown = unclaimed[best]
    out.unknown_examples = examples[best]
    if chosen.tool == "go-ycsb" and any(iv.latency_ms for iv in out.intervals):
        out.notes.append("go-ycsb prints percentiles since the run started, not per interval")
    if chosen.tool in ("go-ycsb", "go-tpc") and out.summary is not None and len(
            [o for o in out.summary.ops if not o.error and o.name.upper() != "TOTAL"]) > 1 and not any(
            o.name.upper() == "TOTAL" and o.latency_ms for o in out.summary.ops):
        out.notes.append(f"{chosen.tool} prints percentiles per operation type: the largest is given "
                         "(an upper bound of the combined one)")
    return out
