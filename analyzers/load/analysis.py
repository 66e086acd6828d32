"""The load next to a capture, analyzed (analyzers layer).

Its series on the capture's clock, its summary, the verdict window, dips, and what each
transaction cost the targets.

``analyze_load(log, manifest)`` is everything that needs only the load's members;
``per_transaction`` is added once the verdict's metrics exist (they are computed over the
window this module chooses). ``to_dict()`` is the JSON report's ``load`` object
(docs/report-json.md, docs/load.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from profiler.analyzers.load.align import Placement, Point, place
from profiler.analyzers.load.model import ParsedLoad
from profiler.analyzers.load.phases import Phases, find_phases
from profiler.analyzers.load.view import LoadLog

from profiler.bundle import Manifest

TOOLS_TEXT = "sysbench, go-ycsb or go-tpc"


@dataclass
class PerTransaction:
    """What one transaction cost one target, over the verdict window."""

    target: str
    pid: int
    cpu_ms: float | None = None  # CPU time (user + system) per transaction, ms
    ios: float | None = None  # block IOs its threads issued per transaction (traced IO only)
    io_bytes: float | None = None  # bytes it read and wrote to storage per transaction (/proc/PID/io)
    ctx_switches: float | None = None  # voluntary + involuntary context switches per transaction


@dataclass
class LoadAnalysis:
    source: str  # "run" or "attach"
    status: str  # "ok", "missing" (no log), "unrecognised" (no known tool), "no-figures" (the tool printed none)
    why: str | None  # one line when status is not ok
    tool: str | None
    argv: list[str]
    exit_code: int | None
    origin: float  # the capture's start (CLOCK_MONOTONIC): series times count from here
    started: float | None  # the load's start and end (monotonic), when known
    ended: float | None
    parsed: ParsedLoad
    placement: Placement
    phases: Phases
    tps: float | None = None  # mean over the verdict window, else over the series, else the tool's summary
    tps_from: str = ""  # which of those
    per_tx: list[PerTransaction] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    # ---------------------------------------------------------------- figures
    @property
    def points(self) -> list[Point]:
        return self.placement.points

    @property
    def latency_key(self) -> str | None:
        """The percentile to draw: p95 when printed, else p99, else the highest printed."""
        keys = {k for p in self.points for k in p.interval.latency_ms if k.startswith("p")}
        for k in ("p95", "p99"):
            if k in keys:
                return k
        return max(keys, key=lambda k: float(k[1:]), default=None)

    def transactions(self, start: float, end: float) -> tuple[float, float] | None:
        """(transactions done, seconds of load) inside [start, end] (monotonic): the series
        integrated over it; without a series, the tool's summary rate over the part of the load's
        run (started-ended) inside it. None when neither is known."""
        done = covered = 0.0
        for p in self.points:
            if p.interval.tps is None or not p.duration:
                continue
            overlap = min(p.end, end) - max(p.start, start)
            if overlap > 0:
                done += p.interval.tps * overlap
                covered += overlap
        if covered > 0:
            return done, covered
        s = self.parsed.summary
        if s is not None and s.tps is not None and self.started is not None:
            overlap = min(self.ended if self.ended is not None else end, end) - max(self.started, start)
            if overlap > 0:
                return s.tps * overlap, overlap
        return None

    def rel(self, t: float | None) -> float | None:
        return None if t is None else round(t - self.origin, 3)

    # ---------------------------------------------------------------- JSON
    def series(self) -> list[dict[str, Any]]:
        out = []
        for p in self.points:
            iv = p.interval
            row: dict[str, Any] = {"t": self.rel(p.end), "dt": p.duration, "tps": iv.tps, "qps": iv.qps,
                                   "errors": iv.errors, "threads": iv.threads}
            for k, v in sorted(iv.latency_ms.items()):
                if k.startswith("p"):
                    row[k.replace(".", "_") + "_ms"] = v
            out.append(row)
        return out

    def summary(self) -> dict[str, Any]:
        s = self.parsed.summary
        out: dict[str, Any] = {"tool": self.tool, "version": self.parsed.version,
                               "tps": s.tps if s is not None else None, "qps": s.qps if s is not None else None,
                               "errors": s.errors if s is not None else None,
                               "transactions": s.transactions if s is not None else None,
                               "seconds": s.seconds if s is not None else None,
                               "from": "the tool's summary" if s is not None and s.tps is not None else None}
        if s is not None:
            for k, v in sorted(s.latency_ms.items()):
                out[k.replace(".", "_") + "_ms"] = v
            out.update({k: v for k, v in s.extra.items()})
            if s.ops:
                out["ops"] = [{"name": o.name, "count": o.count, "seconds": o.seconds, "rate": o.rate,
                               "error": o.error, **{k.replace(".", "_") + "_ms": v for k, v in o.latency_ms.items()}}
                              for o in s.ops]
        if out["tps"] is None and self.tps is not None:
            out["tps"], out["from"] = self.tps, self.tps_from
        ph = self.phases
        out["window"] = {
            "used": ph.window is not None,
            "start": self.rel(ph.window[0]) if ph.window else None,
            "end": self.rel(ph.window[1]) if ph.window else None,
            "seconds": round(ph.window[1] - ph.window[0], 3) if ph.window else None,
            "tps": self.tps if self.tps_from == "window" else None,
            "steady_tps": ph.level,
            "warmup_end": self.rel(ph.warmup_end),
            "warmup_intervals": ph.warmup_intervals,
            "reason": ph.reason,
        }
        return out

    def to_dict(self, bundle: str = "BUNDLE") -> dict[str, Any]:
        return {
            "source": self.source, "status": self.status, "why": self.why, "tool": self.tool, "argv": self.argv,
            "exit_code": self.exit_code, "placed_by": self.placement.how,
            "lines": self.parsed.lines, "unknown_lines": self.parsed.unknown,
            "unknown_examples": self.parsed.unknown_examples, "fatal": self.parsed.fatal[:5],
            "series": self.series(), "summary": self.summary(),
            "dips": [{"start": self.rel(d.start), "end": self.rel(d.end), "lowest_tps": d.lowest,
                      "mean_tps": d.mean, "level_tps": d.level, "drop": d.drop,
                      "flamegraph": dip_command(bundle, self.rel(d.start) or 0.0, self.rel(d.end) or 0.0)}
                     for d in self.phases.dips],
            "per_transaction": [vars(p) for p in self.per_tx],
            "notes": self.notes,
        }


def dip_command(bundle: str, start: float, end: float) -> str:
    """The command that draws a time range's flame graph (``--from/--to`` count from the capture start)."""
    return f"profiler flamegraph {bundle} --from {max(start, 0.0):.1f}s --to {end:.1f}s -o dip.svg"


