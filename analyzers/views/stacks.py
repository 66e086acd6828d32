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

import io
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from profiler.analyzers.stacks import folding, offcpu, subsecond

from profiler.bundle import Bundle, members
from profiler.inputs import bundles
from profiler.inputs.folded import parse_folded
from profiler.inputs.streams import iter_decoded
from profiler.inputs.window import WHOLE, TimeWindow
from profiler.knowledge import pool_of

# The off-CPU flame graph in the report is built from at most this many switches of the member.
# The collector already symbolizes at most 20,000 switch-outs (a uniform sample over the capture,
# collectors/perf/offcpu.py), so this bounds older bundles and hand-made ones: folding costs ~10-30 us
# a switch here, so the report still comes back in seconds.
OFFCPU_MAX_SWITCHES = 100_000
# bcc stacks blocked for this long or less in all are left out of the off-CPU flame graph (ns):
# they round to no microsecond (round half to even: 500 ns is 0 us), a frame of width 0
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
        if not fold_cpu_stacks(bundle, c):
            return None
        folded = c.result()
    except Exception as exc:  # noqa: BLE001 - the report says why its CPU pictures are missing
        return CpuStacksView(folded={}, times=subsecond.parse_sample_times(()), origin=None, error=exc)
    bundle.log(members.CPU_STACKS).skip(c.weird, "samples whose header could not be read")
    times = subsecond.SampleTimes(t=np.asarray(c.times, dtype=np.float64), tid=np.asarray(c.tids, dtype=np.int64),
                                  comm=c.comms)
    return CpuStacksView(folded=folded, times=times, origin=subsecond.capture_origin(bundle, times.t),
                         warnings=[f"{members.CPU_STACKS}: {w}" for w in c.warnings], timed=timed, timed_threads=threads)


def fold_cpu_stacks(bundle: Bundle, c: folding.Collapser, on_chunk: Callable[[int], None] | None = None) -> bool:
    """cpu.perf.txt.gz through ``c``, a folder with the caller's options (the report's: pools,
    every sample's time; a flame graph's: its own --pools, --tid, window...); False when the
    capture has no CPU stacks. ``on_chunk`` hears the size of each decoded chunk (progress).
    ``c.weird`` then counts the samples whose header could not be read: the caller puts them in
    the member's read log."""
    if not bundle.has(members.CPU_STACKS):
        return False
    with bundle.open_binary(members.CPU_STACKS) as fh:
        # small chunks: a member cut off mid-chunk loses at most one chunk before the cut
        for chunk in iter_decoded(fh, chunk_size=1 << 18, warnings=c.warnings):
            if on_chunk is not None:
                on_chunk(len(chunk))
            c.feed(chunk)
    c.close()
    return True


def read_cpu_times(bundle: Bundle) -> subsecond.SampleTimes | None:
    """Every CPU sample's time, tid and comm (the sub-second heatmap), without folding; None when
    the capture has no CPU stacks."""
    if not bundle.has(members.CPU_STACKS):
        return None
    with bundle.open_binary(members.CPU_STACKS) as fh:
        return subsecond.parse_sample_times(io.TextIOWrapper(fh, encoding="utf-8", errors="replace", newline="\n"),
                                            bundle.log(members.CPU_STACKS))


# --------------------------------------------------------------------------- off-CPU

FutexStacks = offcpu.FutexStacks  # tid -> raw frame lines -> switch-outs
WaitStacks = offcpu.WaitStacks  # tid -> (prev_state, raw frame lines...) -> switch-outs


@dataclass
class OffCpuView:
    """Off-CPU evidence of either backend."""

    source: str  # the stack member: offcpu.perf.txt.gz (perf) or offcpu.folded.gz (bcc)
    folded: dict[str, int] = field(default_factory=dict)  # blocked us per wait reason;pool;stack
    switches: int = 0  # perf: samples folded (at most OFFCPU_MAX_SWITCHES; switch-ins and side-band records too)
    switch_outs: int = 0  # perf: the blocked intervals among them (a flame graph's "N switches")
    limited: bool = False  # perf: the member holds more switches than were folded
    sampled: tuple[int, int] | None = None  # perf: (switch-outs symbolized, the targets' switch-outs) when the collector sampled
    futex: FutexStacks = field(default_factory=dict)  # perf: futex stacks per thread, every switch
    stacks: WaitStacks = field(default_factory=dict)  # perf: every switch-out's stack per thread
    # (from, to, stack) of each folded interval (perf), or (slot start, slot end, stack, us) per slot (bcc)
    timed: list[tuple[float, float, str] | tuple[float, float, str, float]] = field(default_factory=list)
    timed_tids: list[int] = field(default_factory=list)  # the thread of each of timed (perf; bcc slots: none)
    error: Exception | None = None  # the folded stacks could not be read
    notes: list[str] = field(default_factory=list)  # perf: what the widths are (upper bounds...)

    @property
    def bcc(self) -> bool:
        return self.source in (members.OFFCPU_FOLDED, members.OFFCPU_SLOTS)


