"""The kernel's ring buffer pages of block events, decoded (formats layer): what a tracefs ``trace_pipe_raw`` gives.

The block-io collector (collectors/tracefs/blockio.py) reads every CPU's ``trace_pipe_raw``: whole
4 KiB pages of binary ftrace records, nothing formatted. :class:`RawFormats` learns each block
event's id and field offsets from tracefs, :func:`parse_pages` decodes pages with numpy into
:data:`blockevents.RAW_DTYPE` rows, and :class:`PageStream` puts every CPU's rows in one time
order and writes them as ``block.events.bin`` (blockevents.py, the member's format).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

try:
    import numpy as np
except ImportError:  # the cluster agent's bare python3: the collector writes text instead (blockevents.HAVE_NUMPY)
    np = None  # type: ignore[assignment]

from profiler.formats import tracepoints as tp
from profiler.formats.blockevents import (
    ISSUE,
    MERGE,
    RAW_DTYPE,
    TRACEPOINTS,
    Block,
    Converted,
    Tally,
    Writer,
    low_bytes,
)

PAGE = 4096  # a trace_pipe_raw read: one ring buffer page (header, then events)
_COMMIT_MASK = (1 << 20) - 1  # the commit word's data length; its top bits flag missed events
_MISSED_EVENTS, _MISSED_STORED = 1 << 31, 1 << 30


@dataclass
class RawFormats:
    """What decoding raw ftrace records needs: each block event's id and field offsets
    (tracefs ``events/block/NAME/{id,format}``)."""

    kind_of_id: dict[int, int]
    fields: dict[int, dict[str, tp.TpField]]  # kind -> field -> offset, size

    @classmethod
    def from_tracefs(cls, events_dir: str | Path) -> RawFormats:
        kind_of_id: dict[int, int] = {}
        fields: dict[int, dict[str, tp.TpField]] = {}
        for name, kind in TRACEPOINTS.items():
            d = Path(events_dir) / name.split(":")[1]
            try:
                kind_of_id[int((d / "id").read_text())] = kind
                fields[kind] = tp.tp_format_fields((d / "format").read_bytes())
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
        out["dev"][s] = tp.tp_column(rec, o, fl["dev"])
        out["sector"][s] = tp.tp_column(rec, o, fl["sector"])
        out["nr"][s] = tp.tp_column(rec, o, fl["nr_sector"])
        if "bytes" in fl:
            out["bytes"][s] = tp.tp_column(rec, o, fl["bytes"])
        out["rwbs"][s] = u64[o + fl["rwbs"].offset] & low_bytes(min(8, fl["rwbs"].size))
        if "comm" in fl and k in (ISSUE, MERGE):
            out["comm"][s] = tp.tp_strings(rec, o, fl["comm"], intern)
    return out, missed


@dataclass
class _Pages:
    """A batch of pages as the payload readers take it (:class:`tracepoints.Words`)."""

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
