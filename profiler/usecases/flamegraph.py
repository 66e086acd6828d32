"""One flame graph (or folded stacks) from any stack input (usecases layer).

Inputs: a bundle, perf.data, perf script text, folded stacks or a pprof profile.

Composes the readers of profiler.inputs, the stack analyzers (folding, off-CPU, the tree) and
the SVG renderer. No option parsing, no terminal output: progress goes to the callback given.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, TypeVar

from profiler.analyzers.stacks.export import StackProfile
from profiler.analyzers.stacks.flame import FlameGraph, build_tree
from profiler.analyzers.stacks.folding import Collapser, FoldOptions, collapse_stream, format_folded
from profiler.analyzers.stacks.folding_files import PARALLEL_MIN_BYTES, collapse_file
from profiler.analyzers.stacks.naming import fold_stacks
from profiler.analyzers.stacks.offcpu import OffCpuStats, offcpu_folded
from profiler.bundle import Bundle, members
from profiler.errors import BundleError, InputError, UsageError
from profiler.inputs import Format, Source, bundles, detect, folded, perfdata, perfscript, pprof
from profiler.inputs.perfscript import iter_samples, open_lines
from profiler.progress import Progress
from profiler.renderers.flamegraph_svg import RENDERER, FlameGraphOptions
from profiler.tolerant import ReadLog

Warn = Callable[[str], None]

# Only the fields folding reads: no symbol offsets and no CPU column, which makes perf print
# (and us read) about 7% less and spares perf the offset formatting.
FOLD_FIELDS = "comm,pid,tid,time,period,event,ip,sym,dso"

PPROF_UNITS = {"nanoseconds": "ns", "microseconds": "us"}


@dataclass
class LoadedStacks:
    """An input's stacks as load_stacks read them: folded counts plus what the graph's labels need
    to know about them (formats/perfstacks.py's Stacks are perf.data's samples before folding)."""

    counts: dict[str, int]
    unit: str = "samples"
    event: str | None = None
    samples: int = 0
    source: str = ""
    seen: int = 0  # events read, counted or not (filtered out, no stack, unreadable header)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class FlameGraphResult:
    """What `profiler flamegraph` writes: the SVG, or folded lines; and what it says about them."""

    output: str | list[str]
    stacks: LoadedStacks
    frames: int = 0  # frames drawn (0 for folded output)


class Meter:
    """Tells ``progress`` how many bytes of perf script text were folded (of how many, when known)."""

    def __init__(self, progress: Progress | None, task: str = "folding", total: float | None = None) -> None:
        self.progress = progress
        self.task = task
        self.total = total
        self.chars = 0

    def __call__(self, n: int) -> None:
        if self.progress is None:
            return
        self.chars += n
        self.progress(self.task, self.chars, self.total, "B")


def _unit_for(event: str | None, count_samples: bool) -> str:
    if count_samples or event is None:
        return "samples"
    base = event.split(":")[0]
    return "ns" if base in ("cpu-clock", "task-clock") else "events"


def from_collapser(c: Collapser, opts: FoldOptions, source: str, log: ReadLog | None = None) -> LoadedStacks:
    """The folded counts; the samples whose header could not be read are counted in ``log``
    (whose summary, with what the stream tolerated, becomes the one warning about the input)."""
    warnings = list(c.warnings)
    if log is not None:
        log.skip(c.weird, UNREAD_SAMPLES)
        if (summary := log.summary()) is not None:
            warnings.append(summary)
    elif c.weird:
        warnings.append(f"{source}: {UNREAD_SAMPLES}: {c.weird:,} skipped")
    return LoadedStacks(counts=c.counts, unit=_unit_for(c.event, opts.count_samples), event=c.event, samples=c.samples,
                  source=source, warnings=warnings, seen=c.samples + c.skipped + c.weird)


UNREAD_SAMPLES = "samples whose header could not be read"


def log_warnings(log: ReadLog) -> list[str]:
    summary = log.summary()
    return [summary] if summary is not None else []


@dataclass
class StackRequest:
    """One stack input being read: where it is and how to fold it."""

    input: str  # as the user gave it
    src: Source
    bundle: Bundle | None
    opts: FoldOptions
    progress: Progress | None
    warn: Warn | None = None  # hears what was tolerated in the input (the readers that check their own stacks)


def load_stacks(input: str, opts: FoldOptions, *, offcpu: bool = False, progress: Progress | None = None,
                stdin: IO[bytes] | None = None) -> LoadedStacks:
    """Any stack input -> folded counts (CPU samples, off-CPU time in µs, or a pprof sample type,
    picked by ``opts.event_filter``). A relative ``opts.window`` counts from a bundle's capture
    start, else from the first sample. The input's format picks its reader in STACK_READERS (or,
    with ``offcpu``, OFFCPU_READERS): the formats a flame graph accepts, in detection order."""
    req = stack_request(input, opts, progress=progress, stdin=stdin)
    refuse_untimed(req)
    return pick(OFFCPU_READERS if offcpu else STACK_READERS, req, offcpu)(req)


def stack_request(input: str, opts: FoldOptions, *, progress: Progress | None = None,
                  stdin: IO[bytes] | None = None) -> StackRequest:
    """Detect a stack input among the formats STACK_READERS accepts (in its order); a bundle's
    relative ``opts.window`` is rebased on its capture start."""
    src = detect(input, tuple(STACK_READERS), stdin=stdin)
    if opts.group_by and not src.format.labels:  # a graph and every export alike: never ignored in silence
        raise UsageError("--group-by roots stacks at a pprof profile's labels; for threads and pools use --by")
    bundle = src.bundle() if src.format.directory else None
    if bundle is not None:
        opts = replace(opts, window=opts.window.rebased(bundle.manifest.clock.monotonic_start))
    return StackRequest(input, src, bundle, opts, progress)


def refuse_untimed(req: StackRequest) -> None:
    """--from/--to on an input whose samples have no times: a usage error saying why."""
    if req.opts.window.bounded and req.src.format.untimed:
        raise UsageError(f"--from/--to need timestamps: {req.src.format.untimed}")


R = TypeVar("R")


def pick(readers: dict[Format, R], req: StackRequest, offcpu: bool) -> R:
    """The row of ``readers`` for the request's format; with ``offcpu``, a usage error when the
    format holds no off-CPU evidence (every stack input has a row of the CPU tables)."""
    reader = readers.get(req.src.format)
    if reader is None:
        raise UsageError(f"--offcpu needs sched_switch samples (a bundle or perf script text), not {req.src.format.what}"
                         if offcpu else f"{req.src.name}: {req.src.format.what} holds no stacks")
    return reader


def _meter(req: StackRequest, task: str) -> Meter:
    src = req.src
    return Meter(req.progress, task, src.path.stat().st_size
                  if src.path is not None and src.path.is_file() and not src.compressed else None)


def fold_bundle_cpu(req: StackRequest, c: Collapser, meter: Meter) -> LoadedStacks:
    """A bundle's CPU stacks folded by ``c`` through the views (the report's one reader of the
    member); a BundleError saying what the collector did when the capture has none."""
    from profiler.analyzers import views  # the analysis's readers: only for a bundle

    bundle = req.bundle
    assert bundle is not None
    if not views.fold_cpu_stacks(bundle, c, meter):
        raise BundleError(f"{req.input} holds no CPU stacks ({members.CPU_STACKS}; cpu-stacks collector: "
                          f"{bundles.collector_status(bundle, 'cpu-stacks')})")
    out = from_collapser(c, req.opts, f"{req.input}/{members.CPU_STACKS}", bundle.log(members.CPU_STACKS))
    out.notes.extend(bundles.collector_note(bundle, "cpu-stacks"))
    return out


def _bundle_stacks(req: StackRequest) -> LoadedStacks:
    return fold_bundle_cpu(req, Collapser(req.opts), _meter(req, f"folding {members.CPU_STACKS}"))


def _perf_data_stacks(req: StackRequest) -> LoadedStacks:
    meter = Meter(req.progress, f"perf script {req.src.name} | folding")
    return _from_perf_data(req.src.file, req.input, req.opts, meter, req.src.log, req.src.name + req.src.damage())


def _folded_stacks(req: StackRequest) -> LoadedStacks:
    counts = folded.read_source(req.src)
    return LoadedStacks(counts=counts, source=req.src.name, samples=sum(counts.values()), warnings=log_warnings(req.src.log))


def _perf_script_stacks(req: StackRequest) -> LoadedStacks:
    src, opts, progress = req.src, req.opts, req.progress
    meter = _meter(req, f"folding {src.name}")
    if src.rereadable and src.path is not None and not src.compressed and src.path.stat().st_size >= PARALLEL_MIN_BYTES:
        fold = collapse_file(str(src.path), opts, on_progress=(lambda d, t: progress(meter.task, d, t, "B"))
                             if progress is not None else None)  # several processes
        return from_collapser(fold, opts, src.name)
    with src.open() as fh:
        return from_collapser(collapse_stream(fh, opts, meter), opts, src.name, src.log)


def _from_perf_data(path: str | Path, input: str, opts: FoldOptions, meter: Meter, log: ReadLog | None = None,
                    name: str | None = None) -> LoadedStacks:
    """perf.data through perf script, identical stacks merged first (their weight in the period
    field) unless a time window needs each sample's own time, or inferno's rules may ignore the
    period (it does when perf pads the event name: a file of several events). ``log``: what
    decompressing a gzipped perf.data tolerated; ``name``: the input as errors name it."""
    if opts.window.bounded or opts.compat == "inferno":
        direct = perfdata.Direct()
        c = perfdata.read_perf_script(path, lambda out: collapse_stream(out, opts, meter), FOLD_FIELDS, name=name,
                                      direct=direct, samples=lambda items: _fold_items(items, opts))
        out = from_collapser(c, opts, input, log)
        out.warnings.extend(_by_perf(direct, name or input))
        return out
    merge = perfdata.Merge(by_tid=opts.include_tid or opts.tid_filter is not None, count_samples=opts.count_samples,
                           symbolic=not opts.include_addrs)
    fold_opts = replace(opts, count_samples=False)  # the merged period is the weight, counts or not
    merged: list[perfdata.Merged] = []
    direct = perfdata.Direct()
    c = perfdata.read_perf_script(path, lambda out: collapse_stream(out, fold_opts, meter), FOLD_FIELDS,
                                  merge=merge, merged=merged, name=name, direct=direct,
                                  samples=lambda items: _fold_items(items, fold_opts))
    out = from_collapser(c, opts, input, log)
    out.warnings.extend(_by_perf(direct, name or input))
    if merged:
        # perf script read one sample per distinct stack: the file's own count when every
        # sample was folded, else none (the subtitle leaves it out rather than understate it)
        out.samples = merged[0].samples if c.skipped == 0 and not c.weird else 0
    return out


def _fold_items(items: Iterator[perfdata.Item], opts: FoldOptions) -> Collapser:
    """The direct path's samples folded as they come: each distinct stack's lines once (by
    their key), perf's own text (what it named) as text; the same counts as folding the text."""
    c = Collapser(opts)
    for item in items:
        if isinstance(item, bytes):
            c.feed_block(item.decode("utf-8", "replace"))
        else:
            c.feed_sample(*item)
    c.close()
    return c


