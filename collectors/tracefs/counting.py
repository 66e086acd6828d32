"""What the block trace should hold (collectors layer): perf stat's count of the same events, the ring buffer's losses, the balance.

``perf stat -a`` counts block_rq_issue and block_rq_complete beside the trace (:func:`counter_argv`,
:func:`parse_counter`); the instance's per-CPU ``stats`` say what its ring buffer overran
(:func:`parse_cpu_stats`); :func:`balance` compares the three and says why a trace is partial.
:class:`TraceCounter` counts the events of ftrace text as it streams by (the text path).
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

EVENTS = ["block_rq_issue", "block_rq_complete"]  # what the trace and the counter both count

# "  kworker/u8:2-1234    [001] d..1.  123.456789: block_rq_issue: ..." -> the issuing tid
# (the irq-flags column is optional; no lazy scan to the end of every line: issue lines only cost)
_ISSUER = re.compile(rb"-(\d+) +\[\d+\] +(?:[^ \n]+ +)?\d+\.\d+: block_rq_issue:")


def counter_argv(perf: str, out: Path) -> list[str]:
    """The independent count: perf stat keeps exact counts even where perf record loses samples."""
    return [perf, "stat", "-a", "-x", ",", "-e",
            ",".join(f"block:{e}" for e in EVENTS), "-o", str(out)]


def parse_counter(text: str) -> dict[str, int]:
    """perf stat -x, output -> {'block_rq_issue': n, 'block_rq_complete': n}."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        f = line.split(",")
        if len(f) >= 3 and f[2].startswith("block:"):
            with contextlib.suppress(ValueError):
                out[f[2].split(":", 1)[1]] = int(f[0])
    return out


def parse_cpu_stats(text: str) -> dict[str, int]:
    """A tracefs per_cpu/cpuN/stats file -> {'overrun': n, 'dropped events': n, ...}."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        with contextlib.suppress(ValueError):
            out[key.strip()] = int(value.split()[0])
    return out


def balance(trace: dict[str, int], counted: dict[str, int] | None, ring_lost: int,
            window_ratio: float = 1.0) -> tuple[dict[str, Any], str | None]:
    """Compare the trace with the independent count; returns (stats, reason it is incomplete or None).

    The counter starts before the trace and is stopped before it (the stop waits for it):
    ``window_ratio`` is the share of the counter's window the trace covered, and the events the counter may
    have seen outside the trace's window, plus IOs in flight at either edge, are allowed as slack.
    """
    stats: dict[str, Any] = {"trace": dict(trace), "ring_buffer_lost": ring_lost}
    reasons = []
    if ring_lost:
        reasons.append(f"the tracefs buffer lost {ring_lost} events (overrun)")
    if counted:
        stats["counted"] = dict(counted)
        for ev in EVENTS:
            want, got = counted.get(ev, 0), trace.get(ev, 0)
            slack = 64 + want // 100 + int(want * max(0.0, 1.0 - window_ratio))
            if want - got > slack:
                reasons.append(f"the trace holds {got} of {want} {ev} events counted by perf stat")
    issues, completes = trace.get("block_rq_issue", 0), trace.get("block_rq_complete", 0)
    stats["unpaired"] = abs(issues - completes)
    if issues and completes < issues // 2 - 64:
        reasons.append(f"only {completes} completions for {issues} issues: pairing is incomplete")
    return stats, "; ".join(reasons) or None


class TraceCounter:
    """Counts block events in ftrace text as it streams by (C-speed byte counts per chunk),
    and the issues made by the targets' own threads."""

    def __init__(self, events: list[str], is_target: Callable[[int], bool]) -> None:
        self.needles = {ev: f" {ev}:".encode() for ev in events}
        self.counts = {ev: 0 for ev in events}
        self.is_target = is_target
        self.target_issues = 0
        self.carry = b""

    def feed(self, chunk: bytes) -> None:
        data = self.carry + chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            self.carry = data
            return
        self.carry = data[cut + 1:]
        self._count(data[:cut + 1])

    def close(self) -> None:
        if self.carry:
            self._count(self.carry)
            self.carry = b""

    def _count(self, data: bytes) -> None:
        for ev, needle in self.needles.items():
            self.counts[ev] += data.count(needle)
        if b" block_rq_issue:" not in data:
            return
        # one is_target per distinct issuing thread, not per issue (millions on a high-IOPS host)
        for tid, n in Counter(_ISSUER.findall(data)).items():
            if self.is_target(int(tid)):
                self.target_issues += n
