"""perf.data, the binary file perf record writes, read without `perf script` (bundle layer).

Both sides read it: the collectors at the end of a capture (syscall pairs, off-CPU intervals,
keeping only the targets' samples before symbolizing) and the inputs layer (perf.data given
to a verb). It lives here, below both, as the format of the ``*.perf.data`` members a bundle
may hold. What it reads (tools/perf/Documentation/perf.data-file-format.txt, and
include/uapi/linux/perf_event.h for the records):

- the header: the attribute section (one ``perf_event_attr`` per event, with its sample ids),
  the data section, and the feature sections after it (event names, tracepoint formats);
- records, walked by their 8-byte headers in file order; a sample's fields sit at offsets its
  event's ``sample_type`` fixes, up to the first variable-size field (the call chain), so whole
  batches of samples decode as numpy column reads;
- tracepoint payloads (``PERF_SAMPLE_RAW``) by the field offsets of the event's format file,
  which perf stores in the tracing-data feature section.

Anything it does not handle (pipe-mode or compressed files, another byte order, a sample type
it cannot lay out) raises :class:`PerfDataUnsupported`: the caller falls back to `perf script`.
Memory: records are read in chunks (``CHUNK``); a caller that needs time order uses
:func:`ordered`, which holds at most the events of two of perf's flush rounds.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

try:
    import numpy as np
except ImportError:  # the cluster agent runs collectors under a bare python3: they fall back to perf script
    np = None  # type: ignore[assignment]

MAGIC = b"PERFILE2"
HEADER_SIZE = 104
CHUNK = 8 << 20

# record types (perf_event.h, and perf's own user records)
RECORD_MMAP, RECORD_LOST, RECORD_COMM, RECORD_EXIT, RECORD_FORK, RECORD_SAMPLE, RECORD_MMAP2 = 1, 2, 3, 4, 7, 9, 10
RECORD_KSYMBOL, RECORD_BPF_EVENT = 17, 18
RECORD_FINISHED_ROUND, RECORD_COMPRESSED = 68, 81

# sample_type bits
S_IP, S_TID, S_TIME, S_ADDR, S_READ, S_CALLCHAIN, S_ID, S_CPU, S_PERIOD = 1, 2, 4, 8, 16, 32, 64, 128, 256
S_STREAM_ID, S_RAW, S_BRANCH_STACK, S_REGS_USER, S_STACK_USER = 512, 1024, 2048, 4096, 8192
S_WEIGHT, S_DATA_SRC, S_IDENTIFIER = 16384, 32768, 1 << 16

FEAT_TRACING_DATA, FEAT_EVENT_DESC = 1, 12
_SAMPLE_ID_ALL = 1 << 18  # perf_event_attr flag bit: non-sample records carry the sample id fields

_FIELD = re.compile(rb"field:([^;]*?)\b(\w+)(?:\[\d+\])?;\s*offset:(\d+);\s*size:(\d+);\s*signed:(\d+);")
_FLAG = re.compile(rb"\{\s*(0x[0-9a-fA-F]+|\d+)\s*,\s*\"([^\"]*)\"\s*\}")

if TYPE_CHECKING or np is not None:
    U64 = np.uint64


class PerfDataUnsupported(Exception):
    """This perf.data cannot be read directly (read it through `perf script`)."""


@dataclass(frozen=True)
class TpField:
    offset: int
    size: int
    signed: bool


@dataclass
class Event:
    """One event of the file: its attribute fields that matter here, its name and sample ids."""

    index: int
    type: int
    config: int
    sample_type: int
    sample_id_all: bool
    ids: list[int] = field(default_factory=list)
    name: str = ""


@dataclass(frozen=True)
class Layout:
    """Byte offsets of a sample's fields from the start of its record (-1: not recorded).
    Fields after the call chain (``raw``) sit ``8 * nr`` further when ``callchain`` >= 0."""

    id: int
    tid: int
    time: int
    cpu: int
    period: int
    callchain: int
    raw: int  # the u32 size of the raw data (the payload starts 4 bytes later)


def sample_layout(sample_type: int) -> Layout:
    st = sample_type
    o = 8
    o_id = -1
    if st & S_IDENTIFIER:
        o_id = o
        o += 8
    o += 8 if st & S_IP else 0
    o_tid = o if st & S_TID else -1
    o += 8 if st & S_TID else 0
    o_time = o if st & S_TIME else -1
    o += 8 if st & S_TIME else 0
    o += 8 if st & S_ADDR else 0
    if st & S_ID:
        o_id = o_id if o_id >= 0 else o
        o += 8
    o += 8 if st & S_STREAM_ID else 0
    o_cpu = o if st & S_CPU else -1
    o += 8 if st & S_CPU else 0
    o_period = o if st & S_PERIOD else -1
    o += 8 if st & S_PERIOD else 0
    if st & S_READ:
        return Layout(o_id, o_tid, o_time, o_cpu, o_period, -2, -2)  # read_format layout not handled
    o_cc = o if st & S_CALLCHAIN else -1
    if st & S_CALLCHAIN:
        o += 8  # nr, then 8 * nr
    o_raw = o if st & S_RAW else -1
    return Layout(o_id, o_tid, o_time, o_cpu, o_period, o_cc, o_raw)


def _id_trailer(sample_type: int) -> tuple[int, int]:
    """Offsets from a non-sample record's END of its sample_id's tid and time (-1: absent)."""
    st = sample_type
    parts = [(S_TID, "tid"), (S_TIME, "time"), (S_ID, "id"), (S_STREAM_ID, "sid"), (S_CPU, "cpu"),
             (S_IDENTIFIER, "ident")]
    present = [name for bit, name in parts if st & bit]
    size = 8 * len(present)
    o_tid = -(size - 8 * present.index("tid")) if "tid" in present else -1
    o_time = -(size - 8 * present.index("time")) if "time" in present else -1
    return o_tid, o_time


class PerfFile:
    """One perf.data: header, events, feature sections; records on demand."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        if np is None:
            raise PerfDataUnsupported("numpy is not installed")
        self.path = Path(path)
        try:
            self.fh = open(self.path, "rb")  # noqa: SIM115 - closed by close()/with
        except OSError as exc:
            raise PerfDataUnsupported(f"cannot read {self.path}: {exc.strerror or exc}") from None
        try:
            self._read_header()
        except BaseException:
            self.fh.close()
            raise

    def __enter__(self) -> PerfFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.fh.close()

    # -- header
    def _read_header(self) -> None:
        head = self.fh.read(HEADER_SIZE)
        if len(head) < HEADER_SIZE or head[:8] != MAGIC:
            raise PerfDataUnsupported("not a perf.data file (or a pipe-mode one)")
        size, attr_size, attrs_off, attrs_sz, data_off, data_sz = struct.unpack_from("<QQQQQQ", head, 8)
        if size != HEADER_SIZE or attr_size < 80 + 16:
            raise PerfDataUnsupported("unexpected perf.data header")
        self.attr_size = attr_size
        self.data_off, self.data_size = data_off, data_sz
        if data_sz == 0:
            raise PerfDataUnsupported("perf.data was not finished (perf record did not stop cleanly)")
        flags = struct.unpack_from("<4Q", head, 72)
        self.feature_bits = [b for b in range(256) if (flags[b // 64] >> (b % 64)) & 1]
        self.fh.seek(data_off + data_sz)
        table = self.fh.read(16 * len(self.feature_bits))
        self.features: dict[int, tuple[int, int]] = {
            b: struct.unpack_from("<QQ", table, 16 * i) for i, b in enumerate(self.feature_bits)
            if 16 * i + 16 <= len(table)}
        # attributes and their ids
        self.fh.seek(attrs_off)
        blob = self.fh.read(attrs_sz)
        self.events: list[Event] = []
        esize = attr_size - 16
        for i in range(attrs_sz // attr_size):
            a = blob[i * attr_size : (i + 1) * attr_size]
            typ, _asz, config, _period, st, _rf, flg = struct.unpack_from("<IIQQQQQ", a, 0)
            ids_off, ids_sz = struct.unpack_from("<QQ", a, esize)
            self.fh.seek(ids_off)
            raw_ids = self.fh.read(ids_sz)
            ids = list(struct.unpack_from(f"<{ids_sz // 8}Q", raw_ids)) if ids_sz else []
            self.events.append(Event(i, typ, config, st, bool(flg & _SAMPLE_ID_ALL), ids))
        if not self.events:
            raise PerfDataUnsupported("perf.data lists no events")
        names = self._event_names()
        for ev in self.events:
            ev.name = names.get(ev.index, "")
        self.event_of_id: dict[int, Event] = {i: ev for ev in self.events for i in ev.ids}
        self._formats: dict[str, bytes] | None = None

    def _feature(self, bit: int) -> bytes | None:
        sec = self.features.get(bit)
        if sec is None:
            return None
        self.fh.seek(sec[0])
        return self.fh.read(sec[1])

    def _event_names(self) -> dict[int, str]:
        desc = self._feature(FEAT_EVENT_DESC)
        out: dict[int, str] = {}
        if not desc or len(desc) < 8:
            return out
        nr, asz = struct.unpack_from("<II", desc, 0)
        p = 8
        for i in range(nr):
            if p + asz + 8 > len(desc):
                break
            p += asz
            nids, slen = struct.unpack_from("<II", desc, p)
            p += 8
            out[i] = desc[p : p + slen].split(b"\0")[0].decode("utf-8", "replace")
            p += slen + 8 * nids
        return out

    def event(self, name: str) -> Event | None:
        return next((ev for ev in self.events if ev.name == name), None)

    # -- tracepoint formats
    def _tracing_formats(self) -> dict[str, bytes]:
        if self._formats is None:
            blob = self._feature(FEAT_TRACING_DATA) or b""
            self._formats = {m.group(1).decode(): m.group(2) for m in
                             re.finditer(rb"name: (\w+)\nID: \d+\nformat:\n(.*?\nprint fmt: [^\n]*)", blob, re.S)}
        return self._formats

    def tp_fields(self, name: str) -> dict[str, TpField]:
        """Field offsets of a tracepoint's raw record (``sched_switch``, ``sys_enter``...)."""
        fmt = self._tracing_formats().get(name.split(":")[-1])
        if fmt is None:
            raise PerfDataUnsupported(f"no format for {name} in the tracing data")
        return tp_format_fields(fmt)

    def tp_flags(self, name: str) -> list[tuple[int, str]]:
        """The ``__print_flags`` table of a tracepoint's print format (sched_switch's prev_state letters)."""
        fmt = self._tracing_formats().get(name.split(":")[-1], b"")
        pf = fmt.find(b"print fmt:")
        return [(int(v, 0), s.decode()) for v, s in _FLAG.findall(fmt[pf:])] if pf >= 0 else []

    # -- records
    def chunks(self, chunk: int = CHUNK) -> Iterator[Records]:
        """The data section in whole records: one :class:`Records` per chunk read."""
        self.fh.seek(self.data_off)
        left = self.data_size
        pos = self.data_off  # file offset of the next byte read
        rest = b""
        while left > 0:
            data = self.fh.read(min(chunk, left))
            if not data:
                break  # cut short: what was read
            left -= len(data)
            buf = rest + data
            base = pos - len(rest)
            pos += len(data)
            offs, end = walk(buf)
            rest = buf[end:]
            if len(offs):
                yield Records(buf, offs, base)
            if len(rest) > chunk:  # one record larger than a chunk: corrupt
                raise PerfDataUnsupported("corrupt record sizes in perf.data")

    def again(self, plan: list[tuple[int, int, np.ndarray]]) -> Iterator[Records]:
        """The chunks of an earlier pass (``(rec.base, len(rec.buf), rec.offs)`` each), read
        again without walking the records a second time."""
        for base, size, offs in plan:
            self.fh.seek(base)
            yield Records(self.fh.read(size), offs, base)


def tp_format_fields(fmt: bytes) -> dict[str, TpField]:
    """A tracepoint's format text (tracefs ``events/SYS/NAME/format``) -> field offsets and sizes."""
    return {m.group(2).decode(): TpField(int(m.group(3)), int(m.group(4)), m.group(5) == b"1")
            for m in _FIELD.finditer(fmt)}


def walk(buf: bytes) -> tuple[np.ndarray, int]:
    """Offsets of the whole records in ``buf`` and where the first incomplete one starts.

    Record boundaries are a chain (each header gives the next one's offset), so this is a
    Python loop, kept to two steps a record; the sizes are checked afterwards, all at once (a
    size of 0 ends the loop, any other bad size is found there, at the first record that has
    one, as a loop that checked each would have)."""
    n = len(buf)
    mv = memoryview(buf)[: n - n % 2].cast("H")
    offs: list[int] = []
    add = offs.append
    p = 0
    lim = n - 8
    far = 1 << 62
    while p <= lim:
        add(p)
        p += mv[(p >> 1) + 3] or far
    if not offs:
        return np.zeros(0, np.int64), p
    o = np.asarray(offs, dtype=np.int64)
    b = np.frombuffer(buf, np.uint8)
    sz = b[o + 6].astype(np.int64) | (b[o + 7].astype(np.int64) << 8)
    bad = (sz < 8) | ((sz & 7) != 0)
    if bad.any():
        raise PerfDataUnsupported(f"corrupt record at data offset {int(o[int(np.argmax(bad))])}")
    if int(o[-1] + sz[-1]) > n:  # the last one does not fit: it starts the next chunk
        return o[:-1], int(o[-1])
    return o, p


class Records:
    """The whole records of one chunk of the data section."""

    def __init__(self, buf: bytes, offs: np.ndarray, base: int = 0) -> None:
        self.buf = buf
        self.offs = offs
        self.base = base  # file offset of buf[0]
        b = np.frombuffer(buf, np.uint8)
        # unaligned little-endian reads at any byte offset
        self.u64 = np.ndarray(shape=(max(0, len(b) - 7),), dtype="<u8", buffer=b, strides=(1,))
        self.u32 = np.ndarray(shape=(max(0, len(b) - 3),), dtype="<u4", buffer=b, strides=(1,))
        self.types = self.u32[offs] if len(offs) else np.zeros(0, np.uint32)

    def of_type(self, typ: int) -> np.ndarray:
        out: np.ndarray = self.offs[self.types == typ]
        return out

    def lost(self) -> int:
        o = self.of_type(RECORD_LOST)
        return int(self.u64[o + 16].sum()) if len(o) else 0

    def comms(self) -> list[tuple[int, int, bytes]]:
        """(pid, tid, comm) of the COMM records, in file order."""
        out = []
        for o in self.of_type(RECORD_COMM).tolist():
            pid, tid = struct.unpack_from("<II", self.buf, o + 8)
            out.append((pid, tid, self.buf[o + 16 : o + 32].split(b"\0")[0]))
        return out

    def forks(self) -> list[tuple[int, int]]:
        """(pid, tid) of the FORK records (a new thread or process), in file order."""
        out = []
        for o in self.of_type(RECORD_FORK).tolist():
            pid, _ppid, tid, _ptid = struct.unpack_from("<IIII", self.buf, o + 8)
            out.append((pid, tid))
        return out


@dataclass
class Samples:
    """Decoded columns of the samples of one event in a chunk (record offsets kept for the rest)."""

    offs: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    time: np.ndarray  # ns, the event's clock (CLOCK_MONOTONIC with perf record -k CLOCK_MONOTONIC)
    cpu: np.ndarray
    raw: np.ndarray  # offset of each raw payload (-1: none)


def samples(rec: Records, f: PerfFile, events: list[Event]) -> dict[int, Samples]:
    """The sample records of the given events in a chunk, decoded (event index -> columns)."""
    offs = rec.of_type(RECORD_SAMPLE)
    out: dict[int, Samples] = {}
    if not len(offs) or not events:
        return out
    types = {ev.sample_type for ev in f.events}
    wanted = {ev.index for ev in events}
    if len(f.events) == 1:
        idx = np.zeros(len(offs), np.int64)
    else:
        # with PERF_SAMPLE_IDENTIFIER on every event the id is the first field whatever the
        # layout (perf sets it when events differ); otherwise one layout must fit all
        if all(t & S_IDENTIFIER for t in types):
            o_id = 8
        elif len(types) == 1:
            o_id = sample_layout(next(iter(types))).id
        else:
            raise PerfDataUnsupported("events with different sample layouts and no sample identifier")
        if o_id < 0:
            raise PerfDataUnsupported("several events but no sample id")
        ids = rec.u64[offs + o_id]
        uid, inv = np.unique(ids, return_inverse=True)
        table = np.array([f.event_of_id[int(i)].index if int(i) in f.event_of_id else -1 for i in uid], np.int64)
        idx = table[inv.ravel()]
    for ev in events:
        sel = offs[idx == ev.index] if len(f.events) > 1 else offs
        if ev.index not in wanted:
            continue
        lay = sample_layout(ev.sample_type)
        if lay.callchain == -2 or lay.time < 0 or lay.tid < 0:
            raise PerfDataUnsupported("samples without time or thread, or with read values")
        w = rec.u64[sel + lay.tid]
        raw = np.full(len(sel), -1, np.int64)
        if lay.raw >= 0:
            raw = sel + lay.raw
            if lay.callchain >= 0:
                raw = raw + 8 * rec.u64[sel + lay.callchain].astype(np.int64)
            raw = raw + 4
        out[ev.index] = Samples(
            offs=sel,
            pid=(w & U64(0xFFFFFFFF)).astype(np.int64),
            tid=(w >> U64(32)).astype(np.int64),
            time=rec.u64[sel + lay.time].astype(np.int64),
            cpu=((rec.u64[sel + lay.cpu] & U64(0xFFFFFFFF)).astype(np.int64) if lay.cpu >= 0
                 else np.full(len(sel), -1, np.int64)),
            raw=raw,
        )
    return out


def tp_column(rec: Records, raw: np.ndarray, fld: TpField) -> np.ndarray:
    """One integer field of tracepoint payloads starting at ``raw``, sign-extended when signed."""
    w: np.ndarray = rec.u64[raw + fld.offset]
    if fld.size >= 8:
        return w.view(np.int64) if fld.signed else w
    bits = 8 * fld.size
    v: np.ndarray = (w & U64((1 << bits) - 1)).astype(np.int64)
    if fld.signed:
        v = np.where(v >= (1 << (bits - 1)), v - (1 << bits), v)
    return v


def tp_strings(rec: Records, raw: np.ndarray, fld: TpField, intern: Callable[[bytes], int]) -> np.ndarray:
    """A char[N] field of tracepoint payloads as ids from ``intern`` (each distinct string decoded once)."""
    out = np.zeros(len(raw), np.int64)
    if not len(raw):
        return out
    lo = rec.u64[raw + fld.offset]
    hi = rec.u64[raw + fld.offset + 8] if fld.size > 8 else np.zeros(len(raw), U64)
    with np.errstate(over="ignore"):
        h = lo ^ (hi * U64(0x9E3779B97F4A7C15))
    _, first, inv = np.unique(h, return_index=True, return_inverse=True)
    ids = np.array([intern(bytes(rec.buf[int(raw[i]) + fld.offset : int(raw[i]) + fld.offset + fld.size])
                           .split(b"\0")[0]) for i in first], np.int64)
    out[:] = ids[inv.ravel()]
    return out


def state_letters(flags: list[tuple[int, str]]) -> Callable[[int], str]:
    """sched_switch's prev_state as perf script prints it: flag letters joined by '|', 'R' for
    none, '+' when the preemption bit (the one above the highest flag) is set."""
    if not flags:
        raise PerfDataUnsupported("sched_switch's print format has no prev_state flags")
    top = max(v for v, _ in flags) << 1
    mask = top - 1

    def letters(state: int) -> str:
        s = state & mask
        text = "|".join(name for v, name in flags if s & v) if s else "R"
        return text + ("+" if state & top else "")

    return letters


def ordered(f: PerfFile, decode: Callable[[Records], np.ndarray], on_chunk: Callable[[Records], None] | None = None,
            chunk: int = CHUNK) -> Iterator[np.ndarray]:
    """Time-ordered batches of what ``decode`` makes of each chunk's records: a structured array
    with an ``off`` (record offset) and a ``t`` (time) field, in any order (see :func:`in_order`).
    ``on_chunk`` sees every chunk's records first (side-band records: names, lost counts)."""

    def items() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for rec in f.chunks(chunk):
            if on_chunk is not None:
                on_chunk(rec)
            yield decode(rec), rec.of_type(RECORD_FINISHED_ROUND)

    return in_order(items())


ROUND_END = np.iinfo(np.int64).max if np is not None else 0  # an offset after every record: the chunk ends a round


def in_order(items: Iterable[tuple[np.ndarray, np.ndarray]]) -> Iterator[np.ndarray]:
    """Time-ordered batches from (events, offsets of the FINISHED_ROUND records) per chunk.

    perf writes its per-CPU buffers in rounds ended by FINISHED_ROUND records, and an event
    written after round R is never older than the newest event of round R-1 (the rule perf
    script's own ordering relies on). So once R rounds are read, everything up to the newest
    time of rounds <= R-2 is final: it is sorted and handed on, the rest waits. Memory: two
    rounds of events at most (perf flushes a round at least every buffer's worth). Chunks may
    come from successive files of one perf record (``--switch-output``: a switch ends a round,
    given as a round end at :data:`ROUND_END`).
    """
    pend: np.ndarray | None = None
    pend_rnd = np.zeros(0, np.int64)
    rounds = 0
    t_safe: int | float = -np.inf
    for ev, round_ends in items:
        if len(ev):
            rnd = rounds + np.searchsorted(round_ends, ev["off"])
            pend = ev if pend is None else np.concatenate([pend, ev])
            pend_rnd = np.concatenate([pend_rnd, rnd])
        rounds += len(round_ends)
        if pend is None or not len(pend):
            continue
        old = pend_rnd <= rounds - 2
        if old.any():
            t_safe = max(t_safe, int(pend["t"][old].max()))
        ready = pend["t"] <= t_safe
        if ready.any():
            out = pend[ready]
            yield out[np.argsort(out["t"], kind="stable")]
            pend, pend_rnd = pend[~ready], pend_rnd[~ready]
    if pend is not None and len(pend):
        yield pend[np.argsort(pend["t"], kind="stable")]


Keep = Callable[["np.ndarray", "np.ndarray", "np.ndarray"], "np.ndarray"]  # (pid, tid, time ns) -> which to keep


def _kept(rec: Records, f: PerfFile, keep: Keep) -> tuple[np.ndarray, np.ndarray]:
    """Offsets of the sample records ``keep`` takes, and of those it leaves."""
    yes, no = [], []
    for c in samples(rec, f, f.events).values():
        ok = keep(c.pid, c.tid, c.time)
        yes.append(c.offs[ok])
        no.append(c.offs[~ok])
    def cat(parts: list[np.ndarray]) -> np.ndarray:
        return np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.int64)

    return cat(yes), cat(no)


def count_samples(src: str | os.PathLike[str], keep: Keep) -> tuple[int, int]:
    """How many samples of a perf.data ``keep`` takes, and how many call-chain frames they hold."""
    n = frames = 0
    with PerfFile(src) as f:
        for rec in f.chunks():
            yes = _kept(rec, f, keep)[0]
            n += len(yes)
            frames += chain_frames(rec, f, yes)
    return n, frames


def chain_frames(rec: Records, f: PerfFile, offs: np.ndarray) -> int:
    """Call-chain frames of the given samples (0 without call chains)."""
    if not len(offs):
        return 0
    lays = {sample_layout(ev.sample_type).callchain for ev in f.events}
    if len(lays) != 1 or next(iter(lays)) < 0:
        o_cc = sample_layout(f.events[0].sample_type).callchain
        if o_cc < 0:
            return 0
    else:
        o_cc = next(iter(lays))
    return int(rec.u64[offs + o_cc].astype(np.int64).sum())


def thinning(fraction: float, seed: int = 0x5EED) -> Keep:
    """A deterministic uniform sample of about ``fraction`` of the samples: each is kept by a hash
    of its time and thread (never every n-th: a ping-pong of two threads would lose one)."""
    if fraction >= 1.0:
        return lambda pid, tid, t: np.ones(len(t), bool)
    cut = U64(int(fraction * 2.0**64) if fraction > 0 else 0)

    def keep(pid: np.ndarray, tid: np.ndarray, t: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            x = t.astype(U64) ^ (tid.astype(U64) * U64(0x9E3779B97F4A7C15)) ^ U64(seed)
            x = (x ^ (x >> U64(30))) * U64(0xBF58476D1CE4E5B9)
            x = (x ^ (x >> U64(27))) * U64(0x94D049BB133111EB)
            x = x ^ (x >> U64(31))
        return x < cut

    return keep


# records that change how a sample resolves: a process's maps, a thread's name
_RESOLUTION = (RECORD_MMAP, RECORD_MMAP2, RECORD_COMM, RECORD_FORK)
_UNSAFE_TO_MERGE = S_READ | S_BRANCH_STACK | S_REGS_USER | S_STACK_USER  # (dwarf unwinding copies the stack)
_DEPTH_MULT: np.ndarray | None = None


def _depth_mult(n: int) -> np.ndarray:
    """Per-depth odd 64-bit multipliers for hashing call chains (fixed: hashes are reproducible)."""
    global _DEPTH_MULT
    if _DEPTH_MULT is None or len(_DEPTH_MULT) < n:
        size = max(n, 256)
        rng = np.random.Generator(np.random.PCG64(0x51AC4))
        _DEPTH_MULT = rng.integers(0, 2**63, size=size, dtype=np.uint64) * U64(2) + U64(1)
    return _DEPTH_MULT


def _mix(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        x = (x ^ (x >> U64(30))) * U64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> U64(27))) * U64(0x94D049BB133111EB)
        out: np.ndarray = x ^ (x >> U64(31))
        return out


def _chain_hash(rec: Records, offs: np.ndarray, o_cc: int) -> np.ndarray:
    """A 64-bit hash of each sample's call chain (its length and every address), vectorised."""
    nr = rec.u64[offs + o_cc].astype(np.int64)
    if (nr > 65536).any():
        raise PerfDataUnsupported("implausible call chain length")
    total = int(nr.sum())
    h = _mix(nr.astype(U64) + U64(0x632BE59BD9B4E019))
    if total == 0:
        return h
    starts = np.cumsum(nr) - nr
    depth = np.arange(total, dtype=np.int64) - np.repeat(starts, nr)
    addr = np.repeat(offs + o_cc + 8, nr) + 8 * depth
    with np.errstate(over="ignore"):
        vals = rec.u64[addr] * _depth_mult(int(nr.max()))[depth]
    has = nr > 0
    sums = np.zeros(len(offs), U64)
    sums[has] = np.add.reduceat(vals, starts[has])
    with np.errstate(over="ignore"):
        return _mix(h ^ sums)


@dataclass
class Merged:
    samples: int = 0  # samples read (kept by the filter)
    written: int = 0  # samples written (one per distinct stack)


def merge_samples(src: str | os.PathLike[str], dst: str | os.PathLike[str], *, by_tid: bool,
                  count_samples: bool = False, keep: Keep | None = None) -> Merged:
    """Copy a perf.data with the samples of identical stacks merged into one, whose period is
    their total (``count_samples``: how many they were): `perf script` then symbolizes each
    distinct stack once, and folding its text by period gives the same folded stacks as the
    whole file (checked byte for byte on a MariaDB profile).

    Samples merge when their event, process, thread name (``by_tid``: and thread), and call
    chain (else instruction pointer) are the same, and no map of that process (nor a kernel
    symbol) appeared in between (each starts a new generation of its addresses). The merged
    sample keeps the first one's place and time. Call chains are compared by a 64-bit hash
    (a collision among a million distinct stacks: ~3e-8). Files whose samples carry anything
    else perf script resolves per sample (a dwarf stack copy, branch stacks, read values) or
    no period raise PerfDataUnsupported. ``keep`` filters samples first (pid, tid, time)."""
    out = Merged()
    with PerfFile(src) as f:
        for ev in f.events:
            if ev.sample_type & _UNSAFE_TO_MERGE:
                raise PerfDataUnsupported("samples carry per-sample stack data (dwarf, LBR or read values)")
            lay = sample_layout(ev.sample_type)
            if lay.period < 0 or lay.tid < 0:
                raise PerfDataUnsupported("samples without a period or a thread id")
        if f.events and not all(ev.sample_type & S_CALLCHAIN or ev.sample_type & S_IP for ev in f.events):
            raise PerfDataUnsupported("samples without call chain or instruction pointer")
        gen: dict[int, int] = {}  # pid -> generation
        comm_of: dict[int, int] = {}  # tid -> comm id
        comm_ids: dict[bytes, int] = {}
        first: dict[int, list[int]] = {}  # key hash -> [chunk, offset, event index, weight]
        glob = 0  # generation of the kernel's own symbols (BPF programs come and go)
        plan: list[tuple[int, int, np.ndarray]] = []
        for ci, rec in enumerate(f.chunks()):
            plan.append((rec.base, len(rec.buf), rec.offs))
            sides = rec.offs[np.isin(rec.types, np.asarray((*_RESOLUTION, RECORD_KSYMBOL), np.uint32))]
            cols = samples(rec, f, f.events)
            all_s = rec.of_type(RECORD_SAMPLE)
            # runs of resolution records with no sample between them are applied together; the
            # samples between two runs share one state of gen/comm_of
            before = np.searchsorted(all_s, sides)
            cut = np.flatnonzero(np.diff(before, prepend=-1) != 0)  # the first record of each run
            runs = np.split(sides, cut[1:]) if len(sides) else []
            edges = [int(r[0]) for r in runs] + [int(rec.offs[-1]) + 1]
            lo = -1
            for n, b in enumerate(edges):
                for idx, c in cols.items():
                    a, z = np.searchsorted(c.offs, [lo, b])
                    if z <= a:
                        continue
                    seg = np.zeros(len(c.offs), bool)
                    seg[a:z] = True
                    if keep is not None:
                        seg[a:z] = keep(c.pid[a:z], c.tid[a:z], c.time[a:z])
                    if seg.any():
                        self_merge(rec, f.events[idx], c, seg, gen, comm_of, glob, by_tid, count_samples, ci, first, out)
                if n < len(runs):
                    for off in runs[n].tolist():
                        glob = _side_record(rec, off, gen, comm_of, comm_ids, glob)
                lo = b
        keep_at: dict[int, dict[int, tuple[int, int]]] = {}
        for ci, off, idx, w in first.values():
            keep_at.setdefault(ci, {})[off] = (idx, w)
        out.written = len(first)
        _write_merged(f, dst, keep_at, plan)
    return out


def self_merge(rec: Records, ev: Event, c: Samples, seg: np.ndarray, gen: dict[int, int], comm_of: dict[int, int],
               glob: int, by_tid: bool, count_samples: bool, ci: int, first: dict[int, list[int]], out: Merged) -> None:
    """Fold one run of samples of one event into ``first`` (key hash -> representative and weight)."""
    lay = sample_layout(ev.sample_type)
    offs, pid, tid = c.offs[seg], c.pid[seg], c.tid[seg]
    out.samples += len(offs)
    if lay.callchain >= 0:
        h = _chain_hash(rec, offs, lay.callchain)
    else:
        h = _mix(rec.u64[offs + 8 + (8 if ev.sample_type & S_IDENTIFIER else 0)])  # the ip
    upid, pinv = np.unique(pid, return_inverse=True)
    g = np.array([gen.get(int(p), 0) for p in upid.tolist()], np.int64)[pinv.ravel()]
    utid, tinv = np.unique(tid, return_inverse=True)
    who = np.array([comm_of.get(int(t), -1 - int(t)) for t in utid.tolist()], np.int64)[tinv.ravel()]
    if by_tid:
        who = who * 4194305 + tid  # the thread and its name (a reused thread id may carry another)
    with np.errstate(over="ignore"):
        k = _mix(h ^ _mix(pid.astype(U64) * U64(0x9E3779B97F4A7C15) + g.astype(U64) * U64(0xC2B2AE3D27D4EB4F)
                          + who.astype(U64) * U64(0x165667B19E3779F9) + U64(ev.index + 1) * U64(0xD6E8FEB86659FD93)
                          + U64(glob)))
    w = np.ones(len(offs), np.int64) if count_samples else rec.u64[offs + lay.period].astype(np.int64)
    uk, idx_first, inv = np.unique(k, return_index=True, return_inverse=True)
    sums = np.bincount(inv.ravel(), weights=w.astype(np.float64)).astype(np.int64)
    for key, i, s in zip(uk.tolist(), idx_first.tolist(), sums.tolist(), strict=True):
        e = first.get(key)
        if e is None:
            first[key] = [ci, int(offs[i]), ev.index, int(s)]
        else:
            e[3] += int(s)


def _side_record(rec: Records, off: int, gen: dict[int, int], comm_of: dict[int, int], comm_ids: dict[bytes, int],
                 glob: int) -> int:
    """Apply one resolution record: a new generation of its process, names and threads noted."""
    typ = int(rec.u32[off])
    if typ == RECORD_KSYMBOL:
        return glob + 1
    pid, tid = struct.unpack_from("<II", rec.buf, off + 8)
    if typ == RECORD_FORK:  # a new thread or process takes its parent's name
        pid, _ppid, tid, ptid = struct.unpack_from("<IIII", rec.buf, off + 8)
        if ptid in comm_of:
            comm_of[tid] = comm_of[ptid]
    elif typ == RECORD_COMM:
        name = rec.buf[off + 16 : off + 32].split(b"\0")[0]
        comm_of[tid] = comm_ids.setdefault(name, len(comm_ids))
    elif typ in (RECORD_MMAP, RECORD_MMAP2):  # its addresses may resolve elsewhere from here on
        gen[pid] = gen.get(pid, 0) + 1
    return glob


def _write_merged(f: PerfFile, dst: str | os.PathLike[str], keep_at: dict[int, dict[int, tuple[int, int]]],
                  plan: list[tuple[int, int, np.ndarray]]) -> None:
    lays = {ev.index: sample_layout(ev.sample_type) for ev in f.events}
    f.fh.seek(0)
    head = bytearray(f.fh.read(f.data_off))
    with open(dst, "wb") as out:
        out.write(head)
        size = 0
        for ci, rec in enumerate(f.again(plan)):
            here = keep_at.get(ci, {})
            take = rec.types != RECORD_SAMPLE
            buf = bytearray(rec.buf)
            if here:
                pos = np.searchsorted(rec.offs, np.fromiter(here.keys(), np.int64, len(here)))
                take[pos] = True
                for off, (idx, w) in here.items():
                    struct.pack_into("<Q", buf, off + lays[idx].period, w)
            ends = rec.offs + (rec.u32[rec.offs + 4] >> np.uint32(16)).astype(np.int64)
            t = np.concatenate([[0], take.astype(np.int8), [0]])
            starts = np.flatnonzero(np.diff(t) == 1)
            stops = np.flatnonzero(np.diff(t) == -1) - 1
            mv = memoryview(buf)
            for a, b in zip(starts.tolist(), stops.tolist(), strict=True):
                piece = mv[int(rec.offs[a]) : int(ends[b])]
                out.write(piece)
                size += len(piece)
        _write_features(f, out, head, size)


def _write_features(f: PerfFile, out: BinaryIO, head: bytearray, size: int) -> None:
    """The feature sections after a rewritten data section of ``size`` bytes, and the header."""
    contents = []
    for bit in f.feature_bits:
        off, sz = f.features.get(bit, (0, 0))
        f.fh.seek(off)
        contents.append(f.fh.read(sz))
    pos = f.data_off + size + 16 * len(contents)
    table = bytearray()
    for c in contents:
        table += struct.pack("<QQ", pos, len(c))
        pos += len(c)
    out.write(table)
    for c in contents:
        out.write(c)
    struct.pack_into("<Q", head, 48, size)  # data.size
    out.seek(0)
    out.write(head[:HEADER_SIZE])


def filter_samples(src: str | os.PathLike[str], dst: str | os.PathLike[str], keep: Keep,
                   drop_types: tuple[int, ...] = ()) -> tuple[int, int]:
    """Copy a perf.data, keeping every non-sample record (but ``drop_types``) and the samples
    ``keep`` takes. perf script resolves the address of every sample it reads before its
    ``--pid`` filter drops it, loading (and demangling) the symbols of every binary any process
    ran on a system-wide capture: without the others' samples it loads the targets' only
    (measured: 1.6 s of CPU down to 0.1 s on a shared host). Returns (kept, dropped) samples."""
    kept = dropped = 0
    with PerfFile(src) as f:
        f.fh.seek(0)
        head = bytearray(f.fh.read(f.data_off))
        with open(dst, "wb") as out:
            out.write(head)
            size = 0
            for rec in f.chunks():
                yes, no = _kept(rec, f, keep)
                kept += len(yes)
                dropped += len(no)
                take = np.ones(len(rec.offs), bool)
                take[np.searchsorted(rec.offs, no)] = False
                if drop_types:
                    take &= ~np.isin(rec.types, np.asarray(drop_types, np.uint32))
                ends = rec.offs + (rec.u32[rec.offs + 4] >> np.uint32(16)).astype(np.int64)
                mv = memoryview(rec.buf)
                # contiguous runs of kept records are written in one piece
                t = np.concatenate([[0], take.astype(np.int8), [0]])
                starts = np.flatnonzero(np.diff(t) == 1)
                stops = np.flatnonzero(np.diff(t) == -1) - 1
                for a, b in zip(starts.tolist(), stops.tolist(), strict=True):
                    piece = mv[int(rec.offs[a]) : int(ends[b])]
                    out.write(piece)
                    size += len(piece)
            _write_features(f, out, head, size)
    return kept, dropped
