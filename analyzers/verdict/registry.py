"""Every verdict rule, in one list (analyzers layer).

A rule is a function ``(TargetMetrics, Metrics) -> Finding | None``: one target's evidence
records and the capture's (host, IO, the other targets), to a finding with its score, sub-cause,
evidence rows and advice, or None when its evidence is absent. The ranking (ranking.py) runs
every rule here for each target, then the not-saturated rule over their findings. Adding a rule
is adding it here (docs/design.md, "A first walk"; its thresholds go in findings.THRESHOLDS and
docs/verdict.md).

The order is the order of the findings before they are ranked: it decides nothing but the order
of findings of equal score and category in the report.
"""

from __future__ import annotations

from collections.abc import Callable

from profiler.analyzers.verdict.findings import Finding
from profiler.analyzers.verdict.model import Metrics, TargetMetrics
from profiler.analyzers.verdict.rules import rule_io_wait, rule_lock, rule_memory
from profiler.analyzers.verdict.rules_cpu import rule_cpu
from profiler.analyzers.verdict.rules_requests import (
    rule_request_io,
    rule_request_locks,
    rule_request_queue,
)
from profiler.analyzers.verdict.rules_server import rule_go_locks, rule_go_memory

Rule = Callable[[TargetMetrics, Metrics], Finding | None]

RULES: tuple[Rule, ...] = (
    rule_cpu,  # cores used or wanted against the cores it may use; sub-causes in rules_cpu.SUB_CAUSES
    rule_io_wait,  # the work path blocked on storage
    rule_memory,  # paging, cgroup limit, PSI, swap
    rule_lock,  # the work path asleep in futex or kernel locks, waking often
    rule_request_locks,  # the servers' requests wait for locks and latches (their own histograms)
    rule_request_queue,  # ... for a slot (execution tokens)
    rule_request_io,  # ... for their log's disk (WAL fsync, backend commit)
    rule_go_locks,  # goroutines queued on Go locks (status port)
    rule_go_memory,  # the Go GC's share of the process's CPU, the heap at GOMEMLIMIT
)


def findings(t: TargetMetrics, m: Metrics) -> list[Finding]:
    """Every rule's finding for one target (None results left out), in registry order."""
    return [f for f in (rule(t, m) for rule in RULES) if f is not None]
