"""Futex waits by user stack, thread, time slot and lock address with bcc (collectors layer).

The direct evidence for user-space lock contention in Go and Rust servers: collectors/bcc/bpf/futex.c
times every waiting futex call (FUTEX_WAIT, WAIT_BITSET, LOCK_PI, LOCK_PI2, WAIT_REQUEUE_PI)
of the targets' threads, from syscalls:sys_enter_futex to sys_exit_futex, by time slot, thread
and the waiter's user stack, and by lock address. Its helper process sends the finished slots
every ``--interval``; they are written as they come to ``futex.slots.jsonl.gz``
(collectors/bcc/slots.py; rows ``[tid, pid, comm, stack, ns, waits, timeouts]``). At the stop,
waits still in progress get their time up to the stop, and the whole-capture files are written:
``futex.folded.gz`` (``thread-comm;outermost;...;innermost NS``, timed-out waits included) and
``futex.summary.json`` (per-thread totals, the most waited-on lock addresses, lost stacks).

Idle worker pools also wait on futexes (Go's runtime.futexsleep under runtime.stopm, Rust's
parking_lot/crossbeam parkers): the stack tells a lock from an idle pool, so the analyzers,
not this collector, decide which waits are contention.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from profiler.collectors.base import CaptureContext
from profiler.collectors.bcc import symbols
from profiler.collectors.bcc.common import BccCollector, comm_text
from profiler.collectors.bcc.slots import (
    EFAULT,
    STACK_BUDGET,
    UNSAMPLED,
    Sharer,
    StackTable,
    header,
    interval_parts,
    json_line,
    spread,
)

from profiler.bundle import PARTIAL, CollectorRecord, members

MEMBER = members.FUTEX_FOLDED
SUMMARY = members.FUTEX_SUMMARY
SLOTS = members.FUTEX_SLOTS
FORMAT = "profiler.futex-slots"
TOP_LOCKS = 50
LOST_SHARE_PARTIAL = 0.01


class BccFutex(BccCollector):
    name = "futex-waits"
    program = "futex.c"

    def __init__(self, user_stacks: int = 16384, wait_entries: int = 8192, lock_entries: int = 4096,
                 max_threads: int = 16384, stack_every: int = 32, stack_budget: int = STACK_BUDGET) -> None:
        super().__init__()
        self.stack_every = max(1, stack_every)
        self.stack_budget = max(0, stack_budget)
        self.every_used = self.stack_every  # the sparsest sampling an interval had (stack_budget)
        self.user_stacks = user_stacks
        self.wait_entries = wait_entries
        self.lock_entries = lock_entries
        self.max_threads = 1 << max(1, max_threads - 1).bit_length()  # a power of two: the program masks into it
        self.out: Any = None
        self.sym: symbols.Symbols | None = None
        self.table: StackTable | None = None
        self.header_written = False
        self.folded: dict[str, int] = defaultdict(int)
        self.lines: dict[tuple[str, int], str] = {}
        self.threads: dict[int, dict[str, Any]] = {}
        self.locks: list[list[Any]] = []
        self.lock_addresses = 0
        self.total_ns = self.lost_ns = self.waits = self.timeouts = self.eagain = 0
        self.waiting_at_stop = 0
        self.slots: set[int] = set()
        self.sharer = Sharer()

    def settings(self, ctx: CaptureContext) -> dict[str, Any]:
        return {"user_stacks": self.user_stacks, "wait_entries": self.wait_entries,
                "lock_entries": self.lock_entries, "max_threads": self.max_threads,
                "stack_every": self.stack_every, "stack_budget": self.stack_budget}

    def open_outputs(self, ctx: CaptureContext) -> None:
        self.out = self.open_member(ctx, SLOTS)
        self.sym = symbols.acquire()
        self.table = StackTable(self.sym, lambda obj: self.out.write(json_line(obj)))

    def cleanup(self) -> None:
        if self.sym is not None:
            cpu = symbols.release(self.sym)
            if cpu and self.rec is not None:  # the last collector to let go says what naming cost
                self.rec.stats["symbolizer_cpu_seconds"] = cpu
            self.sym = None

    def _header(self) -> None:
        if not self.header_written:
            self.header_written = True
            self.out.write(json_line(header(FORMAT, self.t0_ns, self.slot_ns, targets=self.pids)))

    def _thread(self, pid: int, tid: int, comm: str) -> dict[str, Any]:
        return self.threads.setdefault(tid, {"tid": tid, "pid": pid, "comm": comm, "wait_ns": 0, "waits": 0,
                                             "timeouts": 0, "eagain": 0, "max_ns": 0})

    def on_data(self, ctx: CaptureContext, msg: dict[str, Any]) -> None:
        assert self.table is not None
        self._header()
        self.table.learn(msg)
        self.every_used = max(self.every_used, int(msg.get("stack_every") or 0))
        parts: dict[int, list[list[Any]]] = defaultdict(list)
        rows = self.sharer.share(msg.get("rows") or [], key=lambda r: (r[3], 0), stack=lambda r: (r[5], 0),
                                 amounts=(6, 11), fractions=(7, 8, 9), with_stack=lambda r, st: [*r[:5], st[0], *r[6:]])
        for slot, back, tgid, tid, comm, us, total, count, timeouts, eagain, mx, head in rows:
            c = comm_text(comm)
            t = self._thread(tgid, tid, c)
            t["wait_ns"] += total
            t["waits"] += count
            t["timeouts"] += timeouts
            t["eagain"] += eagain
            t["max_ns"] = max(t["max_ns"], mx)
            self.total_ns += total
            self.waits += count
            self.timeouts += timeouts
            self.eagain += eagain
            if total <= 0:
                continue
            stack = self.table.id(tgid, us)
            for s, ns in spread(slot, back, total, count + timeouts, head, self.slot_ns):
                parts[s].append([tid, tgid, c, stack, ns, round(count, 2) if s == slot else 0,
                                 round(timeouts, 2) if s == slot else 0])
            self._fold(c, us, stack, total)
        for tgid, tid, comm, us, since, uaddr in msg.get("waiting") or []:
            c = comm_text(comm)
            spent = max(0, self.end_ns - since)
            stack = self.table.id(tgid, us)
            for s, ns in interval_parts(since, self.end_ns, self.t0_ns, self.slot_ns):
                parts[s].append([tid, tgid, c, stack, ns, 0, 0])
            t = self._thread(tgid, tid, c)
            t["wait_ns"] += spent
            t["max_ns"] = max(t["max_ns"], spent)
            self.total_ns += spent
            self._fold(c, us, stack, spent)
            self.locks.append([tgid, uaddr, spent, 0, spent])
            self.waiting_at_stop += 1
        if msg.get("final"):
            self.locks.extend(msg.get("locks") or [])
            self.lock_addresses = int(msg.get("lock_addresses") or 0)
        for s in sorted(parts):
            start, stop = self.slot_bounds(s)
            self.out.write(json_line({"kind": "slot", "slot": s, "t": round(start, 9), "end": round(stop, 9),
                                      "rows": parts[s]}))
            self.slots.add(s)

    def _fold(self, comm: str, us: int, stack: int, ns: int) -> None:
        assert self.table is not None
        if us < 0 and us not in (-EFAULT, UNSAMPLED):
            self.lost_ns += ns
        line = self.lines.get((comm, stack))
        if line is None:  # built once per thread name and stack
            line = self.lines[(comm, stack)] = f"{comm};{self.table.frames[stack]}".rstrip(";")
        self.folded[line] += ns

    def finish(self, ctx: CaptureContext, rec: CollectorRecord) -> None:
        c = self.counters
        self._header()
        self.out.write(json_line({"kind": "end", "ended": self.end_ns / 1e9, "counters": c, "slots": len(self.slots)}))
        merged: dict[tuple[int, int], list[int]] = {}
        for tgid, uaddr, total, count, mx in self.locks:
            m = merged.setdefault((int(tgid), int(uaddr)), [0, 0, 0])
            m[0] += int(total)
            m[1] += int(count)
            m[2] = max(m[2], int(mx))
        ranked = sorted(merged.items(), key=lambda kv: (-kv[1][0], kv[0]))
        locks = [{"pid": p, "uaddr": f"0x{a:x}", "wait_ns": v[0], "waits": v[1], "max_ns": v[2]} for (p, a), v in ranked]
        with ctx.writer.open_member(MEMBER) as fh:
            fh.write("".join(f"{s} {n}\n" for s, n in sorted(self.folded.items())).encode())
        lost = int(c.get("user_stack_collision", 0)) + int(c.get("user_stack_error", 0))
        dropped = int(c.get("shared_entry", 0)) + int(c.get("waits_full", 0))
        summary: dict[str, Any] = {
            "unit": "ns",
            "window": [self.t0_ns / 1e9, self.end_ns / 1e9],
            "wait_ns": self.total_ns,
            "waits": round(self.waits),
            "timeouts": round(self.timeouts),
            "eagain": round(self.eagain),
            "waiting_at_stop": self.waiting_at_stop,
            "threads": sorted(({**t, **{k: round(t[k]) for k in ("waits", "timeouts", "eagain")}}
                               for t in self.threads.values()), key=lambda t: t["tid"]),
            "locks": locks[:TOP_LOCKS],
            "lock_addresses": max(self.lock_addresses, len(locks)),
            "lost": {"user_stacks": lost, "lost_ns": self.lost_ns, "dropped_waits": dropped,
                     "locks_map_full": int(c.get("locks_full", 0))},
            "stack_map_entries": self.user_stacks,
        }
        with ctx.writer.open_member(SUMMARY) as fh:
            fh.write((json.dumps(summary, indent=1, sort_keys=True) + "\n").encode())
        rec.files = [SLOTS, MEMBER, SUMMARY]
        rec.stats.update({"waits": round(self.waits), "wait_ns": self.total_ns, "timeouts": round(self.timeouts),
                          "eagain": round(self.eagain), "waiting_at_stop": self.waiting_at_stop, "stacks": len(self.folded),
                          "slots": len(self.slots), "lock_addresses": summary["lock_addresses"],
                          "lost_user_stacks": lost, "stack_collisions": int(c.get("user_stack_collision", 0)),
                          "stacks_sampled": int(c.get("stacks_sampled", 0)), "stack_every": self.stack_every,
                          "stack_budget": self.stack_budget, "stack_every_max": self.every_used,
                          "unsampled_shared": self.sharer.shared, "unsampled_kept": self.sharer.kept,
                          "lost_stack_ns": self.lost_ns, "dropped": dropped, "unit": "ns",
                          "events": int(c.get("entered", 0)), "lost": lost + dropped})
        if self.sym is not None and self.sym.fallback:
            rec.stats["symbolizer"] = self.sym.fallback
        share = self.lost_ns / self.total_ns if self.total_ns else 0.0
        if share > LOST_SHARE_PARTIAL or dropped:
            rec.status = PARTIAL
            rec.reason = (f"{share:.1%} of futex wait time has a lost stack ({lost} stacks lost; stack map "
                          f"{self.user_stacks} entries)" + (f"; {dropped} waits dropped: maps full" if dropped else ""))
