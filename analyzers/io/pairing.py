"""Block IO tracepoints -> one record per completed request (analyzer layer).

Pairs ``block_rq_issue`` with ``block_rq_complete`` (see :func:`pair_events` and docs/heatmap.md
for the rules), vectorised and streaming: only the requests still in flight are carried from one
batch to the next, so memory grows with completed IOs only (48 bytes each). The events come from
the block trace readers in the inputs layer (``profiler/inputs/blocktrace.py`` for ftrace and
perf script text, ``perfdata_blocks.py`` for perf.data).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO

import numpy as np

from profiler.bundle import members
from profiler.formats import blockevents
from profiler.inputs import blocktrace, perfdata_blocks
from profiler.inputs.blocktrace import (
    COMPLETE,
    EVENT_DTYPE,
    ISSUE,
    MERGE,
    OP_FLUSH,
    REQUEUE,
    CommTable,
)
from profiler.inputs.streams import iter_chunks, log_of, open_binary, open_path
from profiler.tolerant import ReadLog

# --------------------------------------------------------------------------- model

IO_DTYPE = np.dtype(
    [
        ("t_issue", "f8"),
        ("t_complete", "f8"),
        ("latency", "f8"),  # seconds, t_complete - t_issue (from the last issue after a requeue)
        ("sector", "u8"),
        ("dev", "u4"),
        ("bytes", "u4"),
        ("tid", "i4"),  # issuer tid
        ("comm", "u2"),  # issuer comm (index into PairedIO.comms)
        ("op", "u1"),
        ("flags", "u1"),
    ],
    align=True,
)  # 48 bytes per completed IO


FLUSH_SECTOR = np.uint64(0xFFFFFFFFFFFFFFFF)  # what the kernel prints for a flush's completion
_DATALESS_KEY = np.uint64((1 << 58) - 2)  # pairing key of set-aside data-less completions
# A trace with at least this many issues, more than half of them without a completion, lost its
# completions (a device queue holds far fewer in flight than that): said in the warnings.
MISSING_COMPLETIONS_MIN = 100

# Kernel threads that issue IO on nobody's behalf (writeback, journal, swap, md/dm workers).
KERNEL_ISSUERS = re.compile(
    r"^(kworker/|jbd2/|kswapd|flush-|writeback|kcompactd|khugepaged|xfsaild|xfs-|btrfs|kblockd|"
    r"md\d*_|dmcrypt|kcryptd|loop\d|nvme|scsi_|ext4|f2fs|ksoftirqd|swapper|z?ram)"
)


ISSUER_CLASSES = ("target", "kernel", "other")


def issuer_class(comm: str, tid: int, target_tids: frozenset[int] = frozenset(), target_comms: frozenset[str] = frozenset()) -> str:
    """'target' (the profiled process's threads), 'kernel' (writeback/journal/...), or 'other'."""
    if tid in target_tids or (comm and comm in target_comms):
        return "target"
    if KERNEL_ISSUERS.match(comm):
        return "kernel"
    return "other"


@dataclass
class PairCounts:
    """How the events were accounted for: every completion is paired, orphan or data-less."""

    events: int = 0  # block events read
    issues: int = 0
    completions: int = 0
    paired: int = 0  # completed IOs with a latency (the heatmap's total)
    unpaired_issues: int = 0  # issues that never completed (in_flight_at_end + superseded)
    in_flight_at_end: int = 0  # issued, not completed when the trace ends
    superseded: int = 0  # issued again at the same sector without a completion or requeue between
    unpaired_completions: int = 0  # completed without an issue in the trace (cut-off start, lost events)
    requeues: int = 0  # block_rq_requeue events (the request is issued again later)
    requeued_issues: int = 0  # issues cancelled by a requeue (the reissue is what pairs)
    merges: int = 0  # block_rq_merge events (requests merged before issue)
    dataless_completions: int = 0  # 0-sector non-flush completions (the request around a pre-flush)
    partial_completions: int = 0  # completions of fewer sectors than issued (pair with the issue)
    lost_events: int = 0  # "[LOST n EVENTS]" that ftrace reported
    skipped_lines: int = 0  # lines naming a block_rq_ event we could not read

    def to_json(self) -> dict[str, int]:
        return asdict(self)


@dataclass
class PairedIO:
    """Paired block IO: one row of :data:`IO_DTYPE` per completed request, by completion time."""

    ios: np.ndarray
    counts: PairCounts
    comms: list[str]
    t_first: float | None = None  # first and last event time seen
    t_last: float | None = None
    warnings: list[str] = field(default_factory=list)

    def comm_of(self, idx: np.ndarray) -> np.ndarray:
        out: np.ndarray = np.asarray(self.comms, dtype=object)[idx]
        return out

    def issuer_classes(self, target_tids: Iterable[int] = (), target_comms: Iterable[str] = ()) -> np.ndarray:
        """Issuer class ('target'/'kernel'/'other') per IO, as an array of str."""
        out: np.ndarray = np.asarray(ISSUER_CLASSES, dtype="U6")[self.issuer_class_index(target_tids, target_comms)]
        return out

    def issuer_class_index(self, target_tids: Iterable[int] = (), target_comms: Iterable[str] = ()) -> np.ndarray:
        """Issuer class per IO as an index into :data:`ISSUER_CLASSES` (one label per distinct
        (comm, tid), not per IO)."""
        tids = frozenset(int(t) for t in target_tids)
        comms = frozenset(target_comms)
        if not len(self.ios):
            return np.zeros(0, np.int8)
        key = self.ios["comm"].astype(np.int64) << 32 | (self.ios["tid"].astype(np.int64) & 0xFFFFFFFF)
        uniq, inv = np.unique(key, return_inverse=True)
        labels = np.array([ISSUER_CLASSES.index(issuer_class(self.comms[int(k >> 32)], int(np.int32(np.uint32(k & 0xFFFFFFFF))),
                                                            tids, comms)) for k in uniq.tolist()], np.int8)
        out: np.ndarray = labels[inv.reshape(-1)]
        return out



_BLOCK_IOS = 1 << 20  # paired IOs the output starts with (48 MiB), doubled as it fills
_U64 = np.uint64


# --------------------------------------------------------------------------- pairing


class BlockPairer:
    """Streaming pairer: feed chunks of whole text lines (or event arrays), then :meth:`finish`.

    Only requests still in flight are carried between chunks; paired IOs are kept compactly.
    """

    def __init__(self) -> None:
        self.comms = CommTable()
        self.comms.intern(b"")  # index 0: unknown issuer (completions carry no comm)
        self.counts = PairCounts()
        self._carry = np.zeros(0, EVENT_DTYPE)
        self._ios: np.ndarray | None = None  # paired IOs so far: the first ``_fill`` rows
        self._fill = 0
        self.t_first: float | None = None
        self.t_last: float | None = None
        self.warnings: list[str] = []

    def feed(self, chunk: bytes, other: blocktrace.OtherLines | None = None) -> None:
        ev, lost, skipped = blocktrace.parse_chunk(chunk, self.comms, other)
        self.counts.lost_events += lost
        self.counts.skipped_lines += skipped
        self.feed_events(ev)

    def feed_batch(self, ev: np.ndarray, slice_size: int = 1 << 16) -> None:
        """Pair a large time-ordered events array in cache-sized slices."""
        for i in range(0, len(ev), slice_size):
            self.feed_events(ev[i : i + slice_size])

    def feed_events(self, ev: np.ndarray, *, owned: bool = True) -> None:
        """Pair a time-ordered events array (modified in place unless ``owned`` is False)."""
        if not len(ev):
            return
        c = self.counts
        c.events += len(ev)
        tt = ev["t"]
        tmin, tmax = float(tt[0]), float(tt[-1])  # trace_pipe and perf script print in time order
        self.t_first = tmin if self.t_first is None else min(self.t_first, tmin)
        self.t_last = tmax if self.t_last is None else max(self.t_last, tmax)
        kind = ev["kind"]
        per_kind = np.bincount(kind, minlength=5)
        c.issues += int(per_kind[ISSUE])
        c.completions += int(per_kind[COMPLETE])
        c.requeues += int(per_kind[REQUEUE])
        c.merges += int(per_kind[MERGE])
        if per_kind[MERGE]:
            ev = ev[kind != MERGE]
            owned = True
            if not len(ev):  # a batch of merges only: nothing to pair
                return
        nodata = ev["nr"] == 0
        if nodata.any():
            if not owned:
                ev = ev.copy()
            flush = nodata & (ev["op"] == OP_FLUSH)
            # Flushes: issued at sector 0, completed at sector 2^64-1: one key for both.
            ev["sector"][flush] = FLUSH_SECTOR
            # Data-less non-flush completions: the request that carried a pre-flush, never
            # issued itself. Set aside (kind 0, a key of their own), counted.
            dataless = nodata & ~flush & (ev["kind"] == COMPLETE)
            if dataless.any():
                c.dataless_completions += int(np.count_nonzero(dataless))
                ev["kind"][dataless] = 0
                ev["sector"][dataless] = _DATALESS_KEY
        if len(self._carry):
            ev = np.concatenate([self._carry, ev])
        self._carry = self._pair(ev)

    def _order(self, ev: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Event indices sorted by (device, sector, position), and the sorted group keys.

        Fast path: device index, sector and position packed in one uint64 (5 + 41 + 17 bits:
        sectors below 2^41, i.e. disks under 1 PiB) sorted with a plain sort; otherwise a
        stable argsort of (device, sector)."""
        n = len(ev)
        dev = ev["dev"]
        sec = ev["sector"]
        if (dev == dev[0]).all():
            dev_i = np.zeros(n, np.uint64)
            ndev = 1
        else:
            devs, inv = np.unique(dev, return_inverse=True)
            dev_i, ndev = inv.astype(np.uint64).ravel(), len(devs)
        special = (sec == FLUSH_SECTOR) | (sec == _DATALESS_KEY)
        if n < (1 << 17) and ndev <= 32 and not (sec[~special] >= _U64((1 << 41) - 2)).any():
            s41 = np.where(sec == FLUSH_SECTOR, _U64((1 << 41) - 1), np.where(sec == _DATALESS_KEY, _U64((1 << 41) - 2), sec))
            packed = (dev_i << _U64(58)) | (s41 << _U64(17)) | np.arange(n, dtype=np.uint64)
            packed.sort()
            order = (packed & _U64((1 << 17) - 1)).astype(np.int64)
            return order, packed >> _U64(17)
        key = (dev_i << _U64(58)) | np.minimum(sec, _U64((1 << 58) - 1))
        order = np.argsort(key, kind="stable")
        return order, key[order]

    def _pair(self, ev: np.ndarray) -> np.ndarray:
        """Pair within one array of events: a completion pairs with the event just before it
        at the same (device, sector) if that is an issue (see docs/heatmap.md). Paired IOs go
        straight into the output blocks; returns the issues still in flight."""
        c = self.counts
        order, ks = self._order(ev)
        kd = ev["kind"][order]
        same = ks[1:] == ks[:-1]
        is_i = kd == ISSUE
        is_c = kd == COMPLETE
        pair = same & is_i[:-1] & is_c[1:]
        last_of_key = np.append(~same, True)
        nxt_requeue = np.append(kd[1:] == REQUEUE, False)
        paired_issue = np.append(pair, False)
        superseded = is_i & ~last_of_key & ~paired_issue & ~nxt_requeue
        c.superseded += int(np.count_nonzero(superseded))
        c.requeued_issues += int(np.count_nonzero(is_i & ~last_of_key & nxt_requeue))
        paired_c = np.concatenate([[False], pair])
        c.unpaired_completions += int(np.count_nonzero(is_c & ~paired_c))
        carry: np.ndarray = ev[np.sort(order[is_i & last_of_key])]  # still in flight
        npair = int(np.count_nonzero(pair))
        c.paired += npair
        if not npair:
            return carry
        # emit IOs in completion (= input) order, without a second sort
        partner = np.empty(len(ev), np.int64)
        partner[order[1:][pair]] = order[:-1][pair]
        mark = np.zeros(len(ev), bool)
        mark[order[1:][pair]] = True
        cc = np.flatnonzero(mark)
        ii = partner[cc]
        nr_i, nr_c = ev["nr"][ii], ev["nr"][cc]
        c.partial_completions += int(np.count_nonzero((nr_c < nr_i) & (nr_c > 0)))
        t = ev["t"]
        need = self._fill + npair
        if self._ios is None or need > len(self._ios):
            # Grow in place: numpy resizes through realloc, and an array this large is its own
            # mapping, which the kernel moves without copying (mremap); numpy zeroes the new
            # half. No view of the array outlives this method, so no reference check.
            cap = max(_BLOCK_IOS, need, 2 * len(self._ios) if self._ios is not None else 0)
            if self._ios is None:
                self._ios = np.empty(cap, IO_DTYPE)
            else:
                self._ios.resize(cap, refcheck=False)
        dst = self._ios[self._fill : need]
        ti, tc = t[ii], t[cc]
        dst["t_issue"] = ti
        dst["t_complete"] = tc
        dst["latency"] = tc - ti
        for name in ("sector", "dev", "bytes", "tid", "comm", "op", "flags"):
            dst[name] = ev[name][ii]
        del dst
        self._fill = need
        return carry

    def finish(self) -> PairedIO:
        c = self.counts
        c.in_flight_at_end = len(self._carry)
        c.unpaired_issues = c.in_flight_at_end + c.superseded
        if self._ios is None:
            ios = np.zeros(0, IO_DTYPE)
        else:
            ios, self._ios = self._ios, None
            ios.resize(self._fill, refcheck=False)  # give the unused tail back (mremap shrinks in place)
        if len(ios) > 1 and (np.diff(ios["t_complete"]) < 0).any():
            ios = ios[np.argsort(ios["t_complete"], kind="stable")]
        warnings = list(self.warnings)
        if c.lost_events:
            warnings.append(f"the trace reports {c.lost_events} lost events: some IOs are missing or unpaired")
        if c.issues >= MISSING_COMPLETIONS_MIN and c.unpaired_issues * 2 > c.issues:
            warnings.append(
                f"{c.unpaired_issues:,} of {c.issues:,} issued IOs have no completion in this trace: completions were "
                "lost, and the latencies describe the paired few only (perf record -a drops completions that run in "
                "interrupt context on an idle CPU, with no lost record; `profiler attach` records them from a tracefs "
                "buffer that keeps them)")
        return PairedIO(ios=ios, counts=c, comms=list(self.comms.names), t_first=self.t_first, t_last=self.t_last, warnings=warnings)


def parse_block_chunks(chunks: Iterable[bytes]) -> PairedIO:
    """Parse and pair block events from chunks of whole text lines (ftrace or perf script)."""
    p = BlockPairer()
    for chunk in chunks:
        p.feed(chunk)
    return p.finish()


SKIPPED_EVENTS = "block event lines that could not be read"
OTHER_LINES = "lines that are no block event"


def pair_stream(fh: IO[bytes], on_chunk: Callable[[BlockPairer], None] | None = None, *,
                only_block_lines: bool = False) -> PairedIO:
    """Parse and pair a block trace stream (ftrace or perf script text, gzip or plain), chunk by
    chunk; ``on_chunk`` sees the pairer after each (for progress). Lines that could not be read
    are counted in the stream's ReadLog (profiler.tolerant); with ``only_block_lines`` (a
    bundle's block.trace.gz, where every line is a block event) so are lines of anything else.
    A stream that is not tolerant yet is read through it, and what it tolerated joins the
    result's warnings."""
    p = BlockPairer()
    src = open_binary(fh, ReadLog("block trace"))
    own = log_of(fh) is None
    other = blocktrace.OtherLines() if only_block_lines else None
    for chunk in iter_chunks(src):
        p.feed(chunk, other)
        if on_chunk is not None:
            on_chunk(p)
    bio = p.finish()
    log = log_of(src)
    assert log is not None
    log.skip(bio.counts.skipped_lines, SKIPPED_EVENTS)
    if other is not None:
        log.skip(other.lines, OTHER_LINES)
    if own and (summary := log.summary()) is not None:
        bio.warnings.append(summary)
    return bio


def read_block_trace(path: str | Path) -> PairedIO:
    """Parse and pair a block trace file (ftrace or perf script text, plain or gzip), streaming."""
    log = ReadLog(Path(path).name)
    with open_path(path, log) as fh:
        bio = pair_stream(fh)
    if (summary := log.summary()) is not None:
        bio.warnings.append(summary)
    return bio


def parse_block_text(text: str | bytes) -> PairedIO:
    data = text.encode() if isinstance(text, str) else text
    if data and not data.endswith(b"\n"):
        data += b"\n"
    return parse_block_chunks([data] if data else [])


def pair_events(events: np.ndarray, *, slice_size: int = 1 << 16, inplace: bool = False) -> PairedIO:
    """Pair an events array (in cache-sized slices, exactly as the streaming reader does).

    ``inplace`` lets the pairing mark flushes and data-less completions in ``events`` itself
    (as the streaming reader does with its own chunks) instead of copying slices that hold them."""
    p = BlockPairer()
    for i in range(0, len(events), slice_size):
        p.feed_events(events[i : i + slice_size], owned=inplace)
    return p.finish()


def pair_member(fh: IO[bytes], on_chunk: Callable[[BlockPairer], None] | None = None) -> PairedIO:
    """Pair a bundle's ``block.events.bin`` (the block-io collector's binary member), streaming;
    a block cut short or corrupt ends the reading there and is said in the warnings."""
    p = BlockPairer()
    state = blockevents.ReadState()
    for batch in perfdata_blocks.iter_member_events(fh, p.comms, state):
        p.feed_batch(batch)
        if on_chunk is not None:
            on_chunk(p)
    bio = p.finish()
    if state.damage:
        bio.warnings.append(f"{members.BLOCK_EVENTS}: {state.damage}")
    return bio


TAP_LIMIT = 4_000_000  # paired IOs a tap holds during a capture (192 MB) before it gives up


class PairingTap:
    """Pairs a ``block.events.bin`` member's blocks as its writer writes them (attach and run:
    profiler/bundle/early.py): the same pairing as :func:`pair_member` over the finished member,
    done while the capture runs instead of read back and decoded after it. Past ``limit`` paired
    IOs, or on any error, it gives up and frees what it holds; the member is then read after the
    capture as it always is."""

    def __init__(self, limit: int = TAP_LIMIT) -> None:
        self.pairer: BlockPairer | None = BlockPairer()
        self.events = perfdata_blocks.MemberEvents(self.pairer.comms)
        self.limit = limit
        self.given_up: str | None = None

    def __call__(self, block: blockevents.Block) -> None:
        p = self.pairer
        if p is None:
            return
        try:
            p.feed_batch(self.events(block))
        except Exception as exc:  # noqa: BLE001 - never the capture's problem: the member is read later
            self._give_up(f"{type(exc).__name__}: {exc}")
            return
        if p.counts.paired > self.limit:
            self._give_up(f"more than {self.limit} IOs")

    def _give_up(self, why: str) -> None:
        self.pairer, self.given_up = None, why

    def result(self) -> PairedIO | None:
        """The pairing of every block heard (once; None if it gave up)."""
        p, self.pairer = self.pairer, None
        return p.finish() if p is not None else None


def pair_bundle_member(fh: IO[bytes], member: str, on_chunk: Callable[[BlockPairer], None] | None = None) -> PairedIO:
    """Pair a bundle's block events member, whichever format it has: ``block.events.bin``
    (binary, bundles since v4) or ``block.trace.gz`` (ftrace text, before)."""
    if member == members.BLOCK_EVENTS:
        return pair_member(fh, on_chunk)
    return pair_stream(fh, on_chunk, only_block_lines=True)


def read_perf_data(path: str | Path) -> PairedIO:
    """Pair the block events of a perf.data read directly (raises PerfDataUnsupported)."""
    p = BlockPairer()
    lost = [0]
    for batch in perfdata_blocks.iter_block_events(path, p.comms, lost):
        p.feed_batch(batch)
    p.counts.lost_events += lost[0]
    return p.finish()