def _read_perf_offcpu(bundle: Bundle, *, pools: bool, window: TimeWindow, limit: int | None,
                      evidence: bool, on_interval: Callable[[float, float, str, int], None] | None = None) -> OffCpuView:
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
        if evidence:
            timed.append((lo, hi, key))
            tids.append(folder.thread)
        if on_interval is not None:
            on_interval(lo, hi, key, folder.thread)

    folder = offcpu.SwitchFolder(by_reason=True, pools=pools, window=window, intervals=intervals, futex=evidence,
                                 limit=limit, log=bundle.log(members.OFFCPU_STACKS),
                                 on_interval=keep if evidence or on_interval is not None else None)
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
    view.switch_outs = folder.stats.switches
    view.limited = folder.stats.limited
    view.notes = folder.stats.notes
    view.futex = folder.futex
    view.stacks = folder.stacks
    bundle.warnings.extend(f"{members.OFFCPU_STACKS}: {w}" for w in warnings)
    rec = bundle.manifest.collector("offcpu-stacks")
    sym = rec.stats.get("symbolized") if rec is not None else None
    if isinstance(sym, dict) and sym.get("kept", 0) < sym.get("target_samples", 0):
        view.sampled = (int(sym["kept"]), int(sym["target_samples"]))
    return view


def fold_bcc_offcpu(folded: dict[str, int], *, pools: bool = True) -> dict[str, int]:
    """The bcc backend's blocked nanoseconds per ``comm;stack`` as the perf backend's off-CPU
    graph counts: blocked microseconds per ``wait reason;thread (or pool);stack``, the thread
    name with ``_`` for spaces (analyzers.stacks.offcpu.SwitchFolder's roots). A stack of
    ``BCC_MIN_NS`` or less rounds to no microsecond and is left out: a frame of width 0."""
    pooled: dict[str, int] = {}
    for stack, ns in folded.items():
        comm, sep, rest = stack.partition(";")
        key = (pool_of(comm) if pools else comm).replace(" ", "_") + sep + rest
        pooled[key] = pooled.get(key, 0) + ns
    return {k: round(v / 1000) for k, v in offcpu.offcpu_by_reason(pooled).items() if v > BCC_MIN_NS}


def _read_bcc_offcpu(bundle: Bundle, *, pools: bool) -> OffCpuView:
    view = OffCpuView(source=members.OFFCPU_FOLDED)
    try:
        view.folded = fold_bcc_offcpu(parse_folded(bundle.iter_lines(members.OFFCPU_FOLDED),
                                                   bundle.log(members.OFFCPU_FOLDED)), pools=pools)
    except Exception as exc:  # noqa: BLE001 - the flame graph says why
        view.error = exc
    return view


def read_offcpu(bundle: Bundle, *, pools: bool = True, window: TimeWindow = WHOLE,
                limit: int | None = OFFCPU_MAX_SWITCHES, evidence: bool = True,
                on_interval: Callable[[float, float, str, int], None] | None = None) -> OffCpuView | None:
    """The off-CPU stacks of whichever backend wrote them (perf first), or None: the one reader
    of the off-CPU members, for the report (the defaults) and for a flame graph (its own
    ``pools`` and ``window``, every switch: ``limit`` None, and no ``evidence``: the per-thread
    stacks, futex stacks and timed intervals the verdict and the report's ranges use). Both
    backends count blocked microseconds. A bcc capture has no per-switch times: ``window`` is
    for perf's members, and so is ``on_interval``, which sees each blocked interval folded
    (from, to, folded stack, thread id: an export labels them)."""
    if bundle.has(members.OFFCPU_STACKS):
        return _read_perf_offcpu(bundle, pools=pools, window=window, limit=limit, evidence=evidence,
                                 on_interval=on_interval)
    if bundle.has(members.OFFCPU_SLOTS):  # bcc, per time slot (the whole-capture folded file is its sum)
        from profiler.analyzers.views.slots import read_offcpu_slots

        return read_offcpu_slots(bundle, pools=pools)
    if bundle.has(members.OFFCPU_FOLDED):
        return _read_bcc_offcpu(bundle, pools=pools)
    return None