def _by_perf(direct: perfdata.Direct, input: str) -> list[str]:
    """What perf script had to name (the rest was named without it), in one line."""
    if not direct.used or not direct.by_perf:
        return []
    why = "; ".join(sorted(direct.reasons, key=lambda r: -direct.reasons[r])[:2])
    return [f"{input}: {direct.by_perf:,} of {direct.samples:,} samples named by perf script ({why})"]


def _pprof(req: StackRequest) -> LoadedStacks:
    """One sample type of a pprof profile (``--event TYPE``; by default the producer's choice,
    else the last type, as `go tool pprof` shows it): cpu time, goroutines, bytes..."""
    src, opts = req.src, req.opts
    profile = pprof.read_source(src)
    i = profile.index(opts.event_filter)
    st = profile.sample_types[i]
    if opts.count_samples:
        counts = fold_stacks((frames, 1) for frames, _ in profile.stacks(i, opts.group_by))
        unit = "samples"
    else:
        counts = fold_stacks(profile.stacks(i, opts.group_by))
        unit = PPROF_UNITS.get(st.unit) or (st.unit if st.unit != "count" else st.type if st.type.endswith("s") else st.type + "s")
    samples = sum(1 for _ in profile.stacks(i))
    keys = profile.label_keys()
    unlabeled = [f"{src.name}: no sample carries the label {k!r}" + (f" (its labels: {', '.join(keys)})" if keys else
                                                                     " (it has no labels)")
                 for k in opts.group_by if k not in keys]
    return LoadedStacks(counts=counts, unit=unit, event=str(st), samples=samples, source=src.name,
                  warnings=profile.warnings + unlabeled + log_warnings(src.log))


