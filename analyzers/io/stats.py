"""IO statistics over time from paired block IO (analyzer layer).

IOPS, throughput, request sizes, in-flight requests (queue depth) and latency percentiles
per interval and overall, split by op, device and issuer. The verdict and the report call
:func:`capture_io` (analyzers.views.blockio reads and pairs the trace); everything returned is
plain data (``to_json()`` is JSON-ready).

Percentiles use numpy's default ("linear") definition, computed per group on the exact
latencies (not on histogram buckets), so they agree with ``np.percentile`` on the raw values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from profiler.analyzers.io import pairing as blockio
from profiler.analyzers.io.pairing import PairedIO

from profiler.bundle import CollectorRecord, Manifest, members
from profiler.inputs import blocktrace

QUANTILES = (50.0, 95.0, 99.0)
BLOCK_MEMBER = members.BLOCK_TRACE


def group_percentiles(values: np.ndarray, groups: np.ndarray, ngroups: int, qs: tuple[float, ...] = QUANTILES) -> dict[str, np.ndarray]:
    """Per-group percentiles (numpy's linear method), max, mean and count; NaN for empty groups.

    ``groups`` holds group indices in ``[0, ngroups)``. Vectorised: one sort for all groups.
    """
    values = np.asarray(values, dtype=np.float64)
    groups = np.asarray(groups, dtype=np.int64)
    counts = np.bincount(groups, minlength=ngroups)[:ngroups] if len(groups) else np.zeros(ngroups, np.int64)
    out: dict[str, np.ndarray] = {"count": counts}
    if not len(values):
        for q in qs:
            out[_qname(q)] = np.full(ngroups, np.nan)
        out["max"] = np.full(ngroups, np.nan)
        out["mean"] = np.full(ngroups, np.nan)
        return out
    if ngroups <= _FEW_GROUPS:
        return _few_groups(values, groups, ngroups, counts, qs, out)
    # by value, then (stable, radix for small group counts) by group: exact, and faster than lexsort
    o1 = np.argsort(values)
    g1 = groups[o1]
    if ngroups < (1 << 15):
        g1 = g1.astype(np.int16)
    order = o1[np.argsort(g1, kind="stable")]
    v = values[order]
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    has = counts > 0
    nz = np.maximum(counts, 1)
    for q in qs:
        pos = (nz - 1) * (q / 100.0)
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, nz - 1)
        frac = pos - lo
        a = v[np.minimum(starts + lo, len(v) - 1)]
        b = v[np.minimum(starts + hi, len(v) - 1)]
        # numpy's lerp: a + (b - a) * t, or b - (b - a) * (1 - t) for t >= 0.5
        res = np.where(frac >= 0.5, b - (b - a) * (1 - frac), a + (b - a) * frac)
        out[_qname(q)] = np.where(has, res, np.nan)
    out["max"] = np.where(has, v[np.minimum(starts + nz - 1, len(v) - 1)], np.nan)
    sums = np.bincount(groups, weights=values, minlength=ngroups)[:ngroups]
    out["mean"] = np.where(has, sums / nz, np.nan)
    return out


_FEW_GROUPS = 256  # up to this many groups: one selection per group instead of a sort of everything


def _few_groups(values: np.ndarray, groups: np.ndarray, ngroups: int, counts: np.ndarray, qs: tuple[float, ...],
                out: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """group_percentiles by selection (np.partition: linear, not a sort), group by group; the same
    order statistics and the same interpolation, so the same figures to the last bit."""
    if ngroups == 1:
        parts = [values]
    else:
        order = np.argsort(groups.astype(np.int16), kind="stable")  # a radix sort of small ints
        v = values[order]
        ends = np.cumsum(counts)
        parts = [v[e - c : e] for c, e in zip(counts.tolist(), ends.tolist(), strict=True)]
    res = {_qname(q): np.full(ngroups, np.nan) for q in qs}
    mx = np.full(ngroups, np.nan)
    for g, part in enumerate(parts):
        n = len(part)
        if not n:
            continue
        pos = {q: (n - 1) * (q / 100.0) for q in qs}
        kth = sorted({int(math.floor(p)) for p in pos.values()} | {min(int(math.floor(p)) + 1, n - 1) for p in pos.values()}
                     | {n - 1})
        sel = np.partition(part, kth)
        for q, p in pos.items():
            lo = int(math.floor(p))
            hi = min(lo + 1, n - 1)
            frac = np.float64(p) - lo
            a, b = sel[lo], sel[hi]
            res[_qname(q)][g] = b - (b - a) * (1 - frac) if frac >= 0.5 else a + (b - a) * frac
        mx[g] = sel[n - 1]
    out.update(res)
    out["max"] = mx
    has = counts > 0
    sums = np.bincount(groups, weights=values, minlength=ngroups)[:ngroups]
    out["mean"] = np.where(has, sums / np.maximum(counts, 1), np.nan)
    return out


def _qname(q: float) -> str:
    return f"p{q:g}".replace(".", "_")


def latency_summary(lat: np.ndarray) -> dict[str, float | int | None]:
    """count, mean, p50/p95/p99 and max of latencies in seconds (None when empty)."""
    r = group_percentiles(lat, np.zeros(len(lat), np.int64), 1)
    return {k: _num(v[0]) for k, v in r.items()}


def _num(x: Any) -> float | int | None:
    if isinstance(x, np.integer | int):
        return int(x)
    f = float(x)
    return None if math.isnan(f) else f


def size_histogram(nbytes: np.ndarray) -> list[dict[str, int]]:
    """Request sizes in power-of-two buckets: [{"le": 4096, "count": n}, ...] (0-byte flushes as le 0)."""
    if not len(nbytes):
        return []
    b = np.asarray(nbytes, dtype=np.float64)
    exp = np.where(b > 0, np.ceil(np.log2(np.maximum(b, 1))), -1).astype(np.int64)
    per = np.bincount(exp + 1)  # -1 (0 bytes) .. 64: a handful of bins
    out = []
    for i in np.flatnonzero(per):
        e = int(i) - 1
        out.append({"le": 0 if e < 0 else int(2**e), "count": int(per[i])})
    return out


@dataclass
class IoSeries:
    """Per-interval series; interval i covers [t0 + i*interval, t0 + (i+1)*interval)."""

    t0: float
    interval: float
    ios: np.ndarray  # completed IOs
    iops: np.ndarray
    read_bytes_per_s: np.ndarray
    write_bytes_per_s: np.ndarray
    mean_size: np.ndarray  # bytes per IO (NaN when idle)
    in_flight_mean: np.ndarray  # time-weighted mean of requests issued and not completed
    in_flight_max: np.ndarray
    latency: dict[str, np.ndarray]  # p50, p95, p99, max, mean (seconds), count

    def to_json(self) -> dict[str, Any]:
        def arr(a: np.ndarray) -> list[Any]:
            return [_num(x) for x in a]

        return {
            "t0": self.t0,
            "interval": self.interval,
            "ios": arr(self.ios),
            "iops": arr(self.iops),
            "read_bytes_per_s": arr(self.read_bytes_per_s),
            "write_bytes_per_s": arr(self.write_bytes_per_s),
            "mean_size": arr(self.mean_size),
            "in_flight_mean": arr(self.in_flight_mean),
            "in_flight_max": arr(self.in_flight_max),
            "latency": {k: arr(v) for k, v in sorted(self.latency.items())},
        }


def _in_flight(t_issue: np.ndarray, t_complete: np.ndarray, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Time-weighted mean and max of requests in flight per interval between ``edges``."""
    ti = np.sort(t_issue)
    tc = np.asarray(t_complete)
    if len(tc) > 1 and (tc[1:] < tc[:-1]).any():  # paired IOs come in completion order: mostly sorted already
        tc = np.sort(tc)
    ci = np.concatenate([[0.0], np.cumsum(ti)])
    cc = np.concatenate([[0.0], np.cumsum(tc)])
    ni = np.searchsorted(ti, edges, side="left")
    nc = np.searchsorted(tc, edges, side="left")
    # area(b) = sum over requests of the time spent in flight before b
    area = (ni * edges - ci[ni]) - (nc * edges - cc[nc])
    width = np.diff(edges)
    mean = np.diff(area) / np.where(width > 0, width, 1.0)
    # max: the level (+1 at an issue, -1 at a completion, completions first on ties) peaks right
    # after an issue, or is what was carried into the interval
    k = len(edges) - 1
    mx = np.zeros(k, np.int64)
    if len(ti):
        level = np.arange(1, len(ti) + 1) - np.searchsorted(tc, ti, side="right")
        idx = np.clip(np.searchsorted(edges, ti, side="right") - 1, 0, k - 1)  # nondecreasing: ti is sorted
        first = np.flatnonzero(np.concatenate([[True], idx[1:] != idx[:-1]]))
        mx[idx[first]] = np.maximum.reduceat(level, first)
    if len(ti) or len(tc):
        start_level = np.searchsorted(ti, edges[:-1], side="left") - np.searchsorted(tc, edges[:-1], side="left")
        mx = np.maximum(mx, start_level)
    return mean, mx


MAX_INTERVALS = 100_000  # a longer span gets wider intervals (the series' ``interval`` says how wide)


def io_series(ios: np.ndarray, *, interval: float = 1.0, t0: float | None = None, t1: float | None = None) -> IoSeries:
    """Per-interval statistics, bucketed by completion time; at most MAX_INTERVALS intervals
    (a longer span, e.g. two IOs a year apart, widens them: memory follows the IOs, not the span)."""
    if interval <= 0:
        raise ValueError("interval must be positive")
    tc = ios["t_complete"]
    if t0 is None:
        t0 = float(ios["t_issue"].min()) if len(ios) else 0.0
    if t1 is None:
        t1 = float(tc.max()) if len(ios) else t0
    span = t1 - t0 if math.isfinite(t1 - t0) else 0.0
    if span / interval >= MAX_INTERVALS:
        interval = math.ceil(span / (MAX_INTERVALS - 1) / interval) * interval
    k = max(1, int(math.floor(span / interval)) + 1)
    edges = t0 + interval * np.arange(k + 1)
    idx = np.clip(((tc - t0) // interval).astype(np.int64), 0, k - 1) if len(ios) else np.zeros(0, np.int64)
    counts = np.bincount(idx, minlength=k)[:k] if len(idx) else np.zeros(k, np.int64)
    nbytes = ios["bytes"].astype(np.float64)
    rd = ios["op"] == blocktrace.OP_READ
    wr = ios["op"] == blocktrace.OP_WRITE
    rbytes = np.bincount(idx[rd], weights=nbytes[rd], minlength=k)[:k] if len(idx) else np.zeros(k)
    wbytes = np.bincount(idx[wr], weights=nbytes[wr], minlength=k)[:k] if len(idx) else np.zeros(k)
    allbytes = np.bincount(idx, weights=nbytes, minlength=k)[:k] if len(idx) else np.zeros(k)
    lat = group_percentiles(ios["latency"], idx, k)
    mean, mx = _in_flight(ios["t_issue"], tc, edges)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_size = np.where(counts > 0, allbytes / np.maximum(counts, 1), np.nan)
    return IoSeries(
        t0=t0, interval=interval, ios=counts, iops=counts / interval, read_bytes_per_s=rbytes / interval,
        write_bytes_per_s=wbytes / interval, mean_size=mean_size, in_flight_mean=mean, in_flight_max=mx, latency=lat,
    )


def group_summary(ios: np.ndarray, duration: float) -> dict[str, Any]:
    """Totals and latency percentiles of a set of IOs."""
    return _summary(ios["latency"], ios["bytes"], duration)


def _summary(lat: np.ndarray, nb: np.ndarray, duration: float) -> dict[str, Any]:
    """group_summary over the two columns it reads (a subset taken from them, not from the
    48-byte IO records, copies 12 bytes an IO)."""
    d = duration if duration > 0 else float("nan")
    n = len(lat)
    nbytes = int(nb.sum()) if n else 0
    return {
        "ios": n,
        "bytes": nbytes,
        "iops": _num(n / d) if n else 0.0,
        "bytes_per_s": _num(nbytes / d) if n else 0.0,
        "latency": latency_summary(lat),
    }


def split(bio: PairedIO, by: str, *, target_tids: tuple[int, ...] = (), target_comms: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """Masks of IOs per group: by 'op' (read/write/flush/discard/other, '+sync' when sync),
    'device' ('254:0') or 'issuer' ('target', 'kernel', 'other')."""
    ios = bio.ios
    out: dict[str, np.ndarray] = {}
    if by == "op":
        ops = np.ascontiguousarray(ios["op"])
        for op in _distinct(ops):
            out[blocktrace.op_name(int(op))] = ops == op
    elif by == "device":
        devs = np.ascontiguousarray(ios["dev"])
        for dev in _distinct(devs):
            out[blocktrace.dev_name(int(dev))] = devs == dev
    elif by == "issuer":
        cls = bio.issuer_class_index(target_tids, target_comms)
        present = np.bincount(cls, minlength=len(blockio.ISSUER_CLASSES))
        for i, name in enumerate(blockio.ISSUER_CLASSES):
            if present[i]:
                out[name] = cls == i
    elif by == "comm":
        for c in _distinct(ios["comm"]):
            out[bio.comms[int(c)] or "?"] = ios["comm"] == c
    else:
        raise ValueError(f"cannot split by {by!r}: use op, device or issuer")
    return out


def _distinct(col: np.ndarray) -> np.ndarray:
    """np.unique of a column of few distinct values, without sorting millions of them."""
    if not len(col):
        return np.zeros(0, col.dtype)
    if col.dtype.itemsize <= 2:
        return np.flatnonzero(np.bincount(col.astype(np.int64, copy=False), minlength=1)).astype(col.dtype)
    first = col[0]
    if (col == first).all():
        return np.asarray([first], col.dtype)
    out: np.ndarray = np.unique(col)
    return out


@dataclass
class IoAnalysis:
    """Everything the verdict and the report need about block IO in one capture."""

    block: PairedIO
    series: IoSeries
    overall: dict[str, Any]
    by_op: dict[str, dict[str, Any]]
    by_device: dict[str, dict[str, Any]]
    by_issuer: dict[str, dict[str, Any]]
    top_issuers: list[dict[str, Any]]  # by comm, most IOs first
    size_histogram: list[dict[str, int]]
    duration: float
    warnings: list[str] = field(default_factory=list)
    target_tids: tuple[int, ...] = ()
    target_comms: tuple[str, ...] = ()

    # Per-IO columns by plain names (what metrics.py reads): arrays, one entry per paired IO.
    @property
    def issue(self) -> np.ndarray:
        return np.asarray(self.block.ios["t_issue"])

    @property
    def latency(self) -> np.ndarray:
        return np.asarray(self.block.ios["latency"])

    @property
    def bytes(self) -> np.ndarray:
        return np.asarray(self.block.ios["bytes"])

    @property
    def tid(self) -> np.ndarray:
        return np.asarray(self.block.ios["tid"])

    @property
    def dev(self) -> np.ndarray:
        """'254:0' per IO."""
        u, inv = np.unique(self.block.ios["dev"], return_inverse=True)
        return np.asarray([blocktrace.dev_name(int(d)) for d in u], dtype=object)[inv.ravel()]

    @property
    def op(self) -> np.ndarray:
        """'read', 'write', 'flush', 'discard' or 'other' per IO."""
        names = np.asarray(blocktrace.OP_NAMES + ("other",) * (256 - len(blocktrace.OP_NAMES)), dtype=object)
        return np.asarray(names[self.block.ios["op"]])

    @property
    def comm(self) -> np.ndarray:
        """The issuer's comm per IO."""
        return self.block.comm_of(self.block.ios["comm"])

    def split(self, by: str) -> dict[str, np.ndarray]:
        """Masks over ``block.ios`` by 'op', 'device' or 'issuer' (with this capture's targets)."""
        return split(self.block, by, target_tids=self.target_tids, target_comms=self.target_comms)

    def to_json(self) -> dict[str, Any]:
        return {
            "counts": self.block.counts.to_json(),
            "duration": self.duration,
            "overall": self.overall,
            "by_op": self.by_op,
            "by_device": self.by_device,
            "by_issuer": self.by_issuer,
            "top_issuers": self.top_issuers,
            "size_histogram": self.size_histogram,
            "series": self.series.to_json(),
            "warnings": self.warnings,
        }


def analyze_io(bio: PairedIO, *, interval: float = 1.0, t0: float | None = None, t1: float | None = None,
               target_tids: tuple[int, ...] = (), target_comms: tuple[str, ...] = ()) -> IoAnalysis:
    ios = bio.ios
    if t0 is None:
        t0 = bio.t_first if bio.t_first is not None else (float(ios["t_issue"].min()) if len(ios) else 0.0)
    if t1 is None:
        t1 = bio.t_last if bio.t_last is not None else t0
    duration = max(t1 - t0, 0.0)
    series = io_series(ios, interval=interval, t0=t0, t1=t1)
    lat, nb = np.ascontiguousarray(ios["latency"]), np.ascontiguousarray(ios["bytes"])
    base = _summary(lat, nb, duration)

    def summary(m: np.ndarray) -> dict[str, Any]:
        # a group of every IO (one disk, one issuer) is the overall figures: no second selection
        if m.all():
            return {**base, "latency": dict(base["latency"])}
        return _summary(lat[m], nb[m], duration)

    overall = {**base, "latency": dict(base["latency"])}
    overall["in_flight_mean"] = _num(float(np.sum(ios["latency"])) / duration) if duration > 0 else None
    overall["in_flight_max"] = int(series.in_flight_max.max()) if len(series.in_flight_max) else 0
    by_op = {k: summary(m) for k, m in split(bio, "op").items()}
    by_device = {k: summary(m) for k, m in split(bio, "device").items()}
    by_issuer = {k: summary(m) for k, m in split(bio, "issuer", target_tids=target_tids, target_comms=target_comms).items()}
    top: list[dict[str, Any]] = []
    if len(ios):
        comm = np.ascontiguousarray(ios["comm"])
        per = np.bincount(comm.astype(np.int64))
        cidx = np.flatnonzero(per)
        cnt = per[cidx]
        for ci in cidx[np.argsort(-cnt, kind="stable")][:10]:
            m = comm == ci
            name = bio.comms[int(ci)] or "?"
            top.append({"comm": name, "class": blockio.issuer_class(name, -2, frozenset(target_tids), frozenset(target_comms)),
                        **summary(m)})
    return IoAnalysis(
        block=bio, series=series, overall=overall, by_op=by_op, by_device=by_device, by_issuer=by_issuer,
        top_issuers=top, size_histogram=size_histogram(ios["bytes"][ios["op"] != blocktrace.OP_FLUSH]),
        duration=duration, warnings=list(bio.warnings), target_tids=tuple(target_tids), target_comms=tuple(target_comms),
    )


def targets_of(manifest: Manifest) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The target processes' tids (pid and every thread) and comms, from the manifest."""
    tids: list[int] = []
    comms: list[str] = []
    for t in manifest.targets:
        tids.append(t.pid)
        tids.extend(th.tid for th in t.threads)
        comms.append(t.comm)
        comms.extend(th.comm for th in t.threads)
    return tuple(sorted(set(tids))), tuple(sorted(set(c for c in comms if c)))


@dataclass(frozen=True)
class IoWindow:
    """What a capture's IO analysis depends on besides the IOs: the block collector's span, the
    interval of the series and the targets (equal windows, equal analyses)."""

    started: float | None
    ended: float | None
    interval: float
    tids: tuple[int, ...]
    comms: tuple[str, ...]


def io_window(manifest: Manifest, rec: CollectorRecord | None = None, *, interval: float | None = None) -> IoWindow:
    """The window of ``manifest``'s block collector (or of ``rec``, its record as it stopped)."""
    rec = rec if rec is not None else manifest.collector("block-io")
    tids, comms = targets_of(manifest)
    return IoWindow(started=rec.started if rec is not None else None, ended=rec.ended if rec is not None else None,
                    interval=interval or float(manifest.options.get("interval") or 1.0), tids=tids, comms=comms)


def capture_io(bio: PairedIO, manifest: Manifest, *, interval: float | None = None) -> IoAnalysis:
    """The IO analysis of a capture's paired block IO (analyzers.views.blockio reads the trace).

    Intervals default to the capture's ``options.interval`` (1 s); times start at the block
    collector's start (or the first event), so series line up with the other collectors'.
    """
    return analyze_window(bio, io_window(manifest, interval=interval))


def analyze_window(bio: PairedIO, w: IoWindow) -> IoAnalysis:
    t0, t1 = w.started, w.ended
    if t0 is not None and bio.t_first is not None:
        t0 = min(t0, bio.t_first)
    if t1 is not None and bio.t_last is not None:
        t1 = max(t1, bio.t_last)
    return analyze_io(bio, interval=w.interval, t0=t0, t1=t1, target_tids=w.tids, target_comms=w.comms)
