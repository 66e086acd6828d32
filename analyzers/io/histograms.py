"""Reading the bcc backend's in-kernel block IO histograms (analyzers layer): block.hist.jsonl.gz.

The perf backend keeps one line per IO (block.trace.gz); the bcc backend keeps, per time slot,
device and op, a log-linear latency histogram (docs/bundle.md). This module turns that file
into the same summaries the block IO analyzers compute from per-IO events: latency
percentiles per device and op, IOPS and throughput per slot, a latency-by-time heatmap
matrix (log2, fine or linear rows), and who issued the IOs.

Buckets, with S = 2**sub_bits sub-buckets per power of two (S = 16 today): values below S ns
have one bucket each; above, bucket ``S + (e - sub_bits) * S + s`` holds
``[(S + s) << (e - sub_bits), (S + s + 1) << (e - sub_bits))`` ns where ``e = floor(log2 v)``.
A bucket is at most 1/S (6.25%) of its value wide; percentiles interpolate inside it.

Pure functions over dataclasses; no printing. The report reads the member through
analyzers.views.blockio, the one place that opens it.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from profiler.bundle import members

MAX_ROWS = 2000  # rows of a linear heatmap (the latency heatmap's cap)
MEMBER = members.BLOCK_HIST
FORMAT = "profiler.block-hist"
DEFAULT_QUANTILES = (50.0, 90.0, 99.0, 99.9)
OP_NAMES = {"R": "read", "W": "write", "D": "discard", "F": "flush", "O": "other"}


@dataclass
class SlotHist:
    """One time slot of one device and op."""

    t: float  # slot start, monotonic seconds
    end: float  # slot end (the last slot ends when the capture stopped)
    dev: str  # "254:0"
    op: str  # R W D F O
    count: int
    bytes: int
    sum_ns: int
    max_ns: int
    buckets: dict[int, int]


@dataclass
class BlockHist:
    t0: float = 0.0
    slot_seconds: float = 1.0
    sub_bits: int = 4
    max_exp: int = 40
    ended: float | None = None
    slots: list[SlotHist] = field(default_factory=list)
    tasks: list[dict[str, Any]] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    devices: dict[str, str | None] = field(default_factory=dict)
    targets: list[int] = field(default_factory=list)
    in_flight_at_stop: int = 0
    complete: bool = False  # the closing "end" line was read (the capture was not cut off)
    warnings: list[str] = field(default_factory=list)


@dataclass
class LatencySummary:
    dev: str
    op: str
    count: int
    bytes: int
    mean_us: float
    max_us: float
    percentiles_us: dict[str, float]  # "p50", "p90", "p99", "p99.9" -> microseconds


@dataclass
class HistogramHeatmap:
    """counts[row][col]: IOs completed in time column ``col`` with latency in row ``row``."""

    times: list[float]  # column start, monotonic seconds
    column_seconds: float
    rows_us: list[tuple[float, float]]  # [lo, hi) latency per row, microseconds, low to high
    counts: list[list[int]]
    scale: str  # log2 | fine | linear


# --------------------------------------------------------------------------- buckets


def bucket_bounds(index: int, sub_bits: int = 4) -> tuple[int, int]:
    """[lo, hi) in ns of bucket ``index``."""
    sub = 1 << sub_bits
    if index < sub:
        return index, index + 1
    e = sub_bits + (index - sub) // sub
    s = (index - sub) % sub
    shift = e - sub_bits
    return (sub + s) << shift, (sub + s + 1) << shift


def bucket_of(value_ns: int, sub_bits: int = 4, max_exp: int = 40) -> int:
    """The bucket a latency falls in (the same arithmetic as collectors/bcc/bpf/blockio.c)."""
    sub = 1 << sub_bits
    v = max(0, int(value_ns))
    if v < sub:
        return v
    e = v.bit_length() - 1
    if e > max_exp:
        e, v = max_exp, (2 << max_exp) - 1
    s = (v >> (e - sub_bits)) - sub
    return sub + (e - sub_bits) * sub + s


# --------------------------------------------------------------------------- reading


def parse_block_hist(lines: Iterable[str]) -> BlockHist:
    """Parse the lines of block.hist.jsonl(.gz); unknown kinds are skipped, bad lines warned about."""
    h = BlockHist()
    seen_header = False
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):  # not JSON, a cut line, a 5,000-digit number, deep nesting
            h.warnings.append(f"{MEMBER} line {n} is not JSON (cut off?); ignored")
            continue
        kind = obj.get("kind") if isinstance(obj, dict) else None
        if not seen_header and kind != "header":
            raise ValueError(f"{MEMBER} does not start with its header line")
        try:
            _take(h, kind, obj)
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            if kind == "header":
                raise ValueError(f"{MEMBER} header is malformed: {exc}") from None
            h.warnings.append(f"{MEMBER} line {n} ({kind}) is malformed ({exc}); ignored")
            continue
        seen_header = True
    if not seen_header:
        raise ValueError(f"{MEMBER} has no header line")
    if not h.complete:
        h.warnings.append(f"{MEMBER} has no closing line: the capture was cut off, slots after the cut are missing")
    h.slots.sort(key=lambda s: (s.t, s.dev, s.op))
    return h


def _finite(v: Any, lo: float = -1e300, hi: float = 1e300) -> float:
    """A number in [lo, hi] (ValueError otherwise: the line is malformed)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError(f"{v!r:.40} is not a number")
    f = float(v)
    if not (math.isfinite(f) and lo <= f <= hi):
        raise ValueError(f"{v!r:.40} is out of range")
    return f


