"""Syscall metrics of one target (analyzers layer): the syscalls its threads spent most time in,
and how many calls a second, from the syscalls view (syscalls.csv rows, or the all-targets
raw_syscalls:sys_enter rate of an older bundle's syscalls-rate.csv)."""

from __future__ import annotations

from profiler.analyzers.verdict.model import CounterEvidence
from profiler.analyzers.views import SyscallsView

from profiler.bundle import CollectorRecord


def syscall_metrics(view: SyscallsView | None, rec: CollectorRecord | None, tids: set[int],
                    window: float, single_target: bool) -> CounterEvidence:
    """The syscalls the target's threads spent most time in, and its calls a second (``syscall_top``,
    ``syscall_rate``). ``rec``: the syscalls collector's record (a duty-cycled trace covers only
    its windows: rates are per traced second)."""
    syscall_top: list[tuple[str, float, float]] = []
    rate: float | None = None
    if view is None:
        return CounterEvidence()
    if view.rows is not None:
        counts: dict[str, float] = {}
        times: dict[str, float] = {}
        for row in view.rows:
            if row.tid is None or (tids and row.tid not in tids) or row.count is None:
                continue
            name = row.syscall
            counts[name] = counts.get(name, 0.0) + row.count
            if row.total_ns is None:
                continue
            times[name] = times.get(name, 0.0) + row.total_ns
        tot_t = sum(times.values())
        span = window or 1.0
        if rec is not None and rec.stats.get("sampled") and rec.stats.get("sampled_seconds"):
            span = float(rec.stats["sampled_seconds"]) or span
        top = sorted(counts, key=lambda k: (-(times.get(k, 0.0)), -counts[k], k))[:8]
        syscall_top = [(k, counts[k] / span, (times.get(k, 0.0) / tot_t) if tot_t else 0.0) for k in top]
        if counts:
            rate = sum(counts.values()) / span
    # syscalls-rate.csv counts all targets together: attributed only when there is one
    if view.rate is not None and single_target:
        for ev in view.rate.events:
            if "sys_enter" in ev:
                rate = view.rate.rate(ev)
    return CounterEvidence(syscall_top=syscall_top, syscall_rate=rate)
