"""Stacks by time bucket, so a page can draw the flame graph of any time range (analyzers layer).

FlameScope's idea, offline: the HTML report embeds every sample's stack bucketed by time, and
its script merges the buckets of the range a reader selects. The stacks are one prefix tree
(``parent``/``frame`` per node, node 0 the root, parents before children) and the samples are
``(bucket, node, count)`` entries, so a stack shared by a thousand buckets is stored once.

Each entry also names its thread (an index into the page's thread table, -1 when the source
does not say: bcc's in-kernel totals), so the page can narrow a graph to a target, a pool or a
thread. Size is bounded (docs/report-html.md): buckets start at 0.1 s and double until the
capture has at most ``MAX_BUCKETS`` buckets and at most ``MAX_ENTRIES`` (bucket, stack, thread)
entries; beyond ``MAX_STACKS`` distinct stacks, the rarest are cut to their first frames (said
in ``cut``). Runs of ``[unknown]`` frames (a broken frame-pointer walk prints dozens) are
folded into one, and :func:`unknown_advice` says why they are there and how to get names.
A goroutine graph is a set of snapshots (:func:`from_snapshots`): one bucket per snapshot, at
its time, and the page shows the one nearest the range.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

MAX_ENTRIES = 60_000  # (bucket, stack) pairs embedded per graph
MAX_BUCKETS = 3_000
MAX_STACKS = 8_000
FIRST_BUCKET = 0.1  # seconds
UNKNOWN = "[unknown]"


@dataclass
class RangeStacks:
    """One graph's stacks over time: what the report's range flame graphs merge."""

    unit: str  # what a count is: "samples" (on-CPU) or "us" (off-CPU blocked time)
    bucket: float  # seconds per bucket
    t0: float  # time of bucket 0's start, seconds on the report's timeline axis
    nbuckets: int
    frames: list[str]
    parent: list[int]  # node -> parent node; node 0 is the root (-1)
    frame: list[int]  # node -> index in frames; the root has -1
    entries: list[tuple[int, int, int]]  # (bucket, node, count), sorted
    total: int
    timed: bool = True  # False: totals only (bcc's in-kernel off-CPU stacks), one bucket for all
    cut: list[str] = field(default_factory=list)  # what the size bounds left out or merged
    unknown_share: float = 0.0  # share of the counts whose stack holds an [unknown] frame
    unknown_deep: float = 0.0  # share whose stack holds a run of 3 or more [unknown] frames (broken unwinding)
    threads: list[int] = field(default_factory=list)  # per entry: its thread (page thread table), -1 unknown
    snapshots: list[tuple[float, int]] = field(default_factory=list)  # per bucket of a snapshot graph: (time, pid)
    advice: dict[str, str] | None = None  # why [unknown] frames are there and how to get names (unknown_advice)
    subtitle: str = ""  # what the graph counts
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        """Compact, for embedding: flat integer arrays."""
        b, n, c = (list(x) for x in zip(*self.entries, strict=True)) if self.entries else ([], [], [])
        out: dict[str, object] = {
            "unit": self.unit, "bucket": self.bucket, "t0": round(self.t0, 6), "nbuckets": self.nbuckets,
            "frames": self.frames, "parent": self.parent, "frame": self.frame, "b": b, "n": n, "c": c,
            "total": self.total, "timed": self.timed, "cut": self.cut,
            "unknown_share": round(self.unknown_share, 4), "unknown_deep": round(self.unknown_deep, 4)}
        if self.threads and any(x >= 0 for x in self.threads):
            out["th"] = self.threads
        if self.snapshots:
            out["snap_t"] = [round(t, 3) for t, _ in self.snapshots]
            out["snap_pid"] = [p for _, p in self.snapshots]
        return out


def fold_unknown_runs(stack: str) -> tuple[str, int]:
    """``a;[unknown];[unknown];b`` -> (``a;[unknown];b``, longest run of [unknown] frames)."""
    if UNKNOWN not in stack:
        return stack, 0
    out: list[str] = []
    run = longest = 0
    for f in stack.split(";"):
        if f == UNKNOWN:
            run += 1
            longest = max(longest, run)
            if run > 1:
                continue
        else:
            run = 0
        out.append(f)
    return ";".join(out), longest


class _Stacks:
    """Distinct stacks (after folding [unknown] runs), their ids and totals."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.names: list[str] = []
        self.totals: list[int] = []
        self.unknown = 0  # counts whose stack holds an [unknown] frame
        self.deep = 0  # counts whose stack held a run of 3 or more
        self._seen: dict[str, tuple[int, int]] = {}  # raw stack -> (id, longest [unknown] run)

    def id(self, raw: str, count: int) -> int:
        got = self._seen.get(raw)
        if got is None:
            folded, run = fold_unknown_runs(raw)
            sid = self.ids.get(folded)
            if sid is None:
                sid = self.ids[folded] = len(self.names)
                self.names.append(folded)
                self.totals.append(0)
            got = self._seen[raw] = (sid, run)
        sid, run = got
        if run:
            self.unknown += count
            if run >= 3:
                self.deep += count
        self.totals[sid] += count
        return sid


