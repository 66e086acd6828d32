"""``analyze(bundle) -> Analysis``: the one object every renderer takes (analyzers layer).

It holds the verdict, the metrics, per-target verdicts, the timeline, the capture's health
and warnings, plus the pictures' models (flame graphs, heatmaps) built from the same views.
Every member of the bundle is read once (analyzers.views). ``to_dict()`` is the JSON report
(docs/report-json.md): schema ``profiler.report``, a version, sorted keys, floats rounded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from profiler.analyzers import explore
from profiler.analyzers.io import heatmap, hist_heatmap
from profiler.analyzers.load import analysis as loadmod
from profiler.analyzers.series import timeline as tlmod
from profiler.analyzers.server import report as server_report
from profiler.analyzers.server.view import ServerStatusView
from profiler.analyzers.stacks import flame, subsecond
from profiler.analyzers.verdict import findings, ranking
from profiler.analyzers.verdict import metrics as metmod
from profiler.analyzers.verdict.client import client_evidence
from profiler.analyzers.views import OFFCPU_MAX_SWITCHES, SOURCES, BundleViews, read_views
from profiler.analyzers.views.window import cut

from profiler import __version__
from profiler.bundle import Bundle, Manifest, members
from profiler.progress import Progress

SCHEMA = "profiler.report"
VERSION = 1
__all__ = ["OFFCPU_MAX_SWITCHES", "SCHEMA", "VERSION", "Analysis", "Health", "analyze", "analyze_views"]


@dataclass
class Health:
    collector: str
    backend: str
    status: str
    reason: str | None
    files: list[str]
    stats: dict[str, Any]
    reading: list[str] = field(default_factory=list)  # what reading its members tolerated, one line each


@dataclass
class Analysis:
    bundle: str
    manifest: dict[str, Any]  # the parts of the manifest a report shows
    verdict: ranking.CaptureVerdict
    metrics: metmod.Metrics
    timeline: tlmod.Timeline
    health: list[Health]
    warnings: list[str]
    artifacts: dict[str, Any] = field(default_factory=dict)  # name -> model (flame, offcpu, io events)
    missing_artifacts: dict[str, str] = field(default_factory=dict)  # name -> why it is not there
    devices: dict[str, str] = field(default_factory=dict)  # 'major:minor' -> block device name (vda)
    server: ServerStatusView | None = None  # what the targets' status ports said (analyzers/server)
    load: loadmod.LoadAnalysis | None = None  # the load next to the capture (docs/load.md)
    reading: dict[str, dict[str, Any]] = field(default_factory=dict)  # member -> what reading it tolerated

    @property
    def reading_warnings(self) -> list[str]:
        """One line per member whose reading tolerated something (a cut, bad CRC, lines skipped)."""
        return [_read_summary(name, r) for name, r in sorted(self.reading.items()) if _damaged(r)]

    def target_verdict(self, label: str) -> findings.Verdict | None:
        for v in self.verdict.per_target:
            if v.target == label:
                return v
        return None

    def to_dict(self) -> dict[str, Any]:
        md = self.metrics.to_dict()
        targets = []
        for tm, v in zip(md["targets"], self.verdict.per_target, strict=True):
            targets.append({"pid": tm["pid"], "comm": tm["comm"], "kind": tm["kind"], "runtime": tm["runtime"],
                            "label": tm["label"], "verdict": v.to_dict(), "metrics": tm})
        out: dict[str, Any] = metmod.jsonable({
            "schema": SCHEMA, "version": VERSION, "tool_version": __version__, "bundle": self.bundle,
            "capture": self.manifest,
            "verdict": self.verdict.to_dict(),
            "targets": targets,
            "imbalances": [vars(i) for i in self.verdict.imbalances],
            "system": md["system"], "io": md["io"],
            "sources": md["sources"], "unsupported_counters": md["unsupported_counters"],
            "timeline": self.timeline.to_dict(),
            "health": [vars(h) for h in self.health],
            "load": self.load.to_dict(self.bundle) if self.load is not None else None,
            "reading": self.reading,
            "warnings": self.warnings,
            "thresholds": {k: {"value": t.value, "full": t.full, "unit": t.unit, "source": t.source}
                           for k, t in sorted(findings.THRESHOLDS.items())},
            "server_status": server_report.summary(self.server, self.timeline.t0),
        })
        return out


def _manifest_summary(m: Manifest) -> dict[str, Any]:
    return {
        "status": m.status, "reason": m.reason, "created": m.created, "duration": m.duration,
        "host": {"hostname": m.host.hostname, "kernel": m.host.kernel, "cpus": m.host.cpus,
                 "memory_bytes": m.host.memory_bytes, "perf_version": m.host.perf_version},
        "targets": [{"pid": t.pid, "comm": t.comm, "kind": t.kind, "exe": t.exe, "threads": len(t.threads),
                     "container": t.container, "runtime": t.runtime,
                     "container_info": dataclasses.asdict(t.container_info) if t.container_info is not None else None,
                     "runtime_info": dataclasses.asdict(t.runtime_info) if t.runtime_info is not None else None}
                    for t in m.targets],
        "load": ({"argv": m.load.argv, "exit_code": m.load.exit_code} if m.load else None),
        "options": m.options,
    }


# --------------------------------------------------------------------------- the pictures' models


def _cpu_flame(v: BundleViews) -> flame.FoldedStacks | None:
    """On-CPU stacks, one root per thread pool (the report draws them by range: explore.py)."""
    cpu = v.cpu
    if cpu is None:
        return None
    if cpu.error is not None:
        raise cpu.error
    if not cpu.folded:
        return None
    return flame.FoldedStacks(cpu.folded, "samples", "cpu-clock samples, one root per thread pool")


def _coverage(m: Manifest) -> dict[str, tuple[list[tuple[float, float]], list[tuple[float, int]]]]:
    """Per evidence source, the windows its collector traced (a duty-cycled perf trace: its
    windows; else from its start to its end, or to its last data if it died) and where it lost
    events (``stats.lost_at``), for the timeline's gaps and each range's traced share."""
    out: dict[str, tuple[list[tuple[float, float]], list[tuple[float, int]]]] = {}
    for name, key in (("syscalls", "syscalls"), ("offcpu-stacks", "offcpu")):
        r = m.collector(name)
        if r is None or r.status in ("skipped", "failed"):
            continue
        wins = r.stats.get("windows")
        if isinstance(wins, list):
            w = [(float(a), float(b)) for a, b in wins]
        elif r.started is not None and r.ended is not None:
            w = [(float(r.started), float(r.ended))]
        else:
            continue
        lost = r.stats.get("lost_at")
        out[key] = (w, [(float(t), int(n)) for t, n in lost if t >= 0] if isinstance(lost, list) else [])
    return out


def _offcpu_flame(v: BundleViews) -> flame.FoldedStacks | None:
    """Off-CPU stacks: blocked time by wait reason, then thread pool, then stack."""
    off = v.offcpu
    if off is None:
        return None
    if off.error is not None:
        raise off.error
    if not off.folded:
        return None
    return flame.FoldedStacks(off.folded, "us", "time blocked (us), by wait reason and thread pool")


def _io_trace_heatmap(v: BundleViews) -> heatmap.LatencyHeatmap | None:
    """The perf backend's IO latency heatmap: its paired IOs binned, a panel per op."""
    if v.io is None:
        return None
    for m in (members.BLOCK_EVENTS, members.BLOCK_TRACE):
        if m in v.io.errors:
            raise v.io.errors[m]
    return heatmap.from_io(v.io.analysis) if v.io.analysis is not None else None


