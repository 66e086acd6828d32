"""Stacks out to other tools with what the capture knows (usecases layer).

`profiler flamegraph INPUT --format pprof|speedscope` (or `-o x.pb.gz`, `x.speedscope.json`):

- perf samples (a bundle's CPU stacks, perf script text, perf.data): every sample read with its
  comm, pid, tid and time, the root frame folding puts there moved into labels (thread, tid,
  pool, pid, and target for a bundle); the duration from the first to the last sample, the
  period the one most samples carry; each function's binary as its mapping; the samples in
  time order per thread for speedscope;
- a bundle's off-CPU intervals (perf backend): the wait reason and pool as labels, the thread;
- a pprof profile: its labels, mappings, duration and period kept as they were;
- anything else (folded stacks, bcc's totals): the folded stacks, as before.

The flame graph's own path (profiler/usecases/flamegraph.py) stays as it is: folding there merges
identical stacks early, which an export that keeps each sample's thread and time cannot.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO

from profiler.analyzers.stacks.export import Labeler, StackProfile
from profiler.analyzers.stacks.folding import Collapser, FoldOptions
from profiler.analyzers.stacks.naming import fold_stacks
from profiler.errors import InputError
from profiler.inputs import Format, bundles, folded, perfdata, perfscript, pprof
from profiler.inputs.streams import iter_decoded
from profiler.progress import Progress
from profiler.usecases import flamegraph as fg


def _fold(c: Collapser, stream: IO[bytes], meter: fg.Meter) -> None:
    for chunk in iter_decoded(stream, warnings=c.warnings):
        meter(len(chunk))
        c.feed(chunk)
    c.close()


def _labeled(req: fg.StackRequest) -> tuple[Labeler, Collapser, fg.Meter]:
    """What folds perf samples keeping each one's thread and time (a bundle's targets named)."""
    bundle = req.bundle
    lab = Labeler({t.pid: f"{t.comm} ({t.pid})" for t in bundle.manifest.targets} if bundle is not None else {})
    c = Collapser(req.opts, on_sample=lambda t, stack, n: lab.sample(t, stack, n, c.ids))
    return lab, c, fg.Meter(req.progress, f"folding {req.src.name}")


def _samples_profile(req: fg.StackRequest, stacks: fg.LoadedStacks, lab: Labeler, c: Collapser) -> tuple[StackProfile, fg.LoadedStacks]:
    fg.check_stacks(stacks, req.opts, req.warn)
    profile = lab.into(fg.stack_profile(stacks, offcpu=False))
    profile.files = c.frame_modules()
    if profile.unit == "nanoseconds":
        profile.period = lab.period
    if req.bundle is not None and req.bundle.manifest.duration:
        profile.duration_ns = round(req.bundle.manifest.duration * 1e9)
    return profile, stacks


def _bundle_cpu(req: fg.StackRequest) -> tuple[StackProfile, fg.LoadedStacks]:
    """A bundle's CPU stacks through the views, each sample with its thread and time."""
    lab, c, meter = _labeled(req)
    return _samples_profile(req, fg.fold_bundle_cpu(req, c, meter), lab, c)


def _perf_data_cpu(req: fg.StackRequest) -> tuple[StackProfile, fg.LoadedStacks]:
    """perf.data through perf script, each sample with its thread and time."""
    src = req.src
    lab, c, meter = _labeled(req)
    meter.task = f"perf script {src.name} | folding"
    perfdata.read_perf_script(src.file, lambda out: _fold(c, out, meter), fg.FOLD_FIELDS, name=src.name + src.damage())
    return _samples_profile(req, fg.from_collapser(c, req.opts, src.name, src.log), lab, c)


def _perf_script_cpu(req: fg.StackRequest) -> tuple[StackProfile, fg.LoadedStacks]:
    """perf script text, each sample with its thread and time."""
    src = req.src
    lab, c, meter = _labeled(req)
    with src.open() as fh:
        _fold(c, fh, meter)
    return _samples_profile(req, fg.from_collapser(c, req.opts, src.name, src.log), lab, c)


def _bundle_offcpu(req: fg.StackRequest) -> tuple[StackProfile, fg.LoadedStacks]:
    """A perf bundle's off-CPU intervals, labeled; a bcc bundle's totals (no threads) as merged stacks."""
    from profiler.analyzers import views  # the one reader of a bundle's members

    src, bundle, opts = req.src, req.bundle, req.opts
    assert bundle is not None
    lab = Labeler()
    view = views.read_offcpu(bundle, pools=opts.pools, window=opts.window, limit=None, evidence=False,
                             on_interval=lambda lo, hi, key, tid: lab.interval(lo, hi, key, round((hi - lo) * 1e6),
                                                                                 tid, opts.pools))
    if view is None or view.bcc:
        return _merged(req, fg.OFFCPU_READERS, offcpu=True)
    if view.error is not None:
        raise view.error
    if not lab.counts:
        raise InputError(f"no sched_switch samples with blocked time in {src.name}/{view.source}")
    notes = view.notes + bundles.collector_note(bundle, "offcpu-stacks")
    stacks = fg.LoadedStacks(counts=view.folded, unit="us", event="sched:sched_switch", samples=view.switch_outs,
                       source=f"{src.name}/{view.source}", warnings=bundle.read_warnings() + bundle.warnings,
                       notes=notes)
    fg.check_stacks(stacks, opts, req.warn)
    return lab.into(fg.stack_profile(stacks, offcpu=True)), stacks


