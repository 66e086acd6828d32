"""An ELF file's function symbols as perf 6.1 loads them (formats layer): the table frames are named from.

perf script names a user-space frame by the symbol holding its address in the symbol table it
loaded for that file (tools/perf/util/symbol-elf.c, symbol.c). To name frames the same way
without running it, the table is built by the same rules, in numpy:

- the symbols: ``.symtab`` of the first file perf would find with one (the binary, its
  debug file; see ``symfiles.py``), else ``.dynsym``; functions (``STT_FUNC``,
  ``STT_GNU_IFUNC``) and objects with a name and a section, and untyped labels
  (``STT_NOTYPE``, not hidden or internal, not absolute) in a section whose name holds "text"
  or "data"; never a symbol of a section that is not loaded (``SHF_ALLOC``) or an absolute one;
- addresses as file offsets: each value moved by its loadable segment's ``p_vaddr - p_offset``
  (else its section's ``sh_addr - sh_offset``), since a frame's address is its offset in the
  mapped file (``map_ip``);
- sorted by address, the input order kept between equal ones; a symbol without a size ends
  where the next one starts (the last one at the next page boundary past its page);
- of the symbols at one address, one is kept: the one with a size, else not weak, else
  global, else the fewest leading underscores, else the longest (demangled) name, else the
  first;
- the PLT: ``.rela.plt`` entries named ``<symbol>@plt``, one ``.plt`` entry each after the
  header (perf 6.1's rule, before .plt.sec was known to it).

A lookup takes the last symbol starting at or below the address that still holds it (an
address at a symbol's end belongs to the next one). Names are decoded and demangled
(``perfdemangle.py``) only for the symbols frames land in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from profiler.formats import perfdemangle, perftree
from profiler.formats.elf import PT_LOAD, SHT_DYNSYM, SHT_SYMTAB, Elf, ElfError

STT_NOTYPE, STT_OBJECT, STT_FUNC, STT_GNU_IFUNC = 0, 1, 2, 10
STB_LOCAL, STB_GLOBAL, STB_WEAK = 0, 1, 2
STV_INTERNAL, STV_HIDDEN = 1, 2
SHN_UNDEF, SHN_ABS = 0, 0xFFF1
SHF_ALLOC = 2
SHT_RELA, SHT_REL = 4, 9
PAGE = 4096
MAX_SYMTAB = 1 << 30  # a symbol or string table larger than this is not read (a corrupt header)


class Plt:
    """The PLT entries of a table, in address order: their bounds as arrays, each entry's
    ``(start, end, name)`` on demand (names decoded on first use: a large binary has thousands)."""

    def __init__(self, starts: np.ndarray | None = None, size: int = 0,
                 name_of: Callable[[int], str] | None = None) -> None:
        self.starts = starts if starts is not None else np.zeros(0, np.uint64)
        self.ends = self.starts + np.uint64(size)
        self._name_of = name_of
        self._names: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, k: int) -> tuple[int, int, str]:
        name = self._names.get(k)
        if name is None:
            name = self._names[k] = self._name_of(k) if self._name_of is not None else ""
        return int(self.starts[k]), int(self.ends[k]), name


@dataclass
class SymTable:
    """Symbols of one file by address (file offsets for user space, addresses for the kernel).

    Every loaded symbol is kept, sorted (ties in load order): of the symbols at one address,
    the one perf keeps is chosen when a lookup first lands there (``_winner``), so a table of
    300,000 symbols costs a sort, and names are decoded for the few symbols frames hit.
    """

    starts: np.ndarray  # uint64, sorted
    ends: np.ndarray  # uint64
    name_at: np.ndarray  # int64: offset of each name in ``strings``
    binds: np.ndarray  # uint8: STB_*
    strings: bytes
    demangle: bool = True
    plt: Plt = field(default_factory=Plt)  # (start, end, name): index len(starts) + k
    failed: bool = False  # perf's loading stopped part way: its first lookup finds nothing, later ones these
    fixed: np.ndarray | None = None  # symbols that went through perf's fixups (dedupe), None: all
    loaded: tuple[np.ndarray, tuple[int, ...], np.ndarray] | None = None  # perf's order: ``perftree.build``
    _names: dict[int, str] = field(default_factory=dict)
    _win: dict[int, int] = field(default_factory=dict)
    _regions: tuple[np.ndarray, np.ndarray] | None = None
    _tree: perftree.Tree | None = None

    def __len__(self) -> int:
        return len(self.starts)

    def raw_name(self, i: int) -> str:
        if i >= len(self.starts):
            return self.plt[i - len(self.starts)][2]
        at = int(self.name_at[i])
        end = self.strings.find(b"\0", at)
        return self.strings[at : end if end >= 0 else len(self.strings)].decode("utf-8", "surrogateescape")

    def name(self, i: int) -> str:
        """The symbol's name as perf prints it (demangled as perf demangles)."""
        got = self._names.get(i)
        if got is None:
            raw = self.raw_name(i)
            got = perfdemangle.demangle(raw) if self.demangle else raw
            if i >= len(self.starts):
                got += "@plt"
            self._names[i] = got
        return got

    def start(self, i: int) -> int:
        return self.plt[i - len(self.starts)][0] if i >= len(self.starts) else int(self.starts[i])

    def end(self, i: int) -> int:
        return self.plt[i - len(self.starts)][1] if i >= len(self.starts) else int(self.ends[i])

    def bounds(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Start and end of the symbols ``idx`` (valid indices, PLT entries included)."""
        n = len(self.starts)
        plt = idx >= n
        j = np.where(plt, 0, idx)
        st = self.starts[j] if n else np.zeros(len(idx), np.uint64)
        en = self.ends[j] if n else np.zeros(len(idx), np.uint64)
        if plt.any():
            ps, pe = self.plt.starts, self.plt.ends
            st = np.where(plt, ps[np.where(plt, idx - n, 0)], st)
            en = np.where(plt, pe[np.where(plt, idx - n, 0)], en)
        return st, en

    def ambiguous(self, addrs: np.ndarray) -> np.ndarray:
        """Addresses perf's answer for depends on the shape of its symbol tree: inside two
        symbols at once (a symbol without a size, stretched to the next one over the PLT
        entries added after it, or two overlapping sized symbols)."""
        if self._regions is None:
            self._regions = self._overlaps()
        lo, hi = self._regions
        if not len(lo) or not len(addrs):
            return np.zeros(len(addrs), bool)
        a = addrs.astype(np.uint64)
        k = np.searchsorted(lo, a, side="right") - 1
        return (k >= 0) & (a < hi[np.maximum(k, 0)])

    def _overlaps(self) -> tuple[np.ndarray, np.ndarray]:
        lo: list[np.ndarray] = []
        hi: list[np.ndarray] = []
        n = len(self.starts)
        if n > 1:
            # sized symbols overlapping the ones before them (other than at the same address)
            mx = np.maximum.accumulate(self.ends.astype(np.uint64))
            over = np.flatnonzero((self.starts[1:] < mx[:-1]) & (self.starts[1:] != self.starts[:-1])) + 1
            lo.append(self.starts[over].astype(np.uint64))
            hi.append(mx[over - 1])
        if len(self.plt) and n:
            # a symbol stretched over PLT entries
            k = np.searchsorted(self.starts, self.plt.starts, side="right").astype(np.int64) - 1
            kk = k[k >= 0]
            over_plt = self.ends[kk] > self.plt.starts[k >= 0]
            lo.append(self.starts[kk[over_plt]].astype(np.uint64))
            hi.append(self.ends[kk[over_plt]].astype(np.uint64))
        l_ = np.concatenate(lo) if lo else np.zeros(0, np.uint64)
        if not len(l_):
            return np.zeros(0, np.uint64), np.zeros(0, np.uint64)
        order = np.argsort(l_, kind="stable")
        return l_[order], np.maximum.accumulate(np.concatenate(hi)[order])

    def _winner(self, first: int, last: int) -> int:
        """perf's symbols__fixup_duplicate over the symbols ``first..last`` (one address)."""
        got = self._win.get(first)
        if got is None:
            win = first
            for k in range(first + 1, last + 1):
                win = _better(self, win, k)
            got = self._win[first] = win
        return got

    def lookup(self, addrs: np.ndarray) -> np.ndarray:
        """Index of the symbol holding each address, -1 where none does."""
        out = np.full(len(addrs), -1, np.int64)
        if not len(addrs):
            return out
        a = addrs.astype(np.uint64)
        if len(self.starts):
            i = np.searchsorted(self.starts, a, side="right").astype(np.int64) - 1
            ok = i >= 0
            j = np.where(ok, i, 0)
            first = np.searchsorted(self.starts, self.starts[j], side="left").astype(np.int64)
            dup = ok & (first != j)
            if self.fixed is not None:
                dup &= self.fixed[j]  # an unfixed duplicate stays in perf's tree: the first is found
            if dup.any():
                pairs = {(int(f), int(k)) for f, k in zip(first[dup].tolist(), j[dup].tolist(), strict=True)}
                win = {f: self._winner(f, k) for f, k in pairs}
                j = j.copy()
                j[dup] = [win[int(f)] for f in first[dup].tolist()]
            st, en = self.starts[j], self.ends[j]
            hold = ok & ((a < en) | ((st == en) & (a == st)))
            out = np.where(hold, j, -1)
        if len(self.plt):
            ps, pe = self.plt.starts, self.plt.ends
            k = np.searchsorted(ps, a, side="right").astype(np.int64) - 1
            kk = np.maximum(k, 0)
            inside = (k >= 0) & (a < pe[kk])
            out = np.where(inside, len(self.starts) + kk, out)
        return out

    def resolve(self, addrs: np.ndarray) -> np.ndarray:
        """What perf's own tree finds for each address (-1: nothing, ``[unknown]``; -2: not known
        here), for the addresses ``ambiguous`` names: by ``perftree.plt_rule`` where it holds,
        else by rebuilding the tree when it is small (``perftree.TREE_MAX``)."""
        a = addrs.astype(np.uint64)
        got = np.full(len(a), -2, np.int64)
        if self.loaded is None or self.failed or not len(self.starts):
            return got
        got = perftree.plt_rule(self, a)
        rest = got == -2
        if rest.any() and self._tree is None and len(self.starts) + len(self.plt) <= perftree.TREE_MAX:
            self._tree = perftree.build(self)
        if rest.any() and self._tree is not None:
            find = self._tree.find
            got[rest] = [find(x) for x in a[rest].tolist()]
        return got


_DT64 = {"<": np.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"), ("value", "<u8"),
                        ("size", "<u8")]),
         ">": np.dtype([("name", ">u4"), ("info", "u1"), ("other", "u1"), ("shndx", ">u2"), ("value", ">u8"),
                        ("size", ">u8")])}
