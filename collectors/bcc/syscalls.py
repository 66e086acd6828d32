"""Syscall counts and time per thread per syscall, aggregated in the kernel with bcc (collectors layer): syscalls.csv.

The same file as the perf backend (docs/bundle.md: ``time,tid,comm,syscall,count,total_ns``
per interval), made without one record per syscall: collectors/bcc/bpf/syscalls.c keeps
count and total time per (time slot, thread, syscall) for the targets' threads, and this
collector moves finished slots to the CSV every ``--interval``. ``time`` is the start of the
interval (monotonic seconds), as the perf backend writes it; a call counts in the interval
where it returned. Names come from the kernel's syscall table (:func:`profiler.collectors.bcc.common.syscall_names`).
"""

from __future__ import annotations

import os
import time
from typing import Any

from profiler.collectors import host
from profiler.collectors.base import CaptureContext
from profiler.collectors.bcc.common import BccCollector, comm_text, read_counters, syscall_name

from profiler.bundle import PARTIAL, CollectorRecord, members

MEMBER = members.SYSCALLS
HEADER = "time,tid,comm,syscall,count,total_ns\n"
COUNTERS = ["enters", "exits", "start_full", "counts_full", "began_before"]
SETTLE_NS = 50_000_000
NO_RETURN = ("exit", "exit_group")


def csv_field(text: str) -> str:
    """Quote a CSV field if it needs it (thread names may hold commas or quotes)."""
    if any(c in text for c in ',"\n\r'):
        return '"' + text.replace('"', '""') + '"'
    return text


class BccSyscalls(BccCollector):
    name = "syscalls"
    source = "syscalls.c"
    tracepoints = (
        ("raw_syscalls:sys_enter", "pf_sys_enter"),
        ("raw_syscalls:sys_exit", "pf_sys_exit"),
    )
    has_cfg = True
    drains = True

    def __init__(self, max_threads: int = 16384, count_entries: int = 65536) -> None:
        super().__init__()
        self.max_threads = max_threads
        self.count_entries = count_entries
        self.out: Any = None
        self.rows = 0
        self.calls = 0
        self.in_flight: list[tuple[int, int, int]] = []

    def defines(self, ctx: CaptureContext) -> dict[str, int | str]:
        return {"SLOT_NS": f"{self.interval_ns(ctx)}ULL", "MAX_THREADS": self.max_threads,
                "COUNT_ENTRIES": self.count_entries}

    def open_outputs(self, ctx: CaptureContext) -> None:
        self.out = self.open_member(ctx, MEMBER)
        self.out.write(HEADER.encode())

    def drain(self, ctx: CaptureContext, final: bool) -> None:
        cutoff = None if final else self.slot_of(ctx, time.monotonic_ns() - SETTLE_NS)
        counts = self.bpf[b"counts"]
        rows: dict[tuple[int, int, int], list[Any]] = {}
        keys = []
        for k, v in counts.items():
            if cutoff is not None and k.slot >= cutoff:
                continue
            rows[(int(k.slot), int(k.tid), int(k.nr))] = [comm_text(bytes(v.comm)), int(v.count), int(v.total_ns)]
            keys.append(k)
        for k in keys:
            del counts[k]
        if final:
            self._add_in_flight(ctx, rows)
        lines = []
        for (slot, tid, nr), (comm, count, total) in sorted(rows.items()):
            if not count and not total:
                continue
            start, _end = self.slot_bounds(ctx, slot)
            lines.append(f"{start:.6f},{tid},{csv_field(comm)},{syscall_name(nr)},{count},{total}\n")
            self.calls += count
        self.rows += len(lines)
        if lines:
            self.out.write("".join(lines).encode())

    def _add_in_flight(self, ctx: CaptureContext, rows: dict[tuple[int, int, int], list[Any]]) -> None:
        """Calls entered but not returned when the capture stopped: count them, time up to the stop."""
        last = self.slot_of(ctx, self.end_ns)
        comms = {tid: row[0] for (_s, tid, _nr), row in rows.items()}
        for k, v in self.bpf[b"start"].items():
            tid, nr, ts = int(k.value), int(v.nr), int(v.ts)
            if ts < self.t0_ns or ts > self.end_ns:
                continue
            # exit and exit_group never return, nor does a call whose thread is gone: count, no time
            alive = syscall_name(nr) not in NO_RETURN and os.path.exists(f"/proc/{tid}")
            spent = self.end_ns - ts if alive else 0
            row = rows.setdefault((last, tid, nr), [comms.get(tid) or _thread_comm(tid), 0, 0])
            row[1] += 1
            row[2] += spent
            self.in_flight.append((tid, nr, spent))

    def finish(self, ctx: CaptureContext, rec: CollectorRecord) -> None:
        counters = read_counters(self.bpf, COUNTERS)
        rec.files = [MEMBER]
        rec.stats = {
            "syscalls": self.calls,
            "rows": self.rows,
            "in_flight_at_stop": len(self.in_flight),
            "began_before_start": counters["began_before"],
            "dropped": counters["start_full"] + counters["counts_full"],
        }
        rec.stats["events"] = self.calls
        rec.stats["lost"] = rec.stats["dropped"]
        if rec.stats["dropped"]:
            rec.status = PARTIAL
            rec.reason = (f"{rec.stats['dropped']} syscalls not counted: kernel maps full "
                          f"(threads {counters['start_full']}, counts {counters['counts_full']})")


def _thread_comm(tid: int) -> str:
    return host.read_text(f"/proc/{tid}/comm") or "?"
