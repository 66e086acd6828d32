"""The Prometheus text exposition format, read tolerantly (analyzers layer).

What a server's ``/metrics`` returns (format 0.0.4, and the OpenMetrics text it grew into):

    # HELP name text with \\\\ and \\n escaped
    # TYPE name counter|gauge|histogram|summary|untyped
    name{label="value",other="v\\"q\\""} 1.5e+06 [timestamp]

Label values escape ``\\``, ``"`` and newline; values are Go floats (``NaN``, ``+Inf``, ``-Inf``).
OpenMetrics adds ``# EOF``, ``_created`` samples and exemplars (`` # {...} v``), which are cut.

Nothing a server returns is trusted: lines are read one at a time (:func:`parse_lines` streams),
a line that does not parse is counted (``Snapshot.errors``, with the first few kept, escaped
and cut short, for the report) and skipped, never raised; metric names, label counts and label
values are capped in length, and so is the number of series per snapshot.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

MAX_NAME = 200  # characters of a metric or label name
MAX_VALUE = 512  # characters of a label value
MAX_LABELS = 32
MAX_SERIES = 200_000  # series kept per snapshot (TiKV exposes ~10-20 thousand)
MAX_EXAMPLES = 5
TYPES = ("counter", "gauge", "histogram", "summary", "untyped", "info", "stateset", "gaugehistogram", "unknown")

Labels = tuple[tuple[str, str], ...]  # sorted (name, value) pairs
Key = tuple[str, Labels]


class _Bad(Exception):
    pass


_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*\Z")  # ASCII letters, digits, _ and :, not a digit first


def _is_name(s: str) -> bool:
    return bool(s) and len(s) <= MAX_NAME and _NAME.match(s) is not None


_NAMED = {"NaN": math.nan, "+Inf": math.inf, "Inf": math.inf, "-Inf": -math.inf, "+inf": math.inf,
          "-inf": -math.inf, "nan": math.nan, "inf": math.inf}


def _float(text: str) -> float:
    v = _NAMED.get(text)
    if v is not None:
        return v
    try:
        return float(text)
    except ValueError:
        raise _Bad(f"value {text[:40]!r} is not a number") from None


_PAIR = re.compile(r'([A-Za-z_:][A-Za-z0-9_:]*)[ \t]*=[ \t]*"([^"\\]*)"[ \t]*,?')  # name="value", no escapes


def _labels(text: str, pos: int) -> tuple[Labels, int]:
    """Parse ``{a="x",b="y"}`` starting after the ``{``; return labels and the position after ``}``."""
    out: list[tuple[str, str]] = []
    n = len(text)
    while True:
        while pos < n and text[pos] in " \t":
            pos += 1
        if pos < n and text[pos] == "}":
            return tuple(sorted(out)), pos + 1
        m = _PAIR.match(text, pos)  # the usual label in one match; anything else read as it comes
        if m is not None and len(m.group(1)) <= MAX_NAME:
            name, value = m.group(1, 2)
            pos = m.end()
        else:
            name, value, pos = _label(text, pos)
        if len(value) > MAX_VALUE:
            raise _Bad(f"a label value of {len(value)} characters")
        out.append((name, value))
        if len(out) > MAX_LABELS:
            raise _Bad(f"more than {MAX_LABELS} labels")


def _label(text: str, pos: int) -> tuple[str, str, int]:
    """One ``name="value"`` at ``pos``, and the position after it and its comma."""
    n = len(text)
    eq = text.find("=", pos)
    if eq < 0:
        raise _Bad("a label without '='")
    name = text[pos:eq].strip()
    if not _is_name(name):
        raise _Bad(f"label name {name[:40]!r}")
    pos = eq + 1
    while pos < n and text[pos] in " \t":
        pos += 1
    if pos >= n or text[pos] != '"':
        raise _Bad("a label value without quotes")
    pos += 1
    q = text.find('"', pos)
    if q >= 0 and text.find("\\", pos, q) < 0:  # no escape before the closing quote: the value as it is
        value = text[pos:q]
        pos = q + 1
    else:
        value, pos = _escaped_value(text, pos)
    while pos < n and text[pos] in " \t":
        pos += 1
    if pos < n and text[pos] == ",":
        pos += 1
    return name, value, pos


def _escaped_value(text: str, pos: int) -> tuple[str, int]:
    """A label value with escapes, from after its opening quote: the value, the position after its closing quote."""
    n = len(text)
    chars: list[str] = []
    while True:
        if pos >= n:
            raise _Bad("a label value runs off the end of the line")
        c = text[pos]
        if c == "\\":
            if pos + 1 >= n:
                raise _Bad("a dangling escape in a label value")
            e = text[pos + 1]
            chars.append("\n" if e == "n" else e)
            pos += 2
            continue
        if c == '"':
            return "".join(chars), pos + 1
        chars.append(c)
        pos += 1


def parse_sample(line: str) -> tuple[str, Labels, float]:
    """One sample line -> (name, labels, value); raises _Bad."""
    brace = line.find("{")
    space = line.find(" ")
    if brace >= 0 and (space < 0 or brace < space):
        name = line[:brace]
        labels, pos = _labels(line, brace + 1)
        rest = line[pos:]
    else:
        if space < 0:
            raise _Bad("a sample without a value")
        name = line[:space]
        labels = ()
        rest = line[space:]
    if not _is_name(name):
        raise _Bad(f"metric name {name[:40]!r}")
    hashpos = rest.find(" # ")  # an OpenMetrics exemplar
    if hashpos >= 0:
        rest = rest[:hashpos]
    parts = rest.split()
    if not parts or len(parts) > 2:
        raise _Bad("a sample needs a value and at most a timestamp")
    return name, labels, _float(parts[0])


# The usual sample line in one match: a name, ``{a="x",b="y"}`` without escapes or blanks (or no
# braces), one space, the value and perhaps one space and a timestamp, printable ASCII. Names and
# the label count are capped in the pattern; a line it does not take (escapes, blanks, exemplars,
# a name too long, a bad value...) goes to parse_sample, which reads it, or says why not, as before.
_N = "[A-Za-z_:][A-Za-z0-9_:]{0," + str(MAX_NAME - 1) + "}"
_LINE = re.compile("((" + _N + r")(?:\{((?:" + _N + r'="[^"\\]*",?){0,' + str(MAX_LABELS) + r"})\})?) ([!-~]+)(?: [!-~]+)?\Z")
_PAIRS = re.compile("(" + _N + r')="([^"\\]*)"')
MAX_SEEN = MAX_SERIES  # series heads remembered across the scrapes of one reading

Seen = dict[str, Key]  # a usual line's head (``name{labels}``) -> its key, read once


def _fast(line: str, seen: Seen) -> tuple[Key, float] | None:
    """parse_sample's answer for a usual line, or None (not usual: parse_sample reads it). A head
    already in ``seen`` is not read again: its key (the same tuple for every scrape) is reused."""
    m = _LINE.match(line)
    if m is None:
        return None
    head, number = m.group(1, 4)
    value = _NAMED.get(number)
    if value is None:
        try:
            value = float(number)
        except ValueError:
            return None
    key = seen.get(head)
    if key is None:
        name, text = m.group(2, 3)
        labels: Labels = ()
        if text:
            pairs = _PAIRS.findall(text)
            for _k, v in pairs:
                if len(v) > MAX_VALUE:
                    return None
            labels = tuple(sorted(pairs))
        key = (name, labels)
        if len(seen) < MAX_SEEN:
            seen[head] = key
    return key, value


@dataclass
class Family:
    type: str = "untyped"
    help: str = ""


@dataclass
class Snapshot:
    """One scrape: every series' value, the families' types, and what could not be read."""

    samples: dict[Key, float] = field(default_factory=dict)
    families: dict[str, Family] = field(default_factory=dict)
    lines: int = 0
    errors: int = 0
    examples: list[str] = field(default_factory=list)  # the first bad lines' reasons (escaped when shown)
    dropped: int = 0  # series past MAX_SERIES
    _names: dict[str, list[Labels]] = field(default_factory=dict, repr=False, compare=False)
    _indexed: int = field(default=-1, repr=False, compare=False)

    def named(self, name: str) -> list[tuple[Labels, float]]:
        """(labels, value) of each series of metric ``name``, in scrape order: the series indexed by
        name once (a view asks for hundreds of names of a snapshot of thousands of series)."""
        if self._indexed != len(self.samples):
            self._names = {}
            for n, labels in self.samples:
                self._names.setdefault(n, []).append(labels)
            self._indexed = len(self.samples)
        samples = self.samples
        return [(labels, samples[(name, labels)]) for labels in self._names.get(name, ())]

    def bad(self, why: str, lineno: int) -> None:
        self.errors += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(f"line {lineno}: {why}")

    def family_type(self, name: str) -> str:
        """The declared type of a metric, looking through _bucket/_sum/_count/_total suffixes."""
        fam = self.families.get(name)
        if fam is not None:
            return fam.type
        for suffix in ("_bucket", "_sum", "_count", "_total", "_created"):
            if name.endswith(suffix):
                fam = self.families.get(name[: -len(suffix)])
                if fam is not None:
                    return fam.type
        return "untyped"

    def names(self) -> set[str]:
        return {k[0] for k in self.samples}

    def series(self, name: str) -> Iterator[tuple[Labels, float]]:
        for (n, labels), v in self.samples.items():
            if n == name:
                yield labels, v


def _unescape_help(text: str) -> str:
    return text.replace("\\n", "\n").replace("\\\\", "\\")


def parse_lines(lines: Iterable[str], seen: Seen | None = None) -> Snapshot:
    """Read exposition text line by line into a Snapshot; never raises on bad input. ``seen``: a
    dict the caller keeps across the scrapes of one reading (the series repeat in each), else one
    for this text."""
    snap = Snapshot()
    samples = snap.samples
    if seen is None:
        seen = {}
    lineno = 0
    for lineno, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line:
            continue
        if line[0] == "#":
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("TYPE", "HELP"):
                name = parts[2]
                if not _is_name(name):
                    snap.bad(f"# {parts[1]} for a bad metric name", lineno)
                    continue
                fam = snap.families.setdefault(name, Family())
                if parts[1] == "TYPE":
                    t = parts[3].strip().lower() if len(parts) > 3 else ""
                    if t not in TYPES:
                        snap.bad(f"unknown metric type {t[:20]!r}", lineno)
                        continue
                    fam.type = t
                else:
                    fam.help = _unescape_help(parts[3] if len(parts) > 3 else "")[:MAX_VALUE]
            continue
        fast = _fast(line, seen)
        if fast is not None:
            key, value = fast
        else:
            try:
                name, labels, value = parse_sample(line)
            except _Bad as exc:
                snap.bad(str(exc), lineno)
                continue
            key = (name, labels)
        if len(samples) >= MAX_SERIES and key not in samples:
            snap.dropped += 1
            continue
        samples[key] = value
    snap.lines = lineno
    return snap


def parse_text(text: str) -> Snapshot:
    return parse_lines(text.splitlines())


def labels_dict(labels: Labels) -> dict[str, str]:
    return dict(labels)


def without(labels: Labels, *names: str) -> Labels:
    return tuple((k, v) for k, v in labels if k not in names)


def only(labels: Labels, names: tuple[str, ...]) -> Labels:
    return tuple((k, v) for k, v in labels if k in names)