def _bundle_offcpu(req: StackRequest) -> LoadedStacks:
    """A bundle's off-CPU members through the off-CPU view (analyzers/views/stacks.py), the one
    reader the report uses too: blocked microseconds, perf's or bcc's."""
    from profiler.analyzers import views  # the analysis's readers: only for a bundle

    bundle, opts = req.bundle, req.opts
    assert bundle is not None
    view = views.read_offcpu(bundle, pools=opts.pools, window=opts.window, limit=None, evidence=False)
    if view is None:
        raise BundleError(f"{req.src.name} holds no off-CPU evidence ({members.OFFCPU_STACKS}; offcpu-stacks "
                          f"collector: {bundles.collector_status(bundle, 'offcpu-stacks')})")
    if view.bcc and opts.window.bounded:
        raise UsageError("--from/--to: the bcc backend's off-CPU stacks are totals over the capture, without times")
    if view.error is not None:
        raise view.error
    source = f"{req.src.name}/{view.source}"
    warnings = bundle.read_warnings() + bundle.warnings
    if view.bcc:
        return LoadedStacks(counts=view.folded, unit="us", event="offcpu (bcc)", source=source, warnings=warnings)
    if not view.folded:
        raise InputError(f"no sched_switch samples with blocked time in {source}" + _damage(warnings))
    return LoadedStacks(counts=view.folded, unit="us", event="sched:sched_switch", samples=view.switch_outs, source=source,
                  warnings=warnings, notes=view.notes + bundles.collector_note(bundle, "offcpu-stacks"))


