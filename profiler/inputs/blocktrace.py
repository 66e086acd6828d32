"""Block IO trace text: ``block:block_rq_*`` tracepoint lines -> arrays of block events (inputs layer).

Reads ``block_rq_issue`` / ``block_rq_complete`` (and ``block_rq_requeue``, ``block_rq_merge``)
in the two text forms we meet; sniffed by ``block_rq_`` anywhere in the head. The records are
numpy arrays of :data:`EVENT_DTYPE`, in the order of the lines; pairing them into IOs is an
analyzer (``analyzers/io/pairing.py``).

Line variants (the payload after the event name is the kernel's print format either way)::

    ftrace (block.trace.gz, trace_pipe):
      "           mandb-11308   [001] .....   502.553079: block_rq_issue: 254,0 RM 4096 () 23435232 + 8 be,0,4 [mandb]"
    perf script (default fields):
      "        mariadbd 10674 [000]   529.856766:    block:block_rq_issue: 254,0 WS 4096 () 27656648 + 8 0x2,0,4 [mariadbd]"
    perf script -F comm,tid,time,event,trace (no [cpu] column: the tid stands right before the time)
    completion payload:   "254,0 WS () 27581272 + 24 be,0,4 [0]"          (last field: error)
    requeue payload:      "254,0 RA () 26384424 + 1424 be,0,4 [0]"
    merge payload:        "254,0 WS 12288 () 173116560 + 24 be,0,4 [kworker/u8:3]"
    flush:                issue "254,0 FF 0 () 0 + 0 ...", completion "254,0 FF () 18446744073709551615 + 0 ..."
    older kernels omit the ioprio field ("... + 8 [comm]").
    ftrace's "[LOST n EVENTS]" lines are counted.

Parsing is vectorised: a chunk of whole lines becomes one numpy byte array; the event name is
found through the ``block_rq_`` anchor and every field is read from fixed-size byte windows
around it. Lines the fast path cannot read (odd payloads) go through a regular expression
(:func:`parse_line`); lines that are no block event are skipped, block event lines neither
path reads are counted as skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from profiler.inputs.source import Format
from profiler.inputs.streams import iter_chunks, open_path

__all__ = [
    "FORMAT", "EVENT_DTYPE", "ISSUE", "COMPLETE", "REQUEUE", "MERGE", "OP_READ", "OP_WRITE", "OP_FLUSH",
    "OP_DISCARD", "OP_OTHER", "OP_NAMES", "FLAG_SYNC", "FLAG_META", "FLAG_FUA", "FLAG_PREFLUSH", "FLAG_AHEAD",
    "FLAG_NAMES", "CommTable", "OtherLines", "dev_name", "op_name", "parse_chunk", "parse_line", "iter_events", "read_events",
]


def sniff(head: bytes) -> bool:
    return b"block_rq_" in head


FORMAT = Format("block-trace", "a block trace (no block_rq_ events)", sniff)

# --------------------------------------------------------------------------- the record

EVENT_DTYPE = np.dtype(
    [
        ("t", "f8"),  # CLOCK_MONOTONIC seconds (as printed)
        ("sector", "u8"),
        ("dev", "u4"),  # major << 20 | minor (the kernel's dev_t)
        ("bytes", "u4"),  # issue/merge only
        ("nr", "u4"),  # sectors
        ("tid", "i4"),  # the task that hit the tracepoint, -1 when the line does not say
        ("comm", "u2"),  # index into the parser's comm table (issuer), issue/merge only
        ("kind", "u1"),  # ISSUE, COMPLETE, REQUEUE, MERGE
        ("op", "u1"),  # OP_*
        ("flags", "u1"),  # FLAG_* bits
    ],
    align=True,
)

ISSUE, COMPLETE, REQUEUE, MERGE = 1, 2, 3, 4
OP_READ, OP_WRITE, OP_FLUSH, OP_DISCARD, OP_OTHER = 0, 1, 2, 3, 4
OP_NAMES = ("read", "write", "flush", "discard", "other")
FLAG_SYNC, FLAG_META, FLAG_FUA, FLAG_PREFLUSH, FLAG_AHEAD = 1, 2, 4, 8, 16
FLAG_NAMES = ((FLAG_SYNC, "sync"), (FLAG_META, "meta"), (FLAG_FUA, "fua"), (FLAG_PREFLUSH, "preflush"), (FLAG_AHEAD, "readahead"))


def dev_name(dev: int) -> str:
    """'254:0' for a dev_t as the tracepoints encode it."""
    return f"{dev >> 20}:{dev & 0xFFFFF}"


def op_name(op: int, flags: int = 0, *, with_flags: bool = False) -> str:
    name = OP_NAMES[op] if 0 <= op < len(OP_NAMES) else "other"
    if with_flags:
        extra = [n for bit, n in FLAG_NAMES if flags & bit]
        if extra:
            name += "+" + "+".join(extra)
    return name



class CommTable:
    """Task names (comm) interned as small integers, in order of first appearance."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.by_key: dict[bytes, int] = {}

    def intern(self, raw: bytes) -> int:
        idx = self.by_key.get(raw)
        if idx is None:
            idx = len(self.names)
            if idx >= 0xFFFF:
                idx = 0xFFFF  # an absurd number of distinct comms: fold the rest into one
            else:
                self.names.append(raw.decode("utf-8", "replace"))
            self.by_key[raw] = idx
        return idx



