"""perf script text: sniffing, and a streaming parser into samples and frames (inputs layer).

Any text that is not another format is taken for perf script output (plain or gzip, a file,
a named pipe or stdin). Two ways to read it: :func:`profiler.inputs.streams.iter_decoded` gives the text in large
decoded chunks (what the fast folder in ``analyzers/stacks/folding.py`` works on), and
`iter_samples(lines)` reads any iterable of text lines (a file, a gzip stream, a list) and
yields one `ScriptSample` per event, frames leaf first as perf prints them. Memory stays bounded:
only the sample being read is held.

The line variants it meets, each parsed by the code named next to it:

1. Header comments (``perf script --header``): ``# ========`` / ``# cmdline : ...``.
   Skipped wherever a line starts with ``#`` (`_is_comment`).
2. Blank lines end a sample. Several in a row are one separator; a whitespace-only line
   is a blank line (`iter_samples`).
3. Event header lines (`HEADER_LINE`), with optional fields depending on what was recorded
   and on ``perf script -F``::

       mariadbd 10451/10460 [001] 12345.678901:    1001001 cpu-clock:ppp:
       mariadbd 10460 12345.678901:    1001001 cpu-clock:
       V8 WorkerThread 24636/25607 [000] 94564.109216: 100 cycles:       (comm with spaces)
                python3 10889   469.286639:     250000 cpu-clock:pppH:     (padded comm, no -g)
       swapper     0 [000]   100.000000: sched:sched_switch: prev_comm=swapper/0 ... (tracepoint)

   The comm is everything before the first ``[pid/]tid`` word that is followed by the rest of
   a header, so comms with spaces or digits survive. Event modifiers (``:pppH``) stay in
   ``event``; `event_base` strips them.
4. A header that also carries the only frame, when the sample has no call chain
   (``perf record`` without ``-g``)::

       python3 10889 469.286639: 250000 cpu-clock:pppH:  7f65d0ebaf02 intel_check_word+0x122 (/usr/lib/ld.so)

   The text after the event is tried as a frame (`FRAME_LINE`); otherwise it is tracepoint payload
   (``prev_comm=... prev_state=S ==> next_comm=...``), kept verbatim in `ScriptSample.payload`.
5. Frame lines, one per call-chain entry, tab-indented (`FRAME_LINE`)::

       \tffffffff8152d261 __bpf_prog_enter_recur+0x51 ([kernel.kallsyms])
       \t           14f02 intel_check_word.constprop.0+0x122 (/usr/lib/x86_64-linux-gnu/ld.so)
       \t  7ffe24f6e82000 [unknown] ([unknown])                    (unresolved)
       \t    7f1e2215d058  (/lib/x86_64-linux-gnu/libc-2.15.so)     (no symbol: empty name)
       \t    7f722d142778 Ljava/io/PrintStream;::print (/tmp/perf-19982.map)   (JIT map)
       \t          4a1b2c foo (/usr/bin/x (deleted))                 (dso replaced on disk)
       \t          4a1b2c _RNvCs1234_5crate4main (/usr/bin/rustprog)  (Rust v0 left mangled)

   The ``+0x..`` offset is split off the symbol into `Frame.offset`.
   Inlined frames (``perf script --inline``) are printed by perf as extra frame lines with the
   same address; they parse as ordinary frames. JIT-inlined frames joined by ``->``
   (perf-map-agent) stay one frame; folding splits them.
6. Anything else inside a sample (``-F +srcline`` source lines, ``brstack`` text) is kept out
   of the frames: lines that do not match `FRAME_LINE` are ignored.
7. A last sample without its closing blank line, or cut mid-line (a truncated capture), is
   still yielded, with ``truncated=True``.
8. Side-band records (``perf script --show-switch-events`` and friends), one line, no colon
   after the record name (`_SIDEBAND`)::

       python3 15047   627.111387: PERF_RECORD_SWITCH IN
       python3 15047   627.111498: PERF_RECORD_SWITCH OUT preempt

   yielded as samples whose event is the record name and whose payload is the rest.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO

from profiler.inputs.source import Format, Source
from profiler.inputs.streams import open_binary
from profiler.tolerant import ReadLog

__all__ = [
    "FORMAT", "HEADER_LINE", "FRAME_LINE", "Frame", "ScriptSample", "event_base", "iter_samples", "open_lines",
    "parse_frame", "parse_header", "source_samples",
]


def sniff(head: bytes) -> bool:
    """Text is perf script output unless a more specific format claimed it first."""
    return True


FORMAT = Format("perf-script", "perf script text", sniff)


def open_lines(stream: IO[bytes]) -> IO[str]:
    """A text stream of lines (gzip or plain; invalid UTF-8 becomes U+FFFD)."""
    return io.TextIOWrapper(open_binary(stream), encoding="utf-8", errors="replace")


def source_samples(src: Source) -> Iterator[ScriptSample]:
    """The samples of a detected perf script input."""
    with src.open() as fh:
        yield from iter_samples(io.TextIOWrapper(fh, encoding="utf-8", errors="replace"), src.log)


@dataclass(slots=True)
class Frame:
    """One call-chain entry: address, symbol (offset split off), shared object."""

    addr: int | None
    symbol: str
    dso: str | None
    offset: int | None = None


@dataclass(slots=True)
class ScriptSample:
    """One `perf script` event. Fields perf did not print are None."""

    comm: str
    pid: int | None
    tid: int | None
    cpu: int | None
    time: float | None
    period: int | None
    event: str | None
    frames: list[Frame] = field(default_factory=list)
    payload: str | None = None  # tracepoint text after the event name (e.g. sched_switch fields)
    truncated: bool = False  # the input ended inside this sample
    line: int = 0  # 1-based line number of the header


# Variant 3/4: the event header. Lazy comm: the first "[pid/]tid" word that is followed by the
# rest of a header wins, so "V8 WorkerThread 24636/25607 [000] ..." keeps its spaces.
HEADER_LINE = re.compile(
    r"""^\s*(?P<comm>.*?)\s+
    (?:(?P<pid>-?\d+)/)?(?P<tid>-?\d+)\s+
    (?:\[(?P<cpu>\d+)\]\s+)?
    (?:(?P<time>\d+\.\d+):\s+)?
    (?:(?P<period>\d+)(?P<gap>\s+))?
    (?P<event>[A-Za-z_][^\s]*?):(?=\s|$)
    \s*(?P<rest>.*?)\s*$""",
    re.VERBOSE,
)

# Variant 5: a frame line (also the tail of a variant-4 header). The dso may itself hold one
# parenthesised suffix such as "(deleted)".
FRAME_LINE = re.compile(
    r"""^\s*(?P<addr>[0-9a-fA-F]+)\s(?P<sym>.*?)\s*
    \((?P<dso>[^()]*(?:\([^()]*\)[^()]*)?)\)$""",
    re.VERBOSE,
)

# Variant 8: side-band records.
_SIDEBAND = re.compile(
    r"""^\s*(?P<comm>.*?)\s+(?:(?P<pid>-?\d+)/)?(?P<tid>-?\d+)\s+(?:\[(?P<cpu>\d+)\]\s+)?
    (?P<time>\d+\.\d+):\s+(?P<event>PERF_RECORD_[A-Z_]+)\b\s*(?P<rest>.*?)\s*$""",
    re.VERBOSE,
)

_OFFSET = re.compile(r"\+0x([0-9a-fA-F]*)$")

# perf event modifiers: cpu-clock:pppH, cycles:u, instructions:uk
_MODIFIERS = re.compile(r":[ukhIGHpPSDWe]+$")


def event_base(event: str) -> str:
    """'cpu-clock:pppH' -> 'cpu-clock'; 'sched:sched_switch' stays as it is."""
    return _MODIFIERS.sub("", event)


def _is_comment(line: str) -> bool:
    return line.startswith("#")


LINE_LIMIT = 64 << 10  # longer lines are neither headers nor frames (and the regexes stay linear)
MAX_FRAMES = 1 << 16  # frames kept per sample (perf's deepest call chain is perf_event_max_stack, <= 65535)


def _int(text: str) -> int:
    """A pid, tid, cpu or period: at most 18 digits (ValueError otherwise, as for a bad line)."""
    if len(text) > 18:
        raise ValueError("number too long")
    return int(text)


def parse_frame(text: str) -> Frame | None:
    """Parse one frame line (variant 5); None when the line is not a frame."""
    if len(text) > LINE_LIMIT:
        return None
    m = FRAME_LINE.match(text)
    if m is None:
        return None
    sym = m.group("sym")
    offset = None
    om = _OFFSET.search(sym)
    if om is not None:
        sym = sym[: om.start()]
        offset = int(om.group(1), 16) if om.group(1) else 0
    addr = m.group("addr")
    if len(addr) > 16 or (om is not None and len(om.group(1)) > 16):
        return None
    return Frame(addr=int(addr, 16), symbol=sym, dso=m.group("dso"), offset=offset)


def parse_header(text: str, line: int = 0) -> ScriptSample | None:
    """Parse one event header line (variants 3 and 4); None when it is not one."""
    if len(text) > LINE_LIMIT:
        return None
    try:
        return _parse_header(text, line)
    except ValueError:  # a number too long to be a pid, tid, cpu or period
        return None


def _parse_header(text: str, line: int) -> ScriptSample | None:
    m = HEADER_LINE.match(text)
    if m is None:
        m = _SIDEBAND.match(text)
        if m is None:
            return None
        g = m.group
        return ScriptSample(
            comm=g("comm").strip(),
            pid=_int(g("pid")) if g("pid") is not None else None,
            tid=_int(g("tid")),
            cpu=_int(g("cpu")) if g("cpu") is not None else None,
            time=float(g("time")),
            period=None,
            event=g("event"),
            payload=g("rest"),
            line=line,
        )
    g = m.group
    pid = g("pid")
    cpu = g("cpu")
    t = g("time")
    period = g("period")
    s = ScriptSample(
        comm=g("comm").strip(),
        pid=_int(pid) if pid is not None else None,
        tid=_int(g("tid")),
        cpu=_int(cpu) if cpu is not None else None,
        time=float(t) if t is not None else None,
        period=_int(period) if period is not None else None,
        event=g("event"),
        line=line,
    )
    rest = g("rest")
    if rest:
        frame = parse_frame(rest)
        if frame is not None:
            s.frames.append(frame)
        else:
            s.payload = rest
    return s


def iter_samples(lines: Iterable[str], log: ReadLog | None = None) -> Iterator[ScriptSample]:
    """Yield one ScriptSample per event in `perf script` text, streaming.

    Lines may keep their newline. Headers that do not parse start no sample: their frame
    lines are skipped up to the next blank line (counted in ``log`` when the input ends).
    """
    unread = 0
    try:
        for s in _samples(lines):
            if s is None:
                unread += 1
                continue
            yield s
    finally:
        if log is not None:
            log.skip(unread, "samples whose header could not be read")


def _samples(lines: Iterable[str]) -> Iterator[ScriptSample | None]:
    """iter_samples' loop: yields None for each sample skipped because its header did not parse."""
    current: ScriptSample | None = None
    skipping = False
    for n, raw in enumerate(lines, 1):
        line = raw.rstrip("\r\n")
        if _is_comment(line):
            continue
        if not line.strip():
            if current is not None:
                yield current
            current = None
            skipping = False
            continue
        if current is None:
            if skipping:
                continue
            current = parse_header(line, n)
            if current is None:
                skipping = True
                yield None
            elif current.frames or (current.event or "").startswith("PERF_RECORD_"):
                # variant 4: a sample without call chain is one line, and perf prints no
                # blank line after it; variant 8 is one line too
                yield current
                current = None
            continue
        frame = parse_frame(line) if line[0] in " \t" else None
        if frame is not None:
            if len(current.frames) < MAX_FRAMES:  # a deeper "stack" is damage: memory stays bounded
                current.frames.append(frame)
            continue
        # A header with no blank line before it: stack-less tracepoint samples and side-band
        # records come one per line (padded comms start with spaces), and cut-and-pasted files
        # lose blank lines. Close the sample and start the next.
        nxt = parse_header(line, n)
        if nxt is not None:
            yield current
            current = nxt
            if nxt.frames or (nxt.event or "").startswith("PERF_RECORD_"):
                yield nxt
                current = None
    if current is not None:
        # The input ended inside a sample: no closing blank line, or cut in mid-line.
        # A frame line cut in mid-line fails FRAME_LINE (no closing parenthesis) and is dropped.
        current.truncated = True
        yield current