def _io_hist_heatmap(v: BundleViews) -> hist_heatmap.HistHeatmap | None:
    """The bcc backend's IO latency heatmap, from its in-kernel histograms."""
    if v.io is None:
        return None
    if members.BLOCK_HIST in v.io.errors:
        raise v.io.errors[members.BLOCK_HIST]
    return hist_heatmap.from_hist(v.io.hist) if v.io.hist is not None else None


def _cpu_heatmap(v: BundleViews) -> subsecond.SubsecondHeatmap | None:
    """Sub-second offset heatmap of the CPU samples."""
    cpu = v.cpu
    if cpu is None:
        return None
    if cpu.error is not None:
        raise cpu.error
    if not len(cpu.times.t):
        return None
    return subsecond.subsecond_heatmap(cpu.times.t, rows=50, t0=cpu.origin)


# (artifact, member, collector, builder); the first member the bundle has wins: the perf
# backend's per-event files, else the bcc backend's in-kernel aggregates.
_BUILDERS: tuple[tuple[str, str, str, Callable[[BundleViews], Any]], ...] = (
    ("cpu_flame", members.CPU_STACKS, "cpu-stacks", _cpu_flame),
    ("offcpu_flame", members.OFFCPU_STACKS, "offcpu-stacks", _offcpu_flame),
    ("offcpu_flame", members.OFFCPU_FOLDED, "offcpu-stacks", _offcpu_flame),
    ("io_heatmap", members.BLOCK_EVENTS, "block-io", _io_trace_heatmap),
    ("io_heatmap", members.BLOCK_TRACE, "block-io", _io_trace_heatmap),
    ("io_heatmap", members.BLOCK_HIST, "block-io", _io_hist_heatmap),
    ("cpu_heatmap", members.CPU_STACKS, "cpu-stacks", _cpu_heatmap),
)


