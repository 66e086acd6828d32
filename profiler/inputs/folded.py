"""Folded stacks, ``a;b;c 12`` per line, the format FlameGraph and inferno read (inputs layer).

Sniffed when the lines of the head (the last may be cut) are ``stack count``, all but one in
ten at most (one damaged line does not make a file something else). Counts of equal stacks
add up; a fractional count is rounded; blank and ``#`` lines are ignored; any other line
(no count, a count that is no finite number, a negative count) is skipped and counted in the
input's ReadLog, as inferno-flamegraph and flamegraph.pl skip it ("Ignored N lines with
invalid format").
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Iterable, Iterator

from profiler.inputs.source import Format, Source
from profiler.tolerant import ReadLog

__all__ = ["FORMAT", "is_folded", "parse_folded", "read_source"]

_FOLDED_LINE = re.compile(r"^\S.* \d+(?:\.\d+)?$")


def is_folded(sample: str) -> bool:
    """Does this text look like folded stacks ('stack count' lines, one in ten may be damaged)?"""
    lines = [ln for ln in sample.splitlines()[:50] if ln.strip() and not ln.startswith("#")]
    ok = [bool(_FOLDED_LINE.match(ln)) and not ln.startswith(("\t", " ")) for ln in lines]
    if len(ok) > 1 and not ok[-1]:
        ok.pop()  # a truncated last line is tolerated
    good = sum(ok)
    bad = len(ok) - good
    return good > bad and bad <= max(1, good // 10)


def sniff(head: bytes) -> bool:
    return is_folded(head.decode("utf-8", "replace"))


FORMAT = Format("folded", "folded stacks", sniff, untimed="folded stacks have none")


BAD_LINES = "lines that are not 'stack count'"


def parse_folded(lines: Iterable[str], log: ReadLog | None = None) -> dict[str, int]:
    """Read ``stack count`` lines (FlameGraph's folded format); counts of equal stacks add up.

    Lines that are not ``stack count`` are skipped and counted in ``log`` (one call at the end).
    """
    out: dict[str, int] = {}
    get = out.get
    bad = 0
    for block in _blocks_of(lines):
        for line in block.split("\n"):  # not splitlines(): \x1c, \x85, \u2028 are no line ends here
            stack, _, count = line.rpartition(" ")
            try:
                value = int(count) if len(count) <= 20 else -1
            except ValueError:
                if not line.strip() or line.startswith("#"):
                    continue
                try:
                    f = float(count)
                    value = round(f) if math.isfinite(f) and f < 1e18 else -1
                except ValueError:
                    value = -1
            if value < 0 or not stack:
                bad += 1
                continue
            out[stack] = get(stack, 0) + value
    if log is not None:
        log.skip(bad, BAD_LINES)
    return out


def read_source(src: Source) -> dict[str, int]:
    """The counts of a detected folded input (bad lines counted in ``src.log``)."""
    with src.open() as fh:
        return parse_folded(io.TextIOWrapper(fh, encoding="utf-8", errors="replace", newline="\n"), src.log)


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
