"""The fields of perf script's sample header, and what perf.data's header says (formats layer).

Pieces of ``perfscript_text.py``: the build ids of perf.data's header (which files perf would
accept for a binary), sched_switch's payload as its print format prints it (the ``trace``
field), the time as ``secs.usecs``, which events perf checks the requested fields against,
distinct rows of integer columns (lexsort: what distinct frame lines and header prefixes
are found with), equal sequences of integers (equal stacks of symbols), and perf script's
own text cut into samples.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator

import numpy as np

from profiler.formats.perfdata import PerfDataUnsupported, PerfFile
from profiler.formats.perfstacks import Stacks

FEAT_BUILD_ID = 2
MISC_BUILD_ID_SIZE = 1 << 15


def build_ids(f: PerfFile) -> tuple[dict[tuple[bool, str], str], str | None]:
    """The header's build ids: {(kernel?, file name): hex}, and the kernel's."""
    out: dict[tuple[bool, str], str] = {}
    data = f._feature(FEAT_BUILD_ID) or b""
    pos = 0
    kernel = None
    while pos + 8 <= len(data):
        _typ, misc, size = struct.unpack_from("<IHH", data, pos)
        if size < 8 + 4 + 24 or pos + size > len(data):
            break
        raw = data[pos + 12 : pos + 36]
        n = raw[20] if misc & MISC_BUILD_ID_SIZE else 20
        name_end = data.find(b"\0", pos + 36, pos + size)
        name = data[pos + 36 : name_end if name_end >= 0 else pos + size].decode("utf-8", "surrogateescape")
        is_kernel = (misc & 7) == 1
        bid = raw[:n].hex()
        out[(is_kernel, name)] = bid
        if is_kernel and name == "[kernel.kallsyms]":
            kernel = bid
        pos += size
    return out, kernel

def sched_switch(f: PerfFile) -> Callable[..., dict[str, np.ndarray]] | None:
    """The payload columns perf script's ``trace`` field prints for sched_switch."""
    from profiler.formats.tracepoints import tp_column, tp_strings

    try:
        fl = f.tp_fields("sched_switch")
    except PerfDataUnsupported:
        return None
    need = ("prev_comm", "prev_pid", "prev_prio", "prev_state", "next_comm", "next_pid", "next_prio")
    if not all(k in fl for k in need):
        return None
    comms: dict[bytes, int] = {}
    names: list[str] = []

    def intern(b: bytes) -> int:
        i = comms.get(b)
        if i is None:
            i = comms[b] = len(names)
            names.append(b.decode("utf-8", "surrogateescape"))
        return i

    def decode(rec: object, offs: np.ndarray, raw: np.ndarray) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for k in ("prev_pid", "prev_prio", "prev_state", "next_pid", "next_prio"):
            out[k] = tp_column(rec, raw, fl[k]).astype(np.int64)  # type: ignore[arg-type]
        for k in ("prev_comm", "next_comm"):
            out[k] = tp_strings(rec, raw, fl[k], intern)  # type: ignore[arg-type]
        return out

    decode.names = names  # type: ignore[attr-defined]
    return decode

