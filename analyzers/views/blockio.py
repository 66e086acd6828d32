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

from dataclasses import dataclass, field

import numpy as np
from profiler.analyzers.io import histograms, pairing, stats

from profiler.bundle import Bundle, members
from profiler.errors import InputError


@dataclass
class IOEvents:
    """The per-IO columns the verdict and the timeline read (from the paired block trace)."""

    t: np.ndarray  # issue time (monotonic s)
    latency: np.ndarray  # seconds
    dev: np.ndarray  # "254:0" per IO
    op: np.ndarray  # read | write | flush | discard | other
    nbytes: np.ndarray
    tid: np.ndarray
    comm: np.ndarray
    unpaired: int = 0
    source: str = members.BLOCK_EVENTS  # the member they were paired from (block.trace.gz before v4)


def io_events_from(res: stats.IoAnalysis | None) -> IOEvents | None:
    """The per-IO columns of an IO analysis, or None."""
    if res is None:
        return None
    counts = res.block.counts
    unpaired = int(counts.unpaired_issues + counts.unpaired_completions)
    return IOEvents(t=np.asarray(res.issue, dtype=float), latency=np.asarray(res.latency, dtype=float),
                    dev=np.asarray(res.dev, dtype=object), op=np.asarray(res.op, dtype=object),
                    nbytes=np.asarray(res.bytes), tid=np.asarray(res.tid), comm=np.asarray(res.comm, dtype=object),
                    unpaired=unpaired)


@dataclass
class BlockIo:
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


def read_block_trace(bundle: Bundle) -> pairing.BlockIO | None:
    """Parse and pair the bundle's block events (None when the capture has none)."""
    member = block_member(bundle)
    if member is None:
        return None
    with bundle.open_binary(member, text=member == members.BLOCK_TRACE) as fh:
        return pairing.pair_bundle_member(fh, member)


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
    """The IO analysis of a bundle's block trace, or None when it holds none."""
    bio = read_block_trace(bundle)
    if bio is None:
        return None
    res = stats.capture_io(bio, bundle.manifest, interval=interval)
    member = block_member(bundle)
    assert member is not None
    summary = bundle.log(member).summary()
    if summary is not None:
        res.warnings.append(summary)
    return res


def read_block_io(bundle: Bundle) -> BlockIo | None:
    """Whichever block IO member the capture holds (the trace first), or None."""
    member = block_member(bundle)
    if member is None and not bundle.has(members.BLOCK_HIST):
        return None
    view = BlockIo()
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
