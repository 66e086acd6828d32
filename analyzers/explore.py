"""What the HTML report explores, from the bundle views (analyzers layer).

The page selects any time range and narrows every view to a target, a pool or a thread; this
module builds what it needs for that, once, as models (the renderer only serializes them):

- the thread table every view names threads by (analyzers.series.tracks.ThreadTable), each
  thread's track (on CPU, runnable, off CPU per timeline bucket);
- the on-CPU and off-CPU stacks by time bucket and thread (analyzers.stacks.ranges), with what
  they count and why frames lack names (``unknown_advice``);
- the goroutine snapshots (one bucket per snapshot: the page shows the one nearest the range);
- syscalls per timeline bucket, thread and syscall (syscalls.csv);
- block IOs by time, latency, device/op and thread (analyzers.io.ranges);
- CPU samples by second, 20 ms row and thread (the sub-second heatmap, narrowed by the filter).

Where the duty-cycled collectors measured (off-CPU, syscalls) is the timeline's ``coverage``:
the page draws the rest of a range as "not measured", never as zero.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from profiler.analyzers.io import ranges as ioranges
from profiler.analyzers.series import tracks as trk
from profiler.analyzers.stacks import ranges
from profiler.analyzers.views import OFFCPU_MAX_SWITCHES, BundleViews

if TYPE_CHECKING:
    from profiler.analyzers.analysis import Analysis

HEATMAP_ROWS = 50  # 20 ms rows of the CPU sub-second heatmap
MAX_HEATMAP_SECONDS = 900
MAX_CELLS = 60_000  # (second, row, thread) cells of the CPU heatmap; past it, threads are merged
MAX_SYSCALL_ENTRIES = 60_000


@dataclass
class Syscalls:
    """syscalls.csv per timeline bucket (or several, when merged to fit), thread and syscall."""

    names: list[str]
    step: int  # timeline buckets per entry bucket
    entries: list[tuple[int, int, int, float, float]]  # (bucket, thread, syscall, calls, microseconds)

    def to_json(self) -> dict[str, object]:
        cols = list(zip(*self.entries, strict=True)) if self.entries else [(), (), (), (), ()]
        return {"names": self.names, "step": self.step, "b": list(cols[0]), "th": list(cols[1]), "s": list(cols[2]),
                "n": [round(x, 3) for x in cols[3]], "us": [round(x, 1) for x in cols[4]]}


@dataclass
class CpuCells:
    """CPU samples per (second, 20 ms row, thread): the sub-second heatmap, any filter."""

    offset: float  # column 0's start on the timeline axis
    columns: int
    rows: int
    entries: list[tuple[int, int, int, int]]  # (column, row, thread or -1, samples)
    cut: str | None = None

    def to_json(self) -> dict[str, object]:
        cols = list(zip(*self.entries, strict=True)) if self.entries else [(), (), (), ()]
        return {"offset": round(self.offset, 6), "columns": self.columns, "rows": self.rows, "col": list(cols[0]),
                "row": list(cols[1]), "th": list(cols[2]), "c": list(cols[3]), "cut": self.cut}


@dataclass
class Explore:
    threads: trk.ThreadTable
    targets: dict[int, str]  # pid -> "comm (pid)"
    kinds: dict[int, str | None]  # pid -> tikv, tidb, pd... or None
    tracks: trk.Tracks | None = None
    syscalls: Syscalls | None = None
    io: ioranges.IoRanges | None = None
    cpu_cells: CpuCells | None = None
    goroutines: ranges.RangeStacks | None = None
    cli_offset: float = 0.0  # timeline 0 minus the capture's start: what --from/--to count from

    def to_json(self) -> dict[str, Any]:
        th = self.threads.to_json(self.kinds)
        n = len(self.threads.tid)
        out: dict[str, Any] = {"threads": th, "targets": {str(k): v for k, v in self.targets.items()}}
        if self.tracks is not None:
            tr = self.tracks
            out["tracks"] = {"on": tr.on + [""] * (n - len(tr.on)), "runq": tr.runq + [""] * (n - len(tr.runq)),
                             "state": tr.state + [""] * (n - len(tr.state)), "left_out": tr.left_out}
        for key, part in (("syscalls", self.syscalls), ("io", self.io), ("cpu_cells", self.cpu_cells),
                          ("goroutines", self.goroutines)):
            if part is not None:
                out[key] = part.to_json()
        return out


def _syscalls(v: BundleViews, edges: np.ndarray, thread_of: Callable[[int], int]) -> Syscalls | None:
    rows = v.syscalls.rows if v.syscalls is not None else None
    if not rows:
        return None
    names: dict[str, int] = {}
    got: dict[tuple[int, int, int], list[float]] = {}
    nb = len(edges) - 1
    for r in rows:
        if r.time is None or r.count is None or r.tid is None:
            continue
        b = int(np.clip(np.searchsorted(edges, r.time, side="right") - 1, 0, nb - 1))
        key = (b, thread_of(r.tid), names.setdefault(r.syscall, len(names)))
        acc = got.setdefault(key, [0.0, 0.0])
        acc[0] += r.count
        acc[1] += (r.total_ns or 0.0) / 1000
    step = 1
    while len(got) > MAX_SYSCALL_ENTRIES and step < nb:
        step *= 2
        merged: dict[tuple[int, int, int], list[float]] = {}
        for (b, th, s), (n, us) in got.items():
            acc = merged.setdefault((b // 2, th, s), [0.0, 0.0])
            acc[0] += n
            acc[1] += us
        got = merged
    entries = sorted((b, th, s, n, us) for (b, th, s), (n, us) in got.items())
    return Syscalls(names=list(names), step=step, entries=entries)


def _cpu_cells(v: BundleViews, table: trk.ThreadTable, t0: float, threads: list[int]) -> CpuCells | None:
    cpu = v.cpu
    if cpu is None or not cpu.timed:
        return None
    t = np.asarray([x for x, _ in cpu.timed], dtype=np.float64)
    origin = cpu.origin if cpu.origin is not None else float(t.min())
    rel = t - origin
    col = np.floor(rel).astype(np.int64)
    row = np.clip(np.floor((rel - col) * HEATMAP_ROWS), 0, HEATMAP_ROWS - 1).astype(np.int64)
    keep = (col >= 0) & (col < MAX_HEATMAP_SECONDS)
    th = np.asarray(threads, dtype=np.int64)[keep] + 1
    col, row = col[keep], row[keep]
    nth = int(th.max()) + 1 if len(th) else 1
    cut = None
    keys = np.unique((col * HEATMAP_ROWS + row) * nth + th)
    if len(keys) > MAX_CELLS:
        th = np.zeros_like(th)
        cut = "too many cells to keep each thread's: the heatmap shows every thread whatever the filter"
    keys, counts = np.unique((col * HEATMAP_ROWS + row) * nth + th, return_counts=True)
    entries = [(int(k // nth) // HEATMAP_ROWS, int(k // nth) % HEATMAP_ROWS, int(k % nth) - 1, int(c))
               for k, c in zip(keys, counts, strict=True)]
    columns = int(col.max()) + 1 if len(col) else 0
    if len(t) and float(rel.max()) >= MAX_HEATMAP_SECONDS:
        cut = f"the first {MAX_HEATMAP_SECONDS} s are drawn"
    return CpuCells(offset=origin - t0, columns=columns, rows=HEATMAP_ROWS, entries=entries, cut=cut)


def _goroutines(v: BundleViews, t0: float) -> ranges.RangeStacks | None:
    view = v.server
    if view is None:
        return None
    snaps = [(s.t - t0, ts.pid, s.folded) for ts in sorted(view.targets.values(), key=lambda x: x.pid)
             for s in ts.goroutines if s.total]
    return ranges.from_snapshots(snaps, "goroutines") if snaps else None


def _offcpu_notes(v: BundleViews) -> tuple[str, list[str]]:
    off = v.offcpu
    assert off is not None
    if off.bcc and off.timed:
        return ("time blocked (us), by wait reason and thread pool (bcc: summed in the kernel per time slot)",
                ["bcc off-CPU stacks are summed per slot: a range is widened to whole slots"])
    if off.bcc:
        return ("time blocked (us), by wait reason and thread pool (bcc: summed in the kernel)",
                ["bcc off-CPU stacks are totals over the capture: no per-switch times"])
    notes, part = [], ""
    if off.sampled is not None:
        kept, total = off.sampled
        part = " (a uniform sample of the switches)"
        notes.append(f"stacks of {kept:,} of the targets' {total:,} switch-outs, a uniform sample over the "
                     "capture (the collector's bound on symbolizing); widths are those switches' blocked time")
    if off.limited:
        part = " (first part of the capture)"
        notes.append(f"built from the first {OFFCPU_MAX_SWITCHES:,} context switches in the bundle "
                     f"(`profiler flamegraph BUNDLE --offcpu` draws them all)")
    return "time blocked (us), by wait reason and thread pool" + part, notes


def add(v: BundleViews, a: Analysis) -> None:
    """The page's data into ``a``: ``cpu_range`` and ``offcpu_range`` artifacts, and ``explore``."""
    tl = a.timeline
    m = v.manifest
    cpu_t = [t for t, _ in v.cpu.timed] if v.cpu is not None else []
    off_t = [t for iv in v.offcpu.timed for t in iv[:2]] if v.offcpu is not None else []
    t0 = tl.t0 if tl.t0 is not None else min(cpu_t + off_t, default=None)
    if t0 is None and not (v.offcpu is not None and v.offcpu.bcc) and v.server is None:
        return
    t0 = t0 or 0.0
    t1 = t0 + len(tl.t) * tl.step if tl.t else max(cpu_t + off_t, default=t0 + 1.0)
    table = trk.ThreadTable()
    ex = Explore(threads=table, targets={t.pid: f"{t.comm} ({t.pid})" for t in m.targets},
                 kinds={t.pid: t.kind for t in m.targets},
                 cli_offset=round(t0 - m.clock.monotonic_start, 6) if m.clock.monotonic_start else 0.0)
    pd = v.proc
    pid_of: dict[int, int] = {}
    if pd is not None:
        for (pid, tid), s in sorted(pd.threads.items()):
            table.add(pid, tid, s.comm)
            pid_of[tid] = pid
    for t in m.targets:
        for th in t.threads:
            if th.tid not in table.index:
                table.add(t.pid, th.tid, th.comm)
            pid_of.setdefault(th.tid, t.pid)

    def thread_of(tid: int, comm: str = "") -> int:
        return table.add(pid_of.get(tid, 0), tid, comm)

    opts = m.options or {}
    call_graph = str(opts.get("call_graph", "fp"))
    container = any(t.container for t in m.targets)
    try:
        if v.cpu is not None and v.cpu.timed:
            cache: dict[tuple[int, int, str], int] = {}
            ths = []
            for key in v.cpu.timed_threads:
                i = cache.get(key)
                if i is None:
                    pid_of.setdefault(key[1], key[0])
                    i = cache[key] = thread_of(key[1], key[2])
                ths.append(i)
            cpu = ranges.from_samples(v.cpu.timed, t0, t1, ths if len(ths) == len(v.cpu.timed) else None)
            if cpu is not None:
                cpu.subtitle = "cpu-clock samples, one root per thread pool"
                cpu.advice = ranges.unknown_advice(cpu, call_graph, container)
                a.artifacts["cpu_range"] = cpu
                ex.cpu_cells = _cpu_cells(v, table, t0, ths if len(ths) == len(v.cpu.timed) else [-1] * len(cpu_t))
        off = None
        if v.offcpu is not None and v.offcpu.timed:
            tids = v.offcpu.timed_tids
            off = ranges.from_intervals(v.offcpu.timed, t0, t1,
                                        threads=[thread_of(x) for x in tids] if len(tids) == len(v.offcpu.timed) else None)
        elif v.offcpu is not None and v.offcpu.bcc and v.offcpu.folded:
            off = ranges.from_totals(v.offcpu.folded, "us")
        if off is not None:
            off.subtitle, off.notes = _offcpu_notes(v)
            off.advice = ranges.unknown_advice(off, call_graph, container)
            a.artifacts["offcpu_range"] = off
    except Exception as exc:  # noqa: BLE001 - the report says so and shows the rest
        a.warnings.append(f"range flame graphs could not be built: {type(exc).__name__}: {exc}")
    ex.goroutines = _goroutines(v, t0)
    if ex.goroutines is None and v.server is not None:  # (a capture without the collector has none to miss)
        a.missing_artifacts["goroutine_flame"] = "no goroutine profile: " + (
            v.server.reason or "the targets serve no /debug/pprof/ (not Go, or pprof not enabled)")
    edges = tl.edges()
    if edges is not None:
        ex.syscalls = _syscalls(v, edges, lambda tid: thread_of(tid))
    events = v.io.events if v.io is not None else None
    if events is not None and len(events.t):
        ex.io = ioranges.from_events(events, t0, t1, {tid: i for tid, i in table.index.items() if tid in pid_of},
                                     a.devices)
    elif v.io is not None and v.io.hist is not None:
        ex.io = ioranges.from_hist(v.io.hist, t0, t1, a.devices)
    if pd is not None and edges is not None:
        ex.tracks = trk.tracks(pd, table, edges)
    a.artifacts["explore"] = ex
