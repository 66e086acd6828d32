"""`profiler stat`: what a saved perf stat output says, in words (usecases layer).

Reads perf stat's own table or its ``-x,`` CSV (profiler/inputs/perfstat.py) and turns the
counters into the figures the verdict reads: CPUs used, context switches and faults per second,
IPC where the host counts cycles and instructions, and which counters it could not count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from profiler.errors import InputError
from profiler.inputs import COUNTERS, detect, perfstat

__all__ = ["StatRow", "StatSummary", "summarize"]

_PER_S = {"context-switches": "context switches", "cs": "context switches", "cpu-migrations": "CPU migrations",
          "migrations": "CPU migrations", "page-faults": "page faults", "faults": "page faults",
          "major-faults": "major page faults", "minor-faults": "minor page faults",
          "raw_syscalls:sys_enter": "syscalls", "syscalls:sys_enter": "syscalls"}


@dataclass
class StatRow:
    event: str
    value: float | None
    unit: str
    status: str
    per_second: float | None
    meaning: str


@dataclass
class StatSummary:
    input: str
    format: str
    target: str
    elapsed: float | None
    rows: list[StatRow] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    not_supported: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # what reading the input tolerated (lines skipped, a cut)

    def to_json(self) -> dict[str, Any]:
        return {"input": self.input, "format": self.format, "target": self.target, "elapsed": self.elapsed,
                "counters": [vars(r) for r in self.rows], "findings": self.findings,
                "not_supported": self.not_supported, "warnings": self.warnings}


def summarize(input: str) -> StatSummary:
    src = detect(input, COUNTERS)
    try:
        out = perfstat.read_source(src)
    finally:
        src.close()
    src.log.skip(out.skipped_lines, "lines that are no counter")
    # rates need a time: a (damaged) elapsed time of less than a microsecond gives none
    el = out.elapsed if out.elapsed is not None and out.elapsed >= 1e-6 else None
    s = StatSummary(input=input, format=out.format, target=out.target or "", elapsed=el,
                    warnings=[w for w in (src.log.summary(),) if w is not None])
    for c in out.counters:
        per_s = c.value / el if c.value is not None and el else None
        meaning = c.metric
        base = c.event.split(":u")[0].split(":k")[0]
        if base in ("task-clock", "cpu-clock") and c.value is not None and c.unit in ("msec", "") and el:
            per_s = None
            meaning = f"{c.value / 1000 / el:.3f} CPUs used on average"
        elif base in _PER_S and per_s is not None:
            meaning = f"{per_s:,.0f} {_PER_S[base]} per second"
        s.rows.append(StatRow(c.event, c.value, c.unit, c.status, per_s, meaning))
        if c.status == "not supported":
            s.not_supported.append(c.event)
    cyc, ins = out.get("cycles"), out.get("instructions")
    if cyc and ins and cyc.value and ins.value:
        s.findings.append(f"IPC {ins.value / cyc.value:.2f} instructions per cycle"
                          + (" (low: the CPU mostly waits for memory)" if ins.value / cyc.value < 0.7 else ""))
    tc = out.get("task-clock")
    if tc and tc.value is not None and el:
        cpus = tc.value / 1000 / el
        s.findings.append(f"{cpus:.2f} CPUs used on average over {el:.1f} s"
                          + (": little CPU for a server under load, the time goes elsewhere (IO, locks, the client)"
                             if cpus < 0.5 else ""))
    cs = out.get("context-switches") or out.get("cs")
    if cs and cs.value is not None and el:
        rate = cs.value / el
        s.findings.append(f"{rate:,.0f} context switches per second"
                          + (": high, threads block often (IO or lock waits)" if rate > 1000 else ""))
    if s.not_supported:
        s.findings.append(f"{len(s.not_supported)} counters not supported here ({', '.join(s.not_supported[:4])}"
                          f"{', ...' if len(s.not_supported) > 4 else ''}): usual in VMs without a virtual PMU")
    if not s.rows:
        raise InputError(f"{input}: no counters")
    return s