def _pprof(req: fg.StackRequest) -> tuple[StackProfile, fg.LoadedStacks]:
    """A pprof profile's labels, mappings, duration and period, kept as they were."""
    src, opts = req.src, req.opts
    prof = pprof.read_source(src)
    i = prof.index(opts.event_filter)
    st = prof.sample_types[i]
    labeled: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
    counts: dict[str, int] = {}
    samples = 0
    for frames, value, labels in prof.samples_with_labels(i):
        key = next(iter(fold_stacks([(frames, 1)])))
        labeled[(key, labels)] = labeled.get((key, labels), 0) + value
        counts[key] = counts.get(key, 0) + value
        samples += 1
    stacks = fg.LoadedStacks(counts=counts, unit=fg.PPROF_UNITS.get(st.unit) or st.unit, event=str(st), samples=samples,
                       source=src.name, warnings=prof.warnings + fg.log_warnings(src.log))
    period = prof.period_type
    profile = StackProfile(counts=counts, sample_type=st.type, unit=st.unit, name=f"{src.name} · {st}",
                           duration_ns=max(0, prof.duration_nanos), period=max(0, prof.period),
                           period_type=period.type if period else "", period_unit=period.unit if period else "",
                           labeled=labeled, files=prof.function_files(), comments=[f"profiler: {src.name}"])
    fg.check_stacks(stacks, opts, req.warn)
    return profile, stacks


def _merged(req: fg.StackRequest, readers: dict[Format, fg.StackReader], offcpu: bool) -> tuple[StackProfile, fg.LoadedStacks]:
    """Stacks without threads or times (folded stacks, bcc's totals, perf's sched_switch samples
    merged): the flame graph's own reader of the format, as a profile."""
    stacks = readers[req.src.format](req)
    fg.check_stacks(stacks, req.opts, req.warn)
    return fg.stack_profile(stacks, offcpu), stacks


def _folded(req: fg.StackRequest) -> tuple[StackProfile, fg.LoadedStacks]:
    return _merged(req, fg.STACK_READERS, offcpu=False)


def _merged_offcpu(req: fg.StackRequest) -> tuple[StackProfile, fg.LoadedStacks]:
    return _merged(req, fg.OFFCPU_READERS, offcpu=True)


ExportReader = Callable[[fg.StackRequest], tuple[StackProfile, fg.LoadedStacks]]

# How each stack input becomes a profile for another tool: the formats of the flame graph's
# STACK_READERS (the same detection order), each with what it knows kept.
EXPORT_READERS: dict[Format, ExportReader] = {
    bundles.FORMAT: _bundle_cpu,
    perfdata.FORMAT: _perf_data_cpu,
    pprof.FORMAT: _pprof,
    folded.FORMAT: _folded,
    perfscript.FORMAT: _perf_script_cpu,
}
# With --offcpu: the flame graph's OFFCPU_READERS; a perf bundle's intervals keep their threads.
OFFCPU_EXPORT_READERS: dict[Format, ExportReader] = {
    bundles.FORMAT: _bundle_offcpu,
    perfdata.FORMAT: _merged_offcpu,
    perfscript.FORMAT: _merged_offcpu,
}


def export(input: str, opts: FoldOptions, fmt: str, *, offcpu: bool = False, progress: Progress | None = None,
           warn: fg.Warn | None = None, stdin: IO[bytes] | None = None) -> tuple[str | bytes, fg.LoadedStacks]:
    """`profiler flamegraph --format pprof|speedscope`: the input's stacks in another tool's format.
    The input's format picks its reader in EXPORT_READERS (or, with ``offcpu``, OFFCPU_EXPORT_READERS)."""
    from profiler.renderers.registry import EXPORTS

    writer = EXPORTS.pick(StackProfile, fmt)
    req = fg.stack_request(input, opts, progress=progress, stdin=stdin)
    req.warn = warn
    reader = fg.pick(OFFCPU_EXPORT_READERS if offcpu else EXPORT_READERS, req, offcpu)
    fg.refuse_untimed(req)
    profile, stacks = reader(req)
    return writer.render(profile), stacks