def _count(v: Any) -> int:
    """A count, bytes or nanoseconds: a whole number, 0 <= v < 2^63."""
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < (1 << 63):
        raise ValueError(f"{v!r:.40} is not a count")
    return v


def _take(h: BlockHist, kind: Any, obj: dict[str, Any]) -> None:
    if kind == "header":
        if obj.get("format") != FORMAT:
            raise ValueError(f"{MEMBER} is not a {FORMAT} file")
        h.t0 = _finite(obj.get("t0", 0.0))
        h.slot_seconds = _finite(obj.get("slot_seconds", 1.0), 1e-6, 1e6)
        b = obj.get("buckets") or {}
        h.sub_bits = int(_finite(b.get("sub_bits", 4), 0, 10))
        h.max_exp = int(_finite(b.get("max_exp", 40), h.sub_bits, 63))
        h.targets = list(obj.get("targets") or [])
    elif kind == "slot":
        top = bucket_of((2 << h.max_exp) - 1, h.sub_bits, h.max_exp)
        buckets: dict[int, int] = {}
        for b, c in obj.get("hist", []):
            i = _count(b)
            if i > top:
                raise ValueError(f"bucket {i} is past the last one ({top})")
            buckets[i] = buckets.get(i, 0) + _count(c)
        t = _finite(obj["t"])
        h.slots.append(SlotHist(
            t=t, end=_finite(obj.get("end", t + h.slot_seconds)),
            dev=str(obj["dev"]), op=str(obj["op"]), count=_count(obj.get("count", 0)),
            bytes=_count(obj.get("bytes", 0)), sum_ns=_count(obj.get("sum_ns", 0)), max_ns=_count(obj.get("max_ns", 0)),
            buckets=buckets,
        ))
    elif kind == "task":
        task = {k: v for k, v in obj.items() if k != "kind"}
        for key in ("count", "bytes", "sum_ns"):
            if key in task:
                task[key] = _count(task[key])
        for key in ("tid", "pid"):
            if key in task:
                task[key] = int(_finite(task[key], -(1 << 31), (1 << 31) - 1))
        task["comm"] = str(task.get("comm", ""))
        task["dev"], task["op"] = str(task.get("dev", "")), str(task.get("op", ""))
        h.tasks.append(task)
    elif kind == "end":
        h.complete = True
        h.ended = _finite(obj["ended"]) if obj.get("ended") is not None else None
        h.counters = {str(k): _count(v) for k, v in (obj.get("counters") or {}).items()}
        h.devices = {str(k): str(v) for k, v in dict(obj.get("devices") or {}).items()}
        h.in_flight_at_stop = _count(obj.get("in_flight_at_stop", 0))


# --------------------------------------------------------------------------- summaries


