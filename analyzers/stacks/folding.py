"""Folding `perf script` text into folded stacks, ``a;b;c count`` (analyzers layer).

The default output is line-for-line what inferno-collapse-perf 0.12 (which follows
stackcollapse-perf.pl) prints for the same input; docs/flamegraph.md lists where and why
`compat="ours"` (the default) or `compat="perl"` differ.

Speed: perf script repeats the same call chain thousands of times, so the collapser works on
whole samples (the text between blank lines) and caches the folded frames by the sample's
frame text; only the header line (comm, tid, time, period, event) is parsed for every sample.
"""

from __future__ import annotations

import codecs
import gzip
import io
import re
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import IO

from profiler.analyzers.stacks.demangle import demangle
from profiler.analyzers.stacks.perfscript import _FRAME, _HEADER, event_base

from profiler.knowledge import pool_of

__all__ = [
    "FoldOptions",
    "Collapser",
    "collapse_text",
    "collapse_stream",
    "collapse_file",
    "parse_folded",
    "write_folded",
    "format_folded",
    "is_folded",
]

COMPAT_MODES = ("ours", "inferno", "perl")
CACHE_CHARS = 64 << 20  # sample text held in the cache before it is started afresh


@dataclass(frozen=True)
class FoldOptions:
    """How frames are named and which samples count.

    time_from/time_to are absolute perf timestamps (seconds); the CLI converts capture-relative
    offsets before it gets here.
    """

    include_pid: bool = False
    include_tid: bool = False
    annotate_kernel: bool = False
    annotate_jit: bool = False
    include_addrs: bool = False
    event_filter: str | None = None
    time_from: float | None = None
    time_to: float | None = None
    pools: bool = False
    time_relative: bool = False  # time_from/time_to count from the first sample's time
    count_samples: bool = False  # count 1 per sample instead of the event period
    pid_filter: frozenset[int] | None = None
    tid_filter: frozenset[int] | None = None
    compat: str = "ours"  # ours | inferno | perl


# ---------------------------------------------------------------------------------------------
# Frame naming (one frame line -> one or more folded frame names)

_HEX = frozenset("0123456789abcdefABCDEF")
_RUST_HASH = re.compile(r"::h[0-9a-fA-F]{16}$")
_RUST_ESCAPES = {
    "$SP$": "@", "$BP$": "*", "$RF$": "&", "$LT$": "<", "$GT$": ">", "$LP$": "(", "$RP$": ")",
    "$C$": ",", "$u7e$": "~", "$u20$": " ", "$u27$": "'", "$u3d$": "=", "$u5b$": "[",
    "$u5d$": "]", "$u7b$": "{", "$u7d$": "}", "$u3b$": ";", "$u2b$": "+", "$u21$": "!",
    "$u22$": '"',
}  # fmt: skip
_RUST_ESCAPE = re.compile(r"\$(?:SP|BP|RF|LT|GT|LP|RP|C|u7e|u20|u27|u3d|u5b|u5d|u7b|u7d|u3b|u2b|u21|u22)\$")


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
    if rest.startswith("_$"):
        rest = rest[1:]
    out: list[str] = []
    i = 0
    n = len(rest)
    while i < n:
        c = rest[i]
        if c == ".":
            if rest.startswith("..", i):
                out.append("::")
                i += 2
            else:
                out.append(".")
                i += 1
        elif c == "$":
            m = _RUST_ESCAPE.match(rest, i)
            if m is None:
                out.append(rest[i:])  # unknown escape: keep the remainder verbatim
                break
            out.append(_RUST_ESCAPES[m.group(0)])
            i = m.end()
        else:
            j = i
            while j < n and rest[j] not in ".$":
                j += 1
            out.append(rest[i:j])
            i = j
    return "".join(out)


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