def _artifacts(v: BundleViews, a: Analysis) -> None:
    """Flame graph and heatmap models, when the data exists."""
    for name, member, collector, build in _BUILDERS:
        if name in a.artifacts or name in a.missing_artifacts:
            continue  # an earlier source of the same artifact decided
        if not v.has(member):
            others = [m for n, m, *_ in _BUILDERS if n == name and m != member]
            if any(v.has(m) for m in others):
                continue  # the other backend's file is there: its builder draws it
            a.missing_artifacts[name] = f"not captured ({v.source_status(collector, (member,))})"
            continue
        try:
            model = build(v)
        except Exception as exc:  # noqa: BLE001 - one broken artifact must not sink the report
            a.missing_artifacts[name] = f"could not be built: {type(exc).__name__}: {exc}"
            continue
        if model is None:
            a.missing_artifacts[name] = f"{member} holds no samples for it"
        else:
            a.artifacts[name] = model


# --------------------------------------------------------------------------- reading health


def _damaged(r: dict[str, Any]) -> bool:
    return bool(r.get("damage") or r.get("skipped_lines"))


def _read_summary(name: str, r: dict[str, Any]) -> str:
    parts = list(r.get("damage") or [])
    parts += [f"{what}: {n:,} skipped" for what, n in (r.get("skipped_lines") or {}).items()]
    return f"{name}: " + "; ".join(parts)


def _members_of(collector: str, files: list[str]) -> list[str]:
    """The members a collector's health line answers for: the files it lists, and the evidence
    members the analysis knows it for (older bundles list fewer files)."""
    known = [m for col, ms in SOURCES.values() if col == collector for m in ms]
    extra = [members.OFFCPU_INTERVALS] if collector == "offcpu-stacks" else []
    return list(dict.fromkeys(list(files) + known + extra))


# --------------------------------------------------------------------------- the analysis


def analyze(bundle: Bundle, progress: Progress | None = None) -> Analysis:
    """Everything the reports need, from one bundle. Never raises on missing or partial inputs.
    ``progress`` hears each step (reading the members, then each stage of the analysis)."""
    return analyze_views(read_views(bundle, progress), progress)


def _load_panels(tl: tlmod.Timeline, la: loadmod.LoadAnalysis) -> None:
    """The load's throughput and latency on the timeline's axis, and its warm-up and dips as marks."""
    pts = [p for p in la.points if p.interval.tps is not None]
    name = la.tool or "load"
    if pts:
        mids = np.asarray([p.mid for p in pts])
        series = {"transactions/s": (mids, np.asarray([p.interval.tps for p in pts], float))}
        if any(p.interval.errors for p in pts):
            series["errors/s"] = (mids, np.asarray([p.interval.errors or 0.0 for p in pts], float))
        tl.add_points("load_tps", f"Throughput ({name})", "per s", series)
    key = la.latency_key
    lat = [p for p in la.points if key is not None and key in p.interval.latency_ms]
    if lat and key is not None:
        tl.add_points("load_latency", f"Latency {key} ({name})", "ms",
                      {key: (np.asarray([p.mid for p in lat]), np.asarray([p.interval.latency_ms[key] for p in lat]))})
    if tl.t0 is None:
        return
    ph = la.phases
    first = la.points[0].start if la.points else None
    if ph.warmup_end is not None and first is not None:
        tl.marks.append(tlmod.Mark(round(first - tl.t0, 3), round(ph.warmup_end - tl.t0, 3), "warmup",
                                   "warm-up (left out of the verdict)"))
    for d in ph.dips:
        tl.marks.append(tlmod.Mark(round(d.start - tl.t0, 3), round(d.end - tl.t0, 3), "dip",
                                   f"throughput dip: {d.drop:.0%} below {d.level:,.0f}/s"))


