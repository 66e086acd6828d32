"""Block tracepoint events in binary form, read without `perf script` (inputs layer).

Two sources, one decoding: a perf.data of block_rq_* tracepoints (``perf record -e
block:...``, read by :mod:`profiler.formats.perfdata`, the one perf.data record reader) and a
bundle's ``block.events.bin`` (the block-io collector's columnar member,
:mod:`profiler.formats.blockevents`, written from such a perf.data). Both give the tracepoints'
own fields (time, device, sector, sectors, bytes, rwbs, issuing thread and comm); here they
become the same :data:`EVENT_DTYPE` records the text reader (``blocktrace.py``) makes, so the
pairing cannot tell them apart. `perf script` spends ~3 us of CPU per event formatting text
that would then be parsed again; this costs a fraction of a microsecond.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import numpy as np

from profiler.errors import InputError
from profiler.formats import blockevents as be
from profiler.formats import perfdata as pd
from profiler.formats.perfdata import PerfDataUnsupported
from profiler.inputs.blocktrace import (
    _KEEP_LOW,
    _OPCHARS,
    _U8,
    _U64,
    EVENT_DTYPE,
    FLAG_AHEAD,
    FLAG_FUA,
    FLAG_META,
    FLAG_PREFLUSH,
    FLAG_SYNC,
    OP_DISCARD,
    OP_FLUSH,
    OP_OTHER,
    OP_READ,
    OP_WRITE,
    CommTable,
    _eq,
    _low_run,
)

__all__ = ["MemberEvents", "PerfDataUnsupported", "iter_block_events", "iter_member_events", "read_block_events"]


def rwbs_op_flags(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rwbs strings' first 8 bytes (NUL-padded, as little-endian u64) -> op and FLAG_* bits,
    as the text reader reads ``WS``, ``FWFS``, ``RA``..."""
    w = w.astype(_U64, copy=False)
    c0 = (w & _U64(0xFF)).astype(_U8)
    c1 = ((w >> _U64(8)) & _U64(0xFF)).astype(_U8)
    rl = _low_run(_eq(w, 0))
    pre_flush = (c0 == 70) & np.isin(c1, _OPCHARS)
    opc = np.where(pre_flush, c1, c0)
    op = np.full(len(w), OP_OTHER, _U8)
    op[opc == 82] = OP_READ
    op[opc == 87] = OP_WRITE
    op[opc == 70] = OP_FLUSH
    op[(opc == 68) | (opc == 69)] = OP_DISCARD
    wv = w & _KEEP_LOW[np.clip(rl, 0, 8)]
    op_bytes = np.where(pre_flush, _U64(0xFFFF), _U64(0xFF))
    flags = (
        np.where(_eq(wv, 83) != 0, FLAG_SYNC, 0) | np.where(_eq(wv, 77) != 0, FLAG_META, 0)
        | np.where(_eq(wv, 65) != 0, FLAG_AHEAD, 0) | np.where((_eq(wv, 70) & ~op_bytes) != 0, FLAG_FUA, 0)
        | np.where(pre_flush, FLAG_PREFLUSH, 0)
    ).astype(_U8)
    return op, flags


def _events(raw: np.ndarray | dict[str, np.ndarray], comm_map: np.ndarray,
            rwbs: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Raw columns (:data:`blockevents.RAW_DTYPE` fields) -> :data:`EVENT_DTYPE`, comm ids mapped."""
    n = len(raw["t"])
    ev = np.empty(n, EVENT_DTYPE)
    ev["t"] = raw["t"].astype(np.float64) / 1e9
    for name in ("sector", "dev", "bytes", "nr", "tid", "kind"):
        ev[name] = raw[name]
    ev["comm"] = np.take(comm_map, raw["comm"], mode="clip") if len(comm_map) else 0
    if rwbs is not None:  # a table of the distinct values and each event's index: decode the table only
        op, flags = rwbs_op_flags(rwbs[0])
        ev["op"], ev["flags"] = op[rwbs[1]], flags[rwbs[1]]
    else:
        ev["op"], ev["flags"] = rwbs_op_flags(raw["rwbs"])
    return ev


def iter_block_events(path: str | Path, comms: CommTable, lost_box: list[int]) -> Iterator[np.ndarray]:
    """Block events of a perf.data in time-ordered batches (streaming; ``lost_box[0]`` counts LOST).

    A damaged file (cut off, sizes or offsets that point nowhere, records that do not parse)
    raises PerfDataUnsupported like any file this reader does not handle: the caller reads it
    through `perf script` instead, which reads a damaged file as far as it can.
    """
    if not Path(path).is_file():
        raise InputError(f"cannot read {path}: no such file")
    names: list[bytes] = [b""]
    ids: dict[bytes, int] = {b"": 0}

    def intern(raw: bytes) -> int:
        i = ids.get(raw)
        if i is None:
            i = ids[raw] = len(names)
            names.append(raw)
        return i

    def side(rec: pd.Records) -> None:
        lost_box[0] += rec.lost()

    try:
        with pd.PerfFile(path) as f:
            decode = be.decoder(f, intern)
            for batch in pd.ordered(f, decode, side):
                yield _events(batch, np.array([comms.intern(n) for n in names], np.uint16))
    except (PerfDataUnsupported, InputError):
        raise
    except (struct.error, ValueError, OverflowError, IndexError, KeyError, OSError, MemoryError, UnicodeError) as exc:
        raise PerfDataUnsupported(f"damaged perf.data ({type(exc).__name__}: {exc})") from None


def read_block_events(path: str | Path, comms: CommTable | None = None) -> tuple[np.ndarray, int]:
    """All block events of a perf.data in time order, and the number of lost events it records."""
    lost: list[int] = [0]
    parts = list(iter_block_events(path, comms if comms is not None else CommTable(), lost))
    return (np.concatenate(parts) if parts else np.zeros(0, EVENT_DTYPE)), lost[0]


class MemberEvents:
    """The blocks of a ``block.events.bin`` member, in order -> time-ordered event batches, the
    member's comm ids mapped into ``comms``."""

    def __init__(self, comms: CommTable) -> None:
        self.comms = comms
        self.mapped = 0
        self.comm_map = np.zeros(0, np.uint16)

    def __call__(self, block: be.Block) -> np.ndarray:
        if len(block.comms) > self.mapped:
            new = np.array([self.comms.intern(n) for n in block.comms[self.mapped:]], np.uint16)
            self.comm_map = np.concatenate([self.comm_map, new])
            self.mapped = len(block.comms)
        table = (block.rwbs_table, block.rwbs_idx) if block.rwbs_table is not None and block.rwbs_idx is not None else None
        return _events(block.cols, self.comm_map, table)


def iter_member_events(fh: IO[bytes], comms: CommTable, state: be.ReadState) -> Iterator[np.ndarray]:
    """The events of a ``block.events.bin`` member in time-ordered batches (damage: ``state.damage``)."""
    events = MemberEvents(comms)
    for block in be.iter_blocks(fh, state):
        yield events(block)
