"""go-ycsb output -> intervals and summary (analyzers layer).

go-ycsb prints, every 10 s while it runs and once more after ``Run finished, takes 1.07s``,
one line per operation type with its figures *since the run started* (cumulative: the
count grows, ``Takes(s)`` is the time since the start):

- ``READ   - Takes(s): 1.1, Count: 524, OPS: 492.4, Avg(us): 3221, Min(us): 799, Max(us): 22979,
  99th(us): 15000, 99.9th(us): 23000, 99.99th(us): 23000`` (2020 and later);
- ``INSERT - Takes(s): 9.9, Count: 23256, QPS: 2353.1, Avg(us): 42878, Min(us): 17732,
  Max(us): 257349, 95th(us): 73000, 99th(us): 208000`` (older: ``QPS:`` and a 95th);
- operation names with underscores (``READ_MODIFY_WRITE``), ``*_ERROR`` rows (failed
  operations), a ``TOTAL`` row in newer versions.

A report is one block: the lines up to an operation name seen again (or ``Run finished``).
An interval's rate per operation is the difference of counts over the difference of
``Takes(s)`` between two blocks; its throughput is the sum over operations (not errors, not
TOTAL). Percentiles are cumulative since the start (go-ycsb prints no per-interval ones); the
``TOTAL`` row's are every operation's together (v1.0.3 prints it: its own measurement of all
operations), else over several operation types the largest is given (an upper bound of the
combined percentile).
The block after ``Run finished`` (else the last block) is the summary. ``INFO[0000]`` log
lines, the properties banner and ``Using request distribution`` are recognised.
"""

from __future__ import annotations

import re

from profiler.analyzers.load.model import Interval, OpSummary, Summary
from profiler.analyzers.load.oplines import OpLine, parse_op_line

_FINISHED = re.compile(r"^\s*Run finished, takes\s+(\d+(?:\.\d+)?)(ms|s|m|µs|us|h)\b")
_KNOWN = re.compile(
    r"^\s*(?:(?:INFO|WARN|WARNING|ERRO|ERROR|DEBU|DEBUG)\[\d+\]|\*{5,}|\"[\w.]+\"=|Using request distribution"
    r"|\*+ properties \*+|\[\d{4}/\d{2}/\d{2} [\d:.]+ [+-]\d{2}:\d{2}\] \[(?:INFO|WARN|ERROR|DEBUG)\])"
)
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "us": 1e-6, "µs": 1e-6}


def _is_ycsb(line: OpLine) -> bool:
    return line.prefix is None and "TPM" not in line.rates and ("OPS" in line.rates or "QPS" in line.rates)


class GoYcsbParser:
    """Feed lines one at a time (streaming)."""

    tool = "go-ycsb"

    def __init__(self) -> None:
        self.intervals: list[Interval] = []
        self.fatal: list[str] = []
        self.version: str | None = None
        self.data_lines = 0
        self.finished_after: float | None = None  # "Run finished, takes ..." in seconds
        self._block: dict[str, OpLine] = {}
        self._block_line = 0
        self._prev: dict[str, OpLine] = {}
        self._final: dict[str, OpLine] | None = None
        self._final_line = 0
        self._after_finish = False

    def feed(self, lineno: int, text: str) -> bool:
        line = parse_op_line(text)
        if line is not None and _is_ycsb(line):
            self.data_lines += 1
            if line.op in self._block:
                self._close()
            self._block[line.op] = line
            self._block_line = lineno
            return True
        m = _FINISHED.match(text)
        if m:
            self._close()
            self.finished_after = float(m.group(1)) * _UNIT_S[m.group(2)]
            self._after_finish = True
            return True
        return bool(_KNOWN.match(text))

    def _close(self) -> None:
        block, self._block = self._block, {}
        if not block:
            return
        if self._after_finish:
            self._final, self._final_line = block, self._block_line
            return
        self.intervals.append(self._interval(block))
        self._prev = block
        self._final, self._final_line = block, self._block_line

    def _interval(self, block: dict[str, OpLine]) -> Interval:
        end = max(ln.takes for ln in block.values())
        prev_end = max((ln.takes for ln in self._prev.values()), default=0.0)
        ops: dict[str, float] = {}
        tps = errors = 0.0
        for name, ln in block.items():
            before = self._prev.get(name)
            dc = ln.count - (before.count if before is not None else 0)
            dt = ln.takes - (before.takes if before is not None else 0.0)
            if dt <= 0:
                dt = end - prev_end
            rate = dc / dt if dt > 0 else 0.0
            ops[name] = rate
            if ln.total:
                continue
            if ln.error:
                errors += rate
            else:
                tps += rate
        if any(ln.total for ln in block.values()):
            tps = next(ops[n] for n, ln in block.items() if ln.total) - errors
        return Interval(end=end, duration=end - prev_end if end > prev_end else None, tps=tps, errors=errors,
                        latency_ms=_latency(block), line=self._block_line, ops=ops)

    def result(self) -> Summary | None:
        self._close()
        block = self._final
        if not block:
            return None
        ops = [OpSummary(name=n, count=ln.count, seconds=ln.takes, rate=_rate(ln), latency_ms=dict(ln.latency_ms),
                         error=ln.error) for n, ln in sorted(block.items())]
        seconds = max(ln.takes for ln in block.values())
        total = next((o for o in ops if o.name.upper() == "TOTAL"), None)
        work = [o for o in ops if not o.error and o.name.upper() != "TOTAL"]
        count = total.count if total is not None else sum(o.count for o in work)
        errs = sum(o.count for o in ops if o.error)
        if total is not None:
            count -= errs
        if self.finished_after:
            seconds = self.finished_after
        tps = count / seconds if seconds > 0 else None
        return Summary(tps=tps, errors=errs / seconds if seconds > 0 else None, transactions=count, seconds=seconds,
                       latency_ms=_latency(block), ops=ops, line=self._final_line)


def _rate(line: OpLine) -> float | None:
    for key in ("OPS", "QPS"):
        if key in line.rates:
            return line.rates[key]
    return line.count / line.takes if line.takes > 0 else None


def _latency(block: dict[str, OpLine]) -> dict[str, float]:
    """The block's latency figures: the TOTAL row's (go-ycsb measures every operation there) when
    it has one, else the upper bound over the operation types."""
    total = next((ln for ln in block.values() if ln.total and not ln.error and ln.latency_ms), None)
    return dict(total.latency_ms) if total is not None else _upper_percentiles(block)


def _upper_percentiles(block: dict[str, OpLine]) -> dict[str, float]:
    """Per latency figure, the largest over the (non-error) operations: an upper bound of the
    combined percentile; the average is count-weighted."""
    lines = [ln for ln in block.values() if not ln.error and not ln.total] or list(block.values())
    out: dict[str, float] = {}
    for ln in lines:
        for k, v in ln.latency_ms.items():
            if k in ("avg", "sum", "min"):
                continue
            out[k] = max(out.get(k, v), v)
    n = sum(ln.count for ln in lines if "avg" in ln.latency_ms)
    if n:
        out["avg"] = sum(ln.latency_ms["avg"] * ln.count for ln in lines if "avg" in ln.latency_ms) / n
    mins = [ln.latency_ms["min"] for ln in lines if "min" in ln.latency_ms]
    if mins:
        out["min"] = min(mins)
    return out