def _window_rate(points: list[Point], window: tuple[float, float] | None) -> float | None:
    """Duration-weighted mean throughput of the intervals inside the window (all when None)."""
    num = den = 0.0
    for p in points:
        if p.interval.tps is None or not p.duration:
            continue
        if window is not None and (p.start < window[0] - 1e-6 or p.end > window[1] + 1e-6):
            continue
        num += p.interval.tps * p.duration
        den += p.duration
    return num / den if den > 0 else None


def analyze_load(log: LoadLog, manifest: Manifest) -> LoadAnalysis:
    """The load's figures on the capture's clock, its phases and the verdict window."""
    info = log.info
    parsed = log.parsed
    origin = manifest.clock.monotonic_start
    placement = place(parsed, line_times=log.line_times, start=info.started, wall_offset=manifest.clock.offset)
    end = manifest.ended if manifest.ended is not None else (placement.points[-1].end if placement.points else origin)
    phases = find_phases(placement.points, (origin, end)) if placement.points else Phases(
        reason="no load interval on the capture's clock: the whole capture is used")
    la = LoadAnalysis(source=info.source, status="ok", why=None, tool=parsed.tool, argv=list(info.argv),
                      exit_code=info.exit_code, origin=origin, started=placement.start, ended=info.ended,
                      parsed=parsed, placement=placement, phases=phases,
                      notes=list(parsed.notes) + list(placement.notes))
    s = parsed.summary
    if log.missing:
        la.status, la.why = "missing", log.missing
    elif parsed.tool is None:
        la.status = "unrecognised"
        la.why = (f"the load's output ({parsed.lines} lines) is not {TOOLS_TEXT} output: the tool was not "
                  "recognised; the raw log is kept in the bundle (load.log)")
    elif not parsed.intervals and (s is None or (s.tps is None and not s.extra)):
        la.status = "no-figures"
        la.why = f"{parsed.tool} printed no figures" + (f": {parsed.fatal[0]}" if parsed.fatal else "")
    if info.exit_code:
        la.notes.insert(0, f"the load exited with code {info.exit_code}")
    if parsed.intervals and not placement.points:
        la.notes.append(f"{len(parsed.intervals)} interval reports could not be put on the capture's clock: the log "
                        "has no absolute times and the load's start is unknown (profiler attach --load-start)")
    elif placement.unplaced:
        la.notes.append(f"{placement.unplaced} interval reports had no time and were left off the timeline")
    if parsed.tool is not None and not parsed.intervals and la.status == "ok":
        la.notes.append(f"{parsed.tool} printed no interval reports (sysbench: --report-interval=1), so there is no "
                        "series: the summary is the tool's own")
    rate = _window_rate(placement.points, phases.window)
    if rate is not None and phases.window is not None:
        la.tps, la.tps_from = rate, "window"
    elif rate is not None:
        la.tps, la.tps_from = rate, "series"
    elif s is not None and s.tps is not None:
        la.tps, la.tps_from = s.tps, "summary"
    return la


def per_transaction(la: LoadAnalysis, targets: list[Any], io_by_pid: dict[int, int] | None,
                    window_seconds: float) -> list[PerTransaction]:
    """Per target: CPU, IOs, bytes and context switches per transaction, from the verdict's
    metrics (``targets``: TargetMetrics computed over the window) and the IOs each target's
    threads issued in it (``io_by_pid``, None without a block trace)."""
    tps = la.tps
    if not tps or tps <= 0:
        return []
    out = []
    for tm in targets:
        pt = PerTransaction(target=tm.label, pid=tm.pid)
        if tm.process.cpu_cores is not None:
            pt.cpu_ms = tm.process.cpu_cores * 1000.0 / tps
        if io_by_pid is not None and window_seconds > 0:
            pt.ios = io_by_pid.get(tm.pid, 0) / window_seconds / tps
        if tm.process.read_bps is not None and tm.process.write_bps is not None:
            pt.io_bytes = (tm.process.read_bps + tm.process.write_bps) / tps
        if tm.process.vcsw_rate is not None and tm.process.ivcsw_rate is not None:
            pt.ctx_switches = (tm.process.vcsw_rate + tm.process.ivcsw_rate) / tps
        out.append(pt)
    return out


def io_counts(tids_by_pid: dict[int, set[int]], io_tids: np.ndarray, io_t: np.ndarray,
              window: tuple[float, float] | None) -> dict[int, int]:
    """Block IOs issued by each target's threads (inside the window when given)."""
    mask = np.ones(len(io_t), dtype=bool)
    if window is not None:
        mask = (io_t >= window[0]) & (io_t <= window[1])
    tids = io_tids[mask]
    return {pid: int(np.isin(tids, np.fromiter(ts, dtype=np.int64)).sum()) if ts else 0
            for pid, ts in tids_by_pid.items()}
