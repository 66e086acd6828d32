"""View of the block IO members (analyzers layer), one for both backends.

- perf: block.events.bin (block_rq_* tracepoints in binary columns; block.trace.gz, one ftrace
  line per event, in bundles before v4), streamed in chunks through
  the pairing of analyzers.io.pairing: one entry per IO (issue, completion, latency, device,
  op, bytes, issuer), then its statistics (analyzers.io.stats).
- bcc: block.hist.jsonl.gz, per time slot, device and op a latency histogram summed in the
  kernel (analyzers.io.histograms): no per-IO events.

A member that cannot be read keeps its error here; the verdict and the report say why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np
from profiler.analyzers.io import histograms, pairing, stats

from profiler.bundle import OK, Bundle, CollectorRecord, EarlyReads, Manifest, members
from profiler.errors import InputError
from profiler.formats.blockevents import BlockEventsError
from profiler.inputs import blocktrace


@dataclass
class IOEvents:
    """The per-IO columns the verdict and the timeline read (from the paired block trace).

    Device, op and issuer are integer codes into small name tables (a capture has a few devices
    and comms, and millions of IOs): group by the codes, name the groups."""

    t: np.ndarray  # issue time (monotonic s)
    latency: np.ndarray  # seconds
    dev_code: np.ndarray  # index into dev_names per IO
    op_code: np.ndarray  # index into op_names per IO
    nbytes: np.ndarray
    tid: np.ndarray
    comm_code: np.ndarray  # index into comm_names per IO
    dev_names: tuple[str, ...] = ()  # "254:0"
    op_names: tuple[str, ...] = ()  # read | write | flush | discard | other
    comm_names: tuple[str, ...] = ()
    unpaired: int = 0
    source: str = members.BLOCK_EVENTS  # the member they were paired from (block.trace.gz before v4)

    @property
    def dev(self) -> np.ndarray:
        """'254:0' per IO."""
        return np.asarray(self.dev_names, dtype=object)[self.dev_code] if len(self.dev_code) else np.zeros(0, object)

    @property
    def op(self) -> np.ndarray:
        return np.asarray(self.op_names, dtype=object)[self.op_code] if len(self.op_code) else np.zeros(0, object)

    @property
    def comm(self) -> np.ndarray:
        return np.asarray(self.comm_names, dtype=object)[self.comm_code] if len(self.comm_code) else np.zeros(0, object)

    def cut(self, mask: np.ndarray) -> IOEvents:
        """The IOs where ``mask`` holds (same name tables)."""
        return dataclasses.replace(self, t=self.t[mask], latency=self.latency[mask], dev_code=self.dev_code[mask],
                                   op_code=self.op_code[mask], nbytes=self.nbytes[mask], tid=self.tid[mask],
                                   comm_code=self.comm_code[mask])

    @classmethod
    def from_names(cls, *, t: Any, latency: Any, dev: Any, op: Any, nbytes: Any, tid: Any, comm: Any,
                   unpaired: int = 0, source: str = members.BLOCK_EVENTS) -> IOEvents:
        """From per-IO names (inputs other than the pairing, tests)."""
        def codes(names: Any) -> tuple[np.ndarray, tuple[str, ...]]:
            u, inv = np.unique(np.asarray(names, dtype=str), return_inverse=True)
            return inv.reshape(-1).astype(np.int32), tuple(str(x) for x in u)
        dc, dn = codes(dev)
        oc, on = codes(op)
        cc, cn = codes(comm)
        return cls(t=np.asarray(t, dtype=float), latency=np.asarray(latency, dtype=float), dev_code=dc, op_code=oc,
                   nbytes=np.asarray(nbytes), tid=np.asarray(tid), comm_code=cc, dev_names=dn, op_names=on,
                   comm_names=cn, unpaired=unpaired, source=source)


def io_events_from(res: stats.IoAnalysis | None) -> IOEvents | None:
    """The per-IO columns of an IO analysis, or None."""
    if res is None:
        return None
    counts = res.block.counts
    unpaired = int(counts.unpaired_issues + counts.unpaired_completions)
    ios = res.block.ios
    dev = np.ascontiguousarray(ios["dev"])
    dev_u: np.ndarray
    dev_code: np.ndarray
    if len(dev) and (dev == dev[0]).all():  # the common case: one disk
        dev_u, dev_code = dev[:1], np.zeros(len(dev), np.int32)
    else:
        dev_u, dev_code = np.unique(dev, return_inverse=True)
    op_names = tuple(blocktrace.OP_NAMES)  # the last is "other"
    op_code = np.minimum(ios["op"], len(op_names) - 1)
    return IOEvents(t=np.asarray(ios["t_issue"], dtype=float), latency=np.asarray(ios["latency"], dtype=float),
                    dev_code=dev_code.reshape(-1), op_code=op_code, nbytes=np.asarray(ios["bytes"]),
                    tid=np.asarray(ios["tid"]), comm_code=np.asarray(ios["comm"]),
                    dev_names=tuple(blocktrace.dev_name(int(d)) for d in dev_u.tolist()), op_names=op_names,
                    comm_names=tuple(res.block.comms), unpaired=unpaired)


@dataclass
class BlockIoView:
    """Block IO of either backend: per-IO events (perf) or in-kernel histograms (bcc)."""

    analysis: stats.IoAnalysis | None = None  # perf: the paired IOs and their statistics
    events: IOEvents | None = None  # perf: the same IOs as plain columns
    hist: histograms.BlockHist | None = None  # bcc
    errors: dict[str, Exception] = field(default_factory=dict)  # member -> why it could not be read


def block_member(bundle: Bundle) -> str | None:
    """The member holding the block events: the binary one (v4 on), else the text trace."""
    for m in (members.BLOCK_EVENTS, members.BLOCK_TRACE):
        if bundle.has(m):
            return m
    return None


def read_block_trace(bundle: Bundle, on_chunk: Callable[[pairing.BlockPairer], None] | None = None
                     ) -> pairing.PairedIO | None:
    """Parse and pair the bundle's block events (None when the capture has none); ``on_chunk``
    sees the pairing after each chunk (progress)."""
    member = block_member(bundle)
    if member is None:
        return None
    with bundle.open_binary(member, text=member == members.BLOCK_TRACE) as fh:
        try:
            return pairing.pair_bundle_member(fh, member, on_chunk)
        except BlockEventsError as exc:  # no header, another version: nothing in it can be read
            raise InputError(f"{bundle.path(member)}: {exc}") from None


EARLY_IO = "io"  # an early read of block.events.bin: (the IoWindow it used, the IoAnalysis)


def install_taps(early: EarlyReads) -> None:
    """Before the capture: pair the block events as block-io writes them."""
    early.taps[members.BLOCK_EVENTS] = pairing.PairingTap()


def start_early(early: EarlyReads, rec: CollectorRecord, manifest: Manifest) -> None:
    """Analyze the block events as soon as block-io has stopped, while the other collectors
    finish; ``rec`` is its record as it stopped, ``manifest`` the capture's. The IOs are those
    its tap paired during the capture when it heard every block of a member written without
    fault (status ok); else the member is read and paired now."""
    if rec.name != "block-io":
        return
    window = stats.io_window(manifest, rec)
    tap = early.taps.pop(members.BLOCK_EVENTS, None)
    bio = tap.result() if isinstance(tap, pairing.PairingTap) else None
    if bio is not None and rec.status == OK and members.BLOCK_EVENTS in rec.files:
        paired = bio
        early.start_computed(members.BLOCK_EVENTS, EARLY_IO, lambda: (window, stats.analyze_window(paired, window)))
        return

    def work(fh: IO[bytes]) -> tuple[stats.IoWindow, stats.IoAnalysis]:
        return window, stats.analyze_window(pairing.pair_member(fh), window)

    early.start(members.BLOCK_EVENTS, EARLY_IO, work)


def read_block_hist(bundle: Bundle) -> histograms.BlockHist | None:
    """The bundle's block IO histograms, or None when the bcc backend did not write them;
    their warnings (a cut-off file) join the bundle's."""
    if not bundle.has(members.BLOCK_HIST):
        return None
    try:
        h = histograms.parse_block_hist(bundle.iter_lines(members.BLOCK_HIST))
    except ValueError as exc:
        raise InputError(str(exc)) from None
    bundle.warnings.extend(h.warnings)
    return h


