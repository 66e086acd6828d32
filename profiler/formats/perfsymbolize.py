"""Frames of perf.data call chains named as perf script 6.1 names them (formats layer).

Given the samples of ``perfstacks.py`` and one call chain per distinct body, this replays the
side-band records in perf's order to know each process's maps when its samples were taken
(perf's ``maps__fixup_overlappings``: a new mapping cuts the ones it overlaps; a new process
starts with a copy of its parent's), then names every entry of the chains:

- context markers switch between user and kernel addresses (the chain starts in user mode);
  any other marker (a guest's) makes perf drop the whole chain; at most 127 entries are kept;
- a user address is looked up in its process's maps: anonymous and ``[heap]``/``[stack]``
  mappings keep the address as is (an executable one is named ``/tmp/perf-PID.map``, perf's
  JIT map file); other files translate it to a file offset (``address - start + pgoff``) and
  look it up in the file's symbol table (``symfiles.py``; the vDSO's is read from this
  process's own memory, the image every process of this kernel maps);
- a kernel address in the kernel's map (``[kernel.kallsyms]``, from ``_text`` to ``_etext``)
  is named from kallsyms (``kallsyms.py``): ``/proc/kallsyms`` when the capture's kernel is
  this one (same build id, or perf.data has none), else perf's build-id cache copy;
- a frame perf prints with its file offset shows that offset, a kernel or unmapped one its
  address; the symbol's offset follows perf's rule.

What this does not name the way perf would, it says: the samples are marked ``unsupported``
with the reason (a JIT map file perf would read, a kernel module or BPF program, a vmlinux
perf would prefer to kallsyms, a Java-style symbol) and the caller has perf script name them.
"""

from __future__ import annotations

import ctypes
import io
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from profiler.formats import elfsyms, kallsyms, symfiles
from profiler.formats.elf import Elf, ElfError
from profiler.formats.elfsyms import SymTable
from profiler.formats.perfstacks import MISC_FORK_EXEC, Fork, Ksymbol, Mmap, Stacks

CONTEXT_HV = (1 << 64) - 32
CONTEXT_KERNEL = (1 << 64) - 128
CONTEXT_USER = (1 << 64) - 512
CONTEXT_MAX = (1 << 64) - 4095
MAX_STACK = 127  # perf script's default --max-stack
MAP_HUGETLB = 0x40000
PROT_EXEC = 4
MODE_USER, MODE_KERNEL, MODE_HV = 0, 1, 2
KERNEL_DSO = "[kernel.kallsyms]"


@dataclass
class Dso:
    name: str  # as perf prints it
    kind: str  # "file", "vdso", "kernel", "none" (a name perf never loads symbols for)
    path: str = ""  # the mapping's path, for "file"
    pid: int = -1  # the process that mapped it first (its mount namespace)
    build_id: str | None = None
    table: SymTable | None = None
    loaded: bool = False
    go: Callable[[int], tuple[str, int] | None] | None = None  # a stripped Go binary's own table


@dataclass
class Frames:
    """Named call-chain entries of each body, flattened: ``starts[i]:starts[i+1]`` are body i's."""

    starts: np.ndarray
    addr: np.ndarray  # what perf prints in the address column
    dso: np.ndarray  # index in ``dsos`` (-1: unmapped, printed [unknown])
    sym: np.ndarray  # symbol index in the dso's table (-1: unknown; -2 - k: ``names[k]``)
    off: np.ndarray  # offset in the symbol
    dsos: list[Dso]
    names: list[str] = field(default_factory=list)
    unsupported: dict[int, str] = field(default_factory=dict)  # body index -> why perf script must name it


class Unsupported(Exception):
    """A whole file this does not symbolize as perf would (a vmlinux perf would read first...)."""


@dataclass
class _Map:
    start: int
    end: int
    pgoff: int
    dso: int
    identity: bool