# --------------------------------------------------------------------------- reading text


def iter_events(stream: IO[bytes], warnings: list[str] | None = None, size: int = 2 << 20,
                comms: CommTable | None = None) -> Iterator[tuple[np.ndarray, int, int]]:
    """(events, lost events reported, lines skipped) per chunk of a decompressed text stream."""
    table = comms if comms is not None else CommTable()
    for chunk in iter_chunks(stream, size, warnings):
        yield parse_chunk(chunk, table)


def read_events(path: str | Path) -> np.ndarray:
    """All block events of a file as one :data:`EVENT_DTYPE` array (for tests and benchmarks)."""
    parts = []
    with open_path(path) as fh:
        for ev, _lost, _skipped in iter_events(fh):
            parts.append(ev)
    return np.concatenate(parts) if parts else np.zeros(0, EVENT_DTYPE)


_PAD = 160
_U8 = np.uint8
_ANCHOR = np.frombuffer(b"block_rq_", _U8)
_POW10F = np.array([10.0**i for i in range(20)])
_NAME_LEN = {ISSUE: 5, COMPLETE: 8, REQUEUE: 7, MERGE: 5}
_LOST = re.compile(rb"\[LOST (\d{1,18}) EVENTS\]")
_SLOW = re.compile(
    rb"^\s*(?P<prefix>.*?)\s(?P<ts>\d+\.\d+):\s+(?:block:)?block_rq_(?P<ev>issue|complete|requeue|merge):\s+"
    rb"(?P<maj>\d+),(?P<min>\d+)\s+(?P<rwbs>\S*)\s+(?:(?P<bytes>\d+)\s+)?\((?P<cmd>.*?)\)\s+"
    rb"(?P<sector>\d+)\s+\+\s+(?P<nr>\d+)\s*(?P<rest>.*)$"
)
_SLOW_TID = re.compile(rb"(?:-|\s)(\d+)\s+(?:\(\s*\d+\)\s+)?\[\d+\]")