class _Namer:
    """Frame line -> tuple of folded names (root-most first), cached per distinct line."""

    def __init__(self, opts: FoldOptions) -> None:
        self.opts = opts
        self.tidy: Callable[[str], str] = tidy_args_perl if opts.compat == "perl" else tidy_args
        self.demangle = opts.compat == "ours"
        self.cache: dict[str, str] = {}  # frame line -> its names joined by ';' (root-most first)
        self.cache_java: dict[str, str] = {}

    def _name(self, line: str, java: bool) -> tuple[str, ...]:
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
        rawfunc = fix_half_demangled_rust(rawfunc)
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


# ---------------------------------------------------------------------------------------------
# Samples -> folded stacks

_RESPLIT = "\x00resplit"  # a sentinel: this sample holds a whitespace-only line


def _inferno_comm(header: str, comm: str, pid: str | None, tid: str) -> tuple[str, str | None, str]:
    """inferno takes the first all-digit word as the tid, even inside a comm ("Web Content 1")."""
    words = header.split(" ")
    pos = 0
    for i, w in enumerate(words):
        if i > 0 and w and i < len(words) - 1 and all(c.isdigit() or c == "/" for c in w) and w.isascii():
            if "/" in w:
                p, _, t = w.rpartition("/")
                return header[: pos - 1].strip(), p, t
            return header[: pos - 1].strip(), None, w
        pos += len(w) + 1
    return comm, pid, tid


