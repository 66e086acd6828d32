"""Bundle views (analyzers layer): each member of a capture bundle read once, into a typed view.

``read_views(bundle)`` is the one place an analysis opens bundle members: it reads each member
at most once (streaming, in one pass), and hides what differs between the perf and the bcc
backend. Everything downstream (the verdict's metrics, the timeline, the report's pictures)
takes these views, never the bundle. Which member feeds which view: docs/bundle.md#views.

  view             perf backend                          bcc backend
  proc             proc.jsonl.gz                         proc.jsonl.gz
  stat             stat.csv                              stat.csv
  syscalls         syscalls.csv (older: syscalls-rate.csv) syscalls.csv
  cpu              cpu.perf.txt.gz                       cpu.perf.txt.gz
  offcpu           offcpu.perf.txt.gz + offcpu.csv.gz    offcpu.slots.jsonl.gz (older: offcpu.folded.gz)
  io               block.events.bin (older: block.trace.gz) block.hist.jsonl.gz
  waits            (none)                                futex.summary.json, futex.folded.gz,
                                                         offcpu.summary.json
  load             load.log + load.times.csv.gz           (same)
  server           server-status.jsonl, server-metrics.jsonl.gz and its profiles (analyzers/server/view.py)

The same readers serve the verbs with their own options (``read_offcpu``, ``fold_cpu_stacks``,
``read_cpu_times``, ``read_block_trace``, ``read_block_hist``): a flame graph or heatmap of a
bundle and the report read each member the one way.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from profiler.analyzers.load.view import LoadLog, read_load
from profiler.analyzers.series import perfstat
from profiler.analyzers.series.procfs import ProcData, parse_lines
from profiler.analyzers.server.view import ServerStatusView, read_server_status
from profiler.analyzers.views import blockio as _blockio
from profiler.analyzers.views.blockio import (
    BlockIoView,
    IOEvents,
    block_member,
    read_block_hist,
    read_block_io,
    read_block_trace,
)
from profiler.analyzers.views.counters import SyscallRow, SyscallsView, read_stat, read_syscalls
from profiler.analyzers.views.locks import WaitTotals, read_wait_totals
from profiler.analyzers.views.stacks import (
    OFFCPU_MAX_SWITCHES,
    CpuStacksView,
    OffCpuView,
    fold_cpu_stacks,
    read_cpu_stacks,
    read_cpu_times,
    read_offcpu,
)

from profiler.bundle import Bundle, CollectorRecord, EarlyReads, Manifest, members
from profiler.progress import Progress


def _size(bundle: Bundle, member: str) -> int:
    try:
        return bundle.path(member).stat().st_size
    except (OSError, ValueError):
        return 0

# The evidence sources the verdict reports on: source -> (collector, the members that hold it)
SOURCES: dict[str, tuple[str, tuple[str, ...]]] = {
    "procfs": ("procfs", (members.PROC,)),
    "perf-stat": ("perf-stat", (members.STAT,)),
    "cpu-stacks": ("cpu-stacks", (members.CPU_STACKS,)),
    "offcpu": ("offcpu-stacks", (members.OFFCPU_STACKS, members.OFFCPU_FOLDED)),
    "block-io": ("block-io", (members.BLOCK_EVENTS, members.BLOCK_TRACE, members.BLOCK_HIST)),
    "syscalls": ("syscalls", (members.SYSCALLS, members.SYSCALLS_RATE)),
}
_KNOWN = tuple(dict.fromkeys(m for _, files in SOURCES.values() for m in files))


@dataclass
class BundleViews:
    """One capture, every member read once."""

    root: str  # the bundle directory
    manifest: Manifest
    present: frozenset[str]  # the evidence members the bundle holds
    proc: ProcData | None = None
    stat: perfstat.PerfStatSeries | None = None
    syscalls: SyscallsView | None = None
    cpu: CpuStacksView | None = None
    offcpu: OffCpuView | None = None
    io: BlockIoView | None = None
    waits: WaitTotals | None = None
    server: ServerStatusView | None = None  # server-status: /metrics scrapes and Go profiles (analyzers/server)
    load: LoadLog | None = None  # the load next to the capture (run, attach --load-log)
    warnings: list[str] = field(default_factory=list)  # members cut off or corrupted, read up to the cut
    reads: dict[str, dict[str, Any]] = field(default_factory=dict)  # member -> what reading it tolerated (ReadLog)

    def has(self, member: str) -> bool:
        return member in self.present

    def source_status(self, collector: str, files: tuple[str, ...]) -> str:
        """'ok', 'missing', 'partial: why', 'skipped: why', 'failed: why' or 'other format: ...'."""
        rec = self.manifest.collector(collector)
        if rec is not None and rec.status in ("skipped", "failed"):
            return f"{rec.status}: {rec.reason or 'no reason given'}"
        if any(f in self.present for f in files):
            if rec is not None and rec.status == "partial":
                return f"partial: {rec.reason or ''}".rstrip(": ")
            return "ok"
        if rec is not None and rec.files:
            # e.g. the bcc backend's in-kernel histograms: captured, but not the files the verdict reads
            return f"other format: {rec.backend} wrote {', '.join(rec.files)} (not read by the verdict yet)"
        return "missing"


T = TypeVar("T")


def _guarded(bundle: Bundle, member: str, read: Callable[[Bundle], T | None]) -> T | None:
    """One view, read; a member that cannot be parsed at all is a warning naming it, never the
    end of the analysis (exit 70 is for bugs in the profiler, not damage in the data)."""
    try:
        return read(bundle)
    except Exception as exc:  # noqa: BLE001 - the one net under every member's parser
        bundle.warnings.append(f"{member} could not be read: {type(exc).__name__}: {exc}")
        return None


def _read_proc(bundle: Bundle) -> ProcData | None:
    if not bundle.has(members.PROC):
        return None
    pd = parse_lines(bundle.iter_lines(members.PROC))
    bundle.log(members.PROC).skip(pd.bad_lines, "malformed JSON lines")
    return pd


class _Aside(Generic[T]):
    """One view read in a thread, through its own copy of the bundle's warnings and read logs;
    :meth:`join` puts them where a sequential read would have (the reports stay the same run to
    run, whichever thread finished first)."""

    def __init__(self, bundle: Bundle, member: str, read: Callable[[Bundle], T | None]) -> None:
        self.bundle = bundle
        self.own = copy.copy(bundle)
        self.own.warnings, self.own.reads = [], {}
        self.value: T | None = None
        self.thread = threading.Thread(target=self._run, args=(member, read), name=f"profiler-read-{member}", daemon=True)
        self.thread.start()

    def _run(self, member: str, read: Callable[[Bundle], T | None]) -> None:
        self.value = _guarded(self.own, member, read)

    def mark(self) -> tuple[int, int]:
        """Where the sequential read would have read this view."""
        return len(self.bundle.warnings), len(self.bundle.reads)

    def join(self, at: tuple[int, int]) -> T | None:
        self.thread.join()
        w, r = at
        self.bundle.warnings[w:w] = self.own.warnings
        items = list(self.bundle.reads.items())
        self.bundle.reads.clear()
        self.bundle.reads.update(items[:r] + list(self.own.reads.items()) + items[r:])
        return self.value


def read_views(bundle: Bundle, progress: Progress | None = None) -> BundleViews:
    """Read every member an analysis uses, each once. Never raises on a missing, cut-off or
    damaged member: what reading tolerated is in ``reads`` and ``warnings``; a member that cannot
    be parsed keeps its error in its view, or is a warning (the report says why). ``progress``
    hears each member read (bytes of the members, compressed, of their total)."""
    present = frozenset(m for m in _KNOWN + (members.OFFCPU_INTERVALS, members.FUTEX_SUMMARY, members.FUTEX_FOLDED,
                                             members.OFFCPU_SUMMARY) if bundle.has(m))
    v = BundleViews(root=str(bundle.root), manifest=bundle.manifest, present=present)
    seen = len(bundle.warnings)
    sizes = {m: _size(bundle, m) for m in sorted(present)}
    total, done = float(sum(sizes.values()) or 1), 0.0

    def read(label: str, member_names: tuple[str, ...]) -> None:
        nonlocal done
        if progress is not None:
            progress(f"reading {v.root}: {label}", done, total, "B")
        done += sum(sizes.get(m, 0) for m in member_names)

    # Block IO, most of a busy disk's analysis and nearly all numpy (which lets go of the
    # interpreter lock), is read on the other CPU while the rest is read here.
    io_member = members.BLOCK_EVENTS if bundle.has(members.BLOCK_EVENTS) else members.BLOCK_TRACE
    io_read = _Aside(bundle, io_member, read_block_io)
    read("procfs samples", (members.PROC,))
    v.proc = _guarded(bundle, members.PROC, _read_proc)
    read("off-CPU stacks", (members.OFFCPU_STACKS, members.OFFCPU_INTERVALS, members.OFFCPU_FOLDED))
    v.offcpu = _guarded(bundle, members.OFFCPU_STACKS, read_offcpu)
    read("syscalls and counters", (members.SYSCALLS, members.SYSCALLS_RATE, members.STAT, members.FUTEX_SUMMARY,
                                   members.FUTEX_FOLDED, members.OFFCPU_SUMMARY))
    v.syscalls = _guarded(bundle, members.SYSCALLS, read_syscalls)
    v.stat = _guarded(bundle, members.STAT, read_stat)
    v.waits = _guarded(bundle, members.FUTEX_SUMMARY, read_wait_totals)
    io_at = io_read.mark()
    read("CPU stacks", (members.CPU_STACKS,))
    v.cpu = _guarded(bundle, members.CPU_STACKS, read_cpu_stacks)
    v.server = _guarded(bundle, members.SERVER_STATUS, read_server_status)
    read("the load's log", (members.LOAD_LOG,))
    v.load = _guarded(bundle, members.LOAD_LOG, read_load)
    read("block IO", (members.BLOCK_EVENTS, members.BLOCK_TRACE, members.BLOCK_HIST))
    v.io = io_read.join(io_at)
    read("done", ())
    v.warnings = bundle.read_warnings() + bundle.warnings[seen:] + (v.cpu.warnings if v.cpu is not None else [])
    v.reads = {name: log.to_dict() for name, log in sorted(bundle.reads.items())}
    return v


def install_taps(early: EarlyReads) -> None:
    """Before a capture (attach, run): what the views take in while collectors write their
    members (the block events, paired as they are written)."""
    _blockio.install_taps(early)


def start_early_reads(early: EarlyReads, rec: CollectorRecord, manifest: Manifest) -> None:
    """A collector has stopped (``rec``, as it stopped) and its members are final: start the
    views' reads of them while the other collectors finish (attach, run). The block events are
    the one such read today: pairing and analyzing them is most of a high-IOPS capture's
    analysis, and block-io stops before the collectors that symbolize or decode perf.data."""
    _blockio.start_early(early, rec, manifest)


__all__ = [
    "OFFCPU_MAX_SWITCHES", "SOURCES", "BlockIoView", "BundleViews", "CpuStacksView", "IOEvents", "LoadLog", "OffCpuView",
    "SyscallRow", "SyscallsView", "WaitTotals", "block_member", "fold_cpu_stacks", "install_taps", "read_block_hist",
    "read_block_trace", "read_cpu_times", "read_offcpu", "read_views", "start_early_reads",
]