# --- SWAR helpers: eight bytes at any offset read as one little-endian uint64, so that per-line
# work is a handful of whole-array integer operations (no short per-row reductions).
_U64 = np.uint64
_ONES = _U64(0x0101010101010101)
_HI = _U64(0x8080808080808080)
_LO7 = _U64(0x7F7F7F7F7F7F7F7F)
_ZEROS = _U64(0x3030303030303030)  # "00000000"
# _KEEP_TOP[n]: mask of the n most significant bytes (the last n bytes in memory)
_KEEP_TOP = np.array([0] + [((1 << (8 * n)) - 1) << (8 * (8 - n)) for n in range(1, 9)], dtype=np.uint64)
# _KEEP_LOW[n]: mask of the n least significant bytes (the first n bytes in memory)
_KEEP_LOW = np.array([(1 << (8 * n)) - 1 for n in range(0, 9)], dtype=np.uint64)


def _words(b: np.ndarray) -> np.ndarray:
    """u[i] = the 8 bytes b[i:i+8] as a little-endian uint64 (an overlapping view, no copy)."""
    return np.ndarray(shape=(len(b) - 7,), dtype="<u8", buffer=b, strides=(1,))


def _eq(x: np.ndarray, byte: int) -> np.ndarray:
    """High bit of each byte set where the byte equals ``byte``."""
    v = x ^ _U64(byte * 0x0101010101010101)
    return ~(((v & _LO7) + _LO7) | v) & _HI