def _per_transaction(v: BundleViews, la: loadmod.LoadAnalysis, met: metmod.Metrics) -> None:
    pd = v.proc
    window = la.phases.window
    io_by_pid = None
    if v.io is not None and v.io.events is not None and pd is not None:
        tids = {t.pid: {s.tid for s in pd.threads_of(t.pid)} | {th.tid for th in t.threads} for t in v.manifest.targets}
        io_by_pid = loadmod.io_counts(tids, v.io.events.tid, v.io.events.t, window)
    la.per_tx = loadmod.per_transaction(la, met.targets, io_by_pid, met.window)


STAGES = ("metrics", "verdict", "timeline", "pictures", "range flame graphs")


def analyze_views(v: BundleViews, progress: Progress | None = None) -> Analysis:
    """Everything the reports need, from a bundle's views. With a load, the verdict covers its
    steady part (the warm-up left out: analyzers.load.phases); the timeline shows the whole capture."""

    def step(i: int) -> None:
        if progress is not None:
            progress(f"analysing {v.root}: {STAGES[min(i, len(STAGES) - 1)]}", i, len(STAGES), "steps")

    step(0)
    la = loadmod.analyze_load(v.load, v.manifest) if v.load is not None else None
    window = la.phases.window if la is not None else None
    met = metmod.compute(cut(v, *window) if window is not None else v)
    met.client = client_evidence(la, window)
    step(1)
    cv = ranking.judge(met)
    m = v.manifest
    pd = v.proc
    t0 = met.t0
    t1 = pd.t1 if pd is not None else None
    if t0 is None:
        t0 = m.clock.monotonic_start or None
        t1 = m.ended
    rec = m.collector("perf-stat")
    srec = m.collector("syscalls")
    events = v.io.events if v.io is not None else None
    hist = v.io.hist if v.io is not None and events is None else None
    if window is not None and pd is not None:
        t0 = pd.t0  # the timeline shows the whole capture, warm-up included
    step(2)
    tl = tlmod.build(pd, m.targets, t0=t0, t1=t1, io=events, stat=v.stat, stat_start=rec.started if rec else None,
                     syscalls=v.syscalls, syscall_start=srec.started if srec else None, io_hist=hist,
                     coverage=_coverage(m))
    if la is not None:
        _load_panels(tl, la)
        _per_transaction(v, la, met)
    health = [Health(c.name, c.backend, c.status, c.reason, list(c.files), dict(c.stats),
                     reading=[_read_summary(f, v.reads[f]) for f in _members_of(c.name, c.files) if f in v.reads
                              and _damaged(v.reads[f])])
              for c in m.collectors]
    warnings = list(met.warnings)
    if m.status != "ok":
        warnings.insert(0, f"the capture is {m.status}" + (f": {m.reason}" if m.reason else ""))
    if la is not None:
        if la.why:
            warnings.append(f"load: {la.why}")
        elif la.exit_code:
            warnings.append(f"load: the load exited with code {la.exit_code}")
    a = Analysis(bundle=v.root, manifest=_manifest_summary(m), verdict=cv, metrics=met, timeline=tl,
                 health=health, warnings=list(dict.fromkeys(warnings)), reading=dict(v.reads),
                 devices={str(k): str(n) for k, n in ((pd.host.get("block_devices") or {}) if pd else {}).items()},
                 load=la)
    a.server = v.server
    server_report.add_panels(tl, v.server)
    step(3)
    _artifacts(v, a)
    step(4)
    explore.add(v, a)
    step(len(STAGES))
    return a
