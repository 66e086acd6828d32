"""Parse ``perf stat -I <ms> -x,`` CSV (stat.csv, syscalls-rate.csv) into per-event series (analyzers layer).

Line variants (perf 6.1, ``-x,``), each documented here because perf prints all of them:

- ``     1.001108770,1234.56,msec,task-clock,1001234567,100.00,1.234,CPUs utilized``
  interval end (s since the collector started), value, unit, event, run time, % of time
  counted, then an optional derived metric and its unit;
- ``     1.001108770,<not supported>,,cycles,0,100.00,,``: the host cannot count it (VMs);
- ``     1.001108770,<not counted>,msec,task-clock,0,100.00,,``: counted for no time in this
  interval (the target had not run yet, or was multiplexed out);
- with ``-A``/``--per-thread``/``-a --per-cpu`` a leading column (``CPU0`` or ``comm-tid``) shifts
  the rest by one; the parser recognises it because the first column is then not a number;
- lines starting with ``#`` and blank lines are comments.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np


@dataclass
class PerfStatSeries:
    events: dict[str, tuple[np.ndarray, np.ndarray]]  # event -> (interval end time, value per interval)
    units: dict[str, str] = field(default_factory=dict)
    unsupported: list[str] = field(default_factory=list)
    not_counted: dict[str, int] = field(default_factory=dict)  # event -> intervals with <not counted>
    bad_lines: int = 0

    def total(self, event: str) -> float | None:
        ev = self.events.get(event)
        return float(ev[1].sum()) if ev is not None and len(ev[1]) else None

    def span(self) -> float:
        ends = [float(t[-1]) for t, _ in self.events.values() if len(t)]
        return max(ends) if ends else 0.0

    def rate(self, event: str) -> float | None:
        """Per-second rate of a count event over the whole window."""
        tot, span = self.total(event), self.span()
        return tot / span if tot is not None and span > 0 else None

    def series(self, event: str) -> tuple[np.ndarray, np.ndarray] | None:
        return self.events.get(event)


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def parse(lines: Iterable[str]) -> PerfStatSeries:
    acc: dict[str, tuple[list[float], list[float]]] = {}
    units: dict[str, str] = {}
    unsupported: set[str] = set()
    not_counted: dict[str, int] = {}
    bad = 0
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        f = [x.strip() for x in line.split(",")]
        if len(f) < 4:
            bad += 1
            continue
        t = _float(f[0])
        if t is None:
            bad += 1
            continue
        # Optional aggregation column (CPU0, comm-tid) between time and value.
        if len(f) >= 5 and _float(f[1]) is None and not f[1].startswith("<") and (_float(f[2]) is not None or f[2].startswith("<")):
            f = [f[0]] + f[2:]
        value, unit, event = f[1], f[2], f[3]
        if not event:
            bad += 1
            continue
        if value == "<not supported>":
            unsupported.add(event)
            continue
        if value == "<not counted>":
            not_counted[event] = not_counted.get(event, 0) + 1
            ts, vs = acc.setdefault(event, ([], []))
            ts.append(t)
            vs.append(0.0)
            continue
        v = _float(value)
        if v is None:
            bad += 1
            continue
        ts, vs = acc.setdefault(event, ([], []))
        if ts and ts[-1] == t:  # per-cpu / per-thread rows of one interval: sum them
            vs[-1] += v
        else:
            ts.append(t)
            vs.append(v)
        if unit:
            units[event] = unit
    events = {e: (np.asarray(ts), np.asarray(vs)) for e, (ts, vs) in acc.items()}
    return PerfStatSeries(events=events, units=units, unsupported=sorted(unsupported - set(events)),
                    not_counted=not_counted, bad_lines=bad)