def _is_anon(name: str, flags: int) -> bool:
    return name == "//anon" or name.startswith(("/dev/zero", "/anon_hugepage")) or bool(flags & MAP_HUGETLB)


def _is_no_dso(name: str) -> bool:
    return name.startswith(("[stack", "/SYSV")) or name == "[heap]"


class Symbolizer:
    """Names the frames of one perf.data's samples (build ids from its header)."""

    def __init__(self, st: Stacks, build_ids: dict[tuple[bool, str], str], root_of: Callable[[int], str] | None = None,
                 go_tables: Callable[[str], Callable[[int], tuple[str, int] | None] | None] | None = None,
                 kernel_build_id: str | None = None) -> None:
        self.st = st
        self.build_ids = build_ids
        self.root_of = root_of or (lambda pid: "")
        self.go_tables = go_tables
        self.kernel_build_id = kernel_build_id
        self.dsos: list[Dso] = []
        self._dso_of: dict[tuple[str, str], int] = {}
        self.kernel_map: tuple[int, int, int] | None = None  # start, end, pgoff (the _text address then)
        self.kernel_ranges: list[tuple[int, int, str]] = []  # modules and BPF programs: perf script names them
        self._kernel_span: tuple[int, int] | None = None  # the kernel's map once its symbols are loaded
        self.ksymbols: list[Ksymbol] = []  # the capture's own kernel symbol records (BPF programs)

    # -- dsos
    def _dso(self, name: str, kind: str, pid: int) -> int:
        key = (kind, name)
        i = self._dso_of.get(key)
        if i is None:
            i = self._dso_of[key] = len(self.dsos)
            bid = self.build_ids.get((False, name))
            self.dsos.append(Dso(name, kind, name, pid, bid))
        return i

    def _map_of(self, m: Mmap, pid: int) -> _Map:
        name = m.filename
        anon = _is_anon(name, m.flags)
        no_dso = _is_no_dso(name)
        if (anon or no_dso) and m.prot & PROT_EXEC:
            name = f"/tmp/perf-{pid}.map"
            return _Map(m.start, m.start + m.length, m.pgoff, self._dso(name, "jit", pid), True)
        if name in ("[vdso]", "[vdso32]", "[vdsox32]"):
            return _Map(m.start, m.start + m.length, 0, self._dso("[vdso]", "vdso", pid), False)
        kind = "none" if anon or no_dso or name.startswith("[") else "file"
        return _Map(m.start, m.start + m.length, m.pgoff, self._dso(name, kind, pid), anon or no_dso)

    # -- maps, replayed in perf's order
    def snapshots(self, need: set[tuple[int, int]]) -> dict[tuple[int, int], tuple[np.ndarray, ...]]:
        """The maps of each (pid, generation) in ``need``: (starts, ends, pgoffs, dsos, identity)."""
        maps: dict[int, list[_Map]] = {}
        gen: dict[int, int] = {}
        out: dict[tuple[int, int], tuple[np.ndarray, ...]] = {}

        def snap(pid: int) -> None:
            key = (pid, gen.get(pid, 0))
            if key in need:
                ms = sorted(maps.get(pid, []), key=lambda m: m.start)
                out[key] = (np.asarray([m.start for m in ms], np.uint64), np.asarray([m.end for m in ms], np.uint64),
                            np.asarray([m.pgoff for m in ms], np.uint64), np.asarray([m.dso for m in ms], np.int64),
                            np.asarray([m.identity for m in ms], bool))

        for pid, g in need:
            if g == 0:
                snap(pid)
        for item in self.st.side:
            if isinstance(item, Mmap):
                if item.kernel:
                    self._kernel_mmap(item)
                    continue
                new = self._map_of(item, item.pid)
                maps[item.pid] = _insert(maps.setdefault(item.pid, []), new)
                gen[item.pid] = gen.get(item.pid, 0) + 1
                snap(item.pid)
            elif isinstance(item, Fork):
                if not item.exit and item.pid == item.tid:
                    p, pp = item.pid, item.ppid
                    maps[p] = [] if item.misc & MISC_FORK_EXEC or p == pp else [_copy(x) for x in maps.get(pp, [])]
                    gen[p] = gen.get(p, 0) + 1
                    snap(p)
            elif isinstance(item, Ksymbol):
                self.ksymbols.append(item)
                self.kernel_ranges.append((item.addr, item.addr + item.length, f"kernel symbol {item.name}"))
        return out

    def _kernel_mmap(self, m: Mmap) -> None:
        if m.filename.startswith(KERNEL_DSO):
            self.kernel_map = (m.start, m.start + m.length, m.pgoff)
        else:
            self.kernel_ranges.append((m.start, m.start + m.length, f"kernel module {m.filename}"))

    # -- naming
    def frames(self, reps: np.ndarray, starts: np.ndarray, flat: np.ndarray) -> Frames:
        st = self.st
        # the distinct (pid, generation) of the bodies, and each body's
        _u, first, body_pg = np.unique(np.stack([st.pid[reps], st.gen[reps]], axis=1), axis=0, return_index=True,
                                       return_inverse=True) if len(reps) else (None, np.zeros(0, np.int64),
                                                                               np.zeros(0, np.int64))
        pg = list(zip(st.pid[reps][first].tolist(), st.gen[reps][first].tolist(), strict=True))
        snaps = self.snapshots(set(pg))
        n = len(reps)
        lens = np.diff(starts)
        body_of = np.repeat(np.arange(n), lens)
        is_marker = flat >= np.uint64(CONTEXT_MAX)
        unsupported: dict[int, str] = {}
        # the cpumode in effect at each entry: the last marker at or before it in its chain (user at its start)
        mode_val = np.where(flat == np.uint64(CONTEXT_KERNEL), MODE_KERNEL,
                            np.where(flat == np.uint64(CONTEXT_HV), MODE_HV, MODE_USER))
        bad_marker = is_marker & (flat != np.uint64(CONTEXT_KERNEL)) & (flat != np.uint64(CONTEXT_USER)) \
            & (flat != np.uint64(CONTEXT_HV))
        idx = np.arange(len(flat))
        first_of_body = np.zeros(len(flat), bool)
        first_of_body[starts[:-1][lens > 0]] = True
        mode = np.full(len(flat), MODE_USER, np.int64)
        if len(flat):
            src = np.maximum.accumulate(np.where(is_marker | first_of_body, idx, -1))
            mode = np.where(is_marker[src], mode_val[src], MODE_USER)
        entry = ~is_marker
        # at most MAX_STACK entries per chain; a chain with a guest marker prints nothing
        rank = np.cumsum(entry) - 1
        base_rank = np.concatenate([[0], np.cumsum(entry)])[starts[:-1]]
        keep = entry & ((rank - np.repeat(base_rank, lens)) < MAX_STACK)
        if bad_marker.any():
            for b in np.unique(body_of[bad_marker]).tolist():
                keep[starts[b] : starts[b + 1]] = False
        addr = flat.copy()
        dso = np.full(len(flat), -1, np.int64)
        mapip = flat.copy()
        # user entries: the process's maps at the body's generation
        user = keep & (mode == MODE_USER)
        # each body's snapshot, then the user entries grouped by it (one pass, not one per snapshot)
        body_snap = np.asarray(body_pg, np.int64).ravel()
        for k, sel in _groups(body_snap[body_of], user):
            got = snaps.get(pg[k])
            if got is None:
                continue
            ms, me, mpg, md, mid = got
            if not len(ms):
                continue
            ip = flat[sel]
            j = np.searchsorted(ms, ip, side="right") - 1
            ok = (j >= 0) & (ip < me[np.maximum(j, 0)])
            jj = np.maximum(j, 0)
            dm = np.where(ok, md[jj], -1)
            ident = mid[jj]
            mip = np.where(ok & ~ident, ip - ms[jj] + mpg[jj], ip)
            dso[sel] = dm
            mapip[sel] = mip
            addr[sel] = np.where((dm >= 0), mip, ip)
        # kernel entries
        kern = keep & (mode == MODE_KERNEL)
        sym = np.full(len(flat), -1, np.int64)
        off = np.zeros(len(flat), np.uint64)
        names: list[str] = []
        if kern.any():
            kd = self._kernel_entries(flat, kern, body_of, unsupported, sym, off, names, st.kgen[reps][body_of][kern])
            dso[kern] = kd
        for d, sel in _groups(dso, keep & (dso >= 0)):
            t, why = self._table(d)
            if why is None and t is not None and t.failed:
                why = f"perf's loading of {self.dsos[d].name} stops part way (its names then depend on its own tree)"
            if why is not None:
                for b in np.unique(body_of[sel]).tolist():
                    unsupported.setdefault(b, why)
                continue
            if t is None:
                continue
            a = mapip[sel]
            s = t.lookup(a)
            amb = t.ambiguous(a)
            if amb.any():  # held by two symbols at once: what perf's tree meets first (-2: not known)
                walked = t.resolve(a[amb]) if self.dsos[d].kind in ("file", "vdso") else np.full(int(amb.sum()), -2)
                s[amb] = np.where(walked != -2, walked, s[amb])
                amb[amb] = walked == -2
                if amb.any():
                    for b in np.unique(body_of[sel][amb]).tolist():
                        unsupported.setdefault(b, f"an address in {self.dsos[d].name} inside two symbols at once "
                                                  "(perf's answer depends on its symbol tree)")
            hit = s >= 0
            ss = np.maximum(s, 0)
            sst, sen = t.bounds(ss)
            o = np.where(hit, np.where(a < sen, a - sst, a), np.uint64(0))
            sym[sel] = s
            off[sel] = o
            dd = self.dsos[d]
            if dd.go is not None and not hit.all():
                self._go_names(sel, hit, a, dd, sym, off, names)
        return _frames(starts, keep, addr, dso, sym, off, self.dsos, names, unsupported)

    def _go_names(self, sel: np.ndarray, hit: np.ndarray, a: np.ndarray, dd: Dso, sym: np.ndarray, off: np.ndarray,
                  names: list[str]) -> None:
        where = sel[~hit]  # sel: the entries' indices
        uniq, inv = np.unique(a[~hit], return_inverse=True)
        got_sym = np.full(len(uniq), -1, np.int64)
        got_off = np.zeros(len(uniq), np.uint64)
        assert dd.go is not None
        for k, fo in enumerate(uniq.tolist()):
            r = dd.go(int(fo))
            if r is not None:
                got_sym[k] = -2 - len(names)
                names.append(r[0])
                got_off[k] = r[1]
        sym[where] = got_sym[inv.ravel()]
        off[where] = got_off[inv.ravel()]

    def _kernel_entries(self, flat: np.ndarray, kern: np.ndarray, body_of: np.ndarray, unsupported: dict[int, str],
                        sym: np.ndarray, off: np.ndarray, names: list[str], kgen: np.ndarray) -> np.ndarray:
        ip = flat[kern]
        d = np.full(len(ip), -1, np.int64)
        named = self._bpf_entries(ip, kern, d, sym, off, names, kgen)
        if self.kernel_map is not None:
            ks, ke, _ = self.kernel_map
            kd = self._dso(KERNEL_DSO, "kernel", -1)
            t, _why = self._table(kd)
            if t is not None and self._kernel_span is not None:
                # perf fits the kernel's map to its symbols once they are loaded (map__fixup_start
                # and _end): from the first to the end of the last, past _etext (.init.text...)
                ks, ke = self._kernel_span
            inside = (ip >= np.uint64(ks)) & (ip < np.uint64(ke))
            if inside.any():
                d[inside] = self._dso(KERNEL_DSO, "kernel", -1)
        for lo, hi, why in self.kernel_ranges:
            inside = (ip >= np.uint64(lo)) & (ip < np.uint64(hi)) & ~named
            if inside.any():
                for b in np.unique(body_of[kern][inside]).tolist():
                    unsupported.setdefault(b, why)
        return d

    def _bpf_entries(self, ip: np.ndarray, kern: np.ndarray, d: np.ndarray, sym: np.ndarray, off: np.ndarray,
                     names: list[str], kgen: np.ndarray) -> np.ndarray:
        """Kernel entries inside a BPF program registered by the capture's own ksymbol records,
        named as perf names them: ``name+0xoffset (name)``. The records are replayed up to each
        entry's sample (``kgen``: the kernel records before it), as perf keeps its kernel maps:
        a register makes a map unless one holds the address already, an unregister removes the
        map holding it. Named only where one map, made by one record, holds the address then;
        anything else (a record over a live map: perf adds the symbol to that map's binary) is
        left to perf script. Returns which entries of ``ip`` were named."""
        named = np.zeros(len(ip), bool)
        if not self.ksymbols:
            return named
        lo_all = np.asarray([k.addr for k in self.ksymbols], np.uint64)
        hi_all = lo_all + np.asarray([k.length for k in self.ksymbols], np.uint64)
        order = np.argsort(lo_all, kind="stable")
        j = np.searchsorted(lo_all[order], ip, side="right") - 1
        reach = np.maximum.accumulate(hi_all[order])
        cand = np.flatnonzero((j >= 0) & (ip < reach[np.maximum(j, 0)]))  # inside some record's range
        if not len(cand):
            return named
        kside = [x for x in self.st.side if isinstance(x, Ksymbol) or (isinstance(x, Mmap) and x.kernel)]
        where = np.flatnonzero(kern)
        live: list[tuple[int, int, str]] = []  # the maps made by register records: start, end, name
        dirty: set[int] = set()  # maps another record added a symbol to (by start)
        done = 0
        by_name: dict[str, int] = {}
        for e in sorted(cand.tolist(), key=lambda e: int(kgen[e])):
            g = int(kgen[e])
            for rec in kside[done:g]:
                if not isinstance(rec, Ksymbol):
                    continue
                holder = next((m for m in live if m[0] <= rec.addr < m[1]), None)
                if rec.unregister:
                    if holder is not None:
                        live.remove(holder)
                        dirty.discard(holder[0])
                elif holder is not None:
                    dirty.add(holder[0])
                elif rec.length:
                    live.append((rec.addr, rec.addr + rec.length, rec.name))
            done = max(done, g)
            a = int(ip[e])
            hold = [m for m in live if m[0] <= a < m[1]]
            if len(hold) != 1 or hold[0][0] in dirty:
                continue
            start, _end, name = hold[0]
            d[e] = self._dso(name, "bpf", -1)
            k = by_name.get(name)
            if k is None:
                k = by_name[name] = len(names)
                names.append(name)
            sym[where[e]] = -2 - k
            off[where[e]] = a - start
            named[e] = True
        return named

    def _table(self, d: int) -> tuple[SymTable | None, str | None]:
        dd = self.dsos[d]
        if dd.loaded:
            return dd.table, None
        dd.loaded = True
        if dd.kind == "kernel":
            dd.table = self._kallsyms()
        elif dd.kind == "jit":
            root = self.root_of(dd.pid)
            if os.path.exists(root + dd.name):
                dd.loaded = False
                return None, f"JIT symbols in {dd.name} (perf script reads them)"
        elif dd.kind == "vdso":
            dd.table = _vdso_table()
        elif dd.kind == "file":
            root = self.root_of(dd.pid)
            found = symfiles.find(dd.path, dd.build_id, root)
            if found is not None:
                try:
                    dd.table = symfiles.table(found)
                except (ElfError, OSError):
                    dd.table = None
            if self.go_tables is not None:
                dd.go = self.go_tables(dd.path)
        return dd.table, None

    def _kallsyms(self) -> SymTable | None:
        path = kallsyms.path_for(self.kernel_build_id)
        if path is None:
            return None
        table, module, named = kallsyms.load(path)
        kept = kallsyms.kept_modules(path, table, module) if module.any() else module
        if kept.any():
            lo = int(table.starts[kept].min())
            self.kernel_ranges.append((lo, (1 << 64) - 1, "kernel modules (perf script names them)"))
        delta = 0
        if self.kernel_map is not None and self.kernel_map[2] and "_text" in named:
            delta = named["_text"] - self.kernel_map[2]
        table = kallsyms.shifted(table, delta)
        own = np.flatnonzero(~module)
        if len(own):
            self._kernel_span = (int(table.starts[own[0]]), int(table.ends[own[-1]]))
        return table


