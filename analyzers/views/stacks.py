"""Views of the stack members (analyzers layer): on-CPU samples and off-CPU evidence.

On-CPU: cpu.perf.txt.gz (``perf script`` text; both backends write it) is read in one pass
that folds the stacks (one root per thread pool) and keeps every sample's time, for the flame
graph and the sub-second heatmap.

Off-CPU, one view for both backends:
- perf: offcpu.perf.txt.gz (sched_switch stacks: the collector symbolizes at most 20,000
  switch-outs, a uniform sample over the capture) read in one pass (analyzers.stacks.offcpu.
  SwitchFolder: each distinct stack parsed once) that folds the first ``OFFCPU_MAX_SWITCHES``
  switches into blocked time and counts, for every switch, its stack per thread (with its
  prev_state: analyzers.stacks.waits classifies them) and apart the stacks that pass through
  futex code; offcpu.csv.gz (every switch) gives each switch-out its exact switch-in.
- bcc: offcpu.slots.jsonl.gz (blocked nanoseconds summed in the kernel per time slot, thread,
  state and stack: views.slots), else (older bundles) offcpu.folded.gz, folded the same way (its
  per-thread totals, offcpu.summary.json, are in views.locks).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from profiler.analyzers.stacks import folding, offcpu, subsecond

from profiler.bundle import Bundle, members
from profiler.inputs import bundles
from profiler.inputs.folded import parse_folded
from profiler.inputs.streams import iter_decoded
from profiler.knowledge import pool_of

# The off-CPU flame graph in the report is built from at most this many switches of the member.
# The collector already symbolizes at most 20,000 switch-outs (a uniform sample over the capture,
# collectors/perf/offcpu.py), so this bounds older bundles and hand-made ones: folding costs ~10-30 us
# a switch here, so the report still comes back in seconds.
OFFCPU_MAX_SWITCHES = 100_000
# bcc stacks blocked for less than this in all are left out of the off-CPU flame graph (ns)
BCC_MIN_NS = 500


@dataclass
class CpuStacksView:
    """cpu.perf.txt.gz, read once."""

    folded: dict[str, int]  # samples per stack, one root frame per thread pool
    times: subsecond.SampleTimes  # every sample's time, tid and comm
    origin: float | None  # time zero of the sub-second heatmap: the capture start, when before the samples
    warnings: list[str] = field(default_factory=list)
    timed: list[tuple[float, str]] = field(default_factory=list)  # every sample's (time, folded stack)
    error: Exception | None = None  # the member could not be read
    timed_threads: list[tuple[int, int, str]] = field(default_factory=list)  # (pid, tid, comm) of each of timed


def read_cpu_stacks(bundle: Bundle) -> CpuStacksView | None:
    if not bundle.has(members.CPU_STACKS):
        return None
    timed: list[tuple[float, str]] = []
    threads: list[tuple[int, int, str]] = []
    seen: dict[tuple[str, str | None, str], tuple[int, int, str]] = {}

    def keep(t: float | None, stack: str, count: int) -> None:
        if t is not None:
            timed.append((t, stack))
            ids = c.ids
            th = seen.get(ids)
            if th is None:  # one tuple per thread, shared by its samples
                comm, pid, tid = ids
                th = seen[ids] = (int(pid) if pid is not None else int(tid), int(tid), comm.strip())
            threads.append(th)

    # one pass: the folded stacks, each sample's (time, stack), and every sample's time, tid and
    # comm from the headers folding parses anyway
    c = folding.Collapser(folding.FoldOptions(pools=True, count_samples=True), on_sample=keep, keep_times=True)
    try:
        with bundle.open_binary(members.CPU_STACKS) as fh:
            for chunk in iter_decoded(fh, chunk_size=1 << 18, warnings=c.warnings):
                c.feed(chunk)
        folded = c.result()
    except Exception as exc:  # noqa: BLE001 - the report says why its CPU pictures are missing
        return CpuStacksView(folded={}, times=subsecond.parse_sample_times(()), origin=None, error=exc)
    bundle.log(members.CPU_STACKS).skip(c.weird, "samples whose header could not be read")
    times = subsecond.SampleTimes(t=np.asarray(c.times, dtype=np.float64), tid=np.asarray(c.tids, dtype=np.int64),
                                  comm=c.comms)
    return CpuStacksView(folded=folded, times=times, origin=subsecond.capture_origin(bundle, times.t),
                         warnings=[f"{members.CPU_STACKS}: {w}" for w in c.warnings], timed=timed, timed_threads=threads)


# --------------------------------------------------------------------------- off-CPU

FutexStacks = offcpu.FutexStacks  # tid -> raw frame lines -> switch-outs
WaitStacks = offcpu.WaitStacks  # tid -> (prev_state, raw frame lines...) -> switch-outs


@dataclass
class OffCpuView:
    """Off-CPU evidence of either backend."""

    source: str  # the stack member: offcpu.perf.txt.gz (perf) or offcpu.folded.gz (bcc)
    folded: dict[str, int] = field(default_factory=dict)  # blocked us per wait reason;pool;stack
    switches: int = 0  # perf: switch-outs folded (at most OFFCPU_MAX_SWITCHES)
    limited: bool = False  # perf: the member holds more switches than were folded
    sampled: tuple[int, int] | None = None  # perf: (switch-outs symbolized, the targets' switch-outs) when the collector sampled
    futex: FutexStacks = field(default_factory=dict)  # perf: futex stacks per thread, every switch
    stacks: WaitStacks = field(default_factory=dict)  # perf: every switch-out's stack per thread
    # (from, to, stack) of each folded interval (perf), or (slot start, slot end, stack, us) per slot (bcc)
    timed: list[tuple[float, float, str] | tuple[float, float, str, float]] = field(default_factory=list)
    timed_tids: list[int] = field(default_factory=list)  # the thread of each of timed (perf; bcc slots: none)
    error: Exception | None = None  # the folded stacks could not be read

    @property
    def bcc(self) -> bool:
        return self.source in (members.OFFCPU_FOLDED, members.OFFCPU_SLOTS)


def _read_perf_offcpu(bundle: Bundle) -> OffCpuView:
    view = OffCpuView(source=members.OFFCPU_STACKS)
    intervals = None
    try:
        # The collector's switch-out/switch-in pairs give exact widths, and keep a sampled
        # (duty-cycled) capture from closing a switch-out with the next window's switch-out.
        if bundle.has(members.OFFCPU_INTERVALS):
            intervals = bundles.read_intervals(bundle.iter_lines(members.OFFCPU_INTERVALS),
                                               bundle.log(members.OFFCPU_INTERVALS))
    except Exception as exc:  # noqa: BLE001 - the flame graph says why; the futex stacks still count
        view.error = exc
    timed: list[tuple[float, float, str] | tuple[float, float, str, float]] = []
    tids: list[int] = []

    def keep(lo: float, hi: float, key: str) -> None:
        timed.append((lo, hi, key))
        tids.append(folder.thread)

    folder = offcpu.SwitchFolder(by_reason=True, pools=True, intervals=intervals, futex=True,
                                 limit=OFFCPU_MAX_SWITCHES, on_interval=keep, log=bundle.log(members.OFFCPU_STACKS))
    warnings: list[str] = []
    try:
        with bundle.open_binary(members.OFFCPU_STACKS) as fh:
            # small chunks: a member cut off mid-chunk loses at most one chunk before the cut
            for chunk in iter_decoded(fh, chunk_size=1 << 18, warnings=warnings):
                folder.feed(chunk)
        folder.close()
    except Exception as exc:  # noqa: BLE001 - as above
        view.error = view.error or exc
    if view.error is None:
        view.folded = folder.counts
        view.timed = timed
        view.timed_tids = tids
    view.switches = folder.stats.samples
    view.limited = folder.stats.limited
    view.futex = folder.futex
    view.stacks = folder.stacks
    bundle.warnings.extend(f"{members.OFFCPU_STACKS}: {w}" for w in warnings)
    rec = bundle.manifest.collector("offcpu-stacks")
    sym = rec.stats.get("symbolized") if rec is not None else None
    if isinstance(sym, dict) and sym.get("kept", 0) < sym.get("target_samples", 0):
        view.sampled = (int(sym["kept"]), int(sym["target_samples"]))
    return view


def _read_bcc_offcpu(bundle: Bundle) -> OffCpuView:
    view = OffCpuView(source=members.OFFCPU_FOLDED)
    try:
        pooled: dict[str, int] = {}
        for stack, ns in parse_folded(bundle.iter_lines(members.OFFCPU_FOLDED), bundle.log(members.OFFCPU_FOLDED)).items():
            comm, sep, rest = stack.partition(";")
            key = pool_of(comm).replace(" ", "_") + sep + rest
            pooled[key] = pooled.get(key, 0) + ns
        # microseconds, as the perf backend's off-CPU graph counts them
        view.folded = {k: round(v / 1000) for k, v in offcpu.offcpu_by_reason(pooled).items() if v >= BCC_MIN_NS}
    except Exception as exc:  # noqa: BLE001 - the flame graph says why
        view.error = exc
    return view


def read_offcpu(bundle: Bundle) -> OffCpuView | None:
    """The off-CPU stacks of whichever backend wrote them (perf first), or None."""
    if bundle.has(members.OFFCPU_STACKS):
        return _read_perf_offcpu(bundle)
    if bundle.has(members.OFFCPU_SLOTS):  # bcc, per time slot (the whole-capture folded file is its sum)
        from profiler.analyzers.views.slots import read_offcpu_slots

        return read_offcpu_slots(bundle)
    if bundle.has(members.OFFCPU_FOLDED):
        return _read_bcc_offcpu(bundle)
    return None
