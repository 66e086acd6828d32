"""The block-io collector's binary member ``block.events.bin`` (formats layer): format, writer, reader.

The collector reads the block_rq_* tracepoints as the kernel's ring buffer pages
(tracefs ``per_cpu/cpuN/trace_pipe_raw``, ~65 bytes an event) and writes this columnar file
(~5-15 bytes an event): the fields the pairing needs, nothing printed and parsed again. Both
sides use this module: the collector writes it (:class:`Writer`, fed by the ring buffer pages
tracefs_pages.py decodes), the inputs layer reads it (:func:`iter_blocks`). A perf.data of the same
tracepoints converts to it too (:func:`convert`, through the one perf.data reader,
profiler/formats/perfdata.py).

Layout (little-endian)::

    header   b"PRFBLKEV" u32 version (1) u32 0
    block*   b"BLK1" u32 n  u32 comm_bytes  u32 zlen  u32 crc32(z)  u16 n_rwbs  u16 n_dev  u32 flags
             z = zlib(payload)
    payload  comm_bytes of new task names, each NUL-terminated (appended to the file's table:
             the comm column indexes it, 0 is "no name"); u64 first time; n_rwbs u64 and n_dev
             u32 table entries; then the columns of the n events, whole column after whole
             column: time differences (u32, or u64 with flags & 1), rwbs (u8 index into its
             table, or u64 with flags & 4), dev (u8 index, or u32 with flags & 2), kind u8,
             sector u64, nr u32, bytes u32, tid i32, comm u16.

``t`` is CLOCK_MONOTONIC nanoseconds (``trace_clock=mono``, or ``perf record -k CLOCK_MONOTONIC``), ``kind`` is 1 issue,
2 complete, 3 requeue, 4 merge; ``dev`` the kernel's dev_t (major << 20 | minor); ``rwbs`` the
first 8 bytes of the tracepoint's rwbs string (NUL-padded); ``tid`` the thread that hit the
tracepoint. A block cut short or failing its CRC ends the reading: what came before is kept.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from profiler.formats import perfdata as pd
from profiler.formats import tracepoints as tp

try:
    import numpy as np
except ImportError:  # the cluster agent's bare python3: the collector writes text instead (HAVE_NUMPY)
    np = None  # type: ignore[assignment]

HAVE_NUMPY = np is not None

MAGIC = b"PRFBLKEV"
VERSION = 1
_HEAD = struct.Struct("<8sII")
_BLOCK = struct.Struct("<4sIIIIHHI")
_T32, _DEV_RAW, _RWBS_RAW = 1, 2, 4  # block flags: t differences in u32; dev, rwbs without a table
_BLOCK_MAGIC = b"BLK1"
ZLEVEL = 1  # zlib's fastest: ~15 bytes an event, well ahead of the events' rate

COLUMNS: tuple[tuple[str, str], ...] = (
    ("t", "<u8"), ("kind", "u1"), ("dev", "<u4"), ("sector", "<u8"), ("nr", "<u4"), ("bytes", "<u4"),
    ("tid", "<i4"), ("comm", "<u2"), ("rwbs", "<u8"),
)
RAW_DTYPE = np.dtype([(n, d) for n, d in COLUMNS] + [("off", "<i8")]) if np is not None else None
ISSUE, COMPLETE, REQUEUE, MERGE = 1, 2, 3, 4
TRACEPOINTS = {"block:block_rq_issue": ISSUE, "block:block_rq_complete": COMPLETE,
               "block:block_rq_requeue": REQUEUE, "block:block_rq_merge": MERGE}
MAX_BLOCK = 1 << 18  # events per block (~10 MB of columns before compression)


class BlockEventsError(Exception):
    """Not a block events member (wrong magic or version)."""


class Writer:
    """Writes batches of :data:`RAW_DTYPE` events (time-ordered) as blocks.

    ``on_block`` (optional) hears each block once it is written, as :func:`iter_blocks` would
    read it back (the same columns, the same comm table), without reading it back: what
    attach and run use to pair the IOs while the capture runs (profiler/bundle/early.py)."""

    def __init__(self, fh: IO[bytes], on_block: Callable[[Block], None] | None = None) -> None:
        self.fh = fh
        self.comms: dict[bytes, int] = {b"": 0}
        self.new_comms: list[bytes] = []
        self.events = 0
        self.on_block = on_block
        self.names: list[bytes] = [b""]  # the comm table as a reader of the member builds it
        fh.write(_HEAD.pack(MAGIC, VERSION, 0))

    def comm_id(self, name: bytes) -> int:
        idx = self.comms.get(name)
        if idx is None:
            idx = min(len(self.comms), 0xFFFF)
            self.comms[name] = idx
            if idx < 0xFFFF:
                self.new_comms.append(name)
        return idx

    def write(self, ev: np.ndarray) -> None:
        for i in range(0, len(ev), MAX_BLOCK):
            self._block(ev[i : i + MAX_BLOCK])

    def _block(self, ev: np.ndarray) -> None:
        n = len(ev)
        if not n:
            return
        clean = [c.replace(b"\0", b"") for c in self.new_comms]
        names = b"".join(c + b"\0" for c in clean)
        self.new_comms = []
        flags = 0
        t = ev["t"].astype("<u8")
        with np.errstate(over="ignore"):
            dt = np.empty_like(t)
            dt[0] = 0
            np.subtract(t[1:], t[:-1], out=dt[1:])
        if n == 1 or int(dt.max()) < (1 << 32):
            flags |= _T32
            tcol = dt.astype("<u4").tobytes()
        else:
            tcol = dt.tobytes()
        tables = [struct.pack("<Q", int(t[0]))]
        cols = [tcol]
        ntab = []
        rwbs_table: np.ndarray | None = None
        rwbs_idx: np.ndarray | None = None
        for name, dtype, raw_flag in (("rwbs", "<u8", _RWBS_RAW), ("dev", "<u4", _DEV_RAW)):
            table, idx = _dictionary(ev[name])
            if len(table) <= 256:
                if name == "rwbs":
                    rwbs_table, rwbs_idx = table.astype(dtype), idx.astype(np.uint8)
                tables.append(table.astype(dtype).tobytes())
                ntab.append(len(table))
                cols.append(idx.astype(np.uint8).tobytes())
            else:
                flags |= raw_flag
                ntab.append(0)
                cols.append(np.ascontiguousarray(ev[name], dtype=dtype).tobytes())
        cols += [np.ascontiguousarray(ev[c], dtype=d).tobytes() for c, d in _PLAIN]
        z = zlib.compress(b"".join([names, *tables, *cols]), ZLEVEL)
        self.fh.write(_BLOCK.pack(_BLOCK_MAGIC, n, len(names), len(z), zlib.crc32(z), ntab[0], ntab[1], flags))
        self.fh.write(z)
        self.events += n
        self.names.extend(clean)
        if self.on_block is not None:
            out = {c: np.ascontiguousarray(ev[c], dtype=d) for c, d in _PLAIN}
            out["t"] = t
            out["dev"] = np.ascontiguousarray(ev["dev"], dtype="<u4")
            out["rwbs"] = np.ascontiguousarray(ev["rwbs"], dtype="<u8")
            self.on_block(Block(out, self.names, rwbs_table, rwbs_idx))


_PLAIN: tuple[tuple[str, str], ...] = (("kind", "u1"), ("sector", "<u8"), ("nr", "<u4"), ("bytes", "<u4"),
                                       ("tid", "<i4"), ("comm", "<u2"))


def _dictionary(col: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A column of few distinct values -> (table, index of each value); a single value costs no sort."""
    first = col[0]
    if (col == first).all():
        return np.asarray([first]), np.zeros(len(col), np.uint8)
    table, idx = np.unique(col, return_inverse=True)
    return table, idx.ravel()