def _select(h: BlockHist, dev: str | None, op: str | None, t_from: float | None, t_to: float | None) -> list[SlotHist]:
    return [s for s in h.slots
            if (dev is None or s.dev == dev) and (op is None or s.op == op)
            and (t_from is None or s.end > t_from) and (t_to is None or s.t < t_to)]


def merged_buckets(h: BlockHist, dev: str | None = None, op: str | None = None,
                   t_from: float | None = None, t_to: float | None = None) -> dict[int, int]:
    out: dict[int, int] = defaultdict(int)
    for s in _select(h, dev, op, t_from, t_to):
        for b, c in s.buckets.items():
            out[b] += c
    return dict(out)


def quantile_ns(buckets: dict[int, int], q: float, sub_bits: int = 4, max_ns: int | None = None) -> float | None:
    """The q-th percentile (0-100) in ns, interpolated linearly inside the bucket it falls in.

    Rank convention: the value below which q% of the IOs lie (as numpy's "linear" method
    approaches for large counts).
    """
    total = sum(buckets.values())
    if total <= 0:
        return None
    rank = q / 100.0 * total
    seen = 0
    for b in sorted(buckets):
        c = buckets[b]
        if c <= 0:
            continue
        if seen + c >= rank:
            lo, hi = bucket_bounds(b, sub_bits)
            if max_ns is not None:
                hi = max(lo, min(hi, max_ns + 1))
            frac = (rank - seen) / c
            return lo + frac * (hi - lo)
        seen += c
    lo, hi = bucket_bounds(max(buckets), sub_bits)
    return float(min(hi, max_ns + 1) if max_ns is not None else hi)


def _qname(q: float) -> str:
    return f"p{q:g}"


def percentiles(h: BlockHist, quantiles: Iterable[float] = DEFAULT_QUANTILES, dev: str | None = None,
                op: str | None = None, t_from: float | None = None, t_to: float | None = None) -> dict[str, float]:
    """{"p50": us, ...} over the selected slots ({} when there were no IOs)."""
    sel = _select(h, dev, op, t_from, t_to)
    buckets: dict[int, int] = defaultdict(int)
    for s in sel:
        for b, c in s.buckets.items():
            buckets[b] += c
    max_ns = max((s.max_ns for s in sel), default=None)
    out = {}
    for q in quantiles:
        v = quantile_ns(buckets, q, h.sub_bits, max_ns)
        if v is not None:
            out[_qname(q)] = round(v / 1000.0, 3)
    return out


def latency_summary(h: BlockHist, quantiles: Iterable[float] = DEFAULT_QUANTILES,
                    t_from: float | None = None, t_to: float | None = None) -> list[LatencySummary]:
    """One summary per (device, op), sorted; the same numbers the per-IO analyzer computes."""
    qs = tuple(quantiles)
    out = []
    for dev, op in sorted({(s.dev, s.op) for s in h.slots}):
        sel = _select(h, dev, op, t_from, t_to)
        count = sum(s.count for s in sel)
        if count == 0:
            continue
        out.append(LatencySummary(
            dev=dev, op=op, count=count, bytes=sum(s.bytes for s in sel),
            mean_us=round(sum(s.sum_ns for s in sel) / count / 1000.0, 3),
            max_us=round(max(s.max_ns for s in sel) / 1000.0, 3),
            percentiles_us=percentiles(h, qs, dev, op, t_from, t_to),
        ))
    return out


def rate_series(h: BlockHist, dev: str | None = None, op: str | None = None) -> list[dict[str, float]]:
    """Per slot: {"t", "end", "iops", "bytes_per_s", "mean_us"} summed over the selected devices/ops."""
    acc: dict[float, list[float]] = {}
    for s in _select(h, dev, op, None, None):
        a = acc.setdefault(s.t, [s.end, 0, 0, 0])
        a[0] = max(a[0], s.end)
        a[1] += s.count
        a[2] += s.bytes
        a[3] += s.sum_ns
    out = []
    for t in sorted(acc):
        end, count, nbytes, sum_ns = acc[t]
        width = max(end - t, 1e-9)
        out.append({"t": t, "end": end, "iops": count / width, "bytes_per_s": nbytes / width,
                    "mean_us": (sum_ns / count / 1000.0) if count else 0.0})
    return out


