"""The bcc collectors' user frames when bcc's own symbolizer cannot run: named from the binaries'
symbol tables (the perf path's reader), checked against the dynamic linker's own answer (dladdr)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os

import pytest
from profiler.collectors.bcc import symbols


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def _dladdr(addr: int) -> str | None:
    """The symbol the dynamic linker itself names for an address of this process (independent of us)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    info = _DlInfo()
    if not libc.dladdr(ctypes.c_void_p(addr), ctypes.byref(info)) or not info.dli_sname:
        return None
    return info.dli_sname.decode()


def _addrs() -> list[int]:
    """Addresses inside functions of libc and of the interpreter (a few bytes past each start)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    fns = [libc.getpid, libc.qsort, ctypes.pythonapi.PyLong_FromLong, ctypes.pythonapi.PyObject_Repr]
    return [int(ctypes.cast(f, ctypes.c_void_p).value or 0) + 3 for f in fns]


def test_elf_names_agree_with_the_dynamic_linker() -> None:
    addrs = _addrs()
    want = [_dladdr(a) for a in addrs]
    assert all(want), want
    got = symbols.elf_names(os.getpid(), addrs)
    # dladdr reads .dynsym only; a .symtab or debug file may name an alias at the same address
    # (__getpid for getpid): the same function, so the dynamic name or one of its aliases
    for g, w in zip(got, want, strict=True):
        assert g == w or g.lstrip("_") == (w or "").lstrip("_") or g.startswith(w or "\0"), (got, want)


def test_an_address_in_no_mapping_or_no_symbol_keeps_what_is_known() -> None:
    # page 0 is never mapped; the [stack] mapping has no binary: bracketed, never a function name
    stack = next(int(ln.split("-")[0], 16) for ln in open("/proc/self/maps") if ln.rstrip().endswith("[stack]"))
    unmapped, on_stack = symbols.elf_names(os.getpid(), [16, stack + 8])
    assert unmapped == "[unknown]" and on_stack.startswith("[") and "stack" in on_stack


def _anonymous_code() -> int:
    """An address in an anonymous executable mapping of this process (what a JIT writes code to)."""
    import mmap

    m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    _KEEP.append(m)
    return ctypes.addressof(ctypes.c_char.from_buffer(m)) + 16


_KEEP: list[object] = []


def test_frames_in_binaries_never_wait_for_bccs_symbolizer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Frames inside binaries are named from their tables in this process: no symbolizer process."""
    sym = symbols.Symbols()
    monkeypatch.setattr(sym, "_start", lambda: pytest.fail("bcc's symbolizer started for frames in binaries"))
    try:
        got = sym.user(os.getpid(), _addrs())
    finally:
        sym.close()
    assert not any(n.startswith("[") for n in got), got
    assert sym.starts == 0 and sym.fallback is None


def test_without_bcc_the_symbolizer_says_why_and_still_names_frames(monkeypatch: pytest.MonkeyPatch) -> None:
    """An interpreter that cannot import bcc (a pyenv Python, say): no process is started for the
    frame outside any binary, the reason is recorded, and the other frames are named, not just
    their binaries."""
    monkeypatch.setattr(symbols, "bcc_importable", lambda: False)
    sym = symbols.Symbols()
    addrs = [*_addrs(), _anonymous_code()]
    try:
        got = sym.user(os.getpid(), addrs)
    finally:
        sym.close()
    assert sym.fallback is not None and "not importable" in sym.fallback
    assert sym.starts == 0
    assert not any(n.startswith("[") for n in got[:-1]), got
    assert got[-1].startswith("["), got
