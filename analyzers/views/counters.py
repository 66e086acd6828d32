"""Views of the interval counters (analyzers layer): stat.csv, and the syscall counts of syscalls.csv
or, in older bundles, syscalls-rate.csv.

Both backends write syscalls.csv: per interval, thread and syscall, how many calls and how long
they took. A perf-backend bundle from an older version has syscalls-rate.csv instead: a
``perf stat -I`` count of raw_syscalls:sys_enter for all targets together, no names, no times.
"""

from __future__ import annotations

from dataclasses import dataclass

from profiler.analyzers.series import perfstat

from profiler.bundle import Bundle, members
from profiler.inputs.bundles import csv_rows


def read_stat(bundle: Bundle) -> perfstat.PerfStatSeries | None:
    """stat.csv (perf stat -I CSV), or None when the capture has none."""
    if not bundle.has(members.STAT):
        return None
    st = perfstat.parse(bundle.iter_lines(members.STAT))
    bundle.log(members.STAT).skip(st.bad_lines, "lines that are no perf stat row")
    return st


@dataclass(frozen=True)
class SyscallRow:
    """One syscalls.csv row. A field that does not parse is None (a cut-off line, a bad value)."""

    time: float | None  # start of the interval (CLOCK_MONOTONIC s)
    tid: int | None  # an empty tid reads as 0
    syscall: str
    count: float | None  # an empty count reads as 0
    total_ns: float | None  # an empty time reads as 0


@dataclass
class SyscallsView:
    """The targets' syscalls: per-thread rows (syscalls.csv) and/or an all-targets rate
    (syscalls-rate.csv; bundles of some older versions hold both)."""

    rows: list[SyscallRow] | None = None  # syscalls.csv
    rate: perfstat.PerfStatSeries | None = None  # syscalls-rate.csv


def _float(text: str | None, blank: float | None) -> float | None:
    if text is None:
        return None
    if text == "":
        return blank
    try:
        v = float(text)
    except ValueError:
        return None
    return v if abs(v) < 1e18 else None  # NaN, infinities and absurd counts: the row is unreadable


def _row(raw: dict[str, str]) -> SyscallRow:
    tid: int | None
    try:
        tid = int(raw.get("tid") or 0)
    except ValueError:
        tid = None
    return SyscallRow(time=_float(raw.get("time"), None), tid=tid, syscall=raw.get("syscall") or "?",
                      count=_float(raw.get("count") or "", 0.0), total_ns=_float(raw.get("total_ns") or "", 0.0))


def read_syscalls(bundle: Bundle) -> SyscallsView | None:
    """The syscalls members the capture holds, or None when it has neither."""
    out = SyscallsView()
    if bundle.has(members.SYSCALLS):
        parsed = list(csv_rows(bundle.iter_lines(members.SYSCALLS)))
        rows = [_row(r) for r in parsed if r is not None]
        bad = len(parsed) - len(rows) + sum(1 for r in rows if r.time is None or r.count is None)
        bundle.log(members.SYSCALLS).skip(bad, "unreadable rows")
        out.rows = rows
    if bundle.has(members.SYSCALLS_RATE):
        out.rate = perfstat.parse(bundle.iter_lines(members.SYSCALLS_RATE))
        bundle.log(members.SYSCALLS_RATE).skip(out.rate.bad_lines, "lines that are no perf stat row")
    return out if out.rows is not None or out.rate is not None else None
