"""Syscall counts and time per thread per syscall, aggregated in the kernel with bcc (collectors layer): syscalls.csv.

The same file as the perf backend (docs/bundle.md: ``time,tid,comm,syscall,count,total_ns``
per interval), made without one record per syscall: collectors/bcc/bpf/syscalls.c keeps
count and total time per (time slot, thread, syscall) for the targets' threads, and its
helper process sends the finished slots every ``--interval``, written here as they come.
``time`` is the start of the interval (monotonic seconds), as the perf backend writes it; a
call counts in the interval where it returned. Names come from the kernel's syscall table
(:func:`profiler.collectors.bcc.common.syscall_names`).
"""

from __future__ import annotations

from typing import Any

from profiler.collectors import host
from profiler.collectors.base import CaptureContext
from profiler.collectors.bcc.common import BccCollector, comm_text, syscall_name

from profiler.bundle import PARTIAL, CollectorRecord, members

MEMBER = members.SYSCALLS
HEADER = "time,tid,comm,syscall,count,total_ns\n"
NO_RETURN = ("exit", "exit_group")


def csv_field(text: str) -> str:
    """Quote a CSV field if it needs it (thread names may hold commas or quotes)."""
    if any(c in text for c in ',"\n\r'):
        return '"' + text.replace('"', '""') + '"'
    return text


class BccSyscalls(BccCollector):
    name = "syscalls"
    program = "syscalls.c"

    def __init__(self, max_threads: int = 16384, count_entries: int = 16384) -> None:
        super().__init__()
        self.max_threads = 1 << max(1, max_threads - 1).bit_length()  # a power of two: the program masks thread ids
        self.count_entries = count_entries
        self.out: Any = None
        self.rows = 0
        self.calls = 0
        self.slots: set[int] = set()
        self.in_flight = 0
        self.comms: dict[int, str] = {}

    def settings(self, ctx: CaptureContext) -> dict[str, Any]:
        return {"max_threads": self.max_threads, "count_entries": self.count_entries}

    def open_outputs(self, ctx: CaptureContext) -> None:
        self.out = self.open_member(ctx, MEMBER)
        self.out.write(HEADER.encode())

    def on_data(self, ctx: CaptureContext, msg: dict[str, Any]) -> None:
        rows: dict[tuple[int, int, int], list[Any]] = {}
        for slot, tid, _tgid, nr, comm, count, total in msg.get("rows") or []:
            c = self.comms[tid] = comm_text(comm)
            row = rows.setdefault((slot, tid, nr), [c, 0, 0])
            row[1] += count
            row[2] += total
        if msg.get("final"):
            self._add_in_flight(msg.get("in_flight") or [], rows)
        lines = []
        for (slot, tid, nr), (comm, count, total) in sorted(rows.items()):
            if not count and not total:
                continue
            start, _end = self.slot_bounds(slot)
            lines.append(f"{start:.6f},{tid},{csv_field(comm)},{syscall_name(nr)},{count},{total}\n")
            self.calls += count
            self.slots.add(slot)
        self.rows += len(lines)
        if lines:
            self.out.write("".join(lines).encode())

    def _add_in_flight(self, calls: list[list[Any]], rows: dict[tuple[int, int, int], list[Any]]) -> None:
        """Calls entered but not returned when the capture stopped: count them, time up to the stop."""
        last = max(0, (self.end_ns - self.t0_ns) // self.slot_ns)
        for tid, nr, ts, alive in calls:
            # exit and exit_group never return, nor does a call whose thread is gone: count, no time
            spent = self.end_ns - ts if alive and syscall_name(nr) not in NO_RETURN else 0
            comm = self.comms.get(tid) or host.read_text(f"/proc/{tid}/comm") or "?"
            row = rows.setdefault((last, tid, nr), [comm_text(comm.strip()), 0, 0])
            row[1] += 1
            row[2] += spent
            self.in_flight += 1

    def finish(self, ctx: CaptureContext, rec: CollectorRecord) -> None:
        c = self.counters
        rec.files = [MEMBER]
        dropped = int(c.get("shared_entry", 0)) + int(c.get("counts_full", 0))
        rec.stats.update({
            "syscalls": self.calls,
            "rows": self.rows,
            "slots": len(self.slots),
            "in_flight_at_stop": self.in_flight,
            "began_before_start": int(c.get("began_before", 0)),
            "dropped": dropped,
            "shared_entry": int(c.get("shared_entry", 0)),
            "events": self.calls,
            "lost": dropped,
        })
        if dropped:
            rec.status = PARTIAL
            rec.reason = (f"{dropped} syscalls not counted ({c.get('shared_entry', 0)} whose thread shared an entry "
                          f"of the {self.max_threads}-entry call table with another thread inside a call, "
                          f"{c.get('counts_full', 0)} to a full counts map)")
