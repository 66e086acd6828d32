"""Symbol names demangled the way perf 6.1 demangles them (formats layer).

perf (Debian's build, without libbfd) passes every symbol it loads through libiberty's
``cplus_demangle`` with no options: C++ names lose their parameter lists and return types
(``SQL_SELECT::test_quick_select``, ``foo<int>``), ``std::string`` stays short, and Rust names,
legacy (``_ZN...17h<hash>E``) or v0 (``_R...``), are demangled by libiberty's Rust demangler
without their hashes. What it cannot demangle it tries as OCaml (``camlFoo__bar`` ->
``Foo.bar``), then as a Java signature (a name holding ``)``).

The same libiberty is on most hosts that have perf, inside binutils' shared libbfd, which
exports ``cplus_demangle``; it is called through ctypes, so names come out byte for byte as
perf prints them. Without it, C++ names go through the C++ runtime's ``__cxa_demangle``
(libiberty's demangler too, but with parameters) and are cut back to the bare name: the same
text for ordinary functions; template functions' return types and operator names are cut by
bracket counting, which can differ in corner cases; Rust names are then left mangled (the
folder demangles them itself). :func:`exact` says which is in use.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import re
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["backend", "demangle", "exact"]

_LIBBFD_GLOBS = ("/usr/lib/x86_64-linux-gnu/libbfd*.so*", "/usr/lib/aarch64-linux-gnu/libbfd*.so*",
                 "/usr/lib64/libbfd*.so*", "/usr/lib/libbfd*.so*", "/lib64/libbfd*.so*")
_lock = threading.Lock()


@functools.cache
def _libiberty() -> Callable[[bytes], bytes | None] | None:
    for pattern in _LIBBFD_GLOBS:
        for path in sorted(glob.glob(pattern)):
            try:
                lib = ctypes.CDLL(path)
                fn = lib.cplus_demangle
            except (OSError, AttributeError):
                continue
            fn.restype = ctypes.c_void_p
            fn.argtypes = [ctypes.c_char_p, ctypes.c_int]
            free = ctypes.CDLL(None).free
            free.argtypes = [ctypes.c_void_p]

            def call(name: bytes, fn: Any = fn, free: Any = free) -> bytes | None:
                p = fn(name, 0)
                if not p:
                    return None
                try:
                    return ctypes.string_at(p)
                finally:
                    free(p)

            return call
    return None


@functools.cache
def _cxa() -> Callable[[bytes], bytes | None] | None:
    path = ctypes.util.find_library("stdc++")
    if path is None:
        return None
    try:
        fn = ctypes.CDLL(path).__cxa_demangle
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    free = ctypes.CDLL(None).free
    free.argtypes = [ctypes.c_void_p]

    def call(name: bytes) -> bytes | None:
        status = ctypes.c_int(0)
        p = fn(name, None, None, ctypes.byref(status))
        if not p or status.value != 0:
            return None
        try:
            return _bare(ctypes.string_at(p))
        finally:
            free(p)

    return call


def backend() -> str:
    if _libiberty() is not None:
        return "libiberty"
    return "c++ runtime" if _cxa() is not None else "none"


def _bare(full: bytes) -> bytes:
    """``void ns::f<int>(int) const`` -> ``ns::f<int>``: what libiberty prints without DMGL_PARAMS
    (the parameter list cut at its first top-level parenthesis, a return type before the name
    dropped). Operator names (``operator()``, ``operator<``) are stepped over."""
    s = full.decode("utf-8", "surrogateescape")
    depth, i, cut, last_space = 0, 0, len(s), -1
    while i < len(s):
        if s.startswith("operator", i) and (i == 0 or not (s[i - 1].isalnum() or s[i - 1] == "_")):
            j = i + 8
            if s.startswith("()", j):
                j += 2
            while j < len(s) and s[j] in "<>=!+-*/%&|^~[],":
                j += 1
            i = j
            continue
        c = s[i]
        if c == "(" and depth == 0 and not s.startswith("(anonymous namespace)", i):
            cut = i
            break
        if c in "<([{":
            depth += 1
        elif c in ">)]}":
            depth -= 1
        elif c == " " and depth == 0:
            last_space = i
        i += 1
    name = s[:cut]
    if 0 <= last_space < cut and not name[last_space + 1 :].startswith(("operator", "[")):
        head = name[:last_space]
        if not head.endswith("operator"):
            name = name[last_space + 1 :]
    return name.encode("utf-8", "surrogateescape")


_OCAML = re.compile(r"caml[A-Z]")
_HEXCHARS = frozenset("0123456789abcdefABCDEF")


def _ocaml(sym: str) -> str | None:
    if not _OCAML.match(sym):
        return None
    out: list[str] = []
    i, n = 4, len(sym)
    while i < n:
        if sym[i] == "_" and i + 1 < n and sym[i + 1] == "_":
            out.append(".")
            i += 2
        elif sym[i] == "$" and i + 2 < n and sym[i + 1] in _HEXCHARS and sym[i + 2] in _HEXCHARS:
            out.append(chr(int(sym[i + 1 : i + 3], 16)))
            i += 3
        else:
            out.append(sym[i])
            i += 1
    return "".join(out)


_JAVA_BASE = {"B": "byte", "C": "char", "D": "double", "F": "float", "I": "int", "J": "long", "S": "short",
              "Z": "boolean"}
_PREFIX, _CLASS, _FUNC, _TYPE, _CTYPE, _CLASS_SUB = range(6)


def _java(sym: str) -> str | None:
    """perf's Java signature demangler without the return type (``JAVA_DEMANGLE_NORET``), as it
    runs on any name holding a ``)`` that nothing else demangled: ``Lpkg/Cls;meth(I)V`` ->
    ``pkg.Cls.meth(int)``; None when the name does not parse as one (most names)."""
    end = sym.rfind(")")
    if end < 0:
        return None
    out: list[str] = []
    mode = _PREFIX
    array = 0
    narg = 0
    for i in range(end + 1):
        c = sym[i]
        if c == "L":
            if mode in (_PREFIX, _CTYPE):
                if mode == _CTYPE:
                    if narg:
                        out.append(", ")
                    narg += 1
                mode = _CLASS if mode == _PREFIX else _CLASS_SUB
            else:
                out.append(c)
        elif c in _JAVA_BASE:
            if mode == _TYPE:
                if narg:
                    out.append(", ")
                out.append(_JAVA_BASE[c])
                out.extend("[]" for _ in range(array))
                array = 0
                narg += 1
            else:
                out.append(c)
        elif c == "V":
            if mode == _TYPE:
                out.append("void")
                out.extend("[]" for _ in range(array))
                array = 0
            else:
                out.append(c)
        elif c == "[":
            if mode != _TYPE:
                return None
            array += 1
        elif c == "(":
            if mode != _FUNC:
                return None
            out.append(c)
            mode = _TYPE
        elif c == ")":
            if mode != _TYPE:
                return None
            out.append(c)
            narg = 0
        elif c == ";":
            if mode not in (_CLASS, _CLASS_SUB):
                return None
            if i + 1 < len(sym) and sym[i + 1].isascii() and sym[i + 1].isalpha() and mode == _CLASS:
                out.append(".")
            mode = _FUNC if mode == _CLASS else _TYPE
        elif c == "/":
            if mode not in (_CLASS, _FUNC, _CLASS_SUB):
                return None
            out.append(".")
        else:
            out.append(c)
    return "".join(out)


@functools.lru_cache(maxsize=1 << 16)
def demangle(name: str) -> str:
    """``name`` as perf 6.1 stores it."""
    if not name:
        return name
    raw = name.encode("utf-8", "surrogateescape")
    call = _libiberty() or _cxa()
    out = None
    if call is not None and (raw[:1] == b"_" or _libiberty() is not None):
        with _lock:
            out = call(raw)
    if out is not None:
        return out.decode("utf-8", "surrogateescape")
    oc = _ocaml(name)
    if oc is not None:
        return oc
    jv = _java(name)
    return jv if jv is not None else name


def exact() -> bool:
    """Whether names come out as perf's (libiberty found), not approximated."""
    return _libiberty() is not None
