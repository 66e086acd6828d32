"""Folded stacks, ``a;b;c 12`` per line, the format FlameGraph and inferno read (inputs layer).

Sniffed when every non-empty line of the head (the last may be cut) is ``stack count``.
Counts of equal stacks add up; a fractional count is rounded; blank and ``#`` lines are
skipped; any other line is an error (it is not folded stacks).
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Iterator

from profiler.errors import InputError
from profiler.inputs.source import Format, Source

__all__ = ["FORMAT", "is_folded", "parse_folded", "read_source"]

_FOLDED_LINE = re.compile(r"^\S.* \d+(?:\.\d+)?$")


def is_folded(sample: str) -> bool:
    """Does this text look like folded stacks (every non-empty line 'stack count')?"""
    lines = [ln for ln in sample.splitlines()[:50] if ln.strip()]
    if not lines:
        return False
    # a truncated last line is tolerated
    body = lines[:-1] if len(lines) > 1 else lines
    return all(_FOLDED_LINE.match(ln) and not ln.startswith(("\t", " ")) for ln in body)


def sniff(head: bytes) -> bool:
    return is_folded(head.decode("utf-8", "replace"))


FORMAT = Format("folded", "folded stacks", sniff)


def parse_folded(lines: Iterable[str]) -> dict[str, int]:
    """Read ``stack count`` lines (FlameGraph's folded format); counts of equal stacks add up.

    Lines that do not end in a number are an error: they are not folded stacks.
    """
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


def read_source(src: Source) -> dict[str, int]:
    """The counts of a detected folded input."""
    with src.open() as fh:
        return parse_folded(io.TextIOWrapper(fh, encoding="utf-8", errors="replace"))


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
