"""Block IO tracepoints -> one record per completed request (analyzer layer).

Reads the text of ``block:block_rq_issue`` / ``block_rq_complete`` (and ``block_rq_requeue``,
``block_rq_merge``) in the two forms we meet, and pairs issue with completion.

Line variants (the payload after the event name is the kernel's print format either way)::

    ftrace (block.trace.gz, trace_pipe):
      "           mandb-11308   [001] .....   502.553079: block_rq_issue: 254,0 RM 4096 () 23435232 + 8 be,0,4 [mandb]"
    perf script (default fields):
      "        mariadbd 10674 [000]   529.856766:    block:block_rq_issue: 254,0 WS 4096 () 27656648 + 8 0x2,0,4 [mariadbd]"
    completion payload:   "254,0 WS () 27581272 + 24 be,0,4 [0]"          (last field: error)
    requeue payload:      "254,0 RA () 26384424 + 1424 be,0,4 [0]"
    merge payload:        "254,0 WS 12288 () 173116560 + 24 be,0,4 [kworker/u8:3]"
    flush:                issue "254,0 FF 0 () 0 + 0 ...", completion "254,0 FF () 18446744073709551615 + 0 ..."
    older kernels omit the ioprio field ("... + 8 [comm]").

Parsing is vectorised: a chunk of whole lines becomes one numpy byte array; the event name is
found through the ``block_rq_`` anchor and every field is read from fixed-size byte windows
around it. Lines the fast path cannot read (odd payloads) go through a regular expression;
lines that are no block event are skipped. Pairing is vectorised too (see :func:`pair_events`
and docs/heatmap.md for the rules) and streams: only the requests still in flight are carried
from one chunk to the next, so memory grows with completed IOs only (48 bytes each).
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from profiler.errors import InputError

# --------------------------------------------------------------------------- model

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

IO_DTYPE = np.dtype(
    [
        ("t_issue", "f8"),
        ("t_complete", "f8"),
        ("latency", "f8"),  # seconds, t_complete - t_issue (from the last issue after a requeue)
        ("sector", "u8"),
        ("dev", "u4"),
        ("bytes", "u4"),
        ("tid", "i4"),  # issuer tid
        ("comm", "u2"),  # issuer comm (index into BlockIO.comms)
        ("op", "u1"),
        ("flags", "u1"),
    ],
    align=True,
)  # 48 bytes per completed IO

ISSUE, COMPLETE, REQUEUE, MERGE = 1, 2, 3, 4
OP_READ, OP_WRITE, OP_FLUSH, OP_DISCARD, OP_OTHER = 0, 1, 2, 3, 4
OP_NAMES = ("read", "write", "flush", "discard", "other")
FLAG_SYNC, FLAG_META, FLAG_FUA, FLAG_PREFLUSH, FLAG_AHEAD = 1, 2, 4, 8, 16
FLAG_NAMES = ((FLAG_SYNC, "sync"), (FLAG_META, "meta"), (FLAG_FUA, "fua"), (FLAG_PREFLUSH, "preflush"), (FLAG_AHEAD, "readahead"))
FLUSH_SECTOR = np.uint64(0xFFFFFFFFFFFFFFFF)  # what the kernel prints for a flush's completion
_DATALESS_KEY = np.uint64((1 << 58) - 2)  # pairing key of set-aside data-less completions

# Kernel threads that issue IO on nobody's behalf (writeback, journal, swap, md/dm workers).
KERNEL_ISSUERS = re.compile(
    r"^(kworker/|jbd2/|kswapd|flush-|writeback|kcompactd|khugepaged|xfsaild|xfs-|btrfs|kblockd|"
    r"md\d*_|dmcrypt|kcryptd|loop\d|nvme|scsi_|ext4|f2fs|ksoftirqd|swapper|z?ram)"
)


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
class BlockIO:
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
        tids = frozenset(int(t) for t in target_tids)
        comms = frozenset(target_comms)
        key = self.ios["comm"].astype(np.int64) << 32 | (self.ios["tid"].astype(np.int64) & 0xFFFFFFFF)
        uniq, inv = np.unique(key, return_inverse=True)
        labels = [issuer_class(self.comms[int(k >> 32)], int(np.int32(np.uint32(k & 0xFFFFFFFF))), tids, comms) for k in uniq]
        return np.asarray(labels, dtype="U6")[inv.ravel()] if len(uniq) else np.zeros(0, "U6")


# --------------------------------------------------------------------------- reading


def open_input(path: str | Path) -> IO[bytes]:
    """Open a plain or gzip file for binary reading (by magic, not by name)."""
    p = Path(path)
    try:
        fh = open(p, "rb")
    except OSError as exc:
        raise InputError(f"cannot read {p}: {exc.strerror or exc}") from None
    magic = fh.read(2)
    fh.seek(0)
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=fh, mode="rb")  # type: ignore[return-value]
    return fh


def iter_chunks(fh: IO[bytes], size: int = 2 << 20, warnings: list[str] | None = None) -> Iterator[bytes]:
    """Yield chunks of whole lines (each ending in a newline); a truncated gzip ends early."""
    rest = b""
    while True:
        try:
            data = fh.read(size)
        except (EOFError, OSError) as exc:
            if warnings is not None:
                warnings.append(f"input is truncated or corrupted ({exc}); using what was read")
            data = b""
        if not data:
            break
        data = rest + data
        cut = data.rfind(b"\n")
        if cut < 0:
            rest = data
            continue
        rest = data[cut + 1 :]
        yield data[: cut + 1]
    if rest.strip():
        yield rest + b"\n"


_PAD = 160
_BLOCK_IOS = 1 << 20  # paired IOs per output block (48 MiB)
_U8 = np.uint8
_ANCHOR = np.frombuffer(b"block_rq_", _U8)
_POW10F = np.array([10.0**i for i in range(20)])
_NAME_LEN = {ISSUE: 5, COMPLETE: 8, REQUEUE: 7, MERGE: 5}
_LOST = re.compile(rb"\[LOST (\d+) EVENTS\]")
_SLOW = re.compile(
    rb"^\s*(?P<prefix>.*?)\s(?P<ts>\d+\.\d+):\s+(?:block:)?block_rq_(?P<ev>issue|complete|requeue|merge):\s+"
    rb"(?P<maj>\d+),(?P<min>\d+)\s+(?P<rwbs>\S*)\s+(?:(?P<bytes>\d+)\s+)?\((?P<cmd>.*?)\)\s+"
    rb"(?P<sector>\d+)\s+\+\s+(?P<nr>\d+)\s*(?P<rest>.*)$"
)
_SLOW_TID = re.compile(rb"(?:-|\s)(\d+)\s+(?:\(\s*\d+\)\s+)?\[\d+\]")


class _CommTable:
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


def _parse_chunk(buf: bytes, comms: _CommTable) -> tuple[np.ndarray, int, int]:
    """One chunk of whole lines -> (events, lost events reported, lines skipped).

    Three passes over the bytes find the newlines, the ``block_rq_`` anchors and the ``+``
    between sector and length; every field is then read at known offsets eight bytes at a time.
    """
    lost = sum(int(m.group(1)) for m in _LOST.finditer(buf)) if b"LOST" in buf else 0
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
        return empty, lost, 0
    li = np.searchsorted(nl, c)
    keep = np.ones(len(c), bool)
    keep[1:] = li[1:] != li[:-1]
    c, li = c[keep], li[keep]
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
    ok &= (nmaj >= 1) & (b[comma] == 44)
    minor, nmin = _number_fwd(u, comma + 1, 8)
    sp1 = comma + 1 + nmin
    ok &= (nmin >= 1) & (b[sp1] == 32)
    rw = u[sp1 + 1]
    rl = _low_run(~_range(rw, 65, 90) & _HI)  # rwbs: capital letters
    sp2 = sp1 + 1 + rl
    ok &= (rl >= 1) & (b[sp2] == 32)
    has_bytes = (kind == ISSUE) | (kind == MERGE)
    nbytes, nby = _number_fwd(u, sp2 + 1, 11)
    paren = np.where(has_bytes, sp2 + 2 + nby, sp2 + 1)
    ok &= np.where(has_bytes, (nby >= 1) & (b[sp2 + 1 + nby] == 32), True) & (b[paren] == 40)
    pluses = np.flatnonzero(b == 43)
    k = np.searchsorted(pluses, paren)
    plus = pluses[np.minimum(k, len(pluses) - 1)] if len(pluses) else paren
    ok &= (k < len(pluses)) & (plus < le) & (b[plus - 1] == 32) & (b[plus + 1] == 32)
    sector, nsec = _number_back(u, plus - 1, 20)
    ok &= (nsec >= 1) & (b[plus - 2 - nsec] == 32) & (b[plus - 3 - nsec] == 41)  # ") 123 + 8"
    nr, nnr = _number_fwd(u, plus + 2, 11)
    after = plus + 2 + nnr
    ok &= (nnr >= 1) & ((b[after] == 32) | (after == le))

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
            rec = _parse_slow(buf[ls[i] - _PAD : le[i] - _PAD], comms)
            if rec is None:
                skipped += 1
            else:
                ev[i] = rec
                keep_rows[i] = True
        ev = ev[keep_rows]  # line order is kept
    return ev, lost, skipped


_NAMELEN = np.zeros(5, np.int64)
for _k, _v in _NAME_LEN.items():
    _NAMELEN[_k] = _v
_OPCHARS = np.frombuffer(b"WDEFRN", _U8)


def _parse_slow(line: bytes, comms: _CommTable) -> tuple[Any, ...] | None:
    """The regular-expression path for lines the vectorised reader refused."""
    m = _SLOW.match(line)
    if not m:
        return None
    kind = {b"issue": ISSUE, b"complete": COMPLETE, b"requeue": REQUEUE, b"merge": MERGE}[m.group("ev")]
    rwbs = m.group("rwbs").decode("ascii", "replace")
    pre_flush = len(rwbs) >= 2 and rwbs[0] == "F" and rwbs[1] in "WDEFRN"
    opc = rwbs[1] if pre_flush else (rwbs[:1] or "N")
    op = {"R": OP_READ, "W": OP_WRITE, "F": OP_FLUSH, "D": OP_DISCARD, "E": OP_DISCARD}.get(opc, OP_OTHER)
    flags = (FLAG_SYNC if "S" in rwbs else 0) | (FLAG_META if "M" in rwbs else 0) | (FLAG_AHEAD if "A" in rwbs else 0)
    flags |= FLAG_PREFLUSH if pre_flush else 0
    flags |= FLAG_FUA if "F" in rwbs[1 + pre_flush :] else 0
    tm = _SLOW_TID.search(m.group("prefix") + b" ")
    tid = int(tm.group(1)) if tm else -1
    comm = 0
    rest = m.group("rest")
    if kind in (ISSUE, MERGE):
        lb, rb = rest.rfind(b"["), rest.rfind(b"]")
        if 0 <= lb < rb:
            comm = comms.intern(rest[lb + 1 : rb][:16])
    sector = int(m.group("sector")) & 0xFFFFFFFFFFFFFFFF
    return (
        float(m.group("ts")), kind, (int(m.group("maj")) << 20) | (int(m.group("min")) & 0xFFFFF), op, flags,
        int(m.group("bytes") or 0) & 0xFFFFFFFF, sector, int(m.group("nr")) & 0xFFFFFFFF, comm, tid,
    )


# --------------------------------------------------------------------------- pairing


class BlockPairer:
    """Streaming parser and pairer: feed chunks of whole lines, then :meth:`finish`.

    Only requests still in flight are carried between chunks; paired IOs are kept compactly.
    """

    def __init__(self) -> None:
        self.comms = _CommTable()
        self.comms.intern(b"")  # index 0: unknown issuer (completions carry no comm)
        self.counts = PairCounts()
        self._carry = np.zeros(0, EVENT_DTYPE)
        self._blocks: list[np.ndarray] = []  # full blocks of paired IOs
        self._block: np.ndarray | None = None  # the block being filled
        self._fill = 0
        self.t_first: float | None = None
        self.t_last: float | None = None
        self.warnings: list[str] = []

    def feed(self, chunk: bytes) -> None:
        ev, lost, skipped = _parse_chunk(chunk, self.comms)
        self.counts.lost_events += lost
        self.counts.skipped_lines += skipped
        self.feed_events(ev)

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
        carry = ev[np.sort(order[is_i & last_of_key])]  # still in flight
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
        pos = 0
        while pos < npair:
            if self._block is None or self._fill == len(self._block):
                if self._block is not None:
                    self._blocks.append(self._block)
                # Blocks are larger than glibc's largest mmap threshold, so each is its own
                # mapping, returned to the OS when freed, its untouched tail never resident.
                self._block = np.empty(_BLOCK_IOS, IO_DTYPE)
                self._fill = 0
            k = min(npair - pos, len(self._block) - self._fill)
            dst = self._block[self._fill : self._fill + k]
            i, j = ii[pos : pos + k], cc[pos : pos + k]
            ti, tc = t[i], t[j]
            dst["t_issue"] = ti
            dst["t_complete"] = tc
            dst["latency"] = tc - ti
            for name in ("sector", "dev", "bytes", "tid", "comm", "op", "flags"):
                dst[name] = ev[name][i]
            self._fill += k
            pos += k
        return carry

    def finish(self) -> BlockIO:
        c = self.counts
        c.in_flight_at_end = len(self._carry)
        c.unpaired_issues = c.in_flight_at_end + c.superseded
        if self._block is None:
            ios = np.zeros(0, IO_DTYPE)
        elif not self._blocks:
            ios = self._block[: self._fill]
        else:
            ios = np.empty(len(self._blocks) * _BLOCK_IOS + self._fill, IO_DTYPE)
            pos = 0
            while self._blocks:  # copy block by block, unmapping each as we go
                part = self._blocks.pop(0)
                ios[pos : pos + len(part)] = part
                pos += len(part)
            ios[pos:] = self._block[: self._fill]
        self._block = None
        if len(ios) > 1 and (np.diff(ios["t_complete"]) < 0).any():
            ios = ios[np.argsort(ios["t_complete"], kind="stable")]
        warnings = list(self.warnings)
        if c.lost_events:
            warnings.append(f"the trace reports {c.lost_events} lost events: some IOs are missing or unpaired")
        if c.skipped_lines:
            warnings.append(f"{c.skipped_lines} block event lines could not be read and were skipped")
        return BlockIO(ios=ios, counts=c, comms=list(self.comms.names), t_first=self.t_first, t_last=self.t_last, warnings=warnings)


def parse_block_chunks(chunks: Iterable[bytes]) -> BlockIO:
    """Parse and pair block events from chunks of whole text lines (ftrace or perf script)."""
    p = BlockPairer()
    for chunk in chunks:
        p.feed(chunk)
    return p.finish()


def read_block_trace(path: str | Path) -> BlockIO:
    """Parse and pair a block trace file (ftrace or perf script text, plain or gzip), streaming."""
    p = BlockPairer()
    with open_input(path) as fh:
        for chunk in iter_chunks(fh, warnings=p.warnings):
            p.feed(chunk)
    return p.finish()


def parse_block_text(text: str | bytes) -> BlockIO:
    data = text.encode() if isinstance(text, str) else text
    if data and not data.endswith(b"\n"):
        data += b"\n"
    return parse_block_chunks([data] if data else [])


def read_events(path: str | Path) -> np.ndarray:
    """All block events of a file as one :data:`EVENT_DTYPE` array (for tests and benchmarks)."""
    comms = _CommTable()
    parts = []
    with open_input(path) as fh:
        for chunk in iter_chunks(fh):
            parts.append(_parse_chunk(chunk, comms)[0])
    return np.concatenate(parts) if parts else np.zeros(0, EVENT_DTYPE)


def pair_events(events: np.ndarray, *, slice_size: int = 1 << 16, inplace: bool = False) -> BlockIO:
    """Pair an events array (in cache-sized slices, exactly as the streaming reader does).

    ``inplace`` lets the pairing mark flushes and data-less completions in ``events`` itself
    (as the streaming reader does with its own chunks) instead of copying slices that hold them."""
    p = BlockPairer()
    for i in range(0, len(events), slice_size):
        p.feed_events(events[i : i + slice_size], owned=inplace)
    return p.finish()


# --------------------------------------------------------------------------- perf.data, read directly
#
# `perf script` spends ~3 us of CPU per event formatting text that we then parse again. For the
# block tracepoints everything we need is in the samples' raw tracepoint records, whose layout
# perf.data itself describes (the kernel's event format files ride along in its tracing-data
# section). So a perf.data of block_rq_* events is read here: header, attributes, event names,
# field offsets, then every sample record; anything unexpected (compressed or pipe-mode files,
# other byte order, no raw data) raises PerfDataUnsupported and the caller falls back to
# `perf script`.

_PERF_MAGIC = b"PERFILE2"
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


def read_perf_data_events(path: str | Path, comms: _CommTable | None = None) -> tuple[np.ndarray, int]:
    """All block events of a perf.data in time order, and the number of lost events it records."""
    lost: list[int] = [0]
    parts = list(iter_perf_data(path, comms if comms is not None else _CommTable(), lost))
    return (np.concatenate(parts) if parts else np.zeros(0, EVENT_DTYPE)), lost[0]


def iter_perf_data(path: str | Path, comms: _CommTable, lost_box: list[int], *, chunk: int = 4 << 20) -> Iterator[np.ndarray]:
    """Block events of a perf.data in time-ordered batches (streaming; ``lost_box[0]`` counts LOST).

    perf writes its per-CPU buffers in rounds ended by FINISHED_ROUND records; an event written
    after round R is never older than the newest event of round R-1 (the rule perf script's
    own ordering relies on). So once R rounds are read, everything up to the newest time of
    rounds <= R-2 is final: it is sorted and handed on, the rest waits.
    """
    import struct

    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    with fh:
        head = fh.read(104)
        if len(head) < 104 or head[:8] != _PERF_MAGIC:
            raise PerfDataUnsupported("not a perf.data file (or pipe mode)")
        size, attr_size, attrs_off, attrs_sz, data_off, data_sz = struct.unpack_from("<QQQQQQ", head, 8)
        if size != 104 or attr_size < 80:
            raise PerfDataUnsupported("unexpected perf.data header")
        flags = struct.unpack_from("<4Q", head, 72)
        bits = [b for b in range(256) if (flags[b // 64] >> (b % 64)) & 1]
        fh.seek(data_off + data_sz)
        secs = {b: struct.unpack_from("<QQ", fh.read(16)) for b in bits}
        if _FEAT_TRACING_DATA not in secs or _FEAT_EVENT_DESC not in secs:
            raise PerfDataUnsupported("no tracing data or event names in this perf.data")
        off, sz = secs[_FEAT_TRACING_DATA]
        fh.seek(off)
        fmts = _tp_formats(fh.read(sz))
        off, sz = secs[_FEAT_EVENT_DESC]
        fh.seek(off)
        desc = fh.read(sz)
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
        for ev in ("block_rq_issue", "block_rq_complete"):
            if ev not in fmts or not need <= set(fmts[ev]):
                raise PerfDataUnsupported(f"no format for {ev} in the tracing data")
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
                  o_tid: int, o_time: int, o_raw: int, comms: _CommTable) -> tuple[np.ndarray, np.ndarray]:
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
            w = u[r + off]
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


def read_perf_data(path: str | Path) -> BlockIO:
    """Pair the block events of a perf.data read directly (see :func:`read_perf_data_events`)."""
    p = BlockPairer()
    lost = [0]
    for batch in iter_perf_data(path, p.comms, lost):
        for i in range(0, len(batch), 1 << 16):
            p.feed_events(batch[i : i + (1 << 16)])
    p.counts.lost_events += lost[0]
    return p.finish()