def heatmap(h: BlockHist, dev: str | None = None, op: str | None = None, scale: str = "log2",
            row_us: float | None = None, max_us: float | None = None) -> HistogramHeatmap:
    """A latency-by-time matrix: one column per slot, rows by latency.

    scale ``log2``: one row per power of two of ns (as bcc's histograms print); ``fine``: one
    row per histogram bucket that has data, in between empty buckets too; ``linear``: rows
    ``row_us`` wide up to ``max_us`` (the HeatMap script's layout), each bucket's count spread
    evenly over the rows it overlaps, rounded so that column totals are kept.
    """
    sel = _select(h, dev, op, None, None)
    times = sorted({s.t for s in sel})
    col = {t: i for i, t in enumerate(times)}
    used = sorted({b for s in sel for b in s.buckets})
    if scale == "log2":
        def row_of(b: int) -> int:
            return max(0, int(math.log2(max(bucket_bounds(b, h.sub_bits)[0], 1))))

        exps = sorted({row_of(b) for b in used})
        if exps:
            exps = list(range(exps[0], exps[-1] + 1))
        rows = [((1 << e) / 1000.0, (2 << e) / 1000.0) for e in exps]
        index = {e: i for i, e in enumerate(exps)}
        counts = [[0] * len(times) for _ in rows]
        for s in sel:
            for b, c in s.buckets.items():
                counts[index[row_of(b)]][col[s.t]] += c
        return HistogramHeatmap(times, h.slot_seconds, rows, counts, scale)
    if scale == "fine":
        span = list(range(used[0], used[-1] + 1)) if used else []
        fine_rows = [(lo / 1000.0, hi / 1000.0) for lo, hi in (bucket_bounds(b, h.sub_bits) for b in span)]
        index = {b: i for i, b in enumerate(span)}
        counts = [[0] * len(times) for _ in fine_rows]
        for s in sel:
            for b, c in s.buckets.items():
                counts[index[b]][col[s.t]] += c
        return HistogramHeatmap(times, h.slot_seconds, fine_rows, counts, scale)
    if scale == "linear":
        if not row_us or row_us <= 0:
            raise ValueError("a linear heatmap needs row_us > 0")
        top = max_us or max((bucket_bounds(b, h.sub_bits)[1] / 1000.0 for b in used), default=row_us)
        nrows = max(1, min(MAX_ROWS, math.ceil(top / row_us)))  # capped: slower IOs count in the last row
        rows = [(i * row_us, (i + 1) * row_us) for i in range(nrows)]
        frac = [[0.0] * len(times) for _ in rows]
        top = rows[-1][1]
        for s in sel:
            for b, c in s.buckets.items():
                lo, hi = (x / 1000.0 for x in bucket_bounds(b, h.sub_bits))
                j = col[s.t]
                if lo >= top:  # beyond the last row: counted in it
                    frac[-1][j] += c
                    continue
                width = hi - lo
                r = int(lo // row_us)
                while r < nrows and r * row_us < hi:
                    frac[r][j] += c * (min(hi, (r + 1) * row_us) - max(lo, r * row_us)) / width
                    r += 1
                if hi > top:
                    frac[-1][j] += c * (hi - top) / width
        counts = _round_columns(frac)
        return HistogramHeatmap(times, h.slot_seconds, rows, counts, scale)
    raise ValueError(f"unknown heatmap scale {scale!r} (log2, fine, linear)")


def _round_columns(frac: list[list[float]]) -> list[list[int]]:
    """Round each column's fractional counts to integers keeping the column total (largest remainder)."""
    if not frac:
        return []
    nrows, ncols = len(frac), len(frac[0])
    out = [[0] * ncols for _ in range(nrows)]
    for c in range(ncols):
        vals = [frac[r][c] for r in range(nrows)]
        total = round(sum(vals))
        floors = [math.floor(v) for v in vals]
        rest = total - sum(floors)
        order = sorted(range(nrows), key=lambda r: (-(vals[r] - floors[r]), r))
        for r in order[: max(0, rest)]:
            floors[r] += 1
        for r in range(nrows):
            out[r][c] = floors[r]
    return out


def issuers(h: BlockHist, top: int = 20) -> list[dict[str, Any]]:
    """Who issued the IOs: per thread, summed over devices and ops, most IOs first."""
    acc: dict[tuple[int, int, str], dict[str, Any]] = {}
    for t in h.tasks:
        key = (int(t.get("pid", 0)), int(t.get("tid", 0)), str(t.get("comm", "")))
        a = acc.setdefault(key, {"pid": key[0], "tid": key[1], "comm": key[2], "count": 0, "bytes": 0,
                                 "sum_ns": 0, "target": bool(t.get("target"))})
        a["count"] += int(t.get("count", 0))
        a["bytes"] += int(t.get("bytes", 0))
        a["sum_ns"] += int(t.get("sum_ns", 0))
    out = sorted(acc.values(), key=lambda a: (-a["count"], a["pid"], a["tid"]))
    return out[:top]


def target_share(h: BlockHist) -> float | None:
    """Share of IOs issued by the targets' threads (the rest: other processes, kernel writeback)."""
    total = sum(int(t.get("count", 0)) for t in h.tasks)
    if not total:
        return None
    return sum(int(t.get("count", 0)) for t in h.tasks if t.get("target")) / total


def io_summary(h: BlockHist, target_tids: set[int] | None = None, window: float | None = None) -> dict[str, Any]:
    """The block IO figures the verdict's IOMetrics holds, from histograms instead of per-IO events.

    Keys: ``source``, ``total``, ``groups`` (per device and op: ``dev``, ``op``, ``count``, ``iops``,
    ``bytes``, ``p50_ms``, ``p95_ms``, ``p99_ms``, ``max_ms``, ``target_share``), ``p50_ms``, ``p99_ms``,
    ``max_ms``, ``target_share``, ``top_issuers`` ([(comm, share of IOs)], top 5), ``unpaired``.
    ``target_tids`` decides what counts as the targets' IOs (default: the collector's tgid flag).
    """
    def is_target(t: dict[str, Any]) -> bool:
        return int(t.get("tid", 0)) in target_tids if target_tids else bool(t.get("target"))

    span = window
    if span is None:
        ends = [s.end for s in h.slots]
        span = (max(ends) - h.t0) if ends else 1.0
    span = max(span, 1e-9)
    groups: list[dict[str, Any]] = []
    for s in latency_summary(h, quantiles=(50, 95, 99)):
        tasks = [t for t in h.tasks if t.get("dev") == s.dev and t.get("op") == s.op]
        n = sum(int(t.get("count", 0)) for t in tasks)
        mine = sum(int(t.get("count", 0)) for t in tasks if is_target(t))
        p = s.percentiles_us
        groups.append({"dev": s.dev, "op": s.op, "count": s.count, "iops": s.count / span, "bytes": s.bytes,
                       "p50_ms": p.get("p50", 0.0) / 1000, "p95_ms": p.get("p95", 0.0) / 1000,
                       "p99_ms": p.get("p99", 0.0) / 1000, "max_ms": s.max_us / 1000,
                       "target_share": (mine / n) if n else 0.0})
    groups.sort(key=lambda g: (-g["count"], g["dev"], g["op"]))
    total = sum(g["count"] for g in groups)
    overall = percentiles(h, (50, 99))
    every = sum(int(t.get("count", 0)) for t in h.tasks)
    by_comm: dict[str, int] = defaultdict(int)
    for t in h.tasks:
        by_comm[str(t.get("comm", "?"))] += int(t.get("count", 0))
    top = sorted(by_comm.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    return {
        "source": MEMBER,
        "total": total,
        "groups": groups,
        "p50_ms": overall["p50"] / 1000 if "p50" in overall else None,
        "p99_ms": overall["p99"] / 1000 if "p99" in overall else None,
        "max_ms": max((g["max_ms"] for g in groups), default=None),
        "target_share": (sum(int(t.get("count", 0)) for t in h.tasks if is_target(t)) / every) if every else None,
        "top_issuers": [(c, n / every) for c, n in top] if every else [],
        "unpaired": h.counters.get("unmatched_complete", 0),
    }