def unique_rows(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each distinct row of equal-length integer columns: (index of its first occurrence, in
    sorted order; each row's distinct row number). A lexsort: no structured-array sort."""
    n = len(cols[0])
    if not n:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.lexsort(cols[::-1])
    change = np.zeros(n, bool)
    change[0] = True
    for c in cols:
        sc = c[order]
        change[1:] |= sc[1:] != sc[:-1]
    group = np.cumsum(change) - 1
    inv = np.empty(n, np.int64)
    inv[order] = group
    return order[change], inv

def time_text(t: np.ndarray) -> list[str]:
    """perf's ``%12s: `` of ``secs.usecs`` (microseconds truncated)."""
    secs = (t // 1_000_000_000).tolist()
    usecs = ((t % 1_000_000_000) // 1000).tolist()
    return [f"{f'{s_}.{u:06d}':>12}: " for s_, u in zip(secs, usecs, strict=True)]

def trace_texts(st: Stacks, trace: Callable[..., dict[str, np.ndarray]], states: Callable[[int], str] | None,
                 evtypes: dict[int, int]) -> list[str]:
    """sched_switch's payload as its print format prints it (perf's ``trace`` field)."""
    names: list[str] = getattr(trace, "names", [])
    ex = st.extra
    if not ex:
        return [""] * len(st)
    letters: dict[int, str] = {}
    assert states is not None
    out = []
    tp = np.asarray([evtypes[int(e)] == 2 for e in range(max(evtypes) + 1)], bool)[st.event].tolist()
    for is_tp, pc, pp, pr, ps, nc, np_, nr in zip(tp, ex["prev_comm"].tolist(), ex["prev_pid"].tolist(),
                                                  ex["prev_prio"].tolist(), ex["prev_state"].tolist(),
                                                  ex["next_comm"].tolist(), ex["next_pid"].tolist(),
                                                  ex["next_prio"].tolist(), strict=True):
        if not is_tp:
            out.append("")
            continue
        s_ = letters.get(ps)
        if s_ is None:
            s_ = letters[ps] = states(ps)
        out.append(f"prev_comm={names[pc]} prev_pid={pp} prev_prio={pr} prev_state={s_} ==> "
                   f"next_comm={names[nc]} next_pid={np_} next_prio={nr}")
    return out

def is_dummy(ev: object) -> bool:
    return getattr(ev, "type", -1) == 1 and getattr(ev, "config", -1) == 9  # PERF_TYPE_SOFTWARE, PERF_COUNT_SW_DUMMY

def output_type(typ: int) -> str:
    return str(typ) if typ < 6 else "other"  # PERF_TYPE_MAX: dynamic PMUs share one output type

def same_sequences(vals: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """An id per sequence ``vals[starts[i]:starts[i+1]]``, equal for equal sequences: hashed in
    one pass, then each checked entry by entry against the first of its hash (exact)."""
    from profiler.formats.perfdata import U64
    from profiler.formats.perfdata_reduce import _depth_mult, _mix

    n = len(starts) - 1
    if n <= 0:
        return np.zeros(0, np.int64)
    lens = np.diff(starts)
    depth = np.arange(len(vals), dtype=np.int64) - np.repeat(starts[:-1], lens)
    h = _mix(lens.astype(U64) + U64(0x632BE59BD9B4E019))
    if len(vals):
        with np.errstate(over="ignore"):
            v = _mix(vals.astype(U64) + U64(1)) * _depth_mult(int(lens.max()))[depth]
        has = lens > 0
        sums = np.zeros(n, U64)
        sums[has] = np.add.reduceat(v, starts[:-1][has])
        h = _mix(h ^ sums)
    _u, first, ids = np.unique(h, return_index=True, return_inverse=True)
    ids = ids.ravel()
    rep = first[ids]  # the first sequence of each hash
    body = np.repeat(np.arange(n), lens)
    same = (lens[rep] == lens).all() and (vals == vals[starts[rep[body]] + depth]).all() if len(vals) else \
        bool((lens[rep] == lens).all())
    if same:
        return ids.astype(np.int64)
    seen: dict[tuple[int, ...], int] = {}  # two sequences share a hash: told apart one by one
    cl, st = vals.tolist(), starts.tolist()
    return np.asarray([seen.setdefault(tuple(cl[a:b]), len(seen)) for a, b in zip(st[:-1], st[1:], strict=True)],
                      np.int64)


def perf_blocks(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """perf script's text cut into samples: a header line, then (with a call chain) its frame
    lines, each starting with a tab, and the blank line that ends it."""
    rest = b""
    lines: list[bytes] = []
    for c in chunks:
        rest += c
        *full, rest = rest.split(b"\n")
        lines.extend(full)
        yield from _cut(lines, final=False)
    if rest:
        lines.append(rest)
    yield from _cut(lines, final=True)


def _cut(lines: list[bytes], final: bool) -> Iterator[bytes]:
    """Whole samples from the front of ``lines`` (removed from it)."""
    i = 0
    n = len(lines)
    while i < n:
        j = i + 1
        if j < n and (lines[j][:1] == b"\t" or lines[j] == b""):
            while j < n and lines[j][:1] == b"\t":
                j += 1
            if j >= n:
                if not final:
                    break
            else:
                j += 1  # the blank line
        elif j >= n and not final:
            break
        yield b"".join(x + b"\n" for x in lines[i:j])
        i = j
    del lines[:i]
