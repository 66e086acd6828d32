"""``analyze(bundle) -> Analysis``: the one object every renderer takes (analyzers layer).

It holds the verdict, the metrics, per-target verdicts, the timeline, the capture's health
and warnings, plus optional artifacts other analyzers provide (flame graph models, IO events)
when their modules are present. ``to_dict()`` is the JSON report (docs/report-json.md):
schema ``profiler.report``, a version, sorted keys, floats rounded.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
from dataclasses import dataclass, field
from typing import Any

from profiler.analyzers.series import perfstat
from profiler.analyzers.series import procfs as procmod
from profiler.analyzers.series import timeline as tlmod
from profiler.analyzers.verdict import metrics as metmod
from profiler.analyzers.verdict import rules as vmod

from profiler import __version__

SCHEMA = "profiler.report"
# The off-CPU flame graph in the report is built from at most this many switches: a lock storm
# records hundreds of thousands a second, and the report must come back in seconds.
OFFCPU_MAX_SWITCHES = 20_000
VERSION = 1


@dataclass
class Health:
    collector: str
    backend: str
    status: str
    reason: str | None
    files: list[str]
    stats: dict[str, Any]


@dataclass
class Analysis:
    bundle: str
    manifest: dict[str, Any]  # the parts of the manifest a report shows
    verdict: vmod.CaptureVerdict
    metrics: metmod.Metrics
    timeline: tlmod.Timeline
    health: list[Health]
    warnings: list[str]
    artifacts: dict[str, Any] = field(default_factory=dict)  # name -> model (flame, offcpu, io events)
    missing_artifacts: dict[str, str] = field(default_factory=dict)  # name -> why it is not there

    def target_verdict(self, label: str) -> vmod.Verdict | None:
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
        out: dict[str, Any] = metmod._jsonable({
            "schema": SCHEMA, "version": VERSION, "tool_version": __version__, "bundle": self.bundle,
            "capture": self.manifest,
            "verdict": self.verdict.to_dict(),
            "targets": targets,
            "imbalances": [vars(i) for i in self.verdict.imbalances],
            "system": md["system"], "io": md["io"],
            "sources": md["sources"], "unsupported_counters": md["unsupported_counters"],
            "timeline": self.timeline.to_dict(),
            "health": [vars(h) for h in self.health],
            "warnings": self.warnings,
            "thresholds": {k: {"value": t.value, "full": t.full, "unit": t.unit, "source": t.source}
                           for k, t in sorted(vmod.THRESHOLDS.items())},
        })
        return out


def _manifest_summary(bundle: Any) -> dict[str, Any]:
    m = bundle.manifest
    return {
        "status": m.status, "reason": m.reason, "created": m.created, "duration": m.duration,
        "host": {"hostname": m.host.hostname, "kernel": m.host.kernel, "cpus": m.host.cpus,
                 "memory_bytes": m.host.memory_bytes, "perf_version": m.host.perf_version},
        "targets": [{"pid": t.pid, "comm": t.comm, "kind": t.kind, "exe": t.exe, "threads": len(t.threads),
                     "container": t.container} for t in m.targets],
        "load": ({"argv": m.load.argv, "exit_code": m.load.exit_code} if m.load else None),
        "options": m.options,
    }


def _optional(module: str, attr: str) -> Any:
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return None
    return getattr(mod, attr, None)


def _cpu_flame(bundle: Any) -> Any:
    """On-CPU flame graph model (flame engineer's folding and tree), one root frame per thread pool."""
    folded = importlib.import_module("profiler.analyzers.stacks.folding")
    flame = importlib.import_module("profiler.analyzers.stacks.flame")
    with bundle.open_binary("cpu.perf.txt.gz") as fh:
        counts = folded.collapse_stream(fh, folded.FoldOptions(pools=True, count_samples=True)).result()
    if not counts:
        return None
    root = flame.build_tree(counts, min_fraction=0.0005)
    return flame.FlameGraph(root=root, title="On-CPU", subtitle="cpu-clock samples, one root per thread pool",
                            unit="samples")


def _offcpu_flame(bundle: Any) -> Any:
    """Off-CPU flame graph model: blocked time by wait reason, then thread pool, then stack."""
    perfscript = importlib.import_module("profiler.inputs.perfscript")
    bundles = importlib.import_module("profiler.inputs.bundles")
    flame = importlib.import_module("profiler.analyzers.stacks.flame")
    offcpu = importlib.import_module("profiler.analyzers.stacks.offcpu")
    samples = perfscript.iter_samples(bundle.iter_lines("offcpu.perf.txt.gz"))
    seen = 0

    def counted() -> Any:
        nonlocal seen
        for smp in itertools.islice(samples, OFFCPU_MAX_SWITCHES):
            seen += 1
            yield smp

    # The collector's switch-out/switch-in pairs give exact widths, and keep a sampled (duty-cycled)
    # capture from closing a switch-out with the next window's switch-out.
    intervals = bundles.read_intervals(bundle.iter_lines("offcpu.csv.gz")) if bundle.has("offcpu.csv.gz") else None
    counts, _stats = offcpu.offcpu_folded(counted(), by_reason=True, pools=True, intervals=intervals)
    if not counts:
        return None
    root = flame.build_tree(counts, min_fraction=0.0005)
    notes = []
    if seen >= OFFCPU_MAX_SWITCHES:
        notes.append(f"built from the first {OFFCPU_MAX_SWITCHES:,} context switches of the capture "
                     f"(`profiler flamegraph BUNDLE --offcpu` draws them all)")
    return flame.FlameGraph(root=root, title="Off-CPU", subtitle="time blocked (us), by wait reason and thread pool"
                            + (" (first part of the capture)" if notes else ""), unit="us", notes=notes)


def _bcc_offcpu_flame(bundle: Any) -> Any:
    """Off-CPU flame graph of a bcc capture: offcpu.folded.gz, blocked time summed in the kernel per stack."""
    folded = importlib.import_module("profiler.inputs.folded")
    flame = importlib.import_module("profiler.analyzers.stacks.flame")
    offcpu = importlib.import_module("profiler.analyzers.stacks.offcpu")
    knowledge = importlib.import_module("profiler.knowledge")
    pooled: dict[str, int] = {}
    for stack, ns in folded.parse_folded(bundle.iter_lines("offcpu.folded.gz")).items():
        comm, sep, rest = stack.partition(";")
        key = knowledge.pool_of(comm).replace(" ", "_") + sep + rest
        pooled[key] = pooled.get(key, 0) + ns
    # microseconds, as the perf backend's off-CPU graph counts them
    counts = {k: round(v / 1000) for k, v in offcpu.offcpu_by_reason(pooled).items() if v >= 500}
    if not counts:
        return None
    root = flame.build_tree(counts, min_fraction=0.0005)
    return flame.FlameGraph(root=root, title="Off-CPU", unit="us",
                            subtitle="time blocked (us), by wait reason and thread pool (bcc: summed in the kernel)",
                            notes=["bcc off-CPU stacks are totals over the capture: no per-switch times"])


def _io_events(bundle: Any) -> Any:
    fn = _optional("profiler.analyzers.io.stats", "io_from_bundle")
    return fn(bundle) if fn is not None else None


def _subsecond(bundle: Any) -> Any:
    fn = _optional("profiler.analyzers.stacks.subsecond", "from_bundle")
    return fn(bundle) if fn is not None else None


def _bcc_io_heatmap(bundle: Any) -> Any:
    fn = _optional("profiler.analyzers.io.hist_heatmap", "from_bundle")
    return fn(bundle) if fn is not None else None


# (artifact, member, collector, modules it needs, builder); the first member the bundle has wins:
# the perf backend's per-event files, else the bcc backend's in-kernel aggregates.
_BUILDERS = (
    ("cpu_flame", "cpu.perf.txt.gz", "cpu-stacks", ("profiler.analyzers.stacks.flame", "profiler.analyzers.stacks.folding"), _cpu_flame),
    ("offcpu_flame", "offcpu.perf.txt.gz", "offcpu-stacks", ("profiler.analyzers.stacks.offcpu",), _offcpu_flame),
    ("offcpu_flame", "offcpu.folded.gz", "offcpu-stacks", ("profiler.analyzers.stacks.offcpu", "profiler.inputs.folded"),
     _bcc_offcpu_flame),
    ("io_heatmap", "block.trace.gz", "block-io", ("profiler.analyzers.io.stats",), _io_events),
    ("io_heatmap", "block.hist.jsonl.gz", "block-io", ("profiler.analyzers.io.hist_heatmap",), _bcc_io_heatmap),
    ("cpu_heatmap", "cpu.perf.txt.gz", "cpu-stacks", ("profiler.analyzers.stacks.subsecond",), _subsecond),
)


def _artifacts(bundle: Any, a: Analysis, io_model: Any = None) -> None:
    """Flame graph and heatmap models from the other analyzers, when they are installed and the data exists."""
    for name, member, collector, modules, build in _BUILDERS:
        if name in a.artifacts or name in a.missing_artifacts:
            continue  # an earlier source of the same artifact decided
        if not bundle.has(member):
            others = [m for n, m, *_ in _BUILDERS if n == name and m != member]
            if any(bundle.has(m) for m in others):
                continue  # the other backend's file is there: its builder draws it
            a.missing_artifacts[name] = f"not captured ({metmod._source_status(bundle, collector, (member,))})"
            continue
        if any(importlib.util.find_spec(mod) is None for mod in modules):
            a.missing_artifacts[name] = f"{member} is in the bundle, but this build cannot draw it yet"
            continue
        try:
            model = io_model if member == "block.trace.gz" and io_model is not None else build(bundle)
        except Exception as exc:  # noqa: BLE001 - one broken artifact must not sink the report
            a.missing_artifacts[name] = f"could not be built: {type(exc).__name__}: {exc}"
            continue
        if model is None:
            a.missing_artifacts[name] = f"{member} holds no samples for it"
        else:
            a.artifacts[name] = model


def _syscall_counts(bundle: Any) -> tuple[Any, Any] | None:
    """(interval start, calls) rows of syscalls.csv, every target together."""
    import csv

    import numpy as np

    t, n = [], []
    for row in csv.DictReader(bundle.iter_lines("syscalls.csv")):
        try:
            t.append(float(row["time"]))
            n.append(float(row["count"]))
        except (KeyError, TypeError, ValueError):
            continue
    return (np.asarray(t), np.asarray(n)) if t else None


def analyze(bundle: Any) -> Analysis:
    """Everything the reports need, from one bundle. Never raises on missing or partial inputs."""
    pd = procmod.load(bundle)
    io_model, io = None, None
    io_error = None
    if bundle.has("block.trace.gz"):
        try:
            io_model, io = metmod.load_io(bundle)
        except Exception as exc:  # noqa: BLE001 - a broken trace must not sink the report
            io_error = f"block.trace.gz could not be read: {type(exc).__name__}: {exc}"
    met = metmod.compute(bundle, pd, io)
    if io_error:
        met.warnings.append(io_error)
    cv = vmod.judge(met)
    m = bundle.manifest
    t0 = met.t0
    t1 = pd.t1 if pd is not None else None
    if t0 is None:
        t0 = m.clock.monotonic_start or None
        t1 = m.ended
    stat = perfstat.parse(bundle.iter_lines("stat.csv")) if bundle.has("stat.csv") else None
    rec = m.collector("perf-stat")
    srate = perfstat.parse(bundle.iter_lines("syscalls-rate.csv")) if bundle.has("syscalls-rate.csv") else None
    srec = m.collector("syscalls")
    io_hist = None
    if io is None and bundle.has("block.hist.jsonl.gz"):
        seen = len(bundle.warnings)
        try:
            io_hist = importlib.import_module("profiler.analyzers.io.histograms").read_block_hist(bundle)
        except Exception:  # noqa: BLE001 - compute() already warned about a broken file
            io_hist = None
        del bundle.warnings[seen:]  # compute() reported them already
    scounts = _syscall_counts(bundle) if srate is None and bundle.has("syscalls.csv") else None
    tl = tlmod.build(pd, m.targets, t0=t0, t1=t1, io=io, stat=stat, stat_start=rec.started if rec else None,
                     syscall_rate=srate, syscall_start=srec.started if srec else None, io_hist=io_hist,
                     syscall_counts=scounts)
    health = [Health(c.name, c.backend, c.status, c.reason, list(c.files), dict(c.stats)) for c in m.collectors]
    warnings = list(met.warnings)
    if m.status != "ok":
        warnings.insert(0, f"the capture is {m.status}" + (f": {m.reason}" if m.reason else ""))
    a = Analysis(bundle=str(bundle.root), manifest=_manifest_summary(bundle), verdict=cv, metrics=met, timeline=tl,
                 health=health, warnings=list(dict.fromkeys(warnings)))
    _artifacts(bundle, a, io_model)
    return a
