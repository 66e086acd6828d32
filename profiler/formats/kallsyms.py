"""The kernel's symbols from a kallsyms file, as perf 6.1 loads them (formats layer).

``/proc/kallsyms`` (or a copy perf keeps in its build-id cache) lists ``ADDRESS TYPE NAME``
lines, module symbols with a ``\\t[module]`` suffix. perf keeps the text, weak, data and bss
symbols (types T, W, D, B in either case), drops ARM mapping symbols (``$``), sorts them by
address, lets each one end where the next starts (the last symbol before a change between the
kernel and a module ends at the page boundary past it instead), keeps one symbol per address
(the one with a size, else weak loses, global wins, fewer leading underscores, the longest
name), and moves the result by the difference between the relocation symbol's address when
the capture was taken (``_text``, in perf.data's kernel map) and now.

The file is parsed with numpy: the address is the first 16 hex digits of a line (8 on a 32-bit
kernel), the type the character after it; names are decoded only for symbols frames land in.
"""

from __future__ import annotations

import os
import struct
import threading

import numpy as np

from profiler.formats.elfsyms import PAGE, STB_GLOBAL, STB_LOCAL, STB_WEAK, SymTable

KEEP_TYPES = b"TtWwDdBb"
_cache: dict[str, tuple[SymTable, np.ndarray, dict[str, int]]] = {}
_lock = threading.Lock()


class KallsymsError(Exception):
    pass


def _hex_digits() -> np.ndarray:
    table = np.full(256, 255, np.uint8)
    for i, c in enumerate(b"0123456789abcdef"):
        table[c] = i
    for i, c in enumerate(b"ABCDEF"):
        table[c] = 10 + i
    return table


_HEX = _hex_digits()


