"""perf.data, the binary file perf record writes, read without `perf script` (formats layer).

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

Writing smaller copies (only some samples; identical stacks merged) is perfdata_reduce.py's.
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
from typing import TYPE_CHECKING

from profiler.formats.tracepoints import TpField, tp_format_fields, tp_format_flags

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
_EXCLUDE_KERNEL = 1 << 5


if TYPE_CHECKING or np is not None:
    U64 = np.uint64


class PerfDataUnsupported(Exception):
    """This perf.data cannot be read directly (read it through `perf script`)."""


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
    exclude_kernel: bool = False  # sampled in user mode only: no kernel frame to name


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
            self.events.append(Event(i, typ, config, st, bool(flg & _SAMPLE_ID_ALL), ids,
                                     exclude_kernel=bool(flg & _EXCLUDE_KERNEL)))
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
        return tp_format_flags(self._tracing_formats().get(name.split(":")[-1], b""))

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

    def lost_at(self, sample_type: int) -> list[tuple[int, int]]:
        """(time in ns, events lost) of each LOST record, the time from its sample_id trailer
        (perf record writes one: sample_id_all), -1 when it has none."""
        _o_tid, o_time = _id_trailer(sample_type)
        out = []
        for o in self.of_type(RECORD_LOST).tolist():
            size = int(self.u32[o + 4]) >> 16  # the header's u16 size
            t = int(self.u64[o + size + o_time]) if o_time != -1 and size >= 32 else -1
            out.append((t, int(self.u64[o + 16])))
        return out

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