_DT32 = {e: np.dtype([("name", e + "u4"), ("value", e + "u4"), ("size", e + "u4"), ("info", "u1"), ("other", "u1"),
                      ("shndx", e + "u2")]) for e in "<>"}


def _symbols(elf: Elf, kind: int) -> tuple[np.ndarray, bytes] | None:
    sec = next((s for s in elf.sections if s.type == kind and s.size > 0), None)
    if sec is None or sec.link >= len(elf.sections):
        return None
    dt = (_DT64 if elf.bits == 64 else _DT32)[elf.endian]
    data = elf.section_data(sec, MAX_SYMTAB)
    rows = np.frombuffer(data, dtype=dt, count=len(data) // dt.itemsize)
    strings = elf.section_data(elf.sections[sec.link], MAX_SYMTAB)
    return rows, strings


def has_symtab(elf: Elf) -> bool:
    return any(s.type == SHT_SYMTAB for s in elf.sections)


def has_dynsym(elf: Elf) -> bool:
    return any(s.type == SHT_DYNSYM for s in elf.sections)


def _pass(syms: Elf, runtime: Elf, kind: int) -> tuple[np.ndarray, ...] | None:
    """One of perf's two loading passes (``.symtab``, then ``.dynsym``): the symbols kept, in
    table order, as (values, sizes, name offsets, bindings, strings, aborted). perf stops a pass
    at a kept symbol whose section does not exist (a stale index left by a binary rewriter):
    the symbols before it stay, unfixed, and loading is reported failed."""
    got = _symbols(syms, kind)
    if got is None:
        return None
    rows, strings = got
    typ = rows["info"] & 0xF
    vis = rows["other"] & 0x3
    named = (rows["name"] != 0) & (rows["shndx"] != SHN_UNDEF)
    func_or_obj = named & ((typ == STT_FUNC) | (typ == STT_GNU_IFUNC) | (typ == STT_OBJECT))
    label = named & (typ == STT_NOTYPE) & (rows["shndx"] != SHN_ABS) & (vis != STV_HIDDEN) & (vis != STV_INTERNAL)
    keep = (func_or_obj | label) & (rows["shndx"] != SHN_ABS)  # absolute symbols are skipped
    secs = syms.sections
    nsec = len(secs)
    shndx = rows["shndx"].astype(np.int64)
    aborted = False
    bad = np.flatnonzero(keep & (shndx >= nsec))
    if len(bad):
        keep[int(bad[0]):] = False
        aborted = True
    alloc = np.array([bool(s.flags & SHF_ALLOC) for s in secs] + [False], bool)
    textdata = np.array([("text" in s.name or "data" in s.name) for s in secs] + [False], bool)
    idx = np.where(keep, shndx, nsec)
    keep &= alloc[idx] & (~label | textdata[idx])
    rows, shndx = rows[keep], shndx[keep]
    value = rows["value"].astype(np.uint64)
    value = value - _adjustment(syms, runtime, value, shndx)
    return (value, rows["size"].astype(np.uint64), rows["name"].astype(np.int64), (rows["info"] >> 4).astype(np.uint8),
            np.frombuffer(strings, np.uint8), np.asarray(aborted))


def _fix_ends(starts: np.ndarray, ends: np.ndarray, zero: np.ndarray) -> np.ndarray:
    """perf's symbols__fixup_end: a symbol without a size ends where the next one (in address
    order) starts; the last one at the page boundary after the next one past it."""
    if not len(starts):
        return ends
    nxt = np.empty_like(starts)
    nxt[:-1] = starts[1:]
    nxt[-1] = (starts[-1] + np.uint64(PAGE - 1)) // np.uint64(PAGE) * np.uint64(PAGE) + np.uint64(PAGE)
    return np.where(zero, nxt, ends)


def load(syms: Elf, runtime: Elf, demangle: bool = True) -> SymTable:
    """The table perf 6.1 builds from ``syms`` (the file with ``.symtab``, else the one with
    ``.dynsym``) with ``runtime`` (the binary: program headers, the PLT): the ``.symtab``
    symbols, fixed up, then the ``.dynsym`` ones added and the whole fixed up again."""
    first = _pass(syms, runtime, SHT_SYMTAB)
    second = _pass(syms, runtime, SHT_DYNSYM) if not (first is not None and bool(first[5])) else None
    if first is None and second is None:
        starts = np.zeros(0, np.uint64)
        table = SymTable(starts, starts.copy(), np.zeros(0, np.int64), np.zeros(0, np.uint8), b"", demangle)
        return _with_plt(table, runtime)
    parts = [p for p in (first, second) if p is not None]
    failed = any(bool(p[5]) for p in parts)
    strings = b"".join(p[4].tobytes() for p in parts)
    base = 0
    vals, sizes, names, binds, passes = [], [], [], [], []
    for k, p in enumerate(parts):
        vals.append(p[0])
        sizes.append(p[1])
        names.append(p[2] + base)
        binds.append(p[3])
        passes.append(np.full(len(p[0]), k, np.int8))
        base += len(p[4])
    value = np.concatenate(vals)
    size = np.concatenate(sizes)
    pas = np.concatenate(passes)
    order = np.argsort(value, kind="stable")  # ties: the .symtab pass first, each in table order
    starts = value[order]
    ends = starts + size[order]
    pas = pas[order]
    raw_ends = ends.copy()
    zero = ends == starts
    fixed = np.ones(len(starts), bool)
    if len(parts) == 2 or not failed:
        # the first pass is fixed up on its own (unless it failed), the second over everything
        p0 = pas == 0
        if not (first is not None and bool(first[5])):
            ends0 = _fix_ends(starts[p0], ends[p0], zero[p0])
            ends[p0] = ends0
        if len(parts) == 2 and not bool(parts[1][5]):
            ends = _fix_ends(starts, ends, ends == starts)
        elif len(parts) == 2:
            fixed = pas == 0  # the failed second pass's symbols stay as loaded
    if failed and len(parts) == 1 and first is not None:
        fixed[:] = False
    table = SymTable(starts, ends, np.concatenate(names)[order], np.concatenate(binds)[order].astype(np.uint8),
                     strings, demangle)
    table.failed = failed
    table.fixed = fixed
    if not failed:
        ins = np.empty(len(order), np.int64)
        ins[order] = np.arange(len(order), dtype=np.int64)  # each symbol's place in address order, in perf's order
        table.loaded = (ins, tuple(len(p[0]) for p in parts), raw_ends)
    return _with_plt(table, runtime)


def _adjustment(syms: Elf, runtime: Elf, value: np.ndarray, shndx: np.ndarray) -> np.ndarray:
    """``p_vaddr - p_offset`` of the loadable segment holding each value (perf adjusts every
    user-space symbol so), else ``sh_addr - sh_offset`` of the symbol's section."""
    out = np.zeros(len(value), np.uint64)
    done = np.zeros(len(value), bool)
    for seg in runtime.segments:
        size = max(seg.memsz, seg.filesz)
        if seg.type != PT_LOAD or not size:
            continue
        inside = ~done & (value >= np.uint64(seg.vaddr)) & (value < np.uint64(seg.vaddr + size))
        out[inside] = np.uint64((seg.vaddr - seg.offset) % (1 << 64))
        done |= inside
    if not done.all():
        secs = syms.sections
        delta = np.array([(s.addr - s.offset) % (1 << 64) for s in secs], np.uint64)
        rest = ~done
        out[rest] = delta[shndx[rest]]
    return out


def _underscores(name: str) -> int:
    return len(name) - len(name.lstrip("_"))


def _better(t: SymTable, a: int, b: int, ends: np.ndarray | None = None) -> int:
    """perf's choose_best_symbol between two symbols at one address: the index kept (their
    sizes from ``ends``, else the table's)."""
    e = t.ends if ends is None else ends
    la, lb = int(e[a] - t.starts[a]), int(e[b] - t.starts[b])
    if lb == 0 and la > 0:
        return a
    if la == 0 and lb > 0:
        return b
    binds = t.binds
    wa, wb = binds[a] == STB_WEAK, binds[b] == STB_WEAK
    if wb and not wa:
        return a
    if wa and not wb:
        return b
    ga, gb = binds[a] == STB_GLOBAL, binds[b] == STB_GLOBAL
    if ga and not gb:
        return a
    if gb and not ga:
        return b
    na, nb = t.name(a), t.name(b)
    ua, ub = _underscores(na), _underscores(nb)
    if ub > ua:
        return a
    if ua > ub:
        return b
    if len(na.encode("utf-8", "surrogateescape")) >= len(nb.encode("utf-8", "surrogateescape")):
        return a
    return b


def _with_plt(t: SymTable, elf: Elf) -> SymTable:
    """perf 6.1's PLT symbols: ``.plt`` entries after the header, one per ``.rela.plt`` (or
    ``.rel.plt``) entry, named after its dynamic symbol with ``@plt``, inserted after the fixups."""
    try:
        secs = elf.sections
        dyn = next((i for i, s in enumerate(secs) if s.type == SHT_DYNSYM), None)
        rel = next((s for s in secs if s.name == ".rela.plt"), None) or next((s for s in secs if s.name == ".rel.plt"), None)
        plt = next((s for s in secs if s.name == ".plt"), None)
        if dyn is None or rel is None or plt is None or rel.link != dyn or not rel.entsize:
            return t
        if rel.type not in (SHT_RELA, SHT_REL):
            return t
        got = _symbols(elf, SHT_DYNSYM)
        if got is None or not got[1]:
            return t
        rows, strings = got
        data = elf.section_data(rel, MAX_SYMTAB)
        word = 8 if elf.bits == 64 else 4
        if rel.entsize % word:
            return t
        words = np.frombuffer(data, elf.endian + ("u8" if word == 8 else "u4"), len(data) // word)
        info = words[: len(words) // (rel.entsize // word) * (rel.entsize // word)].reshape(-1, rel.entsize // word)[:, 1]
        symidx = (info >> np.uint64(32)) if word == 8 else (info >> np.uint32(8))
        entry = plt.entsize
        off = plt.offset + entry  # the header is one entry long on x86
        sym_of = symidx.tolist()
        name_at = rows["name"]

        def name_of(k: int) -> str:
            si = sym_of[k]
            if si >= len(rows):
                return ""
            at = int(name_at[si])
            end = strings.find(b"\0", at)
            return strings[at : end if end >= 0 else len(strings)].decode("utf-8", "surrogateescape")

        starts = np.uint64(off) + np.arange(len(sym_of), dtype=np.uint64) * np.uint64(entry)  # in address order
    except (ElfError, IndexError, ValueError):
        return t
    t.plt = Plt(starts, entry, name_of)
    return t
