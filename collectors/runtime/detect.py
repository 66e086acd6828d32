"""Which runtime built a target, from its executable (collectors layer) -> the manifest's ``runtime_info``.

Read through ``/proc/PID/exe`` (the binary the process runs, even in a container or deleted),
in this order, the first answer wins:

- Go: the ``.go.buildinfo`` section (profiler/formats/golang.py): the Go version and build settings
  (``-buildmode``, ``-trimpath``, ``CGO_ENABLED``, ``GOAMD64``, ``vcs.revision``...), the main
  package and module;
- JVM: the process maps ``libjvm.so``;
- Rust: the ``.comment`` section names ``rustc version ...``, or the read-only data holds the
  standard library's ``/rustc/<commit>/library/`` paths (panic locations; kept by strip);
- C++: ``libstdc++`` or ``libc++`` is linked (DT_NEEDED), or ``.comment`` says ``GCC``/``clang``
  and the data names ``libstdc++``;
- C: any other ELF executable.

Besides the runtime, what perf's stack walking and naming will give: the ELF type
(executable or PIE), whether a symbol table is there (stripped or not) and the build id.
Go keeps frame pointers (amd64 since Go 1.7; arm64 in later releases), so ``--call-graph fp`` walks
Go stacks; a stripped Go binary's frames are named from .gopclntab (collectors/runtime/gosym.py).
C and C++ built with ``-O2`` usually omit frame pointers (Debian's default before trixie), so fp
stacks of such code stop early; ``--call-graph dwarf`` walks them at a higher cost.
"""

from __future__ import annotations

import contextlib
import re

from profiler.bundle import RuntimeInfo
from profiler.formats import golang
from profiler.formats.elf import ET_DYN, ET_EXEC, SHT_NOBITS, Elf, ElfError

RODATA_SCAN = 64 << 20  # bytes of .rodata searched for Rust's standard library paths
MAX_VALUE = 200  # characters kept of each build setting (DefaultGODEBUG runs long)
_RUSTC = re.compile(r"rustc version (\S+)")
_GCC = re.compile(r"GCC: \(.*?\) (\S+)")
_CLANG = re.compile(r"clang version (\S+)")


def _maps_libs(pid: int) -> set[str]:
    libs: set[str] = set()
    with contextlib.suppress(OSError), open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            path = line.rsplit(" ", 1)[-1].strip()
            if path.startswith("/"):
                libs.add(path.rsplit("/", 1)[-1])
    return libs


def _rodata_has(elf: Elf, needle: bytes) -> bool:
    sec = elf.section(".rodata")
    if sec is None or sec.type == SHT_NOBITS:
        return False
    pos, end, step = sec.offset, sec.offset + min(sec.size, RODATA_SCAN), 8 << 20
    while pos < end:
        chunk = elf.read_at(pos, min(step + len(needle), end - pos))
        if needle in chunk:
            return True
        if len(chunk) < step:
            return False
        pos += step
    return False


def _binary(elf: Elf, info: RuntimeInfo) -> None:
    info.binary = {
        "type": "pie" if elf.type == ET_DYN and elf.section(".interp") is not None else
                "executable" if elf.type == ET_EXEC else "shared object" if elf.type == ET_DYN else str(elf.type),
        "stripped": not elf.has_symtab(),
        "build_id": elf.build_id(),
    }


def from_elf(elf: Elf, libs: set[str] | None = None) -> RuntimeInfo:
    """The runtime of one executable (``libs``: the libraries its process maps, when known)."""
    libs = libs or set()
    info = RuntimeInfo()
    _binary(elf, info)
    go = golang.buildinfo(elf)
    if go is not None:
        info.name, info.version, info.evidence = "go", go.version, "Go build info (.go.buildinfo)"
        info.build = {k: v[:MAX_VALUE] for k, v in go.settings.items()}
        if go.path:
            info.build["path"] = go.path
        if go.module.strip():
            info.build["module"] = go.module
        info.frame_pointers = True
        stripped = info.binary.get("stripped")
        info.symbols = ("none in .symtab (stripped): Go frames named from .gopclntab by the profiler"
                        if stripped else ".symtab")
        return info
    comments = elf.comment()
    needed = elf.needed()
    if any(lib.startswith("libjvm.so") for lib in libs):
        info.name, info.evidence = "jvm", "the process maps libjvm.so"
    else:
        rust = next((m.group(1) for c in comments if (m := _RUSTC.search(c))), None)
        if rust is not None:
            info.name, info.version, info.evidence = "rust", f"rustc {rust}", ".comment: rustc version"
        elif _rodata_has(elf, b"/rustc/"):
            info.name, info.evidence = "rust", "Rust standard library paths in .rodata"
        elif any(n.startswith(("libstdc++", "libc++")) for n in needed) or any(
                lib.startswith(("libstdc++", "libc++")) for lib in libs):
            info.name, info.evidence = "c++", "links the C++ standard library"
        else:
            info.name, info.evidence = "c", "an ELF executable without Go, Rust or C++ runtime"
    compiler = next((f"GCC {m.group(1)}" for c in comments if (m := _GCC.search(c))), None) or \
        next((f"clang {m.group(1)}" for c in comments if (m := _CLANG.search(c))), None)
    if compiler and info.version is None and info.name in ("c", "c++"):
        info.version = compiler
    if compiler:
        info.build["compiler"] = compiler
    info.symbols = "dynsym only (stripped)" if info.binary.get("stripped") else ".symtab"
    return info


def detect(pid: int) -> RuntimeInfo | None:
    """The runtime of a live process, or None when its executable cannot be read."""
    try:
        with Elf(f"/proc/{pid}/exe") as elf:
            return from_elf(elf, _maps_libs(pid))
    except (ElfError, OSError):
        return None
    except Exception:  # noqa: BLE001 - a strange binary must not stop a capture
        return None