class Collapser:
    """Incremental collapser: feed() text in any chunking, then result().

    >>> c = Collapser(); c.feed("a 1 1.0: 1 cpu-clock:\\n\\tff f (/x)\\n\\n"); c.result()
    {'a;f': 1}
    """

    def __init__(self, opts: FoldOptions | None = None) -> None:
        self.opts = opts or FoldOptions()
        self.counts: dict[str, int] = {}
        self.samples = 0  # samples counted
        self.skipped = 0  # samples filtered out (event, time, pid)
        self.weird = 0  # headers that did not parse
        self.warnings: list[str] = []
        self.first_time: float | None = None
        self.last_time: float | None = None
        self._event: str | None = event_base(self.opts.event_filter) if self.opts.event_filter else None
        self._namer = _Namer(self.opts)
        self._body: dict[str, str] = {}
        self._cached = 0
        self._body_java: dict[str, str] = {}
        self._last_event: str | None = None
        self._t0 = self.opts.time_from
        self._t1 = self.opts.time_to
        self._timed = self._t0 is not None or self._t1 is not None
        self._rel_pending = self.opts.time_relative and self._timed
        self._ids = self.opts.pid_filter is not None or self.opts.tid_filter is not None
        self._count_samples = self.opts.count_samples
        self._perl = self.opts.compat == "perl"
        self._inferno = self.opts.compat == "inferno"
        self._pname_cache: dict[tuple[str, str | None, str], str] = {}
        self._rest = ""

    def feed(self, text: str) -> None:
        if self._rest:
            text = self._rest + text
        cut = text.rfind("\n\n")
        if cut < 0:
            self._rest = text
            return
        self._rest = text[cut + 2 :]
        self._blocks(text[:cut])

    def close(self) -> dict[str, int]:
        """Fold whatever is left (a last sample without its blank line counts, as in the reference)."""
        rest, self._rest = self._rest, ""
        rest = rest.rstrip("\n")
        if rest:
            self._blocks(rest)
        return self.counts

    def result(self) -> dict[str, int]:
        return self.close()

    # -- internals

    def _blocks(self, text: str) -> None:
        one = self._one
        for block in text.split("\n\n"):
            if block:
                one(block)

    def _one(self, block: str) -> None:
        if block[0] == "\n":
            block = block.lstrip("\n")
            if not block:
                return
        if block[0] == "#" or "\n#" in block:
            block = "\n".join(ln for ln in block.split("\n") if not ln.startswith("#"))
            if not block:
                return
        nl = block.find("\n")
        if nl < 0:
            header, body = block, ""
        else:
            header, body = block[:nl], block[nl + 1 :]
        m = _HEADER.match(header)
        if m is None:
            self.weird += 1
            return
        comm, pid, tid, _cpu, t, period, gap, event, rest = m.groups()
        if rest and body and _FRAME.match(rest):
            # variant 4 without call chains: every line is a sample of its own, and perf
            # prints no blank line between them.
            self._one(header)
            for line in body.split("\n"):
                if line:
                    self._one(line)
            return
        if period is not None and self._inferno and gap != " ":
            period = None  # inferno reads the period only when one space precedes the event
        if event != self._last_event:
            ev = event_base(event)
            if self._event is None:
                self._event = ev
            if ev != self._event:
                self.skipped += 1
                return
            self._last_event = event
        if t is not None:
            tf = float(t)
            if self.first_time is None:
                self.first_time = tf
                if self._rel_pending:
                    self._rel_pending = False
                    self._t0 = tf + self._t0 if self._t0 is not None else None
                    self._t1 = tf + self._t1 if self._t1 is not None else None
            self.last_time = tf
            if self._timed and (
                (self._t0 is not None and tf < self._t0) or (self._t1 is not None and tf >= self._t1)
            ):
                self.skipped += 1
                return
        if self._ids and not self._id_ok(pid, tid):
            self.skipped += 1
            return
        if self._inferno and " " in comm.strip():
            comm, pid, tid = _inferno_comm(header, comm, pid, tid)
        pkey = (comm, pid, tid)
        pname = self._pname_cache.get(pkey)
        if pname is None:
            pname = self._pname(comm.strip(), pid, tid)
            self._pname_cache[pkey] = pname
        if rest:
            # variant 4: the only frame rides on the header line; tracepoint payload does not
            # parse as a frame and yields nothing.
            body = rest + ("\n" + body if body else "")
        if pname.startswith("java"):
            frames = self._body_java.get(body)
            if frames is None:
                frames = self._body_java[body] = self._fold_body(body, True)
        else:
            frames = self._body.get(body)
            if frames is None:
                frames = self._body[body] = self._fold_body(body, False)
                self._cached += len(body)
                if self._cached > CACHE_CHARS:
                    # bounded memory on multi-GB inputs: start the sample cache afresh
                    self._body.clear()
                    self._body_java.clear()
                    self._cached = 0
        if frames is _RESPLIT:
            self._resplit(header, body)
            return
        count = 1 if (self._count_samples or period is None) else int(period)
        if frames:
            stack = pname + ";" + frames
        elif self._perl:
            stack = pname  # the perl script keeps chain-less samples as the process name alone
        else:
            self.skipped += 1
            return
        counts = self.counts
        counts[stack] = counts.get(stack, 0) + count
        self.samples += 1

    def _resplit(self, header: str, body: str) -> None:
        # whitespace-only lines end a sample too (the reference trims lines before testing)
        text = header + "\n" + body
        for part in re.split(r"\n[ \t\r\f\v]*(?:\n|$)", text):
            if part.strip():
                self._one(part)

    def _id_ok(self, pid: str | None, tid: str) -> bool:
        opts = self.opts
        if opts.pid_filter is not None:
            p = int(pid) if pid is not None else int(tid)
            if p not in opts.pid_filter:
                return False
        return opts.tid_filter is None or int(tid) in opts.tid_filter

    def _pname(self, comm: str, pid: str | None, tid: str) -> str:
        name = pool_of(comm) if self.opts.pools else comm
        name = name.replace(" ", "_")
        if self.opts.include_tid:
            return f"{name}-{pid or '?'}/{tid}"
        if self.opts.include_pid:
            return f"{name}-{pid or '?'}"
        return name

    def _fold_body(self, body: str, java: bool) -> str:
        if not body:
            return ""
        namer = self._namer
        cache = namer.cache_java if java else namer.cache
        out: list[str] = []
        for ln in body.split("\n"):
            r = cache.get(ln)
            if r is None:
                if not ln.strip():
                    if ln:
                        return _RESPLIT
                    continue
                r = cache[ln] = ";".join(namer._name(ln, java))
            if r:
                out.append(r)
        out.reverse()
        return ";".join(out)


