"""Folding `perf script` text into folded stacks, ``a;b;c count`` (analyzers layer).

The default output is line-for-line what inferno-collapse-perf 0.12 (which follows
stackcollapse-perf.pl) prints for the same input; docs/flamegraph.md lists where and why
`compat="ours"` (the default) or `compat="perl"` differ.

Speed: perf script repeats the same call chain thousands of times, so the collapser works on
whole samples (the text between blank lines) and caches the folded frames by the sample's
frame text; only the header line (comm, tid, time, period, event) is parsed for every sample.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO

from profiler.analyzers.stacks.naming import FrameNamer

from profiler.inputs.perfscript import FRAME_LINE, HEADER_LINE, event_base
from profiler.inputs.streams import iter_decoded
from profiler.inputs.window import WHOLE, TimeWindow
from profiler.knowledge import pool_of

__all__ = [
    "FoldOptions",
    "Collapser",
    "collapse_text",
    "collapse_stream",
    "write_folded",
    "format_folded",
]

COMPAT_MODES = ("ours", "inferno", "perl")
CACHE_CHARS = 64 << 20  # sample text held in the cache before it is started afresh
BLOCK_LIMIT = 64 << 20  # a "sample" with no blank line in this much text is not one: skipped, counted
HEADER_LIMIT = 64 << 10  # no event header line is longer (comm 16, event names, tracepoint payload)


@dataclass(frozen=True)
class FoldOptions:
    """How frames are named and which samples count.

    ``window``: the samples kept by time; a relative window counts from the first sample's time
    (the caller rebases it first when it knows a better origin, such as a bundle's start).
    """

    include_pid: bool = False
    include_tid: bool = False
    annotate_kernel: bool = False
    annotate_jit: bool = False
    include_addrs: bool = False
    event_filter: str | None = None
    window: TimeWindow = field(default=WHOLE)
    pools: bool = False
    count_samples: bool = False  # count 1 per sample instead of the event period
    pid_filter: frozenset[int] | None = None
    tid_filter: frozenset[int] | None = None
    compat: str = "ours"  # ours | inferno | perl
    group_by: tuple[str, ...] = ()  # pprof inputs: label keys whose values root the stacks


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

    def __init__(self, opts: FoldOptions | None = None,
                 on_sample: Callable[[float | None, str, int], None] | None = None, *,
                 keep_times: bool = False) -> None:
        """``on_sample`` sees each counted sample: (time, folded stack, count). ``keep_times``:
        also keep the time, tid and comm of every sample that has a time (``times``, ``tids``,
        ``comms``; what the sub-second heatmap draws), read from the headers this pass parses
        anyway. While ``on_sample`` runs, ``ids`` is the sample's (comm, pid, tid) as printed."""
        self.opts = opts or FoldOptions()
        self.on_sample = on_sample
        self.ids: tuple[str, str | None, str] = ("", None, "0")
        self.times: list[float] | None = [] if keep_times else None
        self.tids: list[int] = []
        self.comms: list[str] = []
        self.counts: dict[str, int] = {}
        self.samples = 0  # samples counted
        self.skipped = 0  # samples filtered out (event, time, pid)
        self.weird = 0  # headers that did not parse
        self.warnings: list[str] = []
        self.first_time: float | None = None
        self.last_time: float | None = None
        self._event: str | None = event_base(self.opts.event_filter) if self.opts.event_filter else None
        self._namer = FrameNamer(self.opts)
        self._body: dict[str, str] = {}
        self._keyed: dict[tuple[int, bool], str] = {}  # folded frames by the key of their lines (feed_sample)
        self._line_names: dict[tuple[int, bool], list[str | None]] = {}  # feed_sample's lines, named
        self._tables: list[list[str]] = []
        self._cached = 0
        self._body_java: dict[str, str] = {}
        self._last_event: str | None = None
        self._window = self.opts.window
        self._t0 = self._window.start
        self._t1 = self._window.end
        self._timed = self._window.bounded
        self._rel_pending = self._window.relative and self._timed
        self._ids = self.opts.pid_filter is not None or self.opts.tid_filter is not None
        self._count_samples = self.opts.count_samples
        self._perl = self.opts.compat == "perl"
        self._inferno = self.opts.compat == "inferno"
        self._pname_cache: dict[tuple[str, str | None, str], str] = {}
        self._rest = ""
        self._oversized = False

    @property
    def event(self) -> str | None:
        """The event the collapser settled on: the filter's, else the first one seen."""
        return self._event

    def feed(self, text: str) -> None:
        if self._rest:
            text = self._rest + text
        if "\r" in text:  # CRLF text (the tolerant readers fold it already; the parallel path does not)
            text = text.replace("\r\n", "\n")
        if self._oversized:  # the rest of a sample too large to be one: skipped to its end
            end = text.find("\n\n")
            if end < 0:
                self._rest = text[-1:]
                return
            text = text[end + 2 :]
            self._oversized = False
        cut = text.rfind("\n\n")
        if cut < 0:
            if len(text) > BLOCK_LIMIT:
                self.weird += 1
                self._oversized = True
                self._rest = text[-1:]
                return
            self._rest = text
            return
        self._rest = text[cut + 2 :]
        self._blocks(text[:cut])

    def feed_block(self, text: str) -> None:
        """Whole samples of perf script text (one or more, each ending where a blank line or, for
        samples without a call chain, its line would): folded at once, not held for a cut."""
        for block in text.split("\n\n"):
            if block.strip("\n"):
                self._one(block.rstrip("\n"))

    def feed_sample(self, header: str, key: int, ids: Callable[[], list[int]], table: list[str]) -> None:
        """One sample already cut: its header line and its frame lines, ``table[i]`` for each i
        of ``ids()`` (each line as perf prints it, newline included). ``key`` names the lines:
        samples with equal keys print equal lines, so each distinct stack is folded once, and
        each distinct line named once, without re-reading text. The same counts as feeding
        ``header + "\\n" + "".join(table[i] for i in ids()) + "\\n"``."""
        self._one(header, key, lambda: [table[i] for i in ids()], (ids, table))

    def close(self) -> dict[str, int]:
        """Fold whatever is left: a last sample without its blank line counts, as in inferno
        (stackcollapse-perf.pl folds a sample only at a blank line: ``--compat perl`` drops it)."""
        rest, self._rest = self._rest, ""
        rest = rest.rstrip("\n")
        if rest and not self._oversized and not self._perl:
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

    def _one(self, block: str, key: int | None = None, lines: Callable[[], list[str]] | None = None,
             ids: tuple[Callable[[], list[int]], list[str]] | None = None) -> None:
        """One sample: its text, or (``key``, ``lines``) its header line and its keyed frame lines."""
        if key is not None:
            self._sample(block, "", key, lines, ids)
            return
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
        self._sample(header, body, None, None, None)

    def _sample(self, header: str, body: str, key: int | None, lines: Callable[[], list[str]] | None,
                ids: tuple[Callable[[], list[int]], list[str]] | None) -> None:
        if len(header) > HEADER_LIMIT:
            self.weird += 1
            return
        m = HEADER_LINE.match(header)
        if m is None:
            self.weird += 1
            return
        comm, pid, tid, _cpu, t, period, gap, event, rest = m.groups()
        if key is not None and (rest or header[:1] in ("#", "\n")):
            assert lines is not None  # a payload or a frame on the header line: the text decides
            self._one(header + "\n" + "".join(lines()).rstrip("\n"))
            return
        if rest and body and FRAME_LINE.match(rest):
            # variant 4 without call chains: every line is a sample of its own, and perf
            # prints no blank line between them.
            self._one(header)
            for line in body.split("\n"):
                if line:
                    self._one(line)
            return
        if period is not None and self._inferno and gap != " ":
            period = None  # inferno reads the period only when one space precedes the event
        if (period is not None and len(period) > 18) or len(tid) > 18 or (pid is not None and len(pid) > 18):
            self.weird += 1  # no period or id is that long: a damaged header
            return
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
            if self.times is not None:
                self.times.append(tf)
                self.tids.append(int(tid))
                self.comms.append(comm.strip())
            if self.first_time is None:
                self.first_time = tf
                if self._rel_pending:
                    self._rel_pending = False
                    self._window = self._window.rebased(tf)
                    self._t0, self._t1 = self._window.start, self._window.end
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
        if key is not None:
            assert lines is not None
            java = pname.startswith("java")
            frames = self._keyed.get((key, java))
            if frames is None:
                frames = self._keyed[(key, java)] = (self._fold_ids(ids[0](), ids[1], java) if ids is not None
                                                     else self._fold_body("".join(lines()).rstrip("\n"), java))
        elif pname.startswith("java"):
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
        if self.on_sample is not None:
            self.ids = pkey
            self.on_sample(float(t) if t is not None else None, stack, count)

    def _fold_ids(self, ids: list[int], table: list[str], java: bool) -> str:
        """_fold_body of ``table[i]`` for i in ``ids``: each line named once per table."""
        names = self._line_names.get((id(table), java))
        if names is None or len(names) != len(table):
            names = self._line_names[(id(table), java)] = [None] * len(table)
            self._tables.append(table)  # held: its id names its cache
        namer = self._namer
        cache = namer.cache_java if java else namer.cache
        for i in ids:
            if names[i] is None:
                ln = table[i].rstrip("\n")
                r = cache.get(ln)
                if r is None:
                    r = cache[ln] = ";".join(namer.name(ln, java))
                names[i] = r
        return ";".join(filter(None, [names[i] for i in reversed(ids)]))

    def frame_modules(self) -> dict[str, str]:
        """Function name -> the binary (perf's dso) it was first read in: for exports' mappings."""
        out: dict[str, str] = {}
        for cache in (self._namer.cache, self._namer.cache_java):
            for line, names in cache.items():
                i = line.rfind(" (")
                if i < 0 or not line.endswith(")") or not names:
                    continue
                module = line[i + 2 : -1]
                for n in names.split(";"):
                    out.setdefault(n, module)
        return out

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
                r = cache[ln] = ";".join(namer.name(ln, java))
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


def collapse_stream(stream: IO[bytes], opts: FoldOptions | None = None,
                    on_chunk: Callable[[int], None] | None = None) -> Collapser:
    """Fold a binary stream of perf script text (gzip or plain); returns the closed Collapser
    (counts, sample statistics, warnings). ``on_chunk`` hears the size of each decoded chunk
    (for progress)."""
    c = Collapser(opts)
    for chunk in iter_decoded(stream, warnings=c.warnings):
        if on_chunk is not None:
            on_chunk(len(chunk))
        c.feed(chunk)
    c.close()
    return c


# ---------------------------------------------------------------------------------------------
# The folded format, written (profiler/inputs/folded.py reads it)


def format_folded(counts: dict[str, int]) -> Iterator[str]:
    """Folded lines sorted by stack (byte order, as the reference prints them)."""
    for stack in sorted(counts):
        yield f"{stack} {counts[stack]}\n"


def write_folded(counts: dict[str, int], out: IO[str]) -> None:
    out.writelines(format_folded(counts))
