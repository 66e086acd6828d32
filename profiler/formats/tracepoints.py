"""Tracepoint payloads: a tracepoint's format text and the fields of its raw records (formats layer).

The kernel describes each tracepoint's payload in its format file (tracefs
``events/SYS/NAME/format``; perf.data keeps a copy in its tracing-data feature section): each
field's offset, size and sign, and the print format's flag tables (sched_switch's prev_state
letters). Both readers of raw payloads decode with these: perf.data samples (perfdata.py) and
the tracefs ring-buffer pages (tracefs_pages.py), each a buffer read as unaligned
little-endian words (:class:`Words`), so whole batches decode as numpy column reads.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

try:
    import numpy as np
except ImportError:  # the cluster agent runs collectors under a bare python3: they fall back to perf script
    np = None  # type: ignore[assignment]

if TYPE_CHECKING or np is not None:
    U64 = np.uint64

_FIELD = re.compile(rb"field:([^;]*?)\b(\w+)(?:\[\d+\])?;\s*offset:(\d+);\s*size:(\d+);\s*signed:(\d+);")
_FLAG = re.compile(rb"\{\s*(0x[0-9a-fA-F]+|\d+)\s*,\s*\"([^\"]*)\"\s*\}")


@dataclass(frozen=True)
class TpField:
    offset: int
    size: int
    signed: bool


class Words(Protocol):
    """A buffer of records and its unaligned little-endian 64-bit words at every byte offset
    (perfdata.Records, a tracefs page batch)."""

    @property
    def buf(self) -> bytes: ...

    @property
    def u64(self) -> np.ndarray: ...


def tp_format_fields(fmt: bytes) -> dict[str, TpField]:
    """A tracepoint's format text (tracefs ``events/SYS/NAME/format``) -> field offsets and sizes."""
    return {m.group(2).decode(): TpField(int(m.group(3)), int(m.group(4)), m.group(5) == b"1")
            for m in _FIELD.finditer(fmt)}


def tp_format_flags(fmt: bytes) -> list[tuple[int, str]]:
    """The ``__print_flags`` table of a tracepoint's print format (sched_switch's prev_state letters)."""
    pf = fmt.find(b"print fmt:")
    return [(int(v, 0), s.decode()) for v, s in _FLAG.findall(fmt[pf:])] if pf >= 0 else []


def tp_column(rec: Words, raw: np.ndarray, fld: TpField) -> np.ndarray:
    """One integer field of tracepoint payloads starting at ``raw``, sign-extended when signed."""
    w: np.ndarray = rec.u64[raw + fld.offset]
    if fld.size >= 8:
        return w.view(np.int64) if fld.signed else w
    bits = 8 * fld.size
    v: np.ndarray = (w & U64((1 << bits) - 1)).astype(np.int64)
    if fld.signed:
        v = np.where(v >= (1 << (bits - 1)), v - (1 << bits), v)
    return v


def tp_strings(rec: Words, raw: np.ndarray, fld: TpField, intern: Callable[[bytes], int]) -> np.ndarray:
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
