"""Frame naming: one perf script frame line (or one symbol) -> the name a folded stack shows (analyzers layer).

The rules of inferno-collapse-perf / stackcollapse-perf.pl (docs/flamegraph.md lists where
``compat="ours"`` differs): argument lists cut, ``;`` made ``:``, unknown symbols named after
their module, ``_[k]`` / ``_[j]`` / ``_[i]`` annotations; plus, in our mode, Rust symbols perf
left mangled are demangled (``demangle.py``, the one place Rust escapes are decoded) and Go's
``.abi0`` suffixes dropped (the names Go's own profiles use).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from profiler.analyzers.stacks.demangle import demangle, unescape_legacy

if TYPE_CHECKING:
    from profiler.analyzers.stacks.folding import FoldOptions

__all__ = [
    "FrameNamer", "fix_half_demangled_rust", "fold_stacks", "frame_name", "is_jit_module", "is_kernel_module",
    "strip_go_abi", "tidy_args", "tidy_args_perl",
]

_HEX = frozenset("0123456789abcdefABCDEF")
_RUST_HASH = re.compile(r"::h[0-9a-fA-F]{16}$")
GO_ABI0 = ".abi0"  # the suffix the Go linker gives assembly (ABI0) functions in the ELF symbol table


def fix_half_demangled_rust(name: str) -> str:
    """perf's demangler sometimes stops half-way on legacy Rust names.

    ``_$LT$std..fs..ReadDir$u20$as$u20$Iterator$GT$::next::h0123456789abcdef`` ->
    ``<std::fs::ReadDir as Iterator>::next``: drop the hash, turn ``..`` into ``::`` and the
    ``$xx$`` escapes into characters. Names without the trailing hash are left alone.
    """
    if len(name) < 17 or name[-17] != "h" or not _RUST_HASH.search(name):
        return name
    rest = name[:-17]
    if rest.endswith("::"):
        rest = rest[:-2]
    return unescape_legacy(rest, lenient=True) or rest  # lenient: never None


def tidy_args(func: str) -> str:
    """Cut a C++/Rust argument list: the first '(' outside <>, {} and [] brackets.

    Keeps Go method receivers (``net/http.(*Client).Do``: a '(' right after a '.') and C++
    ``(anonymous namespace)``. ';' would break the folded format and becomes ':'.
    """
    if ";" in func:
        func = func.replace(";", ":")
    if "(" not in func:
        return func
    depth = 0
    after_dot = -1
    for i, c in enumerate(func):
        if c in "<{[":
            depth += 1
        elif c in ">}])":
            depth -= 1
        elif c == "(":
            if depth == 0 and after_dot != i and not func.startswith("(anonymous namespace)", i):
                return func[:i]
            depth += 1
        elif c == ".":
            after_dot = i + 1
    return func


def tidy_args_perl(func: str) -> str:
    """stackcollapse-perf.pl's cut: everything from the first '(' (not a Go method, not an
    anonymous namespace), and quotes removed. Breaks Rust generics such as ``<(A, B) as T>``."""
    func = func.replace(";", ":")
    if not re.search(r"\.\(.*\)\.", func):
        func = re.sub(r"\((?!anonymous namespace\)).*", "", func)
    return func.replace('"', "").replace("'", "")


def _is_vmlinux(module: str) -> bool:
    i = module.rfind("vmlinux")
    if i < 0:
        return False
    return all(c.isascii() and (c.isalnum() or c in "-._") for c in module[i:])


def is_kernel_module(module: str) -> bool:
    """'[kernel.kallsyms]', '[nf_conntrack]', 'x.ko', '/boot/vmlinux-6.1' are the kernel."""
    return (module.startswith("[") or module.endswith(".ko") or _is_vmlinux(module)) and module != "[unknown]"


def is_jit_module(module: str) -> bool:
    return (module.startswith("/tmp/perf-") and module.endswith(".map")) or (
        "/jitted-" in module and module.endswith(".so")
    )


class FrameNamer:
    """Frame line -> tuple of folded names (root-most first), cached per distinct line."""

    def __init__(self, opts: FoldOptions) -> None:
        self.opts = opts
        self.tidy: Callable[[str], str] = tidy_args_perl if opts.compat == "perl" else tidy_args
        self.demangle = opts.compat == "ours"
        # stackcollapse-perf.pl has no Rust knowledge at all: --compat perl leaves even the legacy
        # names perf demangled half-way as perf printed them (inferno fixes those, and so do we)
        self.fix_rust = opts.compat != "perl"
        self.cache: dict[str, str] = {}  # frame line -> its names joined by ';' (root-most first)
        self.cache_java: dict[str, str] = {}

    def name(self, line: str, java: bool) -> tuple[str, ...]:
        # "<pc> <symbol>[+0x<off>] (<module>)": split like the reference does (first space,
        # last space) so that odd lines fold the same way.
        parts = line.lstrip().split(" ", 1)
        if len(parts) < 2:
            return ()
        pc = parts[0]
        rs = parts[1].rsplit(" ", 1)
        if len(rs) < 2:
            return ()
        rawfunc, module = rs[0].strip() or " ", rs[1]
        if len(module) < 2 or module[0] != "(" or module[-1] != ")":
            return ()
        module = module[1:-1]
        off = rawfunc.rfind("+0x")
        if off >= 0 and all(c in _HEX for c in rawfunc[off + 3 :]):
            rawfunc = rawfunc[:off]
        if rawfunc.startswith("("):
            return ()  # the reference skips these ("process names")
        if self.demangle and rawfunc.startswith(("_R", "_ZN")):
            rawfunc = demangle(rawfunc)
        if self.fix_rust:
            rawfunc = fix_half_demangled_rust(rawfunc)
        if self.demangle and rawfunc.endswith(GO_ABI0):
            rawfunc = strip_go_abi(rawfunc)
        opts = self.opts
        out: list[str] = []
        for func in rawfunc.split("->"):
            if func == "[unknown]":
                if module != "[unknown]":
                    base = module[module.rfind("/") + 1 :]
                    func = f"[{base} <{pc}>]" if opts.include_addrs else f"[{base}]"
                elif opts.include_addrs:
                    func = f"[unknown <{pc}>]"
            func = self.tidy(func)
            if java and func.startswith("L") and "/" in func:
                func = func[1:]
            if out:
                if "_[i]" not in func:
                    func += "_[i]"
            elif opts.annotate_kernel and is_kernel_module(module):
                func += "_[k]"
            elif opts.annotate_jit and is_jit_module(module) and "_[j]" not in func:
                func += "_[j]"
            out.append(func)
        return tuple(out)


def strip_go_abi(name: str) -> str:
    """``runtime.goexit.abi0`` -> ``runtime.goexit``: the ELF symbol table names a Go assembly
    function after its ABI, Go's own tables (pprof, ``go tool pprof``, a goroutine dump) do not.
    Without this, a perf and a pprof flame graph of one Go server name the same frame twice."""
    base = name[: -len(GO_ABI0)]
    return base if "." in base else name  # a Go name is package-qualified; a C one is left alone


def frame_name(symbol: str) -> str:
    """A bare symbol (an off-CPU frame, a pprof function) named as folding names it: demangled
    leftovers, Go ABI suffixes dropped, argument lists cut, no ';'."""
    if symbol.startswith(("_R", "_ZN")):
        symbol = demangle(symbol)
    elif symbol.endswith(GO_ABI0):
        symbol = strip_go_abi(symbol)
    return tidy_args(fix_half_demangled_rust(symbol))


def fold_stacks(stacks: Iterable[tuple[Sequence[str], int]]) -> dict[str, int]:
    """(symbols root first, count) -> folded counts, each frame named by :func:`frame_name`."""
    names: dict[str, str] = {}
    out: dict[str, int] = {}
    for frames, n in stacks:
        parts = []
        for f in frames:
            name = names.get(f)
            if name is None:
                name = names[f] = frame_name(f)
            parts.append(name)
        key = ";".join(parts)
        out[key] = out.get(key, 0) + n
    return out