def collapse_text(text: str | Iterable[str], opts: FoldOptions | None = None) -> dict[str, int]:
    """Fold perf script text (one string or an iterable of chunks/lines)."""
    c = Collapser(opts)
    if isinstance(text, str):
        c.feed(text)
    else:
        for chunk in text:
            c.feed(chunk)
    return c.close()


class _Prefixed(io.RawIOBase):
    """A read-only stream that gives back `head` before the rest of `stream`."""

    def __init__(self, head: bytes, stream: IO[bytes]) -> None:
        self.head = head
        self.stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray) -> int:  # type: ignore[override]
        if self.head:
            n = min(len(b), len(self.head))
            b[:n] = self.head[:n]
            self.head = self.head[n:]
            return n
        data = self.stream.read(len(b))
        b[: len(data)] = data
        return len(data)


def open_binary(stream: IO[bytes]) -> IO[bytes]:
    """The same stream, decompressed when it starts with the gzip magic."""
    head = stream.read(2)
    rest: IO[bytes] = io.BufferedReader(_Prefixed(head, stream), 1 << 20)  # type: ignore[type-var]
    if head == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=rest, mode="rb")  # type: ignore[return-value]
    return rest


def iter_decoded(stream: IO[bytes], chunk_size: int = 1 << 22, warnings: list[str] | None = None) -> Iterator[str]:
    """Decode a binary stream (gzip or plain) in large chunks; invalid UTF-8 becomes U+FFFD as
    in the reference. A truncated gzip member is read up to the cut and noted in `warnings`."""
    dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
    src = open_binary(stream)
    while True:
        try:
            data = src.read(chunk_size)
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            if warnings is not None:
                warnings.append(f"compressed input is truncated or corrupt ({exc}); read up to the cut")
            data = b""
        if not data:
            tail = dec.decode(b"", final=True)
            if tail:
                yield tail
            return
        yield dec.decode(data)


def collapse_stream(stream: IO[bytes], opts: FoldOptions | None = None) -> Collapser:
    """Fold a binary stream of perf script text (gzip or plain); returns the closed Collapser
    (counts, sample statistics, warnings)."""
    c = Collapser(opts)
    for chunk in iter_decoded(stream, warnings=c.warnings):
        c.feed(chunk)
    c.close()
    return c


# ---------------------------------------------------------------------------------------------
# The folded format itself


def parse_folded(lines: Iterable[str]) -> dict[str, int]:
    """Read ``stack count`` lines (FlameGraph's folded format); counts of equal stacks add up.

    Lines that do not end in a number are an error: they are not folded stacks.
    """
    from profiler.errors import InputError

    out: dict[str, int] = {}
    get = out.get
    for block in _blocks_of(lines):
        for line in block.splitlines():
            stack, _, count = line.rpartition(" ")
            try:
                value = int(count)
            except ValueError:
                if not line.strip() or line.startswith("#"):
                    continue
                try:
                    value = round(float(count))
                except ValueError:
                    raise InputError(f"not 'stack count': {line[:80]!r}") from None
            if not stack:
                raise InputError(f"not 'stack count': {line[:80]!r}")
            out[stack] = get(stack, 0) + value
    return out


def _blocks_of(lines: Iterable[str], size: int = 1 << 22) -> Iterator[str]:
    """Lines (or a text stream) regrouped into large blocks of whole lines."""
    read = getattr(lines, "read", None)
    if read is not None:
        rest = ""
        while True:
            data = read(size)
            if not data:
                if rest:
                    yield rest
                return
            data = rest + data
            cut = data.rfind("\n") + 1
            rest = data[cut:]
            if cut:
                yield data[:cut]
    else:
        yield "".join(ln if ln.endswith("\n") else ln + "\n" for ln in lines)


_FOLDED_LINE = re.compile(r"^\S.* \d+(?:\.\d+)?$")


def is_folded(sample: str) -> bool:
    """Does this text look like folded stacks (every non-empty line 'stack count')?"""
    lines = [ln for ln in sample.splitlines()[:50] if ln.strip()]
    if not lines:
        return False
    # a truncated last line is tolerated
    body = lines[:-1] if len(lines) > 1 else lines
    return all(_FOLDED_LINE.match(ln) and not ln.startswith(("\t", " ")) for ln in body)