class _Cursor:
    """Columns read one after the other from a block's payload."""

    def __init__(self, payload: bytes, pos: int) -> None:
        self.payload, self.pos = payload, pos

    def take(self, dtype: str, count: int) -> np.ndarray:
        a: np.ndarray = np.frombuffer(self.payload, dtype=dtype, count=count, offset=self.pos)
        self.pos += a.nbytes
        return a


@dataclass
class Block:
    """One block read back: the columns of its events (``t`` in absolute ns) and the file's
    comm table so far."""

    cols: dict[str, np.ndarray]
    comms: list[bytes]
    rwbs_table: np.ndarray | None = None  # the block's distinct rwbs values, and each event's index
    rwbs_idx: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.cols["t"])


@dataclass
class ReadState:
    events: int = 0
    damage: str | None = None  # why the reading stopped early (cut short, bad CRC)
    comms: list[bytes] = field(default_factory=lambda: [b""])


def sniff(head: bytes) -> bool:
    return head[:8] == MAGIC


def iter_blocks(fh: IO[bytes], state: ReadState | None = None) -> Iterator[Block]:
    """The blocks of a member, in order; damage ends the iteration and is said in ``state.damage``."""
    st = state if state is not None else ReadState()
    head = fh.read(_HEAD.size)
    if len(head) < _HEAD.size or head[:8] != MAGIC:
        raise BlockEventsError("not a block events member (no PRFBLKEV header)")
    version = _HEAD.unpack(head)[1]
    if version != VERSION:
        raise BlockEventsError(f"block events format v{version}; this profiler reads v{VERSION}")
    while True:
        bh = fh.read(_BLOCK.size)
        if not bh:
            return
        if len(bh) < _BLOCK.size:
            st.damage = f"cut short after {st.events} events"
            return
        magic, n, comm_bytes, zlen, crc, n_rwbs, n_dev, flags = _BLOCK.unpack(bh)
        if magic != _BLOCK_MAGIC:
            st.damage = f"corrupt block after {st.events} events"
            return
        z = fh.read(zlen)
        if len(z) < zlen:
            st.damage = f"cut short after {st.events} events"
            return
        if zlib.crc32(z) != crc:
            st.damage = f"corrupt block (CRC) after {st.events} events"
            return
        try:
            payload = zlib.decompress(z)
        except zlib.error:
            st.damage = f"corrupt compressed block after {st.events} events"
            return
        tsz = 4 if flags & _T32 else 8
        rsz = 8 if flags & _RWBS_RAW else 1
        dsz = 4 if flags & _DEV_RAW else 1
        want = comm_bytes + 8 + 8 * n_rwbs + 4 * n_dev + n * (tsz + rsz + dsz + 1 + 8 + 4 + 4 + 4 + 2)
        if len(payload) != want or (not n_rwbs) != bool(flags & _RWBS_RAW) or (not n_dev) != bool(flags & _DEV_RAW):
            st.damage = f"corrupt block (size) after {st.events} events"
            return
        st.comms.extend(payload[:comm_bytes].split(b"\0")[:-1] if comm_bytes else [])
        cur = _Cursor(payload, comm_bytes)
        t0 = np.uint64(cur.take("<u8", 1)[0])
        rwbs_table = cur.take("<u8", n_rwbs)
        dev_table = cur.take("<u4", n_dev)

        def take(dtype: str, _size: int, cur: _Cursor = cur, n: int = n) -> np.ndarray:
            return cur.take(dtype, n)

        dt = take("<u4" if tsz == 4 else "<u8", tsz)
        rwbs_idx = take("u1", 1) if n_rwbs else None
        rwbs_raw = None if n_rwbs else take("<u8", 8)
        dev_idx = take("u1", 1) if n_dev else None
        dev_raw = None if n_dev else take("<u4", 4)
        cols: dict[str, np.ndarray] = {}
        for c, d in _PLAIN:
            cols[c] = take(d, np.dtype(d).itemsize)
        if n and ((rwbs_idx is not None and int(rwbs_idx.max()) >= n_rwbs)
                  or (dev_idx is not None and int(dev_idx.max()) >= n_dev)):
            st.damage = f"corrupt block (table) after {st.events} events"
            return
        with np.errstate(over="ignore"):
            t = np.cumsum(dt, dtype=np.uint64)
            t += t0
        cols["t"] = t
        cols["dev"] = dev_table[dev_idx] if dev_idx is not None else dev_raw  # type: ignore[assignment]
        cols["rwbs"] = rwbs_table[rwbs_idx] if rwbs_idx is not None else rwbs_raw  # type: ignore[assignment]
        st.events += n
        yield Block(cols, st.comms, rwbs_table if rwbs_idx is not None else None, rwbs_idx)