def parse(data: bytes) -> tuple[SymTable, np.ndarray, dict[str, int]]:
    """(the table, whether each symbol is a module's, addresses of a few symbols by name) of a kallsyms text."""
    buf = np.frombuffer(data, np.uint8)
    if not len(buf):
        raise KallsymsError("empty kallsyms")
    nl = np.flatnonzero(buf == 10)
    starts = np.concatenate([[0], nl[:-1] + 1]) if len(nl) else np.zeros(1, np.int64)
    ends = nl if len(nl) else np.asarray([len(buf)])
    if len(nl) and nl[-1] != len(buf) - 1:
        starts = np.concatenate([starts, [nl[-1] + 1]])
        ends = np.concatenate([ends, [len(buf)]])
    width = int(np.argmax(buf[: min(len(buf), 64)] == 32))
    if width not in (8, 16):
        raise KallsymsError("kallsyms lines do not start with an address")
    ok = (ends - starts) > width + 2
    starts, ends = starts[ok], ends[ok]
    cols = starts[:, None] + np.arange(width)[None, :]
    digits = _HEX[buf[cols]]
    if (digits == 255).any():
        bad = (digits == 255).any(axis=1)
        starts, ends, digits = starts[~bad], ends[~bad], digits[~bad]
    packed = np.zeros((len(starts), 8), np.uint8)
    packed[:, 8 - width // 2 :] = (digits[:, 0::2] << 4) | digits[:, 1::2]
    addr = packed.view(">u8").ravel().astype(np.uint64)
    typ = buf[starts + width + 1]
    name_at = starts + width + 3
    keep = np.isin(typ, np.frombuffer(KEEP_TYPES, np.uint8)) & (buf[np.minimum(name_at, len(buf) - 1)] != ord("$"))
    named: dict[str, int] = {}
    for want in (b"_text", b"_stext", b"_etext"):
        hit = np.flatnonzero((ends - name_at == len(want)) & (buf[np.minimum(name_at, len(buf) - 1)] == want[0]))
        for i in hit.tolist():
            if data[int(name_at[i]) : int(ends[i])] == want:
                named[want.decode()] = int(addr[i])
                break
    addr, typ, name_at, line_end = addr[keep], typ[keep], name_at[keep], ends[keep]
    # module symbols: a tab in the name ("name\t[module]")
    tab = np.zeros(len(addr), bool)
    has_tab = b"\t" in data
    if has_tab:
        tabs = np.flatnonzero(buf == 9)
        line_of_tab = np.searchsorted(line_end, tabs)
        valid = line_of_tab < len(line_end)
        tab[line_of_tab[valid]] = tabs[valid] > name_at[line_of_tab[valid]]
    order = np.argsort(addr, kind="stable")
    addr, typ, name_at, line_end, tab = addr[order], typ[order], name_at[order], line_end[order], tab[order]
    # names end at the newline (the module suffix is part of the name, as perf reads it)
    text = data.replace(b"\n", b"\0")
    ends_out = addr.copy()
    if len(addr):
        nxt = np.empty_like(addr)
        nxt[:-1] = addr[1:]
        nxt[-1] = (addr[-1] + np.uint64(PAGE - 1)) // np.uint64(PAGE) * np.uint64(PAGE) + np.uint64(PAGE)
        cross = np.zeros(len(addr), bool)
        cross[:-1] = tab[:-1] != tab[1:]
        page_end = (addr + np.uint64(PAGE)) // np.uint64(PAGE) * np.uint64(PAGE)  # roundup(end + 4096, 4096)
        ends_out = np.where(cross, page_end, nxt)
    upper = (typ >= ord("A")) & (typ <= ord("Z"))
    binds = np.where((typ == ord("W")) | (typ == ord("w")), STB_WEAK, np.where(upper, STB_GLOBAL, STB_LOCAL))
    table = SymTable(addr, ends_out, name_at.astype(np.int64), binds.astype(np.uint8), text, demangle=False)
    return table, tab, named


def load(path: str = "/proc/kallsyms") -> tuple[SymTable, np.ndarray, dict[str, int]]:
    """:func:`parse` of a kallsyms file, read once per process (the collectors' finishes share it)."""
    with _lock:
        got = _cache.get(path)
        if got is None:
            try:
                with open(path, "rb") as fh:
                    data = fh.read()
            except OSError as exc:
                raise KallsymsError(f"cannot read {path}: {exc.strerror or exc}") from None
            got = _cache[path] = parse(data)
        return got


def prefetch(path: str | None) -> None:
    """Read and parse ``path`` in a thread now, for a :func:`load` later: reading /proc/kallsyms
    is kernel time that runs beside the caller's own reading of the capture on another CPU."""
    if path is None or path in _cache:
        return

    def run() -> None:
        try:
            load(path)
        except KallsymsError:
            pass  # load() says so again when the symbols are needed

    threading.Thread(target=run, name="kallsyms", daemon=True).start()


def kept_modules(path: str, table: SymTable, module: np.ndarray, modules: str = "/proc/modules") -> np.ndarray:
    """Which module symbols of ``table`` (``module``: the mask :func:`parse` gives) perf 6.1
    keeps. With a kcore beside the kallsyms (``/proc/kcore``, readable) it keeps them all;
    without, it puts a module's symbols in that module's map, and drops those of a module with
    no map: maps come from ``/proc/modules`` (and the capture's own module records, which the
    caller leaves to perf script apart), so a ``[bpf]`` program listed in kallsyms, or a module
    when ``/proc/modules`` is missing, is named nothing."""
    kcore = os.path.join(os.path.dirname(path), "kcore")
    try:
        with open(kcore, "rb"):
            return module.copy()
    except OSError:
        pass
    try:
        with open(modules, "rb") as fh:
            mapped = {b"[" + ln.split(b" ", 1)[0] + b"]" for ln in fh.read().splitlines() if ln}
    except OSError:
        mapped = set()
    keep = np.zeros(len(module), bool)
    if not mapped:
        return keep
    for i in np.flatnonzero(module).tolist():
        name = table.raw_name(i).encode("utf-8", "surrogateescape")
        keep[i] = name[name.rfind(b"\t") + 1 :] in mapped
    return keep


def shifted(table: SymTable, delta: int) -> SymTable:
    """The table moved by ``-delta`` (the kernel was relocated since the capture)."""
    if not delta:
        return table
    d = np.uint64(delta % (1 << 64))
    out = SymTable(table.starts - d, table.ends - d, table.name_at, table.binds, table.strings, table.demangle)
    out._names, out._win = table._names, table._win
    return out


VMLINUX_PATHS = ("vmlinux", "/boot/vmlinux", "/boot/vmlinux-{r}", "/usr/lib/debug/boot/vmlinux-{r}",
                 "/lib/modules/{r}/build/vmlinux", "/usr/lib/debug/lib/modules/{r}/vmlinux",
                 "/usr/lib/debug/boot/vmlinux-{r}.debug")


def vmlinux() -> str | None:
    """A vmlinux perf would read the kernel's symbols from before kallsyms (its search list), if any."""
    release = os.uname().release
    for p in VMLINUX_PATHS:
        path = p.format(r=release)
        if os.path.isfile(path):
            return path
    return None


def host_build_id() -> str | None:
    """This kernel's build id (/sys/kernel/notes)."""
    try:
        with open("/sys/kernel/notes", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    pos = 0
    while pos + 12 <= len(data):
        namesz, descsz, typ = struct.unpack_from("<III", data, pos)
        pos += 12
        name = data[pos : pos + namesz].rstrip(b"\0")
        pos += (namesz + 3) & ~3
        desc = data[pos : pos + descsz]
        pos += (descsz + 3) & ~3
        if name == b"GNU" and typ == 3:
            return desc.hex()
    return None


def path_for(build_id: str | None) -> str | None:
    """The kallsyms perf script reads for a capture's kernel: this kernel's when the capture has
    no kernel build id or the same one, else its build-id cache copy (None: none, its frames
    stay unnamed)."""
    if build_id is None or build_id == host_build_id():
        return "/proc/kallsyms"
    from profiler.formats.symfiles import buildid_dir

    cached = f"{buildid_dir()}/[kernel.kallsyms]/{build_id}/kallsyms"
    return cached if os.path.isfile(cached) else None
