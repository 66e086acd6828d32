"""Bundle views cut to a time window (analyzers layer): what the verdict reads when a load's
warm-up is left out (analyzers.load.phases chooses the window).

Cut: the procfs samples (threads, processes, system, cgroups), perf stat intervals, syscalls.csv
rows (and the duty-cycled windows the syscalls record counts its rates over), block IO events
and bcc IO histogram slots. Interval data is kept when the interval ends inside the window.
Not cut: the stacks (folded without times: the flame graphs cover the whole capture), the bcc
backend's in-kernel wait totals, and the report's pictures, which are built from the uncut views.
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
from profiler.analyzers.series import perfstat
from profiler.analyzers.series.procfs import ProcData, Series, ThreadSeries
from profiler.analyzers.views import BundleViews, IOEvents, SyscallsView

from profiler.bundle import CollectorRecord, Manifest


def _series(s: Series, lo: float, hi: float) -> Series:
    m = (s.t >= lo) & (s.t <= hi)
    return Series(t=s.t[m], values={k: v[m] for k, v in s.values.items()})


def _thread(s: ThreadSeries, lo: float, hi: float) -> ThreadSeries | None:
    m = (s.t >= lo) & (s.t <= hi)
    if not m.any():
        return None
    idx = np.nonzero(m)[0]
    return dataclasses.replace(s, t=s.t[m], cpu=s.cpu[m], state=s.state[m], wait=s.wait[m], syscall=s.syscall[m],
                               run_delay=s.run_delay[m], blkio=s.blkio[m], vcsw=s.vcsw[m], ivcsw=s.ivcsw[m],
                               wchans=[s.wchans[i] for i in idx] if s.wchans else [])


def cut_proc(pd: ProcData, lo: float, hi: float) -> ProcData:
    threads = {}
    for key, s in pd.threads.items():
        c = _thread(s, lo, hi)
        if c is not None:
            threads[key] = c
    return dataclasses.replace(
        pd, threads=threads, processes={p: _series(s, lo, hi) for p, s in pd.processes.items()},
        system=_series(pd.system, lo, hi) if pd.system is not None else None,
        cgroups={p: _series(s, lo, hi) for p, s in pd.cgroups.items()},
        events=[e for e in pd.events if lo <= float(e.get("t", lo)) <= hi])


def cut_stat(ps: perfstat.PerfStatSeries, start: float, lo: float, hi: float) -> perfstat.PerfStatSeries:
    """perf stat intervals (ends counted from the collector's ``start``) that end inside the window."""
    events = {}
    for ev, (t, v) in ps.events.items():
        m = (start + t > lo) & (start + t <= hi)
        events[ev] = (t[m], v[m])
    return dataclasses.replace(ps, events=events)


def _io(ev: IOEvents, lo: float, hi: float) -> IOEvents:
    m = (ev.t >= lo) & (ev.t <= hi)
    return ev.cut(m)


def _record(rec: CollectorRecord, lo: float, hi: float) -> CollectorRecord:
    """A duty-cycled record's traced windows clipped to the window (its rates are per traced second)."""
    wins = rec.stats.get("windows")
    if not rec.stats.get("sampled") or not isinstance(wins, list):
        return rec
    clipped = [[max(a, lo), min(b, hi)] for a, b in wins if min(b, hi) > max(a, lo)]
    stats = dict(rec.stats, windows=clipped, sampled_seconds=round(sum(b - a for a, b in clipped), 3))
    return dataclasses.replace(rec, stats=stats)


def cut(v: BundleViews, lo: float, hi: float) -> BundleViews:
    """The views the verdict reads, restricted to [lo, hi] (CLOCK_MONOTONIC seconds)."""
    m: Manifest = copy.copy(v.manifest)
    m.collectors = [_record(r, lo, hi) for r in v.manifest.collectors]
    out = dataclasses.replace(v, manifest=m)
    if v.proc is not None:
        out.proc = cut_proc(v.proc, lo, hi)
    stat_rec = v.manifest.collector("perf-stat")
    if v.stat is not None and stat_rec is not None and stat_rec.started is not None:
        out.stat = cut_stat(v.stat, stat_rec.started, lo, hi)
    if v.syscalls is not None:
        rows = v.syscalls.rows
        if rows is not None:
            rows = [r for r in rows if r.time is not None and lo <= r.time <= hi]
        rate = v.syscalls.rate
        srec = v.manifest.collector("syscalls")
        if rate is not None and srec is not None and srec.started is not None:
            rate = cut_stat(rate, srec.started, lo, hi)
        out.syscalls = SyscallsView(rows=rows, rate=rate)
    if v.io is not None:
        io = dataclasses.replace(v.io)
        if io.events is not None:
            io.events = _io(io.events, lo, hi)
        if io.hist is not None:
            io.hist = dataclasses.replace(io.hist, slots=[s for s in io.hist.slots if lo <= s.t <= hi])
        out.io = io
    return out


__all__ = ["cut", "cut_proc", "cut_stat"]
