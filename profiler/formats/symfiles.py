"""Which file perf 6.1 reads a binary's symbols from, and the table read from it (formats layer).

For a mapped file perf tries, in order (``binary_type_symtab``): the debug file named by its
``.gnu_debuglink`` (next to it, in ``.debug/``, under ``/usr/lib/debug``), its copy in the
build-id cache (``~/.debug/.build-id/xx/...``: ``elf``, then ``debug``), ``/usr/lib/debug`` by
path (``PATH.debug``, ``PATH``) and by build id (``.build-id/xx/....debug``), the file itself,
then two distribution layouts. Where the binary has a build id (from perf.data's header, else
read from the file), a candidate with another build id is skipped. The first candidate with a
``.symtab`` gives the symbols; the first with a ``.dynsym`` the program headers and the PLT
(and the symbols when no candidate has a ``.symtab``). Everything is looked up inside the
process's mount namespace (``/proc/PID/root``), as perf does for a containerised target.

Tables are kept per process run, by the file's identity (device, inode, size, mtime): a 250 MB
TiDB or TiKV binary is read once, and the cpu-stacks and offcpu-stacks finishes of one capture
share it (a second reader waits for the first).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from profiler.formats import elfsyms
from profiler.formats.elf import Elf, ElfError
from profiler.formats.elfsyms import SymTable

DEBUG_DIR = "/usr/lib/debug"
_tables: dict[tuple[int, int, int, int, str], SymTable] = {}
_loading: dict[tuple[int, int, int, int, str], threading.Lock] = {}
_lock = threading.Lock()


def buildid_dir() -> str:
    """perf's build-id cache (``PERF_BUILDID_DIR``, else ``~/.debug``)."""
    return os.environ.get("PERF_BUILDID_DIR") or os.path.join(os.path.expanduser("~"), ".debug")


def _regular(path: str) -> bool:
    try:
        import stat

        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _debuglink(path: str) -> str | None:
    try:
        with Elf(path) as elf:
            sec = elf.section(".gnu_debuglink")
            if sec is None:
                return None
            data = elf.section_data(sec, 1 << 16)
    except (ElfError, OSError):
        return None
    z = data.find(b"\0")
    name = data[: z if z >= 0 else len(data)].decode("utf-8", "surrogateescape")
    return name or None


def candidates(name: str, build_id: str | None, root: str = "") -> list[str]:
    """The files perf tries for the binary mapped as ``name``, in its order (under ``root``)."""
    out: list[str] = []
    full = root + name
    here = os.path.dirname(name)
    if _regular(full):
        link = _debuglink(full)
        if link:
            for cand in (link, f"{here}/{link}", f"{here}/.debug/{link}", f"{DEBUG_DIR}{here}/{link}"):
                if _regular(root + cand if cand.startswith("/") else cand):
                    out.append(root + cand if cand.startswith("/") else cand)
                    break
    if build_id:
        link = f"{buildid_dir()}/.build-id/{build_id[:2]}/{build_id[2:]}"
        if _regular(root + link):
            out.append(root + link)
        else:
            out += [root + link + "/elf", root + link + "/debug"]
    out += [f"{root}{DEBUG_DIR}{name}.debug", f"{root}{DEBUG_DIR}{name}"]
    if build_id:
        out.append(f"{root}{DEBUG_DIR}/.build-id/{build_id[:2]}/{build_id[2:]}.debug")
    out.append(full)
    base = os.path.basename(name)
    out.append(f"{root}{here}/.debug/{base}")
    if name.startswith("/usr/lib/"):
        out.append(f"{root}{DEBUG_DIR}{name[4:]}")
    return out


def file_build_id(path: str) -> str | None:
    try:
        with Elf(path) as elf:
            return elf.build_id()
    except (ElfError, OSError):
        return None


@dataclass
class Found:
    syms: str  # the file the symbols come from
    runtime: str  # the file with .dynsym (program headers, PLT)


def find(name: str, build_id: str | None, root: str = "") -> Found | None:
    """The files perf would read for ``name`` (None: it finds none and names no frame of it)."""
    if build_id is None and _regular(root + name):
        build_id = file_build_id(root + name)
    syms = runtime = None
    for cand in candidates(name, build_id, root):
        if not _regular(cand):
            continue
        try:
            with Elf(cand) as elf:
                if build_id is not None and elf.build_id() != build_id:
                    continue
                has_symtab, has_dynsym = elfsyms.has_symtab(elf), elfsyms.has_dynsym(elf)
        except (ElfError, OSError):
            continue
        if syms is None and has_symtab:
            syms = cand
        if runtime is None and has_dynsym:
            runtime = cand
        if syms is not None and runtime is not None:
            break
    if syms is None and runtime is None:
        return None
    return Found(syms or runtime or "", runtime or syms or "")


def table(found: Found, demangle: bool = True) -> SymTable:
    """The symbol table of ``found``, read once per process run (by the files' identity)."""
    st = os.stat(found.syms)
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, found.runtime)
    with _lock:
        got = _tables.get(key)
        if got is not None:
            return got
        lock = _loading.setdefault(key, threading.Lock())
    with lock:
        with _lock:
            got = _tables.get(key)
        if got is not None:
            return got
        with Elf(found.syms) as syms, Elf(found.runtime) as runtime:
            t = elfsyms.load(syms, runtime, demangle)
        with _lock:
            _tables[key] = t
            _loading.pop(key, None)
        return t
