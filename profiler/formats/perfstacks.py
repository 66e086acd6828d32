"""Samples and their call chains read from perf.data in perf script's order (formats layer).

What perf script does before it prints anything, without it: every record of the data section
is read once (chunks of ``perfdata.CHUNK``), samples as numpy columns and the side-band
records that change how a sample resolves (MMAP/MMAP2: a process's maps; COMM and FORK: a
thread's name and a new process's copy of its parent's maps; KSYMBOL: kernel code that comes
and goes) decoded one by one. Then everything is put in time order, as perf's ordered events
do (equal times keep the file's order), and each sample gets the state perf would have when it
reached it:

- its thread's name (a COMM, or its parent's at FORK; ``:TID`` when perf never saw one);
- its process's maps *generation* (how many map changes that process had before the sample)
  and the kernel's;
- a *body key*: the hash of (process, its generation, the kernel's, the call chain). Samples
  with one body key print the same frames, so each distinct body is symbolized once.

A second pass reads the call chains of one sample per body (:meth:`Stacks.chains`).
:class:`Stacks` also answers which samples a ``Keep`` (pid, tid, time) takes, and merges
samples whose whole printed text but the header's time and cpu would be equal (the flame graph
only needs their total period). Anything perf could print differently than this models
(samples without times, a dwarf stack copy, read values) raises ``PerfDataUnsupported``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from profiler.formats.perfdata import (
    RECORD_COMM,
    RECORD_EXIT,
    RECORD_FORK,
    RECORD_KSYMBOL,
    RECORD_MMAP,
    RECORD_MMAP2,
    S_BRANCH_STACK,
    S_IDENTIFIER,
    S_IP,
    S_READ,
    S_REGS_USER,
    S_STACK_USER,
    S_TIME,
    U64,
    PerfDataUnsupported,
    PerfFile,
    Records,
    sample_layout,
    samples,
)
from profiler.formats.perfdata_reduce import _chain_hash, _mix

MISC_CPUMODE = 7
MISC_KERNEL, MISC_USER = 1, 2
MISC_COMM_EXEC = 1 << 13
MISC_FORK_EXEC = 1 << 13
MISC_MMAP_BUILD_ID = 1 << 14
CONTEXT_KERNEL = (1 << 64) - 128
CONTEXT_USER = (1 << 64) - 512
_SIDE = (RECORD_MMAP, RECORD_MMAP2, RECORD_COMM, RECORD_FORK, RECORD_EXIT, RECORD_KSYMBOL)
_UNSUPPORTED = S_READ | S_BRANCH_STACK | S_REGS_USER | S_STACK_USER

Keep = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


@dataclass
class Mmap:
    """One MMAP/MMAP2 record: a mapping of a process (pid -1: the kernel's)."""

    pid: int
    tid: int
    start: int
    length: int
    pgoff: int
    filename: str
    kernel: bool  # the record's cpumode is the kernel's
    prot: int = 5  # PROT_READ | PROT_EXEC (MMAP records carry none: only executable maps are recorded)
    flags: int = 0
    build_id: bytes | None = None
    ino: tuple[int, int, int, int] | None = None  # maj, min, ino, generation


@dataclass(frozen=True)
class Comm:
    pid: int
    tid: int
    name: str
    exec: bool


@dataclass(frozen=True)
class Fork:
    """A FORK (or, ``exit``, an EXIT) record: the new task and the one it came from."""

    pid: int
    ppid: int
    tid: int
    ptid: int
    misc: int
    exit: bool = False


@dataclass(frozen=True)
class Ksymbol:
    addr: int
    length: int
    name: str
    unregister: bool = False  # PERF_RECORD_KSYMBOL_FLAGS_UNREGISTER: the symbol went away


Side = Mmap | Comm | Fork | Ksymbol


@dataclass
class Stacks:
    """Every sample of the wanted events, in perf script's order, with what prints it."""

    file: str
    event: np.ndarray  # event index
    pid: np.ndarray
    tid: np.ndarray
    time: np.ndarray
    cpu: np.ndarray
    period: np.ndarray
    pos: np.ndarray  # file offset of each sample record
    misc: np.ndarray
    body: np.ndarray  # body key (uint64)
    comm: np.ndarray  # index in ``comms``
    gen: np.ndarray  # the process's map generation at the sample
    kgen: np.ndarray  # the kernel's
    comms: list[str]
    side: list[Side]  # side-band records in processing order
    side_at: np.ndarray  # for each side-band record: how many samples come before it
    extra: dict[str, np.ndarray] = field(default_factory=dict)  # tracepoint columns (see ``fields``)
    lost: int = 0
    plan: list[tuple[int, int, np.ndarray]] = field(default_factory=list)
    nr: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # call-chain entries (context markers too)

    def __len__(self) -> int:
        return len(self.time)

    def select(self, which: np.ndarray) -> Stacks:
        """The samples ``which`` (a mask or indices) keeps, in order."""
        cols = {k: getattr(self, k)[which] for k in ("event", "pid", "tid", "time", "cpu", "period", "pos", "misc", "body",
                                                     "comm", "gen", "kgen", "nr")}
        return Stacks(self.file, **cols, comms=self.comms, side=self.side, side_at=self.side_at,
                      extra={k: v[which] for k, v in self.extra.items()}, lost=self.lost, plan=self.plan)


def _trailer(f: PerfFile) -> tuple[int, int]:
    """Offsets from a non-sample record's end of its sample_id tid and time fields."""
    types = {ev.sample_type for ev in f.events}
    if len(types) != 1:
        if not all(t & S_IDENTIFIER for t in types):
            raise PerfDataUnsupported("events with different sample layouts and no sample identifier")
        # the id is last; every event must lay out tid and time alike for one reading to hold
        tails = {_tail(t) for t in types}
        if len(tails) != 1:
            raise PerfDataUnsupported("events whose side-band records lay out their ids differently")
        return next(iter(tails))
    return _tail(next(iter(types)))


def _tail(st: int) -> tuple[int, int]:
    from profiler.formats.perfdata import _id_trailer

    return _id_trailer(st)


def _cstr(buf: bytes, start: int, end: int) -> str:
    z = buf.find(b"\0", start, end)
    return buf[start : z if z >= 0 else end].decode("utf-8", "surrogateescape")


def _side_record(rec: Records, off: int, typ: int, o_tid: int, o_time: int) -> tuple[int, Side]:
    buf = rec.buf
    misc, size = struct.unpack_from("<HH", buf, off + 4)
    end = off + size
    if typ in (RECORD_FORK, RECORD_EXIT):
        pid, ppid, tid, ptid, t = struct.unpack_from("<iiiiQ", buf, off + 8)
        return t, Fork(pid, ppid, tid, ptid, misc, typ == RECORD_EXIT)
    t = struct.unpack_from("<Q", buf, end + o_time)[0] if o_time < 0 else 0
    tail = (-o_time if o_time < 0 else 0)
    tail = max(tail, -o_tid if o_tid < 0 else 0)
    # the sample_id trailer follows the payload: the name ends before it (NUL-padded anyway)
    if typ == RECORD_COMM:
        pid, tid = struct.unpack_from("<ii", buf, off + 8)
        return t, Comm(pid, tid, _cstr(buf, off + 16, end), bool(misc & MISC_COMM_EXEC))
    if typ == RECORD_MMAP:
        pid, tid, start, length, pgoff = struct.unpack_from("<iiQQQ", buf, off + 8)
        name = _cstr(buf, off + 40, end)
        return t, Mmap(pid, tid, start, length, pgoff, name, (misc & MISC_CPUMODE) == MISC_KERNEL)
    if typ == RECORD_MMAP2:
        pid, tid, start, length, pgoff = struct.unpack_from("<iiQQQ", buf, off + 8)
        if misc & MISC_MMAP_BUILD_ID:
            bsize = buf[off + 40]
            bid: bytes | None = bytes(buf[off + 44 : off + 44 + min(bsize, 20)])
            ino = None
        else:
            bid = None
            ino = struct.unpack_from("<IIQQ", buf, off + 40)
        prot, flags = struct.unpack_from("<II", buf, off + 64)
        name = _cstr(buf, off + 72, end)
        return t, Mmap(pid, tid, start, length, pgoff, name, (misc & MISC_CPUMODE) == MISC_KERNEL, prot, flags,
                       bid, ino)
    if typ == RECORD_KSYMBOL:
        addr, length, ktype, kflags = struct.unpack_from("<QIHH", buf, off + 8)
        return t, Ksymbol(addr, length, _cstr(buf, off + 24, end), bool(kflags & 1))
    raise AssertionError(typ)


def read(path: str, events: list[int] | None = None, keep: Keep | None = None,
         tracepoint: Callable[[Records, np.ndarray, np.ndarray], dict[str, np.ndarray]] | None = None) -> Stacks:
    """Every sample of ``events`` (indices; None: all) that ``keep`` takes, in perf script's order.
    ``tracepoint(rec, record offsets, payload offsets)`` decodes payload columns kept in ``extra``."""
    with PerfFile(path) as f:
        wanted = [ev for ev in f.events if events is None or ev.index in events]
        for ev in f.events:
            if ev.sample_type & _UNSUPPORTED:
                raise PerfDataUnsupported("samples carry per-sample stack data (dwarf, LBR or read values)")
            if not ev.sample_type & S_TIME:
                raise PerfDataUnsupported("samples without times (perf script prints them in file order)")
        o_tid, o_time = _trailer(f)
        if o_time >= 0 and any(ev.sample_id_all for ev in f.events) is False:
            o_time = 0
        cols: dict[str, list[np.ndarray]] = {k: [] for k in ("event", "pid", "tid", "time", "cpu", "period", "pos",
                                                              "misc", "hash", "nr")}
        extra: dict[str, list[np.ndarray]] = {}
        side_t: list[int] = []
        side_p: list[int] = []
        side: list[Side] = []
        lost = 0
        plan: list[tuple[int, int, np.ndarray]] = []
        side_types = np.asarray(_SIDE, np.uint32)
        for rec in f.chunks():
            plan.append((rec.base, len(rec.buf), rec.offs))
            lost += rec.lost()
            is_side = np.isin(rec.types, side_types)
            for off, typ in zip(rec.offs[is_side].tolist(), rec.types[is_side].tolist(), strict=True):
                t, item = _side_record(rec, off, typ, o_tid, o_time)
                side_t.append(t)
                side_p.append(rec.base + off)
                side.append(item)
            for idx, c in samples(rec, f, wanted).items():
                ev = f.events[idx]
                lay = sample_layout(ev.sample_type)
                sel = np.ones(len(c.offs), bool) if keep is None else keep(c.pid, c.tid, c.time)
                if not sel.all():
                    c.offs, c.pid, c.tid, c.time, c.cpu, c.raw = (c.offs[sel], c.pid[sel], c.tid[sel], c.time[sel],
                                                                  c.cpu[sel], c.raw[sel])
                if not len(c.offs):
                    continue
                n = len(c.offs)
                if lay.callchain >= 0:
                    h = _chain_hash(rec, c.offs, lay.callchain)
                    cols["nr"].append(rec.u64[c.offs + lay.callchain].astype(np.int64))
                elif ev.sample_type & S_IP:
                    o_ip = 8 + (8 if ev.sample_type & S_IDENTIFIER else 0)
                    h = _mix(rec.u64[c.offs + o_ip] ^ U64(0x5A5A5A5A5A5A5A5A)
                             ^ (rec.u32[c.offs + 4] & np.uint32(7)).astype(U64) * U64(0xA24BAED4963EE407))
                    cols["nr"].append(np.ones(n, np.int64))
                else:
                    raise PerfDataUnsupported("samples without call chain or instruction pointer")
                cols["event"].append(np.full(n, idx, np.int64))
                # pid and tid are printed signed (-1: unknown)
                cols["pid"].append(np.where(c.pid >= 1 << 31, c.pid - (1 << 32), c.pid))
                cols["tid"].append(np.where(c.tid >= 1 << 31, c.tid - (1 << 32), c.tid))
                cols["time"].append(c.time)
                cols["cpu"].append(c.cpu)
                cols["period"].append(rec.u64[c.offs + lay.period].astype(np.int64) if lay.period >= 0
                                      else np.zeros(n, np.int64))
                cols["pos"].append(c.offs + rec.base)
                misc = (rec.u32[c.offs + 4] & np.uint32(0xFFFF)).astype(np.int64)
                cols["misc"].append(misc)
                cols["hash"].append(h)
                if tracepoint is not None:
                    for k, v in tracepoint(rec, c.offs, c.raw).items():
                        extra.setdefault(k, []).append(v)
    def cat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
        return np.concatenate(parts) if parts else np.zeros(0, dtype)

    c_ = {k: cat(v, np.uint64 if k == "hash" else np.int64) for k, v in cols.items()}
    ex = {k: np.concatenate(v) for k, v in extra.items()}
    st = np.asarray(side_t, np.uint64).astype(np.int64) if side_t else np.zeros(0, np.int64)
    sp = np.asarray(side_p, np.int64)
    # one time order: side-band and samples by (time, file position)
    n_s = len(c_["time"])
    t_all = np.concatenate([c_["time"], st])
    p_all = np.concatenate([c_["pos"], sp])
    order = np.lexsort((p_all, t_all.astype(np.uint64)))
    is_side = order >= n_s
    sample_order = order[~is_side]
    side_order = order[is_side] - n_s
    # how many samples come before each side-band record (in processing order)
    side_at = np.flatnonzero(is_side) - np.arange(int(is_side.sum()))
    for k in c_:
        c_[k] = c_[k][sample_order]
    ex = {k: v[sample_order] for k, v in ex.items()}
    side_sorted = [side[i] for i in side_order.tolist()]
    comm_ids, comm_of_sample, gen, kgen = _state(side_sorted, side_at, c_["pid"], c_["tid"])
    with np.errstate(over="ignore"):
        body = _mix(c_["hash"] ^ _mix(c_["pid"].astype(U64) * U64(0x9E3779B97F4A7C15)
                                      + gen.astype(U64) * U64(0xC2B2AE3D27D4EB4F)
                                      + kgen.astype(U64) * U64(0x165667B19E3779F9)))
    return Stacks(path, c_["event"], c_["pid"], c_["tid"], c_["time"], c_["cpu"], c_["period"], c_["pos"], c_["misc"],
                  body, comm_of_sample, gen, kgen, comm_ids, side_sorted, side_at, ex, lost, plan, c_["nr"])


def _state(side: list[Side], side_at: np.ndarray, pid: np.ndarray,
           tid: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """Each sample's thread name, process map generation and kernel generation, from the
    side-band records in processing order (``side_at[i]``: samples before record i)."""
    names: list[str] = ["swapper"]  # perf names the idle task (tid 0) before reading anything
    name_id: dict[str, int] = {"swapper": 0}
    comm_of: dict[int, int] = {0: 0}  # tid -> name id (set: perf's comm_set)
    # assignments (sample position, tid, name id) and generation bumps (sample position, pid)
    a_at: list[int] = [0]
    a_tid: list[int] = [0]
    a_name: list[int] = [0]
    g_at: list[int] = []
    g_pid: list[int] = []
    k_at: list[int] = []
    for item, at in zip(side, side_at.tolist(), strict=True):
        if isinstance(item, Comm):
            i = name_id.get(item.name)
            if i is None:
                i = name_id[item.name] = len(names)
                names.append(item.name)
            comm_of[item.tid] = i
            a_at.append(at)
            a_tid.append(item.tid)
            a_name.append(i)
        elif isinstance(item, Fork):
            if item.exit:
                continue
            parent = comm_of.get(item.ptid)
            comm_of.pop(item.tid, None)
            a_at.append(at)
            a_tid.append(item.tid)
            a_name.append(-1 if parent is None else parent)
            if parent is not None:
                comm_of[item.tid] = parent
            if item.pid == item.tid:  # a new process (or a reused leader id): new maps
                g_at.append(at)
                g_pid.append(item.pid)
        elif isinstance(item, Mmap):
            if item.kernel:
                k_at.append(at)
            else:
                g_at.append(at)
                g_pid.append(item.pid)
        else:
            k_at.append(at)
    n = len(pid)
    pos = np.arange(n, dtype=np.int64)
    # names: the last assignment of the sample's tid made before it
    comm = np.full(n, -1, np.int64)
    if a_at:
        at_a = np.asarray(a_at, np.int64)
        tid_a = np.asarray(a_tid, np.int64)
        nm_a = np.asarray(a_name, np.int64)
        o = np.lexsort((np.arange(len(at_a)), at_a, tid_a))
        key_a = tid_a[o] * (n + 1) + at_a[o]
        key_s = tid * (n + 1) + pos
        j = np.searchsorted(key_a, key_s, side="right") - 1
        ok = (j >= 0) & (tid_a[o][np.maximum(j, 0)] == tid)
        comm = np.where(ok, nm_a[o][np.maximum(j, 0)], -1)
    # threads never named: ":TID", as perf names a thread it only saw in samples
    unnamed = comm < 0
    if unnamed.any():
        for t in np.unique(tid[unnamed]).tolist():
            name = f":{t}"
            i = name_id.get(name)
            if i is None:
                i = name_id[name] = len(names)
                names.append(name)
            comm[unnamed & (tid == t)] = i
    gen = np.zeros(n, np.int64)
    if g_at:
        at_g = np.asarray(g_at, np.int64)
        pid_g = np.asarray(g_pid, np.int64)
        o = np.lexsort((at_g, pid_g))
        key_g = pid_g[o] * (n + 1) + at_g[o]
        key_s = pid * (n + 1) + pos
        # bumps of this pid at or before the sample's position (a record at position k precedes sample k)
        gen = np.searchsorted(key_g, key_s, side="right") - np.searchsorted(key_g, pid * (n + 1), side="left")
    kgen = np.searchsorted(np.asarray(k_at, np.int64), pos, side="right") if k_at else np.zeros(n, np.int64)
    return names, comm, gen.astype(np.int64), np.asarray(kgen, np.int64)


def chains(path: str, st: Stacks, reps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The call chains (or, without one, the instruction pointer behind a marker of the
    sample's own cpumode) of the samples at indices ``reps``: (offsets into the flat array, one
    more than reps), flat uint64 entries. Gathered a chunk at a time, every chain at once."""
    n = len(reps)
    pos = st.pos[reps]
    ev = st.event[reps]
    lens = np.zeros(n, np.int64)
    got: list[tuple[np.ndarray, np.ndarray]] = []  # (rep indices, their entries flattened) per chunk
    with PerfFile(path) as f:
        o_cc = np.full(len(f.events), -1, np.int64)
        o_ip = np.zeros(len(f.events), np.int64)
        for e in f.events:
            o_cc[e.index] = sample_layout(e.sample_type).callchain
            o_ip[e.index] = 8 + (8 if e.sample_type & S_IDENTIFIER else 0)
        bases = np.asarray([b for b, _, _ in st.plan], np.int64)
        chunk_of = np.searchsorted(bases, pos, side="right") - 1
        for ci in np.unique(chunk_of).tolist():
            base, size, offs = st.plan[ci]
            rec = next(f.again([(base, size, offs)]))
            mine = np.flatnonzero(chunk_of == ci)
            off = pos[mine] - base
            cc = o_cc[ev[mine]]
            has = cc >= 0
            nr = np.where(has, rec.u64[np.where(has, off + cc, 0)].astype(np.int64), 2)
            lens[mine] = nr
            total = int(nr.sum())
            first = np.cumsum(nr) - nr
            k = np.arange(total, dtype=np.int64) - np.repeat(first, nr)
            owner = np.repeat(np.arange(len(mine)), nr)
            # entries of a chain: 8 bytes each after its count; a chain-less sample: marker, then its ip
            addr = np.where(has[owner], off[owner] + cc[owner] + 8 + 8 * k, off[owner] + o_ip[ev[mine]][owner])
            vals = rec.u64[addr].astype(np.uint64)
            if not has.all():
                mode = st.misc[reps[mine]] & MISC_CPUMODE
                marker = np.where(mode == MISC_KERNEL, np.uint64(CONTEXT_KERNEL), np.uint64(CONTEXT_USER))
                first_of = (~has[owner]) & (k == 0)
                vals = np.where(first_of, marker[owner], vals)
            got.append((mine, vals))
    starts = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=starts[1:])
    flat = np.zeros(int(starts[-1]), np.uint64)
    for mine, vals in got:
        dest = np.repeat(starts[mine], lens[mine]) + (np.arange(len(vals)) - np.repeat(np.cumsum(lens[mine]) - lens[mine],
                                                                                       lens[mine]))
        flat[dest] = vals
    return starts, flat