def _switches(req: StackRequest, counts: dict[str, int], stats: OffCpuStats) -> LoadedStacks:
    warnings = log_warnings(req.src.log)
    if not counts:
        raise InputError(f"no sched_switch samples with blocked time in {req.src.name}" + _damage(warnings))
    return LoadedStacks(counts=counts, unit="us", event="sched:sched_switch", samples=stats.switches, source=req.src.name,
                  warnings=warnings, notes=list(stats.notes))


def _perf_data_offcpu(req: StackRequest) -> LoadedStacks:
    src, opts = req.src, req.opts
    counts, stats = perfdata.read_perf_script(
        src.file, lambda out: offcpu_folded(iter_samples(open_lines(out)), pools=opts.pools, window=opts.window),
        name=src.name + src.damage())
    return _switches(req, counts, stats)


def _perf_script_offcpu(req: StackRequest) -> LoadedStacks:
    with req.src.open() as fh:
        counts, stats = offcpu_folded(iter_samples(open_lines(fh), req.src.log), pools=req.opts.pools,
                                      window=req.opts.window)
    return _switches(req, counts, stats)


StackReader = Callable[[StackRequest], LoadedStacks]

# How each input format gives a flame graph its stacks: the formats `profiler flamegraph` and
# `diff` accept, in the order detection tries them (profiler/inputs/source.py: the first that
# claims the input's head wins, so perf script text, the text fallback, comes last).
STACK_READERS: dict[Format, StackReader] = {
    bundles.FORMAT: _bundle_stacks,
    perfdata.FORMAT: _perf_data_stacks,
    pprof.FORMAT: _pprof,
    folded.FORMAT: _folded_stacks,
    perfscript.FORMAT: _perf_script_stacks,
}
# With --offcpu: the formats that hold sched_switch samples (or a bcc capture's blocked time).
OFFCPU_READERS: dict[Format, StackReader] = {
    bundles.FORMAT: _bundle_offcpu,
    perfdata.FORMAT: _perf_data_offcpu,
    perfscript.FORMAT: _perf_script_offcpu,
}


def _damage(warnings: list[str]) -> str:
    """What reading tolerated, for the error that nothing usable was left."""
    return f" (read: {'; '.join(warnings)})" if warnings else ""


def check_stacks(stacks: LoadedStacks, opts: FoldOptions, warn: Warn | None) -> None:
    """Say what was tolerated in the input (``warn``); no stacks at all is an error instead, in
    one line naming what reading tolerated when that is why (a truncated file that yielded
    nothing)."""
    if not stacks.counts:
        raise InputError(f"no samples with stacks in {stacks.source}" + (" in that time range" if opts.window.bounded else "")
                         + _damage(stacks.warnings))
    for w in stacks.warnings:
        if warn is not None:
            warn(w)