def format_folded(counts: dict[str, int]) -> Iterator[str]:
    """Folded lines sorted by stack (byte order, as the reference prints them)."""
    for stack in sorted(counts):
        yield f"{stack} {counts[stack]}\n"


def write_folded(counts: dict[str, int], out: IO[str]) -> None:
    out.writelines(format_folded(counts))


# ---------------------------------------------------------------------------------------------
# Several processes for one large plain-text file

PARALLEL_MIN_BYTES = 32 << 20


def _split_points(path: str, parts: int) -> list[int]:
    """Byte offsets that cut the file at sample boundaries (just after a blank line)."""
    import os

    size = os.path.getsize(path)
    points = [0]
    with open(path, "rb") as f:
        for k in range(1, parts):
            f.seek(size * k // parts)
            buf = f.read(1 << 20)
            i = buf.find(b"\n\n")
            if i < 0:
                continue
            points.append(f.tell() - len(buf) + i + 2)
    points.append(size)
    return sorted(set(points))


def _fold_range(args: tuple[str, int, int, FoldOptions]) -> tuple[dict[str, int], int, int, int, float | None, float | None]:
    path, start, end, opts = args
    c = Collapser(opts)
    dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
    with open(path, "rb") as f:
        f.seek(start)
        left = end - start
        while left > 0:
            data = f.read(min(1 << 22, left))
            if not data:
                break
            left -= len(data)
            c.feed(dec.decode(data))
    c.feed(dec.decode(b"", final=True))
    c.close()
    return c.counts, c.samples, c.skipped, c.weird, c.first_time, c.last_time


def collapse_file(path: str, opts: FoldOptions | None = None, workers: int | None = None) -> Collapser:
    """Fold a perf script file, in several processes when it is large, plain text and the host
    has the cores; the result is the same as collapse_stream's (the first sample's event and time
    are read up front, so every part filters the same way)."""
    import os

    opts = opts or FoldOptions()
    if workers is not None:
        n = workers
    else:
        # only the cores nobody else is using: on a busy host more processes only add overhead
        cores = os.cpu_count() or 1
        idle = cores - os.getloadavg()[0]
        n = max(1, min(cores, 4, int(idle + 0.5)))
    with open(path, "rb") as f:
        head = f.read(2)
    if n < 2 or head == b"\x1f\x8b" or os.path.getsize(path) < PARALLEL_MIN_BYTES and workers is None:
        with open(path, "rb") as f:
            return collapse_stream(f, opts)
    # settle what the first sample decides, so that every part decides the same
    probe = Collapser(replace(opts, time_from=None, time_to=None, time_relative=False))
    with open(path, "rb") as f:
        for chunk in iter_decoded(f, chunk_size=1 << 16):
            probe.feed(chunk)
            if probe.first_time is not None or probe._event is not None and probe.samples:
                break
    probe.close()
    event = opts.event_filter or probe._event
    t0, t1 = opts.time_from, opts.time_to
    if opts.time_relative and probe.first_time is not None:
        t0 = probe.first_time + t0 if t0 is not None else None
        t1 = probe.first_time + t1 if t1 is not None else None
    part_opts = replace(opts, event_filter=event, time_from=t0, time_to=t1, time_relative=False)
    points = _split_points(path, n)
    jobs = [(path, a, b, part_opts) for a, b in zip(points, points[1:], strict=False) if b > a]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=len(jobs)) as pool:
        results = list(pool.map(_fold_range, jobs))
    out = Collapser(part_opts)
    out._event = event
    for counts, samples, skipped, weird, first, last in results:
        for k, v in counts.items():
            out.counts[k] = out.counts.get(k, 0) + v
        out.samples += samples
        out.skipped += skipped
        out.weird += weird
        if first is not None and (out.first_time is None or first < out.first_time):
            out.first_time = first
        if last is not None and (out.last_time is None or last > out.last_time):
            out.last_time = last
    return out
