"""Rust symbol demangling in pure Python, for names perf left mangled (analyzers layer).

Two schemes:

- legacy: ``_ZN`` {<len><ident>} ``E`` with a trailing ``h<16 hex>`` hash component;
  ``$LT$``-style escapes and ``..`` inside identifiers.
- v0 (RFC 2603): ``_R`` <path> [<instantiating crate>] [vendor suffix]; paths, types, generic
  arguments, back-references, punycode identifiers.

Output follows the short form people read in profilers: no crate disambiguator hashes, no
legacy hash, closures as ``{closure#N}``. Anything that does not parse is returned unchanged.
"""

from __future__ import annotations

import re

__all__ = ["demangle", "demangle_legacy", "demangle_v0", "unescape_legacy"]

_LEGACY_ESCAPES = {
    "SP": "@", "BP": "*", "RF": "&", "LT": "<", "GT": ">", "LP": "(", "RP": ")", "C": ",",
}  # fmt: skip
_LEGACY_HASH = re.compile(r"^h[0-9a-f]{16}$")
_HEXDIGITS = frozenset("0123456789abcdefABCDEF")


MAX_SYMBOL = 16 << 10  # a longer "symbol" is left as it is (no demangling work on damage)


def demangle(name: str) -> str:
    """Demangle a Rust symbol (v0 or legacy); anything else comes back unchanged."""
    if len(name) > MAX_SYMBOL:
        return name
    if name.startswith("_R"):
        return demangle_v0(name) or name
    if name.startswith(("_ZN", "__ZN")):
        return demangle_legacy(name) or name
    return name


# ---------------------------------------------------------------------------------------------
# legacy


def unescape_legacy(ident: str, *, lenient: bool = False) -> str | None:
    """Decode a legacy Rust identifier (or a ``::`` path of them): ``$LT$`` and friends,
    ``$u20$``-style code points, ``..`` for ``::``, a leading ``_$`` for ``$``.

    An escape it does not know gives None, or with ``lenient`` the rest of the text verbatim.
    """
    if ident.startswith("_$"):
        ident = ident[1:]
    out: list[str] = []
    i = 0
    n = len(ident)
    while i < n:
        c = ident[i]
        if c == "$":
            j = ident.find("$", i + 1)
            esc = ident[i + 1 : j] if j > 0 else ""
            if esc in _LEGACY_ESCAPES:
                out.append(_LEGACY_ESCAPES[esc])
            elif esc.startswith("u") and 1 < len(esc) <= 7 and all(ch in _HEXDIGITS for ch in esc[1:]) \
                    and int(esc[1:], 16) <= 0x10FFFF:
                out.append(chr(int(esc[1:], 16)))
            elif lenient:
                out.append(ident[i:])
                break
            else:
                return None
            i = j + 1
        elif c == "." and ident.startswith("..", i):
            out.append("::")
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def demangle_legacy(name: str) -> str | None:
    """``_ZN3std2io5stdio6_print17h0123456789abcdefE`` -> ``std::io::stdio::_print``.

    Only names whose last component is the 17-character Rust hash are taken as Rust; a C++
    name perf failed to demangle is left alone (None).
    """
    s = name[1:] if name.startswith("__ZN") else name
    if not s.startswith("_ZN"):
        return None
    i = 3
    parts: list[str] = []
    n = len(s)
    while i < n and s[i] != "E":
        j = i
        while j < n and s[j].isdigit():
            j += 1
        if j == i or j - i > 9:  # no identifier is a billion characters long
            return None
        length = int(s[i:j])
        ident = s[j : j + length]
        if len(ident) != length:
            return None
        parts.append(ident)
        i = j + length
    if i >= n or not parts:
        return None
    suffix = s[i + 1 :]
    if suffix and not suffix.startswith("."):
        return None  # C++ parameters follow: not a Rust legacy name
    if not _LEGACY_HASH.match(parts[-1]):
        return None
    out = []
    for p in parts[:-1]:
        d = unescape_legacy(p)
        if d is None:
            return None
        out.append(d)
    return "::".join(out)


# ---------------------------------------------------------------------------------------------
# v0