def _prefix(stack: str, depth: int) -> str:
    return ";".join(stack.split(";")[:depth])


def _cap_stacks(names: list[str], totals: list[int], cut: list[str]) -> list[int]:
    """Map each stack to the one kept for it: beyond MAX_STACKS, the rarer half is cut to its
    first frames, fewer and fewer, until the distinct stacks fit."""
    mapping = list(range(len(names)))
    if len(names) <= MAX_STACKS:
        return mapping
    order = sorted(range(len(names)), key=lambda i: -totals[i])
    keep, rare = order[: MAX_STACKS // 2], order[MAX_STACKS // 2:]
    depth = 24
    short: dict[str, int] = {}
    for depth in (24, 12, 6, 3, 1):
        short = {}
        for i in rare:
            short.setdefault(_prefix(names[i], depth), i)
        if len(keep) + len(short) <= MAX_STACKS:
            break
    for i in rare:
        mapping[i] = short[_prefix(names[i], depth)]
    for key, rep in short.items():
        names[rep] = key
    cut.append(f"{len(rare):,} rare stacks of {len(names):,} cut to their first {depth} frames")
    return mapping


def _tree(names: list[str], used: Iterable[int]) -> tuple[list[str], list[int], list[int], dict[int, int]]:
    """The prefix tree of the used stacks: frames, parent, frame per node; stack id -> leaf node."""
    frames: list[str] = []
    frame_ids: dict[str, int] = {}
    parent, frame = [-1], [-1]
    children: dict[tuple[int, int], int] = {}
    leaf: dict[int, int] = {}
    for sid in sorted(set(used), key=lambda i: names[i]):
        node = 0
        for f in names[sid].split(";"):
            fi = frame_ids.get(f)
            if fi is None:
                fi = frame_ids[f] = len(frames)
                frames.append(f)
            nxt = children.get((node, fi))
            if nxt is None:
                nxt = children[(node, fi)] = len(parent)
                parent.append(node)
                frame.append(fi)
            node = nxt
        leaf[sid] = node
    return frames, parent, frame, leaf


def _bucket_size(span: float, count_pairs: Callable[[float], int]) -> float:
    """0.1 s, doubled until the buckets and the (bucket, stack) entries fit the bounds."""
    b = FIRST_BUCKET
    while span / b > MAX_BUCKETS or count_pairs(b) > MAX_ENTRIES:
        if b > span:
            break
        b *= 2
    return b


def _entries(keyed: Iterable[tuple[int, int, int, int]], leaf: dict[int, int]) -> tuple[list[tuple[int, int, int]], list[int]]:
    """(bucket, stack id, thread, count) -> entries sorted by bucket, node, thread, and their threads."""
    rows = sorted((k, leaf[s], th, c) for k, s, th, c in keyed)
    return [(k, node, c) for k, node, _, c in rows], [th for _, _, th, _ in rows]


def from_samples(samples: Iterable[tuple[float, str]], t0: float, t1: float,
                 threads: Iterable[int] | None = None) -> RangeStacks | None:
    """On-CPU samples (time, folded stack), each counting 1, on a timeline from ``t0`` to ``t1``;
    ``threads``: each sample's thread (an index into the page's thread table)."""
    st = _Stacks()
    ts: list[float] = []
    ids: list[int] = []
    for t, stack in samples:
        ts.append(t)
        ids.append(st.id(stack, 1))
    if not ts:
        return None
    cut: list[str] = []
    mapping = np.asarray(_cap_stacks(st.names, st.totals, cut), dtype=np.int64)
    t_arr = np.asarray(ts, dtype=np.float64)
    sid = mapping[np.asarray(ids, dtype=np.int64)]
    th = np.asarray(list(threads), dtype=np.int64) + 1 if threads is not None else np.zeros(len(ts), np.int64)
    lo = min(t0, float(t_arr.min()))
    span = max(t1, float(t_arr.max())) - lo
    nstacks = len(st.names)
    nthreads = int(th.max()) + 1
    inner = sid * nthreads + th

    def pairs(b: float) -> int:
        idx = np.floor((t_arr - lo) / b).astype(np.int64)
        return int(len(np.unique(idx * (nstacks * nthreads) + inner)))

    b = _bucket_size(span, pairs)
    idx = np.floor((t_arr - lo) / b).astype(np.int64)
    keys, counts = np.unique(idx * (nstacks * nthreads) + inner, return_counts=True)
    rest = keys % (nstacks * nthreads)
    frames, parent, frame, leaf = _tree(st.names, (int(r // nthreads) for r in rest))
    entries, ths = _entries(((int(k // (nstacks * nthreads)), int(r // nthreads), int(r % nthreads) - 1, int(c))
                             for k, r, c in zip(keys, rest, counts, strict=True)), leaf)
    total = len(ts)
    return RangeStacks(unit="samples", bucket=b, t0=lo - t0, nbuckets=int(math.ceil(span / b)) or 1, frames=frames,
                       parent=parent, frame=frame, entries=entries, total=total, cut=cut,
                       unknown_share=st.unknown / total, unknown_deep=st.deep / total, threads=ths)


def from_intervals(intervals: Iterable[tuple[float, float, str] | tuple[float, float, str, float]], t0: float,
                   t1: float, unit: float = 1e-6, threads: Iterable[int] | None = None) -> RangeStacks | None:
    """Off-CPU intervals (from, to, folded stack), each counting its length in ``unit`` seconds,
    split across the buckets it overlaps; with a fourth element (bcc's per-slot totals: several
    threads' blocked time within one slot), that many units spread evenly over [from, to].
    ``threads``: each interval's thread (page thread table row)."""
    st = _Stacks()
    rows: list[tuple[float, float, int, float | None, int]] = []
    ths = iter(threads) if threads is not None else None
    for iv in intervals:
        a, z, stack = iv[0], iv[1], iv[2]
        th = next(ths, -1) if ths is not None else -1
        if len(iv) > 3:
            w = float(iv[3])
            rows.append((a, z, st.id(stack, max(1, round(w))), w / max(z - a, 1e-12), th))
        else:
            rows.append((a, z, st.id(stack, max(1, round((z - a) / unit))), None, th))
    if not rows:
        return None
    cut: list[str] = []
    mapping = _cap_stacks(st.names, st.totals, cut)
    lo = min(t0, min(r[0] for r in rows))
    span = max(t1, max(r[1] for r in rows)) - lo

    def split(b: float) -> dict[tuple[int, int, int], int]:
        out: dict[tuple[int, int, int], int] = {}
        for a, z, s, per_s, th in rows:
            s = mapping[s]
            i, j = int((a - lo) // b), int((z - lo) // b)
            for k in range(i, j + 1):
                part = min(z, lo + (k + 1) * b) - max(a, lo + k * b)
                w = round(part / unit) if per_s is None else round(part * per_s)
                if w > 0:
                    out[(k, s, th)] = out.get((k, s, th), 0) + w
            if len(out) > 4 * MAX_ENTRIES:
                break  # too fine: the caller doubles the bucket
        return out

    cache: dict[float, dict[tuple[int, int, int], int]] = {}

    def pairs(b: float) -> int:
        cache[b] = split(b)
        return len(cache[b])

    b = _bucket_size(span, pairs)
    got = cache.get(b) or split(b)
    frames, parent, frame, leaf = _tree(st.names, (s for _, s, _ in got))
    entries, ths_out = _entries(((k, s, th, w) for (k, s, th), w in got.items()), leaf)
    total = sum(w for _, _, w in entries)
    all_counts = sum(st.totals) or 1
    return RangeStacks(unit="us", bucket=b, t0=lo - t0, nbuckets=int(math.ceil(span / b)) or 1, frames=frames,
                       parent=parent, frame=frame, entries=entries, total=total, cut=cut,
                       unknown_share=st.unknown / all_counts, unknown_deep=st.deep / all_counts, threads=ths_out)


def from_totals(folded: dict[str, int], unit: str) -> RangeStacks | None:
    """Stacks with no times (bcc's in-kernel totals): one bucket, shown whatever the range."""
    st = _Stacks()
    got: dict[int, int] = {}
    for stack, n in folded.items():
        s = st.id(stack, n)
        got[s] = got.get(s, 0) + n
    if not got:
        return None
    cut: list[str] = []
    mapping = _cap_stacks(st.names, st.totals, cut)
    merged: dict[int, int] = {}
    for s, n in got.items():
        merged[mapping[s]] = merged.get(mapping[s], 0) + n
    frames, parent, frame, leaf = _tree(st.names, merged)
    entries = sorted((0, leaf[s], n) for s, n in merged.items())
    total = sum(merged.values())
    return RangeStacks(unit=unit, bucket=0.0, t0=0.0, nbuckets=1, frames=frames, parent=parent, frame=frame,
                       entries=entries, total=total, timed=False, cut=cut,
                       unknown_share=st.unknown / total, unknown_deep=st.deep / total)


def from_snapshots(snapshots: list[tuple[float, int, dict[str, int]]], unit: str) -> RangeStacks | None:
    """Stacks of snapshots (a goroutine dump's), each (time on the timeline axis, pid, folded
    counts): one bucket per snapshot; the page shows, per pid, the snapshot nearest the range."""
    st = _Stacks()
    got: dict[tuple[int, int], int] = {}
    for k, (_, _, folded) in enumerate(snapshots):
        for stack, n in folded.items():
            sid = st.id(stack, n)
            got[(k, sid)] = got.get((k, sid), 0) + n
    if not got:
        return None
    cut: list[str] = []
    mapping = _cap_stacks(st.names, st.totals, cut)
    merged: dict[tuple[int, int], int] = {}
    for (k, sid), n in got.items():
        merged[(k, mapping[sid])] = merged.get((k, mapping[sid]), 0) + n
    frames, parent, frame, leaf = _tree(st.names, (sid for _, sid in merged))
    entries, ths = _entries(((k, sid, -1, n) for (k, sid), n in merged.items()), leaf)
    total = sum(n for _, _, n in entries)
    return RangeStacks(unit=unit, bucket=0.0, t0=0.0, nbuckets=len(snapshots), frames=frames, parent=parent,
                       frame=frame, entries=entries, total=total, timed=False, cut=cut,
                       unknown_share=st.unknown / total, unknown_deep=st.deep / total, threads=ths,
                       snapshots=[(t, pid) for t, pid, _ in snapshots])


UNKNOWN_SHARE = 0.05  # advise about [unknown] frames when this share of a graph's stacks hold one


def unknown_advice(rs: RangeStacks, call_graph: str, container: bool) -> dict[str, str] | None:
    """Why stacks hold [unknown] frames and how to get names, when enough of them do:
    ``call_graph`` is the capture's --call-graph, ``container`` whether a target ran in one."""
    if rs.unknown_share < UNKNOWN_SHARE:
        return None
    share = f"{100 * rs.unknown_share:.0f}%"
    if rs.unknown_deep >= rs.unknown_share / 2 and call_graph == "fp":
        why = (f"{share} of these stacks run into frames without a name, most of them in long runs: the frame-pointer "
               "walk (--call-graph fp) went astray in code built without frame pointers (often libc, or the program "
               "itself), and read addresses that are not code. Runs of [unknown] are folded into one frame here.")
        fix = ("capture again with --call-graph dwarf (larger captures), or rebuild the program with frame pointers "
               "(C/C++: -fno-omit-frame-pointer; Rust: RUSTFLAGS=\"-C force-frame-pointers=yes\"; Go keeps them).")
    elif container:
        why = (f"{share} of these stacks hold frames without a name, and a target runs in a container: its binaries and "
               "their symbols live in the container's filesystem.")
        fix = ("keep the container running until the capture has finished symbolizing (profiler reads symbols through "
               "/proc/PID/root), and ship symbols in the image (not stripped binaries, or debug packages).")
    else:
        why = f"{share} of these stacks hold frames without a name: stripped binaries, JIT code, or a broken stack walk."
        fix = ("install the programs' debug symbols (Debian: the -dbgsym packages), give JIT runtimes a perf map "
               "(/tmp/perf-PID.map), or capture with --call-graph dwarf.")
    return {"why": why, "fix": fix}
