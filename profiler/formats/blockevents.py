"""The block-io collector's binary member ``block.events.bin`` (formats layer): format, writer, reader.

The collector reads the block_rq_* tracepoints as the kernel's ring buffer pages
(tracefs ``per_cpu/cpuN/trace_pipe_raw``, ~65 bytes an event) and writes this columnar file
(~5-15 bytes an event): the fields the pairing needs, nothing printed and parsed again. Both
sides use this module: the collector decodes pages into it (:func:`parse_pages`,
:class:`PageStream`), the inputs layer reads it (:func:`iter_blocks`). A perf.data of the same
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
            a["dev"] = pd.tp_column(rec, c.raw, fl["dev"])
            a["sector"] = pd.tp_column(rec, c.raw, fl["sector"])
            a["nr"] = pd.tp_column(rec, c.raw, fl["nr_sector"])
            if "bytes" in fl:
                a["bytes"] = pd.tp_column(rec, c.raw, fl["bytes"])
            a["rwbs"] = rec.u64[c.raw + fl["rwbs"].offset] & _low_bytes(min(8, fl["rwbs"].size))
            if "comm" in fl and kind in (ISSUE, MERGE):
                a["comm"] = pd.tp_strings(rec, c.raw, fl["comm"], intern)
            parts.append(a)
        return np.concatenate(parts) if parts else np.zeros(0, RAW_DTYPE)

    return decode


def _low_bytes(n: int) -> np.uint64:
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


# --------------------------------------------------------------------------- from ftrace pages

PAGE = 4096  # a trace_pipe_raw read: one ring buffer page (header, then events)
_COMMIT_MASK = (1 << 20) - 1  # the commit word's data length; its top bits flag missed events
_MISSED_EVENTS, _MISSED_STORED = 1 << 31, 1 << 30


@dataclass
class RawFormats:
    """What decoding raw ftrace records needs: each block event's id and field offsets
    (tracefs ``events/block/NAME/{id,format}``)."""

    kind_of_id: dict[int, int]
    fields: dict[int, dict[str, pd.TpField]]  # kind -> field -> offset, size

    @classmethod
    def from_tracefs(cls, events_dir: str | Path) -> RawFormats:
        kind_of_id: dict[int, int] = {}
        fields: dict[int, dict[str, pd.TpField]] = {}
        for name, kind in TRACEPOINTS.items():
            d = Path(events_dir) / name.split(":")[1]
            try:
                kind_of_id[int((d / "id").read_text())] = kind
                fields[kind] = pd.tp_format_fields((d / "format").read_bytes())
            except (OSError, ValueError):
                continue
        return cls(kind_of_id, fields)


def parse_pages(data: bytes, fmts: RawFormats, intern: Callable[[bytes], int]) -> tuple[np.ndarray, int]:
    """Whole ring buffer pages (as trace_pipe_raw gives them) -> their block events as
    :data:`RAW_DTYPE` (in page order, i.e. time order for one CPU), and the events the buffer
    said it missed. All pages are walked side by side, one event of each per step."""
    npages = len(data) // PAGE
    if not npages:
        return np.zeros(0, RAW_DTYPE), 0
    b = np.frombuffer(data, np.uint8, count=npages * PAGE)
    u64 = np.ndarray(shape=(len(b) - 7,), dtype="<u8", buffer=b, strides=(1,))
    u32 = np.ndarray(shape=(len(b) - 3,), dtype="<u4", buffer=b, strides=(1,))
    base = np.arange(npages, dtype=np.int64) * PAGE
    ts = u64[base].copy()
    commit = u64[base + 8]
    size = (commit & np.uint64(_COMMIT_MASK)).astype(np.int64)
    missed = 0
    flagged = (commit & np.uint64(_MISSED_EVENTS)) != 0
    if flagged.any():
        stored = flagged & ((commit & np.uint64(_MISSED_STORED)) != 0)
        missed += int(np.count_nonzero(flagged & ~stored))  # at least one each, count unknown
        sp = base[stored] + 16 + size[stored]
        ok = sp + 8 <= base[stored] + PAGE
        missed += int(u64[sp[ok]].sum()) if ok.any() else 0
    size = np.minimum(size, PAGE - 16)
    pos = base + 16
    end = pos + size
    page = np.arange(npages, dtype=np.int64)
    ev_off: list[np.ndarray] = []
    ev_t: list[np.ndarray] = []
    ev_page: list[np.ndarray] = []
    act = np.flatnonzero(pos + 4 <= end)
    pos, end, t, page = pos[act], end[act], ts[act], page[act]
    last = len(u32) - 1
    while len(pos):
        h = u32[pos]
        tl = (h & 31).astype(np.int64)
        delta = (h >> 5).astype(np.uint64)
        arr0 = u32[np.minimum(pos + 4, last)].astype(np.int64)
        simple = tl <= 28
        is_data = simple
        if simple.all() and (tl > 0).all():  # the common step: small data events only
            length = 4 + 4 * tl
            data_off = pos + 4
            t = t + delta
        else:
            length = np.where(tl == 0, arr0 + 4, np.where(simple, 4 + 4 * tl, 8))
            data_off = np.where(tl == 0, pos + 8, pos + 4)
            is_ext = tl == 30
            is_abs = tl == 31
            is_pad = tl == 29
            length = np.where(is_pad, np.where(delta == 0, end - pos, arr0 + 4), length)
            t = t + np.where(is_data, delta, np.uint64(0))
            if is_ext.any():
                t = t + np.where(is_ext, (arr0.astype(np.uint64) << np.uint64(27)) | delta, np.uint64(0))
            if is_abs.any():
                top = t & ~np.uint64((1 << 59) - 1)
                t = np.where(is_abs, top | (arr0.astype(np.uint64) << np.uint64(27)) | delta, t)
        take = is_data & (length > 4) & (pos + length <= end)
        if take.any():
            ev_off.append(data_off[take])
            ev_t.append(t[take])
            ev_page.append(page[take])
        pos = pos + np.maximum(length, 4)
        keep = np.flatnonzero(pos + 4 <= end)
        pos, end, t, page = pos[keep], end[keep], t[keep], page[keep]
    if not ev_off:
        return np.zeros(0, RAW_DTYPE), missed
    off = np.concatenate(ev_off)
    tt = np.concatenate(ev_t)
    order = np.lexsort((off, np.concatenate(ev_page)))  # page order, then place in the page
    off, tt = off[order], tt[order]
    typ = u32[off] & np.uint32(0xFFFF)
    uid, inv = np.unique(typ, return_inverse=True)
    kind = np.array([fmts.kind_of_id.get(int(i), 0) for i in uid], np.uint8)[inv.ravel()]
    sel = kind > 0
    off, tt, kind = off[sel], tt[sel], kind[sel]
    out = np.zeros(len(off), RAW_DTYPE)
    out["t"], out["kind"], out["off"] = tt, kind, off
    out["tid"] = u32[off + 4].view(np.int32)
    rec = _Pages(data, b, u64)
    for k, fl in fmts.fields.items():
        s = np.flatnonzero(kind == k)
        if not len(s) or not {"dev", "sector", "nr_sector", "rwbs"} <= set(fl):
            continue
        o = off[s]
        out["dev"][s] = pd.tp_column(rec, o, fl["dev"])  # type: ignore[arg-type]
        out["sector"][s] = pd.tp_column(rec, o, fl["sector"])  # type: ignore[arg-type]
        out["nr"][s] = pd.tp_column(rec, o, fl["nr_sector"])  # type: ignore[arg-type]
        if "bytes" in fl:
            out["bytes"][s] = pd.tp_column(rec, o, fl["bytes"])  # type: ignore[arg-type]
        out["rwbs"][s] = u64[o + fl["rwbs"].offset] & _low_bytes(min(8, fl["rwbs"].size))
        if "comm" in fl and k in (ISSUE, MERGE):
            out["comm"][s] = pd.tp_strings(rec, o, fl["comm"], intern)  # type: ignore[arg-type]
    return out, missed


@dataclass
class _Pages:
    """Duck-types the parts of :class:`perfdata.Records` that ``tp_column``/``tp_strings`` read."""

    buf: bytes
    b: np.ndarray
    u64: np.ndarray


class PageStream:
    """Ring buffer pages of every CPU -> this member, in one time order.

    Each CPU's pages come in time order; across CPUs, events up to a ``horizon`` (a time
    before which every CPU's buffer had been read) are final: :meth:`flush` sorts and writes
    them, the rest waits. Memory: the events since the horizon."""

    def __init__(self, out: IO[bytes], fmts: RawFormats, is_target: Callable[[int], bool] | None = None,
                 on_block: Callable[[Block], None] | None = None) -> None:
        self.w = Writer(out, on_block)
        self.fmts = fmts
        self.tally = Tally(is_target)
        self.missed = 0
        self.pending: dict[int, np.ndarray] = {}  # per CPU, in time order
        self.pages = 0

    def feed(self, cpu: int, pages: bytes) -> None:
        """Whole pages of one CPU, as read (in order)."""
        ev, missed = parse_pages(pages, self.fmts, self.w.comm_id)
        self.pages += len(pages) // PAGE
        self.missed += missed
        if len(ev):
            if len(ev) > 1 and (ev["t"][1:] < ev["t"][:-1]).any():  # a clock step: keep the order right
                ev = ev[np.argsort(ev["t"], kind="stable")]
            old = self.pending.get(cpu)
            self.pending[cpu] = ev if old is None or not len(old) else np.concatenate([old, ev])

    def flush(self, horizon_ns: int | None = None) -> None:
        """Write the events up to ``horizon_ns`` (all of them with None)."""
        parts = []
        for cpu, ev in list(self.pending.items()):
            n = len(ev) if horizon_ns is None else int(np.searchsorted(ev["t"], np.uint64(max(0, horizon_ns)), "right"))
            if n:
                parts.append(ev[:n])
                self.pending[cpu] = ev[n:]
        if not parts:
            return
        ready = np.concatenate(parts) if len(parts) > 1 else parts[0]
        if len(parts) > 1:
            ready = ready[np.argsort(ready["t"], kind="stable")]
        self.tally.add(ready)
        self.w.write(ready)

    def result(self) -> Converted:
        return Converted(dict(self.tally.counts), self.missed, self.tally.target, self.w.events)
