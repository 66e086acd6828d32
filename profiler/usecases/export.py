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

from dataclasses import replace
from typing import IO

from profiler.analyzers.stacks.export import Labeler, StackProfile
from profiler.analyzers.stacks.folding import Collapser, FoldOptions
from profiler.analyzers.stacks.naming import fold_stacks
from profiler.bundle import Bundle, members
from profiler.errors import BundleError, InputError, UsageError
from profiler.inputs import Source, bundles, detect, folded, perfdata, perfscript, pprof
from profiler.inputs.streams import iter_decoded
from profiler.progress import Progress
from profiler.usecases import flamegraph as fg

_SAMPLE_FORMATS = (perfdata.FORMAT, perfscript.FORMAT)


def _fold(c: Collapser, stream: IO[bytes], meter: fg._Meter) -> None:
    for chunk in iter_decoded(stream, warnings=c.warnings):
        meter(len(chunk))
        c.feed(chunk)
    c.close()


def _cpu(src: Source, bundle: Bundle | None, opts: FoldOptions, progress: Progress | None) -> tuple[fg.Stacks, Labeler, Collapser]:
    targets = {t.pid: f"{t.comm} ({t.pid})" for t in bundle.manifest.targets} if bundle is not None else {}
    lab = Labeler(targets)
    c = Collapser(opts, on_sample=lambda t, stack, n: lab.sample(t, stack, n, c.ids))
    meter = fg._Meter(progress, f"folding {src.name}")
    if bundle is not None:
        from profiler.analyzers import views  # the one reader of a bundle's members

        name = members.CPU_STACKS
        if not views.fold_cpu_stacks(bundle, c, meter):
            raise BundleError(f"{src.name} holds no CPU stacks ({name}; cpu-stacks collector: "
                              f"{bundles.collector_status(bundle, 'cpu-stacks')})")
        stacks = fg._from_collapser(c, opts, f"{src.name}/{name}", bundle.log(name))
        stacks.notes.extend(bundles.collector_note(bundle, "cpu-stacks"))
    elif src.format is perfdata.FORMAT:
        meter.task = f"perf script {src.name} | folding"
        perfdata.read_perf_script(src.file, lambda out: _fold(c, out, meter), fg.FOLD_FIELDS,
                                  name=src.name + src.damage())
        stacks = fg._from_collapser(c, opts, src.name, src.log)
    else:
        with src.open() as fh:
            _fold(c, fh, meter)
        stacks = fg._from_collapser(c, opts, src.name, src.log)
    return stacks, lab, c


def _offcpu(src: Source, bundle: Bundle, opts: FoldOptions) -> tuple[fg.Stacks, Labeler] | None:
    """A perf bundle's off-CPU intervals, labeled; None for a bcc bundle (its totals have no threads)."""
    from profiler.analyzers import views  # the one reader of a bundle's members

    lab = Labeler()
    view = views.read_offcpu(bundle, pools=opts.pools, window=opts.window, limit=None, evidence=False,
                             on_interval=lambda lo, hi, key, tid: lab.interval(lo, hi, key, round((hi - lo) * 1e6),
                                                                                 tid, opts.pools))
    if view is None or view.bcc:
        return None
    if view.error is not None:
        raise view.error
    if not lab.counts:
        raise InputError(f"no sched_switch samples with blocked time in {src.name}/{view.source}")
    notes = view.notes + bundles.collector_note(bundle, "offcpu-stacks")
    stacks = fg.Stacks(counts=view.folded, unit="us", event="sched:sched_switch", samples=view.switch_outs,
                       source=f"{src.name}/{view.source}", warnings=bundle.read_warnings() + bundle.warnings,
                       notes=notes)
    return stacks, lab


def _from_pprof(src: Source, opts: FoldOptions) -> tuple[fg.Stacks, StackProfile]:
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
    stacks = fg.Stacks(counts=counts, unit=fg._UNITS.get(st.unit) or st.unit, event=str(st), samples=samples,
                       source=src.name, warnings=prof.warnings + fg._log_warnings(src.log))
    period = prof.period_type
    profile = StackProfile(counts=counts, sample_type=st.type, unit=st.unit, name=f"{src.name} · {st}",
                           duration_ns=max(0, prof.duration_nanos), period=max(0, prof.period),
                           period_type=period.type if period else "", period_unit=period.unit if period else "",
                           labeled=labeled, files=prof.function_files(), comments=[f"profiler: {src.name}"])
    return stacks, profile


def export(input: str, opts: FoldOptions, fmt: str, *, offcpu: bool = False, progress: Progress | None = None,
           warn: fg.Warn | None = None, stdin: IO[bytes] | None = None) -> tuple[str | bytes, fg.Stacks]:
    """`profiler flamegraph --format pprof|speedscope`: the input's stacks in another tool's format."""
    from profiler.renderers.registry import EXPORTS

    writer = EXPORTS.pick(StackProfile, fmt)
    src = detect(input, tuple(fg.STACK_READERS), stdin=stdin)
    bundle = src.bundle() if src.format is bundles.FORMAT else None
    if bundle is not None:
        opts = replace(opts, window=opts.window.rebased(bundle.manifest.clock.monotonic_start))
    if src.format is pprof.FORMAT and not offcpu:
        if opts.window.bounded:
            raise UsageError("--from/--to need timestamps: a pprof profile has none")
        stacks, profile = _from_pprof(src, opts)
        fg._check(stacks, opts, warn)
        return writer.render(profile), stacks
    if offcpu and bundle is not None and (got := _offcpu(src, bundle, opts)) is not None:
        stacks, lab = got
        fg._check(stacks, opts, warn)
        profile = fg.stack_profile(stacks, offcpu=True)
        return writer.render(lab.into(profile)), stacks
    if not offcpu and (bundle is not None or src.format in _SAMPLE_FORMATS):
        stacks, lab, c = _cpu(src, bundle, opts, progress)
        fg._check(stacks, opts, warn)
        profile = lab.into(fg.stack_profile(stacks, offcpu=False))
        profile.files = c.frame_modules()
        if profile.unit == "nanoseconds":
            profile.period = lab.period
        if bundle is not None and bundle.manifest.duration:
            profile.duration_ns = round(bundle.manifest.duration * 1e9)
        return writer.render(profile), stacks
    if offcpu:  # bcc's totals, perf script or perf.data of sched_switch: merged stacks
        off = fg.OFFCPU_READERS.get(src.format)
        if off is None:
            raise UsageError(f"--offcpu needs sched_switch samples (a bundle or perf script text), not {src.format.what}")
        stacks = off(fg._Request(input, src, bundle, opts, progress))
    elif src.format is folded.FORMAT:
        if opts.window.bounded:
            raise UsageError("--from/--to need timestamps: folded stacks have none")
        counts = folded.read_source(src)
        stacks = fg.Stacks(counts=counts, source=src.name, samples=sum(counts.values()), warnings=fg._log_warnings(src.log))
    else:
        raise UsageError(f"{src.name}: {src.format.what} holds no stacks to export")
    fg._check(stacks, opts, warn)
    return writer.render(fg.stack_profile(stacks, offcpu)), stacks