def make_graph(stacks: LoadedStacks, *, title: str | None, subtitle: str | None, offcpu: bool, min_fraction: float) -> FlameGraph:
    if title is None:
        title = "Off-CPU Flame Graph (time blocked, by wait reason)" if offcpu else "CPU Flame Graph"
    if subtitle is None:
        bits = [stacks.source]
        if stacks.event:
            bits.append(stacks.event)
        if stacks.samples:
            bits.append(f"{stacks.samples:,} {'switches' if offcpu else 'samples'}")
        bits.extend(stacks.notes[:1])
        subtitle = " · ".join(bits)
    root = build_tree(stacks.counts, min_fraction=min_fraction)
    return FlameGraph(root=root, title=title, subtitle=subtitle, unit=stacks.unit, notes=stacks.notes)


def flamegraph(input: str, opts: FoldOptions, svg: FlameGraphOptions, *, offcpu: bool = False, folded_output: bool = False,
               title: str | None = None, subtitle: str | None = None, progress: Progress | None = None,
               warn: Warn | None = None, stdin: IO[bytes] | None = None) -> FlameGraphResult:
    """`profiler flamegraph`: the SVG (or folded lines) of one input. ``warn`` hears what was
    tolerated in the input (a truncated file...), before any error about the result."""
    stacks = load_stacks(input, opts, offcpu=offcpu, progress=progress, stdin=stdin)
    if not stacks.counts and folded_output and not stacks.seen and not stacks.warnings and not opts.window.bounded:
        # perf script of a recording without events: nothing to fold, as inferno-collapse-perf
        # prints nothing and succeeds (a graph of nothing is still an error, as in inferno-flamegraph)
        return FlameGraphResult([], stacks)
    check_stacks(stacks, opts, warn)
    if folded_output:
        return FlameGraphResult(list(format_folded(stacks.counts)), stacks)
    frac = svg.min_width / (svg.width - 20) if svg.min_width > 0 else 0.0
    graph = make_graph(stacks, title=title, subtitle=subtitle, offcpu=offcpu, min_fraction=frac)
    text = RENDERER.render(graph, svg)
    return FlameGraphResult(text, stacks, frames=text.count("<g data-i="))


# --------------------------------------------------------------------------- stacks for other tools

_UNIT_NAMES = {"ns": "nanoseconds", "us": "microseconds", "samples": "count"}


def export_formats() -> tuple[str, ...]:
    """The formats of the stack exports (pprof, speedscope): the renderer registry is imported
    only when one is asked for (it imports every renderer, the report's among them)."""
    from profiler.renderers.registry import EXPORTS

    return tuple(f for r in EXPORTS for f in r.formats)


def export_format(fmt: str | None, output: str | None) -> str | None:
    """The export --format asks for, or the output file's extension names (.pb.gz, .speedscope.json); else None."""
    if not fmt and (not output or output.lower().endswith((".svg", ".folded", ".txt"))):
        return None  # not an export: the renderer registry is not imported
    from profiler.renderers.registry import EXPORTS

    if fmt:
        return fmt if fmt in export_formats() else None
    if output:
        low = output.lower()
        for r in EXPORTS:
            if any(low.endswith(ext) for ext in r.extensions):
                return r.formats[0]
    return None


def stack_profile(stacks: LoadedStacks, offcpu: bool) -> StackProfile:
    """Folded stacks with what their values are, as pprof and speedscope name them."""
    if stacks.event and "/" in stacks.event and " " not in stacks.event:  # a pprof input's own type
        kind, _, unit = stacks.event.partition("/")
    elif offcpu:
        kind, unit = "offcpu", _UNIT_NAMES.get(stacks.unit, stacks.unit)
    elif stacks.unit == "ns":
        kind, unit = "cpu", "nanoseconds"
    else:
        kind, unit = (stacks.unit if stacks.unit != "samples" else "samples"), "count"
    name = " · ".join(x for x in (stacks.source, stacks.event) if x)
    return StackProfile(counts=dict(stacks.counts), sample_type=kind, unit=unit, name=name,
                        comments=[f"profiler: {name}"] + stacks.notes[:3])


def export(input: str, opts: FoldOptions, fmt: str, *, offcpu: bool = False, progress: Progress | None = None,
           warn: Warn | None = None, stdin: IO[bytes] | None = None) -> tuple[str | bytes, LoadedStacks]:
    """`profiler flamegraph --format pprof|speedscope`: the input's stacks in another tool's format,
    with their labels, times and binaries (profiler/usecases/export.py)."""
    from profiler.usecases import export as exporting

    return exporting.export(input, opts, fmt, offcpu=offcpu, progress=progress, warn=warn, stdin=stdin)