# --------------------------------------------------------------------------- from perf.data


@dataclass
class Converted:
    """What :func:`convert` wrote: events per kind, lost events perf recorded, issues by target threads."""

    counts: dict[str, int]
    lost: int
    target_issues: int
    events: int


def decoder(f: pd.PerfFile, intern: Callable[[bytes], int]) -> Callable[[pd.Records], np.ndarray]:
    """Per chunk of a perf.data's records: its block events as :data:`RAW_DTYPE` (any order)."""
    evs = [(ev, TRACEPOINTS[ev.name]) for ev in f.events if ev.name in TRACEPOINTS]
    if not any(k == ISSUE for _e, k in evs) or not any(k == COMPLETE for _e, k in evs):
        raise pd.PerfDataUnsupported("no block_rq_issue and block_rq_complete events in this perf.data")
    flds = {}
    for ev, _k in evs:
        fl = f.tp_fields(ev.name)
        if not {"dev", "sector", "nr_sector", "rwbs"} <= set(fl):
            raise pd.PerfDataUnsupported(f"no dev, sector, nr_sector or rwbs in {ev.name}'s format")
        flds[ev.index] = fl

    def decode(rec: pd.Records) -> np.ndarray:
        cols = pd.samples(rec, f, [e for e, _k in evs])
        parts = []
        for ev, kind in evs:
            c = cols.get(ev.index)
            if c is None or not len(c.offs):
                continue
            if (c.raw < 0).any():
                raise pd.PerfDataUnsupported("block samples without raw tracepoint data")
            fl = flds[ev.index]
            a = np.zeros(len(c.offs), RAW_DTYPE)
            a["off"], a["t"], a["tid"], a["kind"] = c.offs, c.time, c.tid, kind
            a["dev"] = tp.tp_column(rec, c.raw, fl["dev"])
            a["sector"] = tp.tp_column(rec, c.raw, fl["sector"])
            a["nr"] = tp.tp_column(rec, c.raw, fl["nr_sector"])
            if "bytes" in fl:
                a["bytes"] = tp.tp_column(rec, c.raw, fl["bytes"])
            a["rwbs"] = rec.u64[c.raw + fl["rwbs"].offset] & low_bytes(min(8, fl["rwbs"].size))
            if "comm" in fl and kind in (ISSUE, MERGE):
                a["comm"] = tp.tp_strings(rec, c.raw, fl["comm"], intern)
            parts.append(a)
        return np.concatenate(parts) if parts else np.zeros(0, RAW_DTYPE)

    return decode


