"""Views of the stack members (analyzers layer): on-CPU samples and off-CPU evidence.

On-CPU: cpu.perf.txt.gz (``perf script`` text; both backends write it) is read in one pass
that folds the stacks (one root per thread pool) and keeps every sample's time, for the flame
graph and the sub-second heatmap.

Off-CPU, one view for both backends:
- perf: offcpu.perf.txt.gz (sched_switch stacks) read in one pass that folds the first
  ``OFFCPU_MAX_SWITCHES`` switches into blocked time and counts, for every switch, the stacks
  that pass through futex code; offcpu.csv.gz gives each switch-out its exact switch-in.
- bcc: offcpu.folded.gz (blocked nanoseconds summed in the kernel per stack) folded the same
  way (its per-thread totals, offcpu.summary.json, are in views.locks).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from profiler.analyzers.stacks import folding, offcpu, subsecond

from profiler.bundle import Bundle, members
from profiler.inputs import bundles, perfscript
from profiler.inputs.folded import parse_folded
from profiler.inputs.streams import iter_decoded
from profiler.knowledge import pool_of
from profiler.tolerant import squeeze_blank_lines

# The off-CPU flame graph in the report is built from at most this many switches: a lock storm
# records hundreds of thousands a second, and the report must come back in seconds.
OFFCPU_MAX_SWITCHES = 20_000
# bcc stacks blocked for less than this in all are left out of the off-CPU flame graph (ns)
BCC_MIN_NS = 500


@dataclass
class CpuStacks:
    """cpu.perf.txt.gz, read once."""

    folded: dict[str, int]  # samples per stack, one root frame per thread pool
    times: subsecond.SampleTimes  # every sample's time, tid and comm
    origin: float | None  # time zero of the sub-second heatmap: the capture start, when before the samples
    warnings: list[str] = field(default_factory=list)
    error: Exception | None = None  # the member could not be read


def _lines(chunks: Iterable[str], collapser: folding.Collapser) -> Iterator[str]:
    """Feed each decoded chunk to the collapser and yield its lines (one pass for both)."""
    rest = ""
    for chunk in chunks:
        collapser.feed(chunk)
        if "\n\n\n" in chunk:  # a run of blank lines is one sample separator: no step per line
            chunk = squeeze_blank_lines(chunk)
        lines = (rest + chunk).split("\n")
        rest = lines.pop()
        yield from lines
    if rest:
        yield rest


def read_cpu_stacks(bundle: Bundle) -> CpuStacks | None:
    if not bundle.has(members.CPU_STACKS):
        return None
    c = folding.Collapser(folding.FoldOptions(pools=True, count_samples=True))
    try:
        with bundle.open_binary(members.CPU_STACKS) as fh:
            times = subsecond.parse_sample_times(_lines(iter_decoded(fh, warnings=c.warnings), c))
        folded = c.result()
    except Exception as exc:  # noqa: BLE001 - the report says why its CPU pictures are missing
        return CpuStacks(folded={}, times=subsecond.parse_sample_times(()), origin=None, error=exc)
    bundle.log(members.CPU_STACKS).skip(c.weird, "samples whose header could not be read")
    return CpuStacks(folded=folded, times=times, origin=subsecond.capture_origin(bundle, times.t),
                     warnings=[f"{members.CPU_STACKS}: {w}" for w in c.warnings])


# --------------------------------------------------------------------------- off-CPU

_HEADER_TID = re.compile(r"\s(\d{1,10})(?:/(\d{1,10}))?\s+(?:\[\d+\]\s+)?\d+\.\d+:")

FutexStacks = dict[int, dict[tuple[str, ...], int]]  # tid -> raw frame lines -> switch-outs


class _FutexCounter:
    """Cuts perf script lines into samples and counts, per thread, those whose stack passes through
    futex code. A plain substring test per sample is far cheaper than parsing every frame of every
    context switch; identical stacks (a lock storm is millions of the same switch) are only counted
    here, and parsed once later (analyzers.verdict.locks)."""

    def __init__(self) -> None:
        self.by_tid: FutexStacks = {}
        self._block: list[str] = []
        self._hit = False

    def feed(self, line: str) -> None:
        if line.strip():
            self._block.append(line)
            if not self._hit and "futex" in line and line.startswith(("\t", " ")):
                self._hit = True
            return
        self._flush()

    def _flush(self) -> None:
        if self._block and self._hit:
            m = _HEADER_TID.search(self._block[0])
            tid = int(m.group(2) or m.group(1)) if m is not None else -1
            stacks = self.by_tid.setdefault(tid, {})
            stack = tuple(self._block[1:])
            stacks[stack] = stacks.get(stack, 0) + 1
        self._block, self._hit = [], False

    def close(self) -> FutexStacks:
        self._flush()
        return self.by_tid


@dataclass
class OffCpu:
    """Off-CPU evidence of either backend."""

    source: str  # the stack member: offcpu.perf.txt.gz (perf) or offcpu.folded.gz (bcc)
    folded: dict[str, int] = field(default_factory=dict)  # blocked us per wait reason;pool;stack
    switches: int = 0  # perf: switch-outs folded (at most OFFCPU_MAX_SWITCHES)
    limited: bool = False  # perf: the capture holds more switches than were folded
    futex: FutexStacks = field(default_factory=dict)  # perf: futex stacks per thread, every switch
    error: Exception | None = None  # the folded stacks could not be read

    @property
    def bcc(self) -> bool:
        return self.source == members.OFFCPU_FOLDED


def _read_perf_offcpu(bundle: Bundle) -> OffCpu:
    view = OffCpu(source=members.OFFCPU_STACKS)
    intervals = None
    try:
        # The collector's switch-out/switch-in pairs give exact widths, and keep a sampled
        # (duty-cycled) capture from closing a switch-out with the next window's switch-out.
        if bundle.has(members.OFFCPU_INTERVALS):
            intervals = bundles.read_intervals(bundle.iter_lines(members.OFFCPU_INTERVALS),
                                               bundle.log(members.OFFCPU_INTERVALS))
    except Exception as exc:  # noqa: BLE001 - the flame graph says why; the futex stacks still count
        view.error = exc
    futex = _FutexCounter()

    def tee(lines: Iterable[str]) -> Iterator[str]:
        for line in lines:
            futex.feed(line)
            yield line

    lines = tee(bundle.iter_lines(members.OFFCPU_STACKS))
    if view.error is None:
        def counted(samples: Iterator[perfscript.Sample]) -> Iterator[perfscript.Sample]:
            for smp in samples:
                view.switches += 1
                yield smp

        try:
            first = itertools.islice(perfscript.iter_samples(lines, bundle.log(members.OFFCPU_STACKS)),
                                     OFFCPU_MAX_SWITCHES)
            view.folded, _ = offcpu.offcpu_folded(counted(first), by_reason=True, pools=True, intervals=intervals)
        except Exception as exc:  # noqa: BLE001 - as above
            view.error = exc
    view.limited = view.switches >= OFFCPU_MAX_SWITCHES
    for _ in lines:  # the rest of the member: every switch counts for the futex stacks
        pass
    view.futex = futex.close()
    return view


def _read_bcc_offcpu(bundle: Bundle) -> OffCpu:
    view = OffCpu(source=members.OFFCPU_FOLDED)
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


def read_offcpu(bundle: Bundle) -> OffCpu | None:
    """The off-CPU stacks of whichever backend wrote them (perf first), or None."""
    if bundle.has(members.OFFCPU_STACKS):
        return _read_perf_offcpu(bundle)
    if bundle.has(members.OFFCPU_FOLDED):
        return _read_bcc_offcpu(bundle)
    return None
