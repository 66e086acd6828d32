"""Time series for the report's timeline: every source on one axis (analyzers layer).

The axis is seconds since the capture's first procfs sample (or the manifest's start), in
buckets of ``step`` seconds (1 s, wider for long captures so a chart holds at most ~300
points). Each panel maps a series name to one value per bucket (None where unknown).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from profiler.analyzers.io import histograms
from profiler.analyzers.series import perfstat
from profiler.analyzers.series import procfs as procmod
from profiler.analyzers.views import IOEvents, SyscallsView

from profiler.bundle import TargetInfo

MAX_POINTS = 300


@dataclass
class Panel:
    title: str
    unit: str
    series: dict[str, list[float | None]] = field(default_factory=dict)
    stacked: bool = False


@dataclass
class Mark:
    """A time range every panel shades: a load's warm-up, a throughput dip."""

    start: float  # seconds since t0
    end: float
    kind: str  # "warmup", "dip"
    label: str


@dataclass
class Timeline:
    t: list[float]  # bucket starts, seconds since t0
    step: float
    t0: float | None
    panels: dict[str, Panel] = field(default_factory=dict)
    marks: list[Mark] = field(default_factory=list)
    # per evidence source (syscalls, offcpu): the windows it traced and where it lost events, in
    # seconds since t0: {"windows": [[from, to], ...], "lost": [[t, events], ...]}. A duty-cycled
    # perf trace covers a second in ten: the seconds outside its windows are gaps, not zeros
    coverage: dict[str, dict[str, list[list[float]]]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"t": self.t, "step": self.step, "t0": self.t0,
                "panels": {k: {"title": p.title, "unit": p.unit, "stacked": p.stacked, "series": p.series}
                           for k, p in self.panels.items()},
                "marks": [vars(m) for m in self.marks], "coverage": self.coverage}

    def edges(self) -> np.ndarray | None:
        """The buckets' edges on the monotonic clock (None for an empty timeline)."""
        if self.t0 is None or not self.t:
            return None
        return self.t0 + np.asarray(self.t + [self.t[-1] + self.step])

    def add_points(self, key: str, title: str, unit: str, points: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
        """A panel from values at points in time (CLOCK_MONOTONIC: e.g. the middle of a load's
        interval reports), averaged per bucket; buckets without a point stay empty."""
        edges = self.edges()
        if edges is None:
            return
        p = Panel(title, unit)
        for name, (t, v) in points.items():
            tt, vv = np.asarray(t, float), np.asarray(v, float)
            inside = (tt >= edges[0]) & (tt <= edges[-1])
            if inside.any():
                p.series[name] = _clean(_level_per_bucket(tt[inside], vv[inside], edges))
        if any(x is not None for vals in p.series.values() for x in vals):
            self.panels[key] = p


def _clean(a: np.ndarray) -> list[float | None]:
    return [None if not np.isfinite(v) else round(float(v), 4) for v in a]


def _rate_per_bucket(t: np.ndarray, v: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Per-second increase of a cumulative counter in each bucket (NaN outside its samples)."""
    ok = ~np.isnan(v)
    t, v = t[ok], v[ok]
    out = np.full(len(edges) - 1, np.nan)
    if len(t) < 2:
        return out
    e = np.clip(edges, t[0], t[-1])  # a bucket only partly covered: the rate over the covered part
    c = np.interp(e, t, v)
    de = np.diff(e)
    inside = de > 0.2 * np.diff(edges)
    out[inside] = np.diff(c)[inside] / de[inside]
    return out


def _level_per_bucket(t: np.ndarray, v: np.ndarray, edges: np.ndarray) -> np.ndarray:
    ok = ~np.isnan(v)
    t, v = t[ok], v[ok]
    out = np.full(len(edges) - 1, np.nan)
    if len(t) == 0:
        return out
    idx = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, len(edges) - 2)
    sums = np.bincount(idx, weights=v, minlength=len(edges) - 1)
    cnt = np.bincount(idx, minlength=len(edges) - 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(cnt > 0, sums / np.maximum(cnt, 1), np.nan)
    return out


def _interval_rate(ends: np.ndarray, rates: np.ndarray, start: float, edges: np.ndarray) -> np.ndarray:
    """Per bucket, the time-weighted mean of interval rates (interval i runs from the previous
    end, the first from ``start``, to ``ends[i]``); NaN where intervals cover under half the
    bucket. A row that arrives a little late still covers the bucket it belongs to (its end
    alone fell in the next one, leaving a gap in the line)."""
    out = np.full(len(edges) - 1, np.nan)
    if not len(ends):
        return out
    lo = np.concatenate([[start], ends[:-1]])
    num = np.zeros(len(out))
    cov = np.zeros(len(out))
    for a, b, r in zip(lo, ends, rates, strict=True):
        if not (b > a) or not np.isfinite(r):
            continue
        i0 = max(0, int(np.searchsorted(edges, a, side="right")) - 1)
        i1 = min(len(out) - 1, int(np.searchsorted(edges, b, side="left")) - 1)
        for i in range(i0, i1 + 1):
            part = min(b, edges[i + 1]) - max(a, edges[i])
            if part > 0:
                num[i] += r * part
                cov[i] += part
    ok = cov >= 0.5 * np.diff(edges)
    out[ok] = num[ok] / cov[ok]
    return out


def covered_per_bucket(windows: list[tuple[float, float]], edges: np.ndarray) -> np.ndarray:
    """Seconds of each bucket inside the windows (monotonic)."""
    out = np.zeros(len(edges) - 1)
    for a, b in windows:
        lo, hi = np.maximum(edges[:-1], a), np.minimum(edges[1:], b)
        out += np.clip(hi - lo, 0, None)
    return out


def _syscall_counts(syscalls: SyscallsView | None) -> tuple[np.ndarray, np.ndarray] | None:
    """(interval start, calls) of the syscalls.csv rows, every thread together; None when there are
    none, or when an older bundle's syscalls-rate.csv gives the rate itself."""
    if syscalls is None or syscalls.rate is not None or syscalls.rows is None:
        return None
    rows = [(r.time, r.count) for r in syscalls.rows if r.time is not None and r.count is not None]
    if not rows:
        return None
    return np.asarray([t for t, _ in rows]), np.asarray([n for _, n in rows])


def build(pd: procmod.ProcData | None, targets: list[TargetInfo], *, t0: float | None, t1: float | None,
          io: IOEvents | None = None, stat: perfstat.PerfStatSeries | None = None, stat_start: float | None = None,
          syscalls: SyscallsView | None = None, syscall_start: float | None = None,
          io_hist: histograms.BlockHist | None = None,
          coverage: dict[str, tuple[list[tuple[float, float]], list[tuple[float, int]]]] | None = None) -> Timeline:
    """The timeline panels. ``io_hist``: the bcc backend's block IO histograms, drawn when there
    are no per-IO events; ``syscalls``: an older bundle's syscalls-rate.csv rate when there is
    one, else the syscalls.csv counts of every thread. ``coverage``: per source, the windows it
    traced and its lost events (monotonic); the syscall rate is per traced second of each
    bucket, None (a gap) in a bucket it did not trace."""
    syscall_rate = syscalls.rate if syscalls is not None else None
    syscall_counts = _syscall_counts(syscalls)
    if t0 is None or t1 is None or t1 <= t0:
        return Timeline(t=[], step=1.0, t0=t0)
    span = t1 - t0
    step = max(1.0, float(np.ceil(span / MAX_POINTS)))
    edges = t0 + np.arange(0, span + step, step)
    if len(edges) < 2:
        edges = np.array([t0, t0 + step])
    tl = Timeline(t=[round(float(e - t0), 3) for e in edges[:-1]], step=step, t0=t0)
    for src, (wins, lost) in (coverage or {}).items():
        tl.coverage[src] = {"windows": [[round(a - t0, 3), round(b - t0, 3)] for a, b in wins],
                            "lost": [[round(t - t0, 3), float(n)] for t, n in lost]}
    labels = {t.pid: f"{t.comm} ({t.pid})" for t in targets}
    if pd is not None:
        cpu = Panel("CPU used by each target", "cores")
        rss = Panel("Resident memory", "MiB")
        flt = Panel("Major page faults", "faults/s")
        for pid, ps in sorted(pd.processes.items()):
            name = labels.get(pid, str(pid))
            u, s = ps.get("utime"), ps.get("stime")
            if u is not None and s is not None:
                cpu.series[name] = _clean(_rate_per_bucket(ps.t, (u + s) / pd.clk_tck, edges))
            r = ps.get("rss")
            if r is not None:
                rss.series[name] = _clean(_level_per_bucket(ps.t, r / 1048576, edges))
            mf = ps.get("majflt")
            if mf is not None:
                flt.series[name] = _clean(_rate_per_bucket(ps.t, mf, edges))
        # thread states: average number of the targets' threads in each wait class
        states = Panel("Threads by state (all targets)", "threads", stacked=True)
        nb = len(edges) - 1
        counts = np.zeros((6, nb))
        for s_ in pd.threads.values():
            idx = np.clip(np.searchsorted(edges, s_.t, side="right") - 1, 0, nb - 1)
            np.add.at(counts, (s_.wait.astype(np.int64), idx), 1)
        # every thread of a tick carries the tick's time: distinct times are the ticks
        all_t = np.unique(np.concatenate([s_.t for s_ in pd.threads.values()])) if pd.threads else np.array([])
        ticks = np.bincount(np.clip(np.searchsorted(edges, all_t, side="right") - 1, 0, nb - 1),
                            minlength=nb).astype(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            per = np.where(ticks > 0, counts / np.maximum(ticks, 1), np.nan)
        names = {procmod.RUNNING: "running or runnable", procmod.DISK: "blocked on IO", procmod.FUTEX: "futex (locks, parked workers)",
                 procmod.IDLE: "idle (epoll, recv)", procmod.SLEEP: "sleep", procmod.OTHER: "other"}
        for cls, name in names.items():
            if np.nansum(per[cls]) > 0:
                states.series[name] = _clean(per[cls])
        tl.panels["cpu"] = cpu
        tl.panels["states"] = states
        if pd.system is not None and len(pd.system.t) >= 2:
            sysp = Panel("Host CPU", "%")
            st = pd.system
            tot = None
            parts = {}
            for k in ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"):
                v = st.get(f"cpu.{k}")
                if v is None:
                    continue
                parts[k] = _rate_per_bucket(st.t, v, edges)
                tot = parts[k] if tot is None else tot + parts[k]
            if tot is not None:
                with np.errstate(invalid="ignore", divide="ignore"):
                    busy = sum(parts[k] for k in parts if k not in ("idle", "iowait"))
                    sysp.series["busy"] = _clean(100 * busy / tot)
                    if "iowait" in parts:
                        sysp.series["iowait"] = _clean(100 * parts["iowait"] / tot)
                    if "steal" in parts:
                        sysp.series["steal"] = _clean(100 * parts["steal"] / tot)
                tl.panels["host_cpu"] = sysp
            disks = st.names_under("disks")
            iops = Panel("Disk IOPS (/proc/diskstats)", "IO/s")
            aw = Panel("Disk await (/proc/diskstats)", "ms")
            for d in disks:
                r_ = _rate_per_bucket(st.t, st.values[f"disks.{d}.reads"], edges)
                w_ = _rate_per_bucket(st.t, st.values[f"disks.{d}.writes"], edges)
                ms = (_rate_per_bucket(st.t, st.values[f"disks.{d}.read_ms"], edges)
                      + _rate_per_bucket(st.t, st.values[f"disks.{d}.write_ms"], edges))
                ios = r_ + w_
                if np.nansum(ios) <= 0:
                    continue
                iops.series[d] = _clean(ios)
                with np.errstate(invalid="ignore", divide="ignore"):
                    aw.series[d] = _clean(np.where(ios > 0, ms / ios, np.nan))
            if iops.series:
                tl.panels["disk_iops"] = iops
                tl.panels["disk_await"] = aw
            mem = Panel("Memory pressure (PSI some)", "%")
            for res in ("memory", "io", "cpu"):
                v = st.get(f"psi.{res}.some_total")
                if v is not None:  # a share of time: the sampler's and the kernel's clocks disagree by a little
                    mem.series[res] = _clean(np.clip(_rate_per_bucket(st.t, v / 1e4, edges), 0, 100))
            if mem.series:
                mem.title = "Pressure stall (PSI some)"
                tl.panels["psi"] = mem
        if rss.series:
            tl.panels["rss"] = rss
        if flt.series and any(v for s_ in flt.series.values() for v in s_ if v):
            tl.panels["majflt"] = flt
    if io is not None and len(io.t):
        idx = np.clip(np.searchsorted(edges, io.t, side="right") - 1, 0, len(edges) - 2)
        lat = Panel("Block IO latency (trace)", "ms")
        p50 = np.full(len(edges) - 1, np.nan)
        p99 = np.full(len(edges) - 1, np.nan)
        order = np.argsort(idx, kind="stable")
        sidx, slat = idx[order], io.latency[order] * 1e3
        bounds = np.searchsorted(sidx, np.arange(len(edges)))
        for b in range(len(edges) - 1):
            chunk = slat[bounds[b]:bounds[b + 1]]
            if len(chunk):
                p50[b], p99[b] = np.percentile(chunk, 50), np.percentile(chunk, 99)
        lat.series = {"p50": _clean(p50), "p99": _clean(p99)}
        tl.panels["io_latency"] = lat
        cnt = np.bincount(idx, minlength=len(edges) - 1) / step
        tl.panels["io_iops"] = Panel("Block IO completions (trace)", "IO/s", {"IOPS": _clean(cnt.astype(float))})
    elif io_hist is not None and io_hist.slots:
        _hist_panels(tl, io_hist, edges, step)
    for ps_, start, key, title in ((syscall_rate, syscall_start, "syscalls", "Syscalls (raw_syscalls:sys_enter)"),):
        if ps_ is None or start is None:
            continue
        p = Panel(title, "calls/s")
        for ev, (tt, vv) in ps_.events.items():
            if len(tt) >= 1:
                ends = start + tt
                dur = np.diff(np.concatenate([[start], ends]))
                rates = np.where(dur > 0, vv / np.maximum(dur, 1e-9), np.nan)
                p.series[ev] = _clean(_level_per_bucket(ends, rates, edges))
        if p.series:
            tl.panels[key] = p
    if "syscalls" not in tl.panels and syscall_counts is not None and len(syscall_counts[0]):
        calls_t, calls_n = syscall_counts
        idx = np.clip(np.searchsorted(edges, calls_t, side="right") - 1, 0, len(edges) - 2)
        calls = np.bincount(idx, weights=calls_n, minlength=len(edges) - 1)
        sys_cov = (coverage or {}).get("syscalls")
        if sys_cov is not None and sys_cov[0]:
            traced = covered_per_bucket(sys_cov[0], edges)
            with np.errstate(invalid="ignore", divide="ignore"):
                # a bucket traced for less than a tenth of itself says too little: a gap
                rate = np.where(traced >= 0.1 * np.diff(edges), calls / np.maximum(traced, 1e-9), np.nan)
        else:
            rate = calls / step
        tl.panels["syscalls"] = Panel("Syscalls (syscalls.csv counts, the targets)", "calls/s", {"calls": _clean(rate)})
    if stat is not None and stat_start is not None:
        tc = stat.series("task-clock")
        cs = stat.series("context-switches")
        if cs is not None:
            ends = stat_start + cs[0]
            dur = np.diff(np.concatenate([[stat_start], ends]))
            p = Panel("Context switches (perf stat)", "per s",
                      {"context-switches": _clean(_interval_rate(ends, cs[1] / np.maximum(dur, 1e-9), stat_start, edges))})
            tl.panels["ctxsw"] = p
        if tc is not None and "cpu" not in tl.panels:
            ends = stat_start + tc[0]
            dur = np.diff(np.concatenate([[stat_start], ends]))
            tl.panels["cpu"] = Panel("CPU used (perf stat task-clock)", "cores",
                                     {"targets": _clean(_interval_rate(ends, tc[1] / 1000 / np.maximum(dur, 1e-9), stat_start,
                                                                       edges))})
    return tl


def _hist_panels(tl: Timeline, h: histograms.BlockHist, edges: np.ndarray, step: float) -> None:
    """IO latency and completions per timeline bucket from in-kernel histograms (a slot counts
    in the bucket where it starts; percentiles interpolated inside a histogram bucket)."""
    n = len(edges) - 1
    merged: list[dict[int, int]] = [{} for _ in range(n)]
    top = [0] * n
    cnt = np.zeros(n)
    for s in h.slots:
        b = int(np.clip(np.searchsorted(edges, s.t, side="right") - 1, 0, n - 1))
        cnt[b] += s.count
        top[b] = max(top[b], s.max_ns)
        for k, c in s.buckets.items():
            merged[b][k] = merged[b].get(k, 0) + c
    p50 = np.full(n, np.nan)
    p99 = np.full(n, np.nan)
    for b in range(n):
        if merged[b]:
            p50[b] = (histograms.quantile_ns(merged[b], 50, h.sub_bits, top[b]) or np.nan) / 1e6
            p99[b] = (histograms.quantile_ns(merged[b], 99, h.sub_bits, top[b]) or np.nan) / 1e6
    tl.panels["io_latency"] = Panel("Block IO latency (bcc histograms)", "ms", {"p50": _clean(p50), "p99": _clean(p99)})
    tl.panels["io_iops"] = Panel("Block IO completions (bcc histograms)", "IO/s", {"IOPS": _clean(cnt / step)})