def low_bytes(n: int) -> np.uint64:
    return np.uint64((1 << (8 * n)) - 1) if n < 8 else np.uint64(0xFFFFFFFFFFFFFFFF)


class Tally:
    """What was written: events per tracepoint, and the issues made by target threads (one
    ``is_target`` call per distinct issuing thread)."""

    def __init__(self, is_target: Callable[[int], bool] | None) -> None:
        self.is_target = is_target
        self.counts = {name.split(":")[1]: 0 for name in TRACEPOINTS}
        self.target = 0
        self.seen: dict[int, bool] = {}

    def add(self, batch: np.ndarray) -> None:
        per = np.bincount(batch["kind"], minlength=5)
        for name, k in TRACEPOINTS.items():
            self.counts[name.split(":")[1]] += int(per[k])
        if self.is_target is not None:
            issuers, n = np.unique(batch["tid"][batch["kind"] == ISSUE], return_counts=True)
            for tid, c in zip(issuers.tolist(), n.tolist(), strict=True):
                ok = self.seen.get(tid)
                if ok is None:
                    ok = self.seen[tid] = self.is_target(tid)
                self.target += c if ok else 0


class Converter:
    """perf.data files of one ``perf record`` (its ``--switch-output`` segments, oldest first)
    -> this member, streaming, with one time ordering across the files."""

    def __init__(self, out: IO[bytes], is_target: Callable[[int], bool] | None = None) -> None:
        self.w = Writer(out)
        self.tally = Tally(is_target)
        self.lost = 0

    def _items(self, paths: Iterable[Path], unlink: bool) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for path in paths:
            with pd.PerfFile(path) as f:
                decode = decoder(f, self.w.comm_id)
                for rec in f.chunks():
                    self.lost += rec.lost()
                    yield decode(rec), rec.of_type(pd.RECORD_FINISHED_ROUND)
            yield np.zeros(0, RAW_DTYPE), np.array([pd.ROUND_END], np.int64)  # a switch ends a round
            if unlink:
                Path(path).unlink(missing_ok=True)

    def run(self, paths: Iterable[Path], *, unlink: bool = False) -> None:
        for batch in pd.in_order(self._items(paths, unlink)):
            self.tally.add(batch)
            self.w.write(batch)

    def result(self) -> Converted:
        return Converted(dict(self.tally.counts), self.lost, self.tally.target, self.w.events)


def convert(src: str | Path, out: IO[bytes], is_target: Callable[[int], bool] | None = None) -> Converted:
    """A perf.data of block tracepoints -> this member, streaming (memory: two of perf's rounds)."""
    c = Converter(out, is_target)
    c.run([Path(src)])
    return c.result()