_BASIC = {
    "a": "i8", "b": "bool", "c": "char", "d": "f64", "e": "str", "f": "f32", "h": "u8",
    "i": "isize", "j": "usize", "l": "i32", "m": "u32", "n": "i128", "o": "u128", "s": "i16",
    "t": "u16", "u": "()", "v": "...", "x": "i64", "y": "u64", "z": "!", "p": "_",
}  # fmt: skip
_SIGNED = {"a", "i", "l", "n", "s", "x"}


class _Invalid(Exception):
    pass


class _V0:
    """Recursive-descent printer over the v0 grammar; positions index into `s`."""

    MAX_DEPTH = 200

    def __init__(self, s: str, start: int) -> None:
        self.s = s
        self.i = start
        self.start = start
        self.depth = 0
        self.bound = 0  # lifetimes bound by enclosing for<...> binders

    def lifetime(self) -> str:
        n = self.base62()
        if n == 0:
            return "'_"
        depth = self.bound - n
        if depth < 0:
            raise _Invalid
        return "'" + chr(97 + depth) if depth < 26 else f"'_{depth}"

    def binder(self) -> str:
        count = self.opt_base62("G")
        if not count:
            return ""
        names = [("'" + chr(97 + self.bound + k)) if self.bound + k < 26 else f"'_{self.bound + k}" for k in range(count)]
        self.bound += count
        return "for<" + ", ".join(names) + "> "

    # -- lexing

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def next(self) -> str:
        if self.i >= len(self.s):
            raise _Invalid
        c = self.s[self.i]
        self.i += 1
        return c

    def eat(self, c: str) -> bool:
        if self.peek() == c:
            self.i += 1
            return True
        return False

    def base62(self) -> int:
        if self.eat("_"):
            return 0
        x = 0
        while True:
            c = self.next()
            if c == "_":
                return x + 1
            if c.isdigit():
                d = ord(c) - 48
            elif "a" <= c <= "z":
                d = ord(c) - 97 + 10
            elif "A" <= c <= "Z":
                d = ord(c) - 65 + 36
            else:
                raise _Invalid
            x = x * 62 + d

    def opt_base62(self, tag: str) -> int:
        return self.base62() + 1 if self.eat(tag) else 0

    def decimal(self) -> int:
        j = self.i
        if self.peek() == "0":
            self.i += 1  # no leading zeros: "0" stands alone ("00u" is 0 then "0u")
            return 0
        while self.i < len(self.s) and self.s[self.i].isdigit():
            self.i += 1
        if j == self.i or self.i - j > 9:  # a length or version of a billion: not a real symbol
            raise _Invalid
        return int(self.s[j : self.i])

    def ident(self) -> tuple[str, int]:
        dis = self.opt_base62("s")
        return self.undisambiguated(), dis

    def undisambiguated(self) -> str:
        puny = self.eat("u")
        n = self.decimal()
        self.eat("_")
        raw = self.s[self.i : self.i + n]
        if len(raw) != n:
            raise _Invalid
        self.i += n
        if puny:
            return _punycode(raw)
        return raw

    def backref(self) -> int:
        pos = self.start + self.base62()
        if pos >= self.i - 1:
            raise _Invalid
        return pos

    def _at(self, pos: int, fn: object, *args: object) -> str:
        saved = self.i
        self.i = pos
        try:
            return fn(*args)  # type: ignore[operator, no-any-return]
        finally:
            self.i = saved

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > self.MAX_DEPTH:
            raise _Invalid

    # -- grammar

    def path(self, value: bool) -> str:
        self._enter()
        try:
            c = self.next()
            if c == "C":
                name, _ = self.ident()
                return name
            if c == "M":
                self.opt_base62("s")
                self.path(False)  # the impl's own path: not printed
                return "<" + self.type_() + ">"
            if c == "X":
                self.opt_base62("s")
                self.path(False)
                t = self.type_()
                return "<" + t + " as " + self.path(False) + ">"
            if c == "Y":
                t = self.type_()
                return "<" + t + " as " + self.path(False) + ">"
            if c == "N":
                ns = self.next()
                if not ns.isalpha():
                    raise _Invalid
                parent = self.path(value)
                name, dis = self.ident()
                if ns.isupper():
                    kind = {"C": "closure", "S": "shim"}.get(ns, ns)
                    inner = f"{kind}:{name}" if name else kind
                    return f"{parent}::{{{inner}#{dis}}}"
                return f"{parent}::{name}" if name else parent
            if c == "I":
                base = self.path(value)
                args = []
                while not self.eat("E"):
                    args.append(self.generic_arg())
                sep = "::<" if value else "<"
                return base + sep + ", ".join(args) + ">"
            if c == "B":
                return self._at(self.backref(), self.path, value)
            raise _Invalid
        finally:
            self.depth -= 1

    def generic_arg(self) -> str:
        if self.eat("L"):
            return self.lifetime()
        if self.eat("K"):
            return self.const()
        return self.type_()

    def const(self) -> str:
        if self.eat("B"):
            return self._at(self.backref(), self.const)
        t = self.next()
        if t == "p":
            return "_"
        neg = t in _SIGNED and self.eat("n")
        j = self.i
        while self.peek() and self.peek() != "_":
            self.i += 1
        hexs = self.s[j : self.i]
        if not self.eat("_"):
            raise _Invalid
        v = int(hexs, 16) if hexs else 0
        if t == "b":
            return "true" if v == 1 else "false"
        if t == "c":
            return repr(chr(v))
        num = f"-{v}" if neg else str(v)
        return f"{num}: {_BASIC[t]}" if t in _BASIC else num

    def type_(self) -> str:
        self._enter()
        try:
            c = self.peek()
            if c in _BASIC:
                self.i += 1
                return _BASIC[c]
            self.i += 1
            if c == "R" or c == "Q":
                lt = self.lifetime() if self.eat("L") else "'_"
                amp = "&" if lt == "'_" else "&" + lt + " "
                return amp + ("mut " if c == "Q" else "") + self.type_()
            if c == "P":
                return "*const " + self.type_()
            if c == "O":
                return "*mut " + self.type_()
            if c == "A":
                t = self.type_()
                return f"[{t}; {self.const()}]"
            if c == "S":
                return "[" + self.type_() + "]"
            if c == "T":
                items = []
                while not self.eat("E"):
                    items.append(self.type_())
                return "(" + items[0] + ",)" if len(items) == 1 else "(" + ", ".join(items) + ")"
            if c == "F":
                return self.fn_sig()
            if c == "D":
                return self.dyn()
            if c == "B":
                return self._at(self.backref(), self.type_)
            self.i -= 1
            return self.path(False)
        finally:
            self.depth -= 1

    def fn_sig(self) -> str:
        saved = self.bound
        prefix = self.binder()
        if self.eat("U"):
            prefix += "unsafe "
        if self.eat("K"):
            if self.eat("C"):
                abi = "C"
            else:
                abi = self.undisambiguated().replace("_", "-")
            prefix += f'extern "{abi}" '
        args = []
        while not self.eat("E"):
            args.append(self.type_())
        ret = self.type_()
        self.bound = saved
        out = prefix + "fn(" + ", ".join(args) + ")"
        return out if ret == "()" else out + " -> " + ret

    def dyn(self) -> str:
        saved = self.bound
        prefix = self.binder()
        traits = []
        while not self.eat("E"):
            t = self.path(False)
            binds = []
            while self.eat("p"):
                name = self.undisambiguated()
                binds.append(f"{name} = {self.type_()}")
            if binds:
                t = t[:-1] + ", " + ", ".join(binds) + ">" if t.endswith(">") else t + "<" + ", ".join(binds) + ">"
            traits.append(t)
        self.bound = saved
        if not self.eat("L"):
            raise _Invalid
        self.base62()
        return "dyn " + prefix + " + ".join(traits)


def _punycode(raw: str) -> str:
    basic, sep, rest = raw.rpartition("_")
    text = (basic + "-" + rest) if sep else ("-" + raw)
    try:
        return text.encode("ascii").decode("punycode")
    except (UnicodeError, ValueError):
        raise _Invalid from None


def demangle_v0(name: str) -> str | None:
    """``_RNvCs15kBYyAo9fc_7mycrate4main`` -> ``mycrate::main``; None when it does not parse."""
    s = name[1:] if name.startswith("__R") else name
    if not s.startswith("_R"):
        return None
    p = _V0(s, 2)
    try:
        if p.peek().isdigit():
            p.decimal()  # encoding version
        out = p.path(True)
        if p.peek() and p.peek().isupper():
            p.path(False)  # instantiating crate: not printed
    except (_Invalid, IndexError, RecursionError, ValueError, OverflowError, MemoryError):
        return None
    tail = s[p.i :]
    if tail and tail[0] not in ".$":
        return None
    return out