def io_from_bundle(bundle: Bundle, *, interval: float | None = None) -> stats.IoAnalysis | None:
    """The IO analysis of a bundle's block trace, or None when it holds none; the analysis made
    while the capture finished, if there was one and its window is the capture's."""
    member = block_member(bundle)
    if member is None:
        return None
    early = bundle.take_early(member, EARLY_IO) if interval is None else None
    res: stats.IoAnalysis
    if early is not None:
        used, res = early
        window = stats.io_window(bundle.manifest)
        if window != used:
            res = stats.analyze_window(res.block, window)
    else:
        bio = read_block_trace(bundle)
        assert bio is not None
        res = stats.capture_io(bio, bundle.manifest, interval=interval)
    summary = bundle.log(member).summary()
    if summary is not None:
        res.warnings.append(summary)
    return res


def read_block_io(bundle: Bundle) -> BlockIoView | None:
    """Whichever block IO member the capture holds (the trace first), or None."""
    member = block_member(bundle)
    if member is None and not bundle.has(members.BLOCK_HIST):
        return None
    view = BlockIoView()
    if member is not None:
        try:
            view.analysis = io_from_bundle(bundle)
            view.events = io_events_from(view.analysis)
            if view.events is not None:
                view.events.source = member
        except Exception as exc:  # noqa: BLE001 - a broken trace lowers confidence, never crashes
            view.errors[member] = exc
    if view.events is None and bundle.has(members.BLOCK_HIST):
        try:
            view.hist = read_block_hist(bundle)
        except Exception as exc:  # noqa: BLE001 - broken histograms lower confidence, never crash
            view.errors[members.BLOCK_HIST] = exc
    return view
