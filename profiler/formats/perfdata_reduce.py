"""Smaller copies of a perf.data (formats layer): only some samples, or identical stacks merged into one.

What `perf script` costs is paid per sample it reads and per binary those samples name, so the
collectors and the flame graph verbs hand it a reduced copy (perfdata.py reads the original):

- :func:`filter_samples` keeps the samples a ``Keep`` takes (the targets' threads, a window) and
  every other record, so perf loads only the targets' symbols;
- :func:`thinning` is a deterministic uniform ``Keep`` for huge inputs (the collector records the fraction kept);
- :func:`merge_samples` writes each distinct stack once with the total as its period, so perf
  symbolizes each once and the folded result is the same;
- :func:`count_samples` says how many samples and frames a ``Keep`` would leave.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from profiler.formats.perfdata import (
    HEADER_SIZE,
    RECORD_COMM,
    RECORD_FORK,
    RECORD_KSYMBOL,
    RECORD_MMAP,
    RECORD_MMAP2,
    RECORD_SAMPLE,
    S_BRANCH_STACK,
    S_CALLCHAIN,
    S_IDENTIFIER,
    S_IP,
    S_READ,
    S_REGS_USER,
    S_STACK_USER,
    U64,
    Event,
    PerfDataUnsupported,
    PerfFile,
    Records,
    Samples,
    sample_layout,
    samples,
)

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
        # splitmix64 of the depth (numpy.random's import alone was ~10 ms of every start)
        with np.errstate(over="ignore"):
            _DEPTH_MULT = _mix(np.arange(size, dtype=U64) * U64(0x9E3779B97F4A7C15) + U64(0x51AC4)) | U64(1)
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


@dataclass(frozen=True)
class Merge:
    """How to merge the samples of identical stacks (merge_samples, and perf.data's text made
    without perf, perfscript_text): their period becomes the total (``count_samples``: their
    number), so a consumer that weighs samples by period folds the same stacks; ``by_tid``
    keeps threads apart. ``symbolic`` (the direct path's only; perf script merges by address):
    samples whose frames print the same symbols and modules merge even where their addresses
    differ, for a folder that reads no address (unknown frames named after their module, no
    ``--addrs``): it folds them the same."""

    by_tid: bool = False
    count_samples: bool = False
    symbolic: bool = False


@dataclass
class Merged:
    samples: int = 0  # samples read (kept by the filter)
    written: int = 0  # samples written (one per distinct stack)


def merge_samples(src: str | os.PathLike[str], dst: str | os.PathLike[str], *, by_tid: bool,
                  count_samples: bool = False, keep: Keep | None = None, drop_types: tuple[int, ...] = ()) -> Merged:
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
        _write_merged(f, dst, keep_at, plan, drop_types)
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
                  plan: list[tuple[int, int, np.ndarray]], drop_types: tuple[int, ...] = ()) -> None:
    lays = {ev.index: sample_layout(ev.sample_type) for ev in f.events}
    f.fh.seek(0)
    head = bytearray(f.fh.read(f.data_off))
    with open(dst, "wb") as out:
        out.write(head)
        size = 0
        for ci, rec in enumerate(f.again(plan)):
            here = keep_at.get(ci, {})
            take = rec.types != RECORD_SAMPLE
            if drop_types:
                take &= ~np.isin(rec.types, np.asarray(drop_types, np.uint32))
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
