"""Standalone ``perf stat`` output, as users save it (inputs layer).

Two formats, each sniffed here and read into one model (one reader per format):

- the human table perf prints by default (the field reports paste it)::

       Performance counter stats for process id '5100':

            101551.465078      task-clock (msec)         #    0.178 CPUs utilized
                1,057,588      context-switches          #    0.010 M/sec
          <not supported>      cycles

            570.655272624 seconds time elapsed

  values may carry thousands separators, a unit may follow the event (``task-clock (msec)``
  in perf 4.x, ``msec task-clock`` in 6.x), ``# ...`` is perf's own derived metric, and a
  trailing ``(50.00%)`` says the counter was multiplexed;
- ``perf stat -x,`` CSV: ``value,unit,event,run time,% counted[,metric,metric unit]``, with or
  without ``-I`` (then a leading interval time column: the values are per interval and are
  summed here); ``<not supported>`` and ``<not counted>`` values are kept as such.

Interval CSV is what a capture's stat.csv holds (analyzers/series/perfstat.py reads that); this
module is for a file a user brings.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from profiler.errors import InputError
from profiler.inputs.source import Format, Source
from profiler.inputs.streams import iter_decoded_lines

__all__ = ["CSV", "TABLE", "Counter", "PerfStatOutput", "parse_csv", "parse_table", "read_source"]

_NUM = r"[0-9][0-9,]*(?:\.[0-9]+)?"
_TABLE_LINE = re.compile(
    rf"^\s*(?P<value>{_NUM}|<not supported>|<not counted>)\s+(?:(?P<unit1>msec|ns|us|ms|Joules|MiB|KiB)\s+)?"
    r"(?P<event>[A-Za-z_][\w\-.:/=,\[\]]*(?:\s\([a-z]+\))?)"
    r"(?:\s+#\s*(?P<metric>.*?))?(?:\s+\((?P<pct>[0-9.]+)%\))?\s*$")
_ELAPSED = re.compile(r"^\s*(?P<s>[0-9.]+)\s+seconds time elapsed")
_HEADER = re.compile(r"Performance counter stats for (?P<what>.*?):?\s*$")


@dataclass
class Counter:
    event: str
    value: float | None  # None: not supported / not counted
    unit: str = ""
    status: str = "ok"  # ok | not supported | not counted
    metric: str = ""  # perf's derived metric text ("0.178 CPUs utilized")
    counted_pct: float | None = None  # < 100: multiplexed


@dataclass
class PerfStatOutput:
    counters: list[Counter] = field(default_factory=list)
    elapsed: float | None = None  # seconds, when perf printed it (table) or the intervals span (-I)
    target: str = ""  # "process id '5100'", "system wide", ...
    intervals: int = 0  # -I CSV: how many intervals were summed
    skipped_lines: int = 0
    format: str = ""

    def get(self, event: str) -> Counter | None:
        for c in self.counters:
            if c.event == event or c.event.split(":")[0] == event:
                return c
        return None


MAX_VALUE = 1e20  # a 64-bit counter holds at most 1.8e19: a larger (or infinite, NaN) value is damage


def _num(text: str) -> float:
    """A counter value, time or share: finite and below MAX_VALUE (ValueError otherwise)."""
    v = float(text.replace(",", ""))
    if not abs(v) < MAX_VALUE:  # also NaN
        raise ValueError(f"not a counter value: {text[:40]}")
    return v


def parse_table(lines: Iterable[str]) -> PerfStatOutput:
    out = PerfStatOutput(format="perf stat table")
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _HEADER.search(line)
        if m:
            out.target = m.group("what").strip()
            continue
        m = _ELAPSED.match(line)
        if m:
            try:
                out.elapsed = _num(m.group("s"))
            except ValueError:
                out.skipped_lines += 1
            continue
        if re.match(r"^\s*[0-9.]+\s+seconds (user|sys)\s*$", line):
            continue
        m = _TABLE_LINE.match(line)
        if m is None:
            out.skipped_lines += 1
            continue
        event = m.group("event")
        unit = m.group("unit1") or ""
        um = re.match(r"^(.*?)\s\(([a-z]+)\)$", event)
        if um:
            event, unit = um.group(1), um.group(2)
        raw = m.group("value")
        status = raw.strip("<>") if raw.startswith("<") else "ok"
        try:
            value = None if status != "ok" else _num(raw)
            pct = _num(m.group("pct")) if m.group("pct") else None
        except ValueError:
            out.skipped_lines += 1  # a number no counter has (or "1.2.3")
            continue
        out.counters.append(Counter(event=event, value=value, unit=unit, status=status,
                                    metric=(m.group("metric") or "").strip(), counted_pct=pct))
    if not out.counters:
        raise InputError("perf stat output: no counter lines found")
    return out


def parse_csv(lines: Iterable[str]) -> PerfStatOutput:
    out = PerfStatOutput(format="perf stat -x, CSV")
    by_event: dict[str, Counter] = {}
    times: set[float] = set()
    for line in lines:
        if not line.strip() or line.startswith("#"):
            continue
        f = [x.strip() for x in line.split(",")]
        interval = None
        if len(f) >= 4 and re.fullmatch(r"[0-9]+\.[0-9]+", f[0]) and re.fullmatch(r"[0-9.]+|<not \w+>", f[1]):
            try:
                interval, f = _num(f[0]), f[1:]  # -I: the interval's end first, then the value
            except ValueError:
                out.skipped_lines += 1
                continue
        if len(f) < 3 or not f[2]:
            out.skipped_lines += 1
            continue
        value, unit, event = f[0], f[1], f[2]
        pct = None
        if len(f) > 4 and f[4]:
            try:
                pct = _num(f[4])
            except ValueError:
                pct = None
        status = value.strip("<>") if value.startswith("<") else "ok"
        try:
            v = None if status != "ok" else _num(value)
        except ValueError:
            out.skipped_lines += 1
            continue
        if interval is not None:
            times.add(interval)
        c = by_event.get(event)
        if c is None:
            c = by_event[event] = Counter(event=event, value=v, unit=unit, status=status, counted_pct=pct,
                                          metric=" ".join(x for x in f[5:7] if x))
            out.counters.append(c)
        elif v is not None:
            c.value = (c.value or 0.0) + v
            c.status = "ok"
    if not out.counters:
        raise InputError("perf stat -x, output: no counter lines found")
    if times:
        out.intervals = len(times)
        out.elapsed = max(times)
    return out


def read_source(src: Source) -> PerfStatOutput:
    with src.open() as fh:
        lines = iter_decoded_lines(fh)
        return parse_csv(lines) if src.format is CSV else parse_table(lines)


def _sniff_table(head: bytes) -> bool:
    text = head.decode("utf-8", "replace")
    if "Performance counter stats for" in text:
        return True
    lines = [ln for ln in text.splitlines()[:30] if ln.strip()]
    hits = sum(1 for ln in lines if _TABLE_LINE.match(ln))
    return hits >= 2 and any(_ELAPSED.match(ln) for ln in lines)


_CSV_LINE = re.compile(r"^(?:\s*[0-9]+\.[0-9]+,)?(?:[0-9.]+|<not supported>|<not counted>),[^,]*,[A-Za-z_][^,]*,")


def _sniff_csv(head: bytes) -> bool:
    lines = [ln for ln in head.decode("utf-8", "replace").splitlines()[:30] if ln.strip() and not ln.startswith("#")]
    return bool(lines) and sum(1 for ln in lines[:10] if _CSV_LINE.match(ln)) >= min(2, len(lines[:10]))


TABLE = Format("perf-stat", "perf stat output", _sniff_table)
CSV = Format("perf-stat-csv", "perf stat -x, output", _sniff_csv)
