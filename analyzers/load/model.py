"""What a load generator printed, as plain data (analyzers layer).

Each parser (sysbench.py, goycsb.py, gotpc.py) turns the tool's own lines into the same three
things: the intervals it reported while running, the summary it printed at the end, and an
account of the lines it did not understand. Times here are the tool's own: seconds since the
load started as the tool counts them (``[ 10s ]``, ``Takes(s): 10.0``), or None when the tool
printed none; align.py puts them on the capture's clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Interval:
    """One progress report: the rates over the last ``duration`` seconds."""

    end: float | None  # seconds since the load started, as the tool counts; None: no time printed
    duration: float | None  # seconds the interval covers (None: unknown)
    tps: float | None  # transactions (sysbench: events) per second; go-ycsb: operations per second
    qps: float | None = None  # queries per second (sysbench OLTP only)
    errors: float | None = None  # failed transactions per second (sysbench err/s, go-ycsb *_ERROR, go-tpc *_ERR)
    latency_ms: dict[str, float] = field(default_factory=dict)  # "p95" -> ms, as printed
    threads: int | None = None
    line: int = 0  # 1-based line of the log that closed this interval
    ops: dict[str, float] = field(default_factory=dict)  # per operation type: per second (go-ycsb, go-tpc)


@dataclass
class OpSummary:
    """go-ycsb / go-tpc: one operation or transaction type over the whole run."""

    name: str
    count: int
    seconds: float | None
    rate: float | None  # per second
    latency_ms: dict[str, float] = field(default_factory=dict)  # "avg", "p99", ... -> ms
    error: bool = False  # an *_ERR / *_ERROR row: failed attempts of the type


@dataclass
class Summary:
    """The tool's own end-of-run figures."""

    tps: float | None = None
    qps: float | None = None
    errors: float | None = None  # per second
    transactions: int | None = None  # total over the run
    seconds: float | None = None  # the run's length as the tool measured it
    latency_ms: dict[str, float] = field(default_factory=dict)  # "min", "avg", "max", "p95"... -> ms
    threads: int | None = None
    ops: list[OpSummary] = field(default_factory=list)
    extra: dict[str, float] = field(default_factory=dict)  # e.g. go-tpc's tpmC, efficiency
    line: int = 0  # the line that completed it


@dataclass
class ParsedLoad:
    """A load log, read once: which tool printed it, and what it said."""

    tool: str | None  # "sysbench", "go-ycsb", "go-tpc", or None when no known tool's lines were found
    intervals: list[Interval] = field(default_factory=list)
    summary: Summary | None = None
    lines: int = 0  # lines read
    recognised: int = 0  # lines the tool's parser understood (banners, intervals, summaries)
    unknown: int = 0  # non-blank lines no parser understood (counted, never fatal)
    unknown_examples: list[str] = field(default_factory=list)  # the first few, for the report
    fatal: list[str] = field(default_factory=list)  # the tool's own error lines (sysbench FATAL:)
    notes: list[str] = field(default_factory=list)  # what was assumed while reading
    wall_times: dict[int, float] = field(default_factory=dict)  # line -> Unix time, from a timestamp prefix
    version: str | None = None  # the tool's version, when it printed it

    @property
    def latency_key(self) -> str | None:
        """The percentile the intervals carry ("p95", "p99"...), the most common one."""
        seen: dict[str, int] = {}
        for iv in self.intervals:
            for k in iv.latency_ms:
                seen[k] = seen.get(k, 0) + 1
        return max(seen, key=lambda k: (seen[k], k)) if seen else None


def percentile_key(text: str) -> str | None:
    """'95' -> 'p95', '99.9' -> 'p99.9', '0' -> None (sysbench --percentile=0: disabled)."""
    try:
        value = float(text)
    except ValueError:
        return None
    if value <= 0 or value > 100:
        return None
    return "p" + (f"{value:g}")