def _range(x: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """High bit of each byte set where lo <= byte <= hi (ASCII bytes)."""
    a = x & _LO7
    ge = (a + _U64((0x80 - lo) * 0x0101010101010101)) & _HI
    le = (_U64((0x80 + hi) * 0x0101010101010101) - a) & _HI
    out: np.ndarray = ge & le & ~x & _HI
    return out


def _top_run(stop: np.ndarray) -> np.ndarray:
    """Bytes from the most significant down before the first flagged one (0..8)."""
    p = np.floor(np.log2(np.maximum(stop, _U64(1)).astype(np.float64))).astype(np.int64)
    return np.where(stop == 0, 8, 7 - p // 8)


def _low_run(stop: np.ndarray) -> np.ndarray:
    """Bytes from the least significant up before the first flagged one (0..8)."""
    with np.errstate(over="ignore"):
        low = stop & (~stop + _U64(1))
    p = np.floor(np.log2(np.maximum(low, _U64(1)).astype(np.float64))).astype(np.int64)
    return np.where(stop == 0, 8, p // 8)


def _run_back(u: np.ndarray, end: np.ndarray, stop_fn: Any, maxw: int) -> np.ndarray:
    """Length of the run of bytes right before ``end`` that ``stop_fn`` does not flag (<= maxw)."""
    n = _top_run(stop_fn(u[end - 8]))
    k = 8
    while k < maxw:
        more = _top_run(stop_fn(u[end - 8 - k]))
        n = np.where(n == k, k + more, n)
        k += 8
    out: np.ndarray = np.minimum(n, maxw)
    return out


def _run_fwd(u: np.ndarray, start: np.ndarray, stop_fn: Any, maxw: int) -> np.ndarray:
    n = _low_run(stop_fn(u[start]))
    k = 8
    while k < maxw:
        more = _low_run(stop_fn(u[start + k]))
        n = np.where(n == k, k + more, n)
        k += 8
    out: np.ndarray = np.minimum(n, maxw)
    return out


def _nondigit(x: np.ndarray) -> np.ndarray:
    return ~_range(x, 48, 57) & _HI


def _nonspace(x: np.ndarray) -> np.ndarray:
    return ~_eq(x, 32) & _HI


def _parse8(x: np.ndarray) -> np.ndarray:
    """Eight ASCII digits (first byte in memory most significant) -> their value."""
    with np.errstate(over="ignore"):
        v = x - _ZEROS
        v = ((v * _U64(10)) + (v >> _U64(8))) & _U64(0x00FF00FF00FF00FF)
        v = ((v * _U64(100)) + (v >> _U64(16))) & _U64(0x0000FFFF0000FFFF)
        v = ((v * _U64(10000)) + (v >> _U64(32))) & _U64(0xFFFFFFFF)
    return v


def _digits_back(u: np.ndarray, end: np.ndarray, n: np.ndarray, maxw: int) -> np.ndarray:
    """The value of the ``n`` digits right before ``end`` (already known to be digits)."""
    val = np.zeros(len(end), np.uint64)
    scale = _U64(1)
    k = 0
    while k < maxw:
        m = np.clip(n - k, 0, 8)
        x = u[end - 8 - k]
        keep = _KEEP_TOP[m]
        part = _parse8((x & keep) | (_ZEROS & ~keep))
        with np.errstate(over="ignore"):
            val += part * scale
            scale = scale * _U64(100_000_000)
        k += 8
    return val


def _number_back(u: np.ndarray, end: np.ndarray, maxw: int) -> tuple[np.ndarray, np.ndarray]:
    """The number ending right before ``end``: (value, digits)."""
    n = _run_back(u, end, _nondigit, maxw)
    return _digits_back(u, end, n, maxw), n


def _number_fwd(u: np.ndarray, start: np.ndarray, maxw: int) -> tuple[np.ndarray, np.ndarray]:
    """The number starting at ``start``: (value, digits)."""
    n = _run_fwd(u, start, _nondigit, maxw)
    return _digits_back(u, start + n, n, maxw), n


_BLOCK_RQ = int.from_bytes(b"block_rq", "little")


@dataclass
class OtherLines:
    """Lines that are neither a block_rq_ event, a comment, a blank line nor ftrace's LOST notice
    (in a block.trace.gz member, where every line should be one of those, they are damage)."""

    lines: int = 0


def _other_lines(b: np.ndarray, nl: np.ndarray, anchored: int, lost_lines: int) -> int:
    starts = np.empty(len(nl), np.int64)
    starts[0] = _PAD
    starts[1:] = nl[:-1] + 1
    blank = int(np.count_nonzero(starts == nl))
    comment = int(np.count_nonzero(b[starts] == 35))  # '#'
    return max(len(nl) - anchored - blank - comment - lost_lines, 0)


def parse_chunk(buf: bytes, comms: CommTable, other: OtherLines | None = None) -> tuple[np.ndarray, int, int]:
    """One chunk of whole lines -> (events, lost events reported, lines skipped); ``other`` counts
    the lines that are no block event at all.

    Three passes over the bytes find the newlines, the ``block_rq_`` anchors and the ``+``
    between sector and length; every field is then read at known offsets eight bytes at a time.
    """
    lost_found = list(_LOST.finditer(buf)) if b"LOST" in buf else []
    lost = sum(int(m.group(1)) for m in lost_found)
    n = len(buf)
    b = np.zeros(n + 2 * _PAD, dtype=_U8)
    b[_PAD : _PAD + n] = np.frombuffer(buf, _U8)
    empty = np.zeros(0, EVENT_DTYPE)
    nl = np.flatnonzero(b == 10)
    if not len(nl):
        return empty, lost, 0
    u = _words(b)
    # --- anchor "block_rq_" (first per line)
    us = np.flatnonzero(b == 95)
    us = us[(us >= _PAD + 5) & (us < _PAD + n)]
    c = us - 5
    c = c[(u[c] == _U64(_BLOCK_RQ)) & (b[c + 8] == 95)]
    if not len(c):
        if other is not None:
            other.lines += _other_lines(b, nl, 0, len(lost_found))
        return empty, lost, 0
    li = np.searchsorted(nl, c)
    keep = np.ones(len(c), bool)
    keep[1:] = li[1:] != li[:-1]
    c, li = c[keep], li[keep]
    if other is not None:
        other.lines += _other_lines(b, nl, len(c), len(lost_found))
    # --- event kind
    e1, e2, e3 = b[c + 9], b[c + 10], b[c + 11]
    kind = np.zeros(len(c), _U8)
    kind[(e1 == 105) & (e2 == 115)] = ISSUE  # "is"
    kind[(e1 == 99) & (e2 == 111)] = COMPLETE  # "co"
    kind[(e1 == 114) & (e2 == 101) & (e3 == 113)] = REQUEUE  # "req"
    kind[(e1 == 109) & (e2 == 101)] = MERGE  # "me"
    sel = kind > 0
    c, li, kind = c[sel], li[sel], kind[sel]
    L = len(c)
    if not L:
        return empty, lost, 0
    le = nl[li]  # the '\n' ending the line
    le = le - (b[le - 1] == 13)  # CRLF
    ls = np.where(li > 0, nl[np.maximum(li - 1, 0)] + 1, _PAD)
    colon = c + 9 + _NAMELEN[kind]
    ps = colon + 2  # payload start
    ok = (b[colon] == 58) & (b[colon + 1] == 32)

    # --- timestamp: "502.553079: block_rq_" or "529.856766:    block:block_rq_"
    name0 = c - np.where(b[c - 1] == 58, 6, 0)
    tpos = name0 - 1 - _run_back(u, name0, _nonspace, 24)  # the ':' after the timestamp
    ok &= (b[tpos] == 58) & (tpos > ls)
    frac, nfrac = _number_back(u, tpos, 9)
    dot = tpos - nfrac - 1
    ok &= (nfrac >= 1) & (b[dot] == 46)
    ip, nint = _number_back(u, dot, 12)
    ok &= (nint >= 1) & (nint < 12)
    t = ip.astype(np.float64) + frac.astype(np.float64) / _POW10F[nfrac]
    # --- tid: digits before " [cpu]" ("comm-1234   [001] .....   " or "comm  1234 [000]   ")
    p = dot - nint
    p = p - _run_back(u, p, _nonspace, 16)  # spaces before the timestamp
    flags_field = b[p - 1] != 93
    p = np.where(flags_field, p - _run_back(u, p, lambda x: _eq(x, 32), 16), p)  # ftrace irq flags
    p = np.where(flags_field, p - _run_back(u, p, _nonspace, 16), p)
    has = b[p - 1] == 93
    ncpu = _run_back(u, p - 1, _nondigit, 8)
    lb = p - 2 - ncpu
    has &= (ncpu >= 1) & (b[lb] == 91) & (lb > ls)
    tend = lb - _run_back(u, lb, _nonspace, 16)
    tidv, ntid = _number_back(u, tend, 8)
    tid = np.where(has & (ntid >= 1) & (tend - ntid > ls), tidv.astype(np.int64), -1)
    # perf script -F comm,tid,time,...: no [cpu] column, the tid stands right before the time
    p0 = dot - nint
    p0 = p0 - _run_back(u, p0, _nonspace, 16)
    tid_alt, nalt = _number_back(u, p0, 8)
    before_alt = b[p0 - nalt - 1]
    alt_ok = ~has & (nalt >= 1) & (p0 - nalt > ls) & ((before_alt == 32) | (before_alt == 45))
    tid = np.where(alt_ok, tid_alt.astype(np.int64), tid)

    # --- payload: "254,0 RM 4096 () 23435232 + 8 be,0,4 [mandb]"
    major, nmaj = _number_fwd(u, ps, 8)
    comma = ps + nmaj
    ok &= (nmaj >= 1) & (b[comma] == 44) & (major <= _U64(_MAJOR_MAX))
    minor, nmin = _number_fwd(u, comma + 1, 8)
    sp1 = comma + 1 + nmin
    ok &= (nmin >= 1) & (b[sp1] == 32) & (minor <= _U64(_MINOR_MAX))
    rw = u[sp1 + 1]
    rl = _low_run(~_range(rw, 65, 90) & _HI)  # rwbs: capital letters
    sp2 = sp1 + 1 + rl
    ok &= (rl >= 1) & (b[sp2] == 32)
    has_bytes = (kind == ISSUE) | (kind == MERGE)
    nbytes, nby = _number_fwd(u, sp2 + 1, 11)
    paren = np.where(has_bytes, sp2 + 2 + nby, sp2 + 1)
    ok &= np.where(has_bytes, (nby >= 1) & (nby <= 10) & (nbytes <= _U64(_U32_MAX)) & (b[sp2 + 1 + nby] == 32), True)
    ok &= b[paren] == 40
    pluses = np.flatnonzero(b == 43)
    k = np.searchsorted(pluses, paren)
    plus = pluses[np.minimum(k, len(pluses) - 1)] if len(pluses) else paren
    ok &= (k < len(pluses)) & (plus < le) & (b[plus - 1] == 32) & (b[plus + 1] == 32)
    sector, nsec = _number_back(u, plus - 1, 20)
    ok &= (nsec >= 1) & (b[plus - 2 - nsec] == 32) & (b[plus - 3 - nsec] == 41)  # ") 123 + 8"
    # 20 digits may exceed 2^64 (read wrapped): only a flush completion's 2^64-1 is taken here
    ok &= (nsec < 20) | (sector == _U64(_U64_MAX))
    nr, nnr = _number_fwd(u, plus + 2, 11)
    after = plus + 2 + nnr
    ok &= (nnr >= 1) & (nnr <= 10) & (nr <= _U64(_U32_MAX)) & ((b[after] == 32) | (after == le))

    # --- rwbs -> op and flags
    rwv = rw & _KEEP_LOW[np.clip(rl, 0, 8)]
    c0 = b[sp1 + 1]
    c1 = np.where(rl >= 2, b[sp1 + 2], 0)
    pre_flush = (c0 == 70) & np.isin(c1, _OPCHARS)
    opc = np.where(pre_flush, c1, c0)
    op = np.full(L, OP_OTHER, _U8)
    op[opc == 82] = OP_READ
    op[opc == 87] = OP_WRITE
    op[opc == 70] = OP_FLUSH
    op[(opc == 68) | (opc == 69)] = OP_DISCARD
    op_bytes = np.where(pre_flush, _U64(0xFFFF), _U64(0xFF))
    flags = (
        np.where(_eq(rwv, 83) != 0, FLAG_SYNC, 0)
        | np.where(_eq(rwv, 77) != 0, FLAG_META, 0)
        | np.where(_eq(rwv, 65) != 0, FLAG_AHEAD, 0)
        | np.where((_eq(rwv, 70) & ~op_bytes) != 0, FLAG_FUA, 0)
        | np.where(pre_flush, FLAG_PREFLUSH, 0)
    ).astype(_U8)

    # --- issuer comm: "[comm]" at the end of issue/merge lines
    comm = np.zeros(L, np.uint16)
    hb = np.flatnonzero(has_bytes & ok & (b[le - 1] == 93))
    if len(hb):
        close = le[hb] - 1
        clen = _run_back(u, close, lambda x: _eq(x, 91), 16)
        start = close - clen
        fo = (b[start - 1] == 91) & (clen <= 15) & (start - 1 >= ls[hb])
        clen = np.where(fo, clen, 0)
        w0 = u[start] & _KEEP_LOW[np.clip(clen, 0, 8)]
        w1 = u[start + 8] & _KEEP_LOW[np.clip(clen - 8, 0, 8)]
        with np.errstate(over="ignore"):
            h = w0 ^ (w1 * _U64(0x9E3779B97F4A7C15))
        _, first_i, inv = np.unique(h, return_index=True, return_inverse=True)
        ids = np.zeros(len(first_i), np.uint16)
        for u_i in np.argsort(first_i):  # intern in order of first appearance: ids do not depend on chunking
            i = first_i[u_i]
            ids[u_i] = comms.intern(buf[start[i] - _PAD : start[i] - _PAD + clen[i]])
        comm[hb] = ids[inv.ravel()]

    ev = np.zeros(L, EVENT_DTYPE)
    ev["t"] = t
    ev["kind"] = kind
    ev["dev"] = (major.astype(np.uint32) << 20) | (minor.astype(np.uint32) & 0xFFFFF)
    ev["op"] = op
    ev["flags"] = flags
    ev["bytes"] = np.where(has_bytes, nbytes, 0).astype(np.uint32)
    ev["sector"] = sector
    ev["nr"] = nr.astype(np.uint32)
    ev["comm"] = comm
    ev["tid"] = tid
    skipped = 0
    if not ok.all():
        keep_rows = ok.copy()
        for i in np.flatnonzero(~ok):
            rec = parse_line(buf[ls[i] - _PAD : le[i] - _PAD], comms)
            if rec is None:
                skipped += 1
            else:
                ev[i] = rec
                keep_rows[i] = True
        ev = ev[keep_rows]  # line order is kept
    return ev, lost, skipped


_U32_MAX = 0xFFFFFFFF
_U64_MAX = 0xFFFFFFFFFFFFFFFF
_MAJOR_MAX = 0xFFF  # dev_t: 12 bits of major, 20 of minor
_MINOR_MAX = 0xFFFFF
_NAMELEN = np.zeros(5, np.int64)
for _k, _v in _NAME_LEN.items():
    _NAMELEN[_k] = _v
_OPCHARS = np.frombuffer(b"WDEFRN", _U8)


def parse_line(line: bytes, comms: CommTable) -> tuple[Any, ...] | None:
    """The regular-expression path for lines the vectorised reader refused."""
    m = _SLOW.match(line)
    if not m or any(len(m.group(g) or b"") > 20 for g in ("ts", "maj", "min", "bytes", "sector", "nr")):
        return None  # no field of a block event has that many digits: a damaged line
    kind = {b"issue": ISSUE, b"complete": COMPLETE, b"requeue": REQUEUE, b"merge": MERGE}[m.group("ev")]
    rwbs = m.group("rwbs").decode("ascii", "replace")
    pre_flush = len(rwbs) >= 2 and rwbs[0] == "F" and rwbs[1] in "WDEFRN"
    opc = rwbs[1] if pre_flush else (rwbs[:1] or "N")
    op = {"R": OP_READ, "W": OP_WRITE, "F": OP_FLUSH, "D": OP_DISCARD, "E": OP_DISCARD}.get(opc, OP_OTHER)
    flags = (FLAG_SYNC if "S" in rwbs else 0) | (FLAG_META if "M" in rwbs else 0) | (FLAG_AHEAD if "A" in rwbs else 0)
    flags |= FLAG_PREFLUSH if pre_flush else 0
    flags |= FLAG_FUA if "F" in rwbs[1 + pre_flush :] else 0
    tm = _SLOW_TID.search(m.group("prefix") + b" ")
    tid = int(tm.group(1)) if tm and len(tm.group(1)) <= 10 else -1
    comm = 0
    rest = m.group("rest")
    if kind in (ISSUE, MERGE):
        lb, rb = rest.rfind(b"["), rest.rfind(b"]")
        if 0 <= lb < rb:
            comm = comms.intern(rest[lb + 1 : rb][:16])
    sector, nbytes, nr = int(m.group("sector")), int(m.group("bytes") or 0), int(m.group("nr"))
    major, minor = int(m.group("maj")), int(m.group("min"))
    if sector > _U64_MAX or nbytes > _U32_MAX or nr > _U32_MAX or major > _MAJOR_MAX or minor > _MINOR_MAX:
        return None  # no block device has such numbers: a damaged line
    if not -(1 << 31) <= tid < (1 << 31):
        tid = -1
    # in EVENT_DTYPE's field order: t, sector, dev, bytes, nr, tid, comm, kind, op, flags
    return (float(m.group("ts")), sector, (major << 20) | minor, nbytes, nr, tid, comm, kind, op, flags)
