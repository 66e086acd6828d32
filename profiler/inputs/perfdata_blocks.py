"""perf.data of block tracepoints, read directly without `perf script` (inputs layer).

`perf script` spends ~3 us of CPU per event formatting text that is then parsed again. For the
block tracepoints everything needed is in the samples' raw tracepoint records, whose layout
perf.data itself describes (the kernel's event format files ride along in its tracing-data
section). So a perf.data of block_rq_* events is read here: header, attributes, event names,
field offsets, then every sample record, yielding the same :data:`EVENT_DTYPE` records as the
text reader. Anything unexpected (compressed or pipe-mode files, other byte order, no raw data,
call chains) raises :class:`PerfDataUnsupported` and the caller falls back to `perf script`.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from profiler.errors import InputError
from profiler.inputs.blocktrace import (
    _KEEP_LOW,
    _OPCHARS,
    _U8,
    _U64,
    COMPLETE,
    EVENT_DTYPE,
    FLAG_AHEAD,
    FLAG_FUA,
    FLAG_META,
    FLAG_PREFLUSH,
    FLAG_SYNC,
    ISSUE,
    MERGE,
    OP_DISCARD,
    OP_FLUSH,
    OP_OTHER,
    OP_READ,
    OP_WRITE,
    REQUEUE,
    CommTable,
    _eq,
    _low_run,
)
from profiler.inputs.perfdata import MAGIC

__all__ = ["PerfDataUnsupported", "iter_block_events", "read_block_events"]

_RECORD_SAMPLE, _RECORD_LOST, _RECORD_FINISHED_ROUND, _RECORD_COMPRESSED = 9, 2, 68, 81
_S_IP, _S_TID, _S_TIME, _S_ADDR, _S_READ, _S_CALLCHAIN, _S_ID, _S_CPU, _S_PERIOD = 1, 2, 4, 8, 16, 32, 64, 128, 256
_S_STREAM_ID, _S_RAW, _S_IDENTIFIER = 512, 1024, 1 << 16
_FEAT_TRACING_DATA, _FEAT_EVENT_DESC = 1, 12
_FIELD = re.compile(rb"field:[^;]*?\b(\w+)(?:\[\d+\])?;\s*offset:(\d+);\s*size:(\d+);")


class PerfDataUnsupported(Exception):
    """This perf.data cannot be read directly (use `perf script`)."""


def _tp_formats(blob: bytes) -> dict[str, dict[str, tuple[int, int]]]:
    """block_rq_* event formats found in the tracing-data blob: name -> field -> (offset, size)."""
    out: dict[str, dict[str, tuple[int, int]]] = {}
    for m in re.finditer(rb"name: (block_rq_\w+)\nID: \d+\nformat:\n(.*?)\nprint fmt", blob, re.S):
        out[m.group(1).decode()] = {f.group(1).decode(): (int(f.group(2)), int(f.group(3))) for f in _FIELD.finditer(m.group(2))}
    return out


def read_block_events(path: str | Path, comms: CommTable | None = None) -> tuple[np.ndarray, int]:
    """All block events of a perf.data in time order, and the number of lost events it records."""
    lost: list[int] = [0]
    parts = list(iter_block_events(path, comms if comms is not None else CommTable(), lost))
    return (np.concatenate(parts) if parts else np.zeros(0, EVENT_DTYPE)), lost[0]


def iter_block_events(path: str | Path, comms: CommTable, lost_box: list[int], *, chunk: int = 4 << 20) -> Iterator[np.ndarray]:
    """Block events of a perf.data in time-ordered batches (streaming; ``lost_box[0]`` counts LOST).

    A damaged file (cut off, sizes or offsets that point nowhere, records that do not parse)
    raises PerfDataUnsupported like any file this reader does not handle: the caller reads it
    through `perf script` instead, which reads a damaged file as far as it can.
    """
    try:
        yield from _iter_block_events(path, comms, lost_box, chunk)
    except (PerfDataUnsupported, InputError):
        raise
    except (struct.error, ValueError, OverflowError, IndexError, KeyError, OSError, MemoryError, UnicodeError) as exc:
        raise PerfDataUnsupported(f"damaged perf.data ({type(exc).__name__}: {exc})") from None


def _iter_block_events(path: str | Path, comms: CommTable, lost_box: list[int], chunk: int) -> Iterator[np.ndarray]:
    """iter_block_events' reading; any exception means a damaged file.

    perf writes its per-CPU buffers in rounds ended by FINISHED_ROUND records; an event written
    after round R is never older than the newest event of round R-1 (the rule perf script's
    own ordering relies on). So once R rounds are read, everything up to the newest time of
    rounds <= R-2 is final: it is sorted and handed on, the rest waits.
    """
    try:
        fh = open(path, "rb")
        fsize = os.fstat(fh.fileno()).st_size
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None

    def section(off: int, sz: int) -> bytes:
        if off < 0 or sz < 0 or off + sz > fsize:
            raise PerfDataUnsupported("a section points past the end of the file (cut off?)")
        fh.seek(off)
        return fh.read(sz)

    with fh:
        head = fh.read(104)
        if len(head) < 104 or head[:8] != MAGIC:
            raise PerfDataUnsupported("not a perf.data file (or pipe mode)")
        size, attr_size, attrs_off, attrs_sz, data_off, data_sz = struct.unpack_from("<QQQQQQ", head, 8)
        if size != 104 or attr_size < 80:
            raise PerfDataUnsupported("unexpected perf.data header")
        flags = struct.unpack_from("<4Q", head, 72)
        bits = [b for b in range(256) if (flags[b // 64] >> (b % 64)) & 1]
        feats = section(data_off + data_sz, 16 * len(bits))
        secs = {b: struct.unpack_from("<QQ", feats, 16 * i) for i, b in enumerate(bits)}
        if _FEAT_TRACING_DATA not in secs or _FEAT_EVENT_DESC not in secs:
            raise PerfDataUnsupported("no tracing data or event names in this perf.data")
        fmts = _tp_formats(section(*secs[_FEAT_TRACING_DATA]))
        desc = section(*secs[_FEAT_EVENT_DESC])
        kind_of_id: dict[int, int] = {}
        nr, asz = struct.unpack_from("<II", desc, 0)
        p = 8
        names = {"block:block_rq_issue": ISSUE, "block:block_rq_complete": COMPLETE,
                 "block:block_rq_requeue": REQUEUE, "block:block_rq_merge": MERGE}
        sample_types = set()
        for _ in range(nr):
            attr_st = struct.unpack_from("<Q", desc, p + 24)[0]
            p += asz
            nids, slen = struct.unpack_from("<II", desc, p)
            p += 8
            name = desc[p : p + slen].split(b"\0")[0].decode("utf-8", "replace")
            p += slen
            ids = struct.unpack_from(f"<{nids}Q", desc, p)
            p += 8 * nids
            for i in ids:
                kind_of_id[i] = names.get(name, 0)
            if name in names:
                sample_types.add(attr_st)
        if len(sample_types) != 1:
            raise PerfDataUnsupported("no block events, or block events with different sample layouts")
        st = sample_types.pop()
        if not (st & _S_IDENTIFIER and st & _S_TIME and st & _S_RAW) or st & (_S_READ | _S_CALLCHAIN) or st & ~0x1FFFF & ~0x3FFFFFF:
            raise PerfDataUnsupported("samples without id, time or raw data, or with call chains")
        # fixed offsets inside a sample record (after its 8-byte header), in the ABI's order
        o = 8 + 8  # IDENTIFIER
        o += 8 if st & _S_IP else 0
        o_tid = o if st & _S_TID else -1
        o += 8 if st & _S_TID else 0
        o_time = o
        o += 8
        for bit in (_S_ADDR, _S_ID, _S_STREAM_ID, _S_CPU, _S_PERIOD):
            o += 8 if st & bit else 0
        o_raw = o + 4  # u32 size, then the tracepoint record
        need = {"dev", "sector", "nr_sector", "rwbs"}
        for evname in ("block_rq_issue", "block_rq_complete"):
            if evname not in fmts or not need <= set(fmts[evname]):
                raise PerfDataUnsupported(f"no format for {evname} in the tracing data")
        # walk the records: keep the offsets of samples and of round ends
        offsets: list[int] = []
        hdr = struct.Struct("<IHH").unpack_from
        u64 = struct.Struct("<Q").unpack_from
        pend_ev = np.zeros(0, EVENT_DTYPE)
        pend_rnd = np.zeros(0, np.int64)
        rounds = 0  # FINISHED_ROUND records seen so far
        t_safe = -np.inf
        fh.seek(data_off)
        left = data_sz
        rest = b""
        while left > 0 or rest:
            data = fh.read(min(chunk, left)) if left > 0 else b""
            left -= len(data)
            buf = rest + data
            if not data and len(buf) < 8:
                break
            p, end = 0, len(buf)
            offsets = []
            round_ends: list[int] = []
            while p + 8 <= end:
                typ, _, rsz = hdr(buf, p)
                if rsz < 8:
                    raise PerfDataUnsupported("corrupt record")
                if p + rsz > end:
                    break
                if typ == _RECORD_SAMPLE:
                    offsets.append(p)
                elif typ == _RECORD_FINISHED_ROUND:
                    round_ends.append(p)
                elif typ == _RECORD_LOST:
                    lost_box[0] += u64(buf, p + 16)[0]
                elif typ == _RECORD_COMPRESSED:
                    raise PerfDataUnsupported("compressed perf.data (perf record -z)")
                p += rsz
            rest = buf[p:]
            if offsets:
                offs = np.asarray(offsets, dtype=np.int64)
                rnd = rounds + np.searchsorted(np.asarray(round_ends, dtype=np.int64), offs)
                ev, keep = _perf_samples(buf, offs, kind_of_id, fmts, o_tid, o_time, o_raw, comms)
                pend_ev = np.concatenate([pend_ev, ev])
                pend_rnd = np.concatenate([pend_rnd, rnd[keep]])
            rounds += len(round_ends)
            old_rounds = pend_rnd <= rounds - 2
            if old_rounds.any():
                t_safe = max(t_safe, float(pend_ev["t"][old_rounds].max()))
            ready = pend_ev["t"] <= t_safe
            if ready.any():
                out = pend_ev[ready]
                yield out[np.argsort(out["t"], kind="stable")]
                pend_ev, pend_rnd = pend_ev[~ready], pend_rnd[~ready]
            if not data:
                break
    if len(pend_ev):
        yield pend_ev[np.argsort(pend_ev["t"], kind="stable")]


def _perf_samples(buf: bytes, offs: np.ndarray, kind_of_id: dict[int, int], fmts: dict[str, dict[str, tuple[int, int]]],
                  o_tid: int, o_time: int, o_raw: int, comms: CommTable) -> tuple[np.ndarray, np.ndarray]:
    """Decode the block samples among the sample records at ``offs``; also which ones they were."""
    b = np.frombuffer(buf, np.uint8)
    u = np.ndarray(shape=(len(b) - 7,), dtype="<u8", buffer=b, strides=(1,))
    ids = u[offs + 8]
    uid, inv = np.unique(ids, return_inverse=True)
    kind = np.array([kind_of_id.get(int(i), 0) for i in uid], dtype=np.uint8)[inv.ravel()]
    keep = kind > 0
    offs, kind = offs[keep], kind[keep]
    n = len(offs)
    ev = np.zeros(n, EVENT_DTYPE)
    if not n:
        return ev, keep
    ev["kind"] = kind
    ev["t"] = u[offs + o_time].astype(np.float64) / 1e9
    ev["tid"] = (u[offs + o_tid] >> _U64(32)).astype(np.int64) if o_tid >= 0 else -1
    raw = offs + o_raw
    names = {ISSUE: "block_rq_issue", COMPLETE: "block_rq_complete", REQUEUE: "block_rq_requeue", MERGE: "block_rq_merge"}
    for k, name in names.items():
        sel = np.flatnonzero(kind == k)
        if not len(sel) or name not in fmts:
            continue
        f = fmts[name]
        r = raw[sel]

        def field(fname: str, r: np.ndarray = r, f: dict[str, tuple[int, int]] = f) -> np.ndarray:
            off, size = f[fname]
            w: np.ndarray = u[r + off]
            return w & _U64((1 << (8 * size)) - 1) if size < 8 else w

        ev["dev"][sel] = field("dev").astype(np.uint32)
        ev["sector"][sel] = field("sector")
        ev["nr"][sel] = field("nr_sector").astype(np.uint32)
        if "bytes" in f:
            ev["bytes"][sel] = field("bytes").astype(np.uint32)
        # rwbs: a NUL-padded string -> op and flags
        roff = f["rwbs"][0]
        w = u[r + roff]
        c0 = (w & _U64(0xFF)).astype(np.uint8)
        c1 = ((w >> _U64(8)) & _U64(0xFF)).astype(np.uint8)
        rl = _low_run(_eq(w, 0))
        pre_flush = (c0 == 70) & np.isin(c1, _OPCHARS)
        opc = np.where(pre_flush, c1, c0)
        op = np.full(len(sel), OP_OTHER, _U8)
        op[opc == 82] = OP_READ
        op[opc == 87] = OP_WRITE
        op[opc == 70] = OP_FLUSH
        op[(opc == 68) | (opc == 69)] = OP_DISCARD
        wv = w & _KEEP_LOW[np.clip(rl, 0, 8)]
        op_bytes = np.where(pre_flush, _U64(0xFFFF), _U64(0xFF))
        ev["op"][sel] = op
        ev["flags"][sel] = (
            np.where(_eq(wv, 83) != 0, FLAG_SYNC, 0) | np.where(_eq(wv, 77) != 0, FLAG_META, 0)
            | np.where(_eq(wv, 65) != 0, FLAG_AHEAD, 0) | np.where((_eq(wv, 70) & ~op_bytes) != 0, FLAG_FUA, 0)
            | np.where(pre_flush, FLAG_PREFLUSH, 0)
        ).astype(_U8)
        if "comm" in f:
            coff = f["comm"][0]
            w0, w1 = u[r + coff], u[r + coff + 8]
            with np.errstate(over="ignore"):
                h = w0 ^ (w1 * _U64(0x9E3779B97F4A7C15))
            _, first_i, cinv = np.unique(h, return_index=True, return_inverse=True)
            cid = np.zeros(len(first_i), np.uint16)
            for ui in np.argsort(first_i):
                start = int(r[first_i[ui]] + coff)
                cid[ui] = comms.intern(bytes(buf[start : start + 16]).split(b"\0")[0])
            ev["comm"][sel] = cid[cinv.ravel()]
    return ev, keep
