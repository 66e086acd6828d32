"""The ``OP - Takes(s): 10.0, Count: 96731, ...`` line go-ycsb and go-tpc both print (analyzers layer).

One operation (go-ycsb: READ, UPDATE, READ_MODIFY_WRITE...) or transaction type (go-tpc:
NEW_ORDER, PAYMENT...) per line, then ``Name(unit): value`` pairs. What differs is read by each
tool's parser: go-ycsb says ``OPS:`` (``QPS:`` before 2020) and microseconds, go-tpc ``TPM:``
and milliseconds, and prefixes ``[Current] `` (this interval only) or ``[Summary] ``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_LINE = re.compile(
    r"^\s*(?:\[(?P<prefix>Current|Summary)\]\s*)?(?P<op>[A-Za-z][A-Za-z0-9_]*)\s+-\s+"
    r"Takes\(s\):\s*(?P<takes>\d+(?:\.\d+)?),\s*Count:\s*(?P<count>\d+)(?P<rest>.*)$"
)
_PAIR = re.compile(r",\s*(?P<name>[A-Za-z0-9.]+)(?:\((?P<unit>us|ms|s)\))?:\s*(?P<value>-?\d+(?:\.\d+)?)")
_PCT = re.compile(r"^(\d+(?:\.\d+)?)th$")
_TO_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0}
ERROR_SUFFIXES = ("_ERR", "_ERROR")


@dataclass
class OpLine:
    """One parsed line."""

    op: str
    takes: float  # seconds the measurement covers (go-ycsb: since the run started; go-tpc [Current]: this interval)
    count: int
    prefix: str | None  # "Current", "Summary" or None
    rates: dict[str, float] = field(default_factory=dict)  # "OPS"/"QPS" per second, "TPM" per minute
    latency_ms: dict[str, float] = field(default_factory=dict)  # "avg", "min", "max", "p99", "p99.9", "sum"
    units: set[str] = field(default_factory=set)  # the latency units seen: {"us"} or {"ms"}

    @property
    def error(self) -> bool:
        return self.op.upper().endswith(ERROR_SUFFIXES)

    @property
    def total(self) -> bool:
        return self.op.upper() == "TOTAL"


def parse_op_line(text: str) -> OpLine | None:
    m = _LINE.match(text)
    if m is None:
        return None
    line = OpLine(op=m.group("op"), takes=float(m.group("takes")), count=int(m.group("count")),
                  prefix=m.group("prefix"))
    for p in _PAIR.finditer(m.group("rest")):
        name, unit, value = p.group("name"), p.group("unit"), float(p.group("value"))
        if unit is None:
            line.rates[name.upper()] = value
            continue
        line.units.add(unit)
        pm = _PCT.match(name)
        key = ("p" + pm.group(1)) if pm else name.lower()
        line.latency_ms[key] = value * _TO_MS[unit]
    return line
