"""go-tpc output -> intervals and summary (analyzers layer).

go-tpc prints one line per transaction type, in milliseconds, with ``TPM:`` (per minute):

- ``[Current] NEW_ORDER - Takes(s): 10.0, Count: 1042, TPM: 6252.0, Sum(ms): 238451.5,
  Avg(ms): 228.8, 50th(ms): 209.7, 90th(ms): 318.8, 95th(ms): 352.3, 99th(ms): 453.0,
  99.9th(ms): 604.0, Max(ms): 805.3``: this interval only (go-tpc resets its current
  histograms at each report, every ``--interval``, 10 s by default);
- ``[Summary] NEW_ORDER - ...``: the whole run;
- the same lines without a prefix (older go-tpc, and what users paste, seed 003): cumulative
  since the start; the last block is the summary, earlier ones become intervals by difference;
- ``*_ERR`` rows: failed attempts of the type (their ``Takes(s)`` may be 0.0: their rate is
  counted over the interval of the block);
- ``tpmC: 205.3`` (seed 000), ``tpmC: 6081.6, efficiency: 591.2%``, ``tpmC: ..., tpmTotal: ...``.

Throughput is every transaction type (not errors) per second; tpmC (NEW_ORDER per minute) is
kept as go-tpc printed it, or computed from the NEW_ORDER row when go-tpc did not print it.
``Finished``, go-tpc's ``[2021/03/01 ...] [INFO]`` log lines and its ``prepare`` progress (``creating
table warehouse``, ``load to item``: v1.0.7 writes them in lower case) are recognised.
"""

from __future__ import annotations

import re

from profiler.analyzers.load.model import Interval, OpSummary, Summary
from profiler.analyzers.load.oplines import OpLine, parse_op_line

_TPMC = re.compile(r"^\s*tpmC:\s*(\d+(?:\.\d+)?)(.*)$")
_EXTRA = re.compile(r",\s*(tpmTotal|efficiency):\s*(\d+(?:\.\d+)?)%?")
_KNOWN = re.compile(
    r"^\s*(?:Finished\s*$|\[\d{4}/\d{2}/\d{2} [\d:.]+ [+-]\d{2}:\d{2}\] \[(?:INFO|WARN|ERROR|DEBUG)\]"
    r"|[Cc]reating table|begin to check|Check (?:warehouse|district|order|\d)|load to|Load data|Loading)"
)


def _is_tpc(line: OpLine) -> bool:
    return line.prefix is not None or "TPM" in line.rates


class GoTpcParser:
    """Feed lines one at a time (streaming)."""

    tool = "go-tpc"

    def __init__(self) -> None:
        self.intervals: list[Interval] = []
        self.fatal: list[str] = []
        self.version: str | None = None
        self.data_lines = 0
        self.extra: dict[str, float] = {}
        self._block: dict[str, OpLine] = {}
        self._block_prefix: str | None = None
        self._block_line = 0
        self._elapsed = 0.0  # sum of [Current] interval lengths: their ends on the tool's clock
        self._bare: list[tuple[int, dict[str, OpLine]]] = []  # unprefixed (cumulative) blocks
        self._summary: dict[str, OpLine] | None = None
        self._summary_line = 0
        self._extra_line = 0

    def feed(self, lineno: int, text: str) -> bool:
        line = parse_op_line(text)
        if line is not None and _is_tpc(line):
            self.data_lines += 1
            if line.op in self._block or line.prefix != self._block_prefix:
                self._close()
            self._block[line.op] = line
            self._block_prefix = line.prefix
            self._block_line = lineno
            return True
        m = _TPMC.match(text)
        if m:
            self._close()
            self.data_lines += 1
            self.extra["tpmC"] = float(m.group(1))
            for k, v in _EXTRA.findall(m.group(2)):
                self.extra[k] = float(v)
            self._extra_line = lineno
            return True
        return bool(_KNOWN.match(text))

    def _close(self) -> None:
        block, self._block = self._block, {}
        if not block:
            return
        if self._block_prefix == "Current":
            length = _length(block)
            self._elapsed += length
            self.intervals.append(_interval(block, self._elapsed, length, self._block_line))
        elif self._block_prefix == "Summary":
            self._summary, self._summary_line = block, self._block_line
        else:
            self._bare.append((self._block_line, block))

    def result(self) -> Summary | None:
        self._close()
        if self._summary is None and self._bare:
            # unprefixed blocks are cumulative: the last is the summary, the others intervals by difference
            prev: dict[str, OpLine] = {}
            for lineno, block in self._bare[:-1]:
                end = _length(block)
                start = _length(prev) if prev else 0.0
                self.intervals.append(_interval(block, end, end - start, lineno, prev))
                prev = block
            self._summary_line, self._summary = self._bare[-1]
        if self._summary is None:
            if not self.extra:
                return None
            return Summary(extra=dict(self.extra), line=self._extra_line)
        block = self._summary
        seconds = _length(block)
        ops = [OpSummary(name=n, count=ln.count, seconds=ln.takes, rate=ln.count / seconds if seconds > 0 else None,
                         latency_ms=dict(ln.latency_ms), error=ln.error) for n, ln in sorted(block.items())]
        done = sum(o.count for o in ops if not o.error)
        errs = sum(o.count for o in ops if o.error)
        extra = dict(self.extra)
        new_order = block.get("NEW_ORDER")
        if "tpmC" not in extra and new_order is not None and new_order.takes > 0:
            extra["tpmC"] = new_order.count / new_order.takes * 60
        return Summary(tps=done / seconds if seconds > 0 else None, errors=errs / seconds if seconds > 0 else None,
                       transactions=done, seconds=seconds, latency_ms=_upper_percentiles(block), ops=ops,
                       extra=extra, line=max(self._summary_line, self._extra_line))


def _length(block: dict[str, OpLine]) -> float:
    """The time a block covers: its longest Takes (an _ERR row may say 0.0)."""
    return max((ln.takes for ln in block.values()), default=0.0)


def _interval(block: dict[str, OpLine], end: float, length: float, lineno: int,
              prev: dict[str, OpLine] | None = None) -> Interval:
    ops: dict[str, float] = {}
    tps = errors = 0.0
    for name, ln in block.items():
        count = ln.count - (prev[name].count if prev and name in prev else 0)
        rate = count / length if length > 0 else 0.0
        ops[name] = rate
        if ln.error:
            errors += rate
        else:
            tps += rate
    lat = _upper_percentiles(block) if not prev else {}
    return Interval(end=end, duration=length or None, tps=tps, errors=errors, latency_ms=lat, line=lineno, ops=ops)


def _upper_percentiles(block: dict[str, OpLine]) -> dict[str, float]:
    """The largest of each percentile over the transaction types (errors left out): an upper bound."""
    out: dict[str, float] = {}
    for ln in block.values():
        if ln.error:
            continue
        for k, v in ln.latency_ms.items():
            if k in ("sum", "avg"):
                continue
            out[k] = max(out.get(k, v), v)
    return out