def _groups(key: np.ndarray, where: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(k, the indices i where ``where[i]`` and ``key[i] == k``, ascending) for each k >= 0, ascending:
    one sort, instead of a pass over every entry for each k."""
    idx = np.flatnonzero(where & (key >= 0))
    if not len(idx):
        return
    k_ = key[idx]
    # a stable sort of small keys is a radix sort in numpy: linear, not n log n
    order = np.argsort(k_.astype(np.uint16) if int(k_.max()) < 1 << 16 else k_, kind="stable")
    idx = idx[order]
    ks = key[idx]
    cut = np.flatnonzero(ks[1:] != ks[:-1]) + 1
    for lo, hi in zip(np.concatenate([[0], cut]).tolist(), np.concatenate([cut, [len(idx)]]).tolist(), strict=True):
        yield int(ks[lo]), idx[lo:hi]


def _frames(starts: np.ndarray, keep: np.ndarray, addr: np.ndarray, dso: np.ndarray, sym: np.ndarray, off: np.ndarray,
            dsos: list[Dso], names: list[str], unsupported: dict[int, str]) -> Frames:
    """Only the kept entries, with ``starts`` recounted."""
    kept_before = np.concatenate([[0], np.cumsum(keep)])
    new_starts = kept_before[starts]
    return Frames(new_starts, addr[keep], dso[keep], sym[keep], off[keep], dsos, names, unsupported)


def _copy(m: _Map) -> _Map:
    return _Map(m.start, m.end, m.pgoff, m.dso, m.identity)


def _insert(maps: list[_Map], new: _Map) -> list[_Map]:
    """perf's maps__fixup_overlappings then insert: maps the new one overlaps are cut around it."""
    out: list[_Map] = []
    for m in maps:
        if m.end <= new.start or m.start >= new.end:
            out.append(m)
            continue
        if m.start < new.start:
            out.append(_Map(m.start, new.start, m.pgoff, m.dso, m.identity))
        if new.end < m.end:
            out.append(_Map(new.end, m.end, m.pgoff + (new.end - m.start), m.dso, m.identity))
    out.append(new)
    return out


_vdso: SymTable | None = None
_vdso_lock = threading.Lock()


def _vdso_table() -> SymTable | None:
    """The vDSO's symbols, from this process's own mapping of it (the kernel gives every process
    one image; perf reads its own the same way)."""
    global _vdso
    with _vdso_lock:
        if _vdso is not None:
            return _vdso
        try:
            with open("/proc/self/maps", encoding="ascii", errors="replace") as fh:
                line = next((ln for ln in fh if ln.rstrip().endswith("[vdso]")), None)
            if line is None:
                return None
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            image = ctypes.string_at(lo, hi - lo)
        except (OSError, ValueError):
            return None
        try:
            with elf_of_bytes(image, "[vdso]") as elf:
                _vdso = elfsyms.load(elf, elf)
        except ElfError:
            return None
        return _vdso


def elf_of_bytes(data: bytes, name: str) -> Elf:
    """An ELF image held in memory, read through the same reader as files."""
    elf = Elf.__new__(Elf)
    elf.path = name
    elf._fh = io.BytesIO(data)
    elf._read_header()
    return elf
