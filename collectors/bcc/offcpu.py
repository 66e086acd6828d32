"""Off-CPU (blocked) time by stack, thread and time slot from sched:sched_switch with bcc (collectors layer).

collectors/bcc/bpf/offcpu.c takes the user and kernel stacks of a target thread as it switches
out and, when it switches back in, adds the time it was off the CPU per slot, thread, state
and stack pair, in the kernel. Its helper process sends the finished slots every
``--interval`` with the addresses of stacks not seen before; they are named here
(collectors/bcc/symbols.py, while the targets are alive) and written as they come to
``offcpu.slots.jsonl.gz`` (collectors/bcc/slots.py: every slot's blocked time per thread, state
and stack, a wait spanning slots split exactly between them). At the stop, threads still off
the CPU get their time up to the stop, and the whole-capture files are written from the same
rows: ``offcpu.folded.gz`` (``thread-comm;user outermost;...;kernel innermost_[k] NS``) and
``offcpu.summary.json`` (per-thread, per-state totals: runnable = preempted and waiting for a
CPU, sleep = S, disk = D, other; and the lost-stack counts).

Stack maps are hash tables without chaining: a stack whose bucket is taken by another is
lost (``-EEXIST``), silently in most tools. Here every lost stack is counted, its time kept
under a ``[lost user stack]`` / ``[lost kernel stack]`` frame, and the capture is marked
partial when more than 1% of the blocked time has a lost stack.
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
    LOST_KERNEL,
    LOST_USER,
    STACK_BUDGET,
    UNSAMPLED,
    Sharer,
    StackTable,
    header,
    interval_parts,
    json_line,
    spread,
    trim_tracing,
)

from profiler.bundle import PARTIAL, CollectorRecord, members

__all__ = ["LOST_KERNEL", "LOST_USER", "BccOffCpu", "fold_frames", "state_class", "trim_tracing"]

MEMBER = members.OFFCPU_FOLDED
SUMMARY = members.OFFCPU_SUMMARY
SLOTS = members.OFFCPU_SLOTS
FORMAT = "profiler.offcpu-slots"
STATES = {0: "runnable", 1: "sleep", 2: "disk", 3: "other"}
LOST_SHARE_PARTIAL = 0.01


def state_class(state: int) -> int:
    """prev_state -> 0 runnable (preempted), 1 sleep (S, and TASK_IDLE), 2 disk (D), 3 other; as offcpu.c does."""
    if state == 0:
        return 0
    low = state & 0xFF
    if (state & 0x400) and (low & 2):
        return 1
    if low & 1:
        return 1
    if low & 2:
        return 2
    return 3


def fold_frames(comm: str, user: list[str], kernel: list[str]) -> str:
    """Frames are innermost first in the maps; folded stacks go root first."""
    return ";".join([comm, *reversed(user), *reversed(kernel)])


class BccOffCpu(BccCollector):
    name = "offcpu-stacks"
    program = "offcpu.c"

    def __init__(self, user_stacks: int = 16384, kernel_stacks: int = 8192, blocked_entries: int = 16384,
                 max_threads: int = 16384, stack_every: int = 32, stack_budget: int = STACK_BUDGET,
                 ongoing: bool = False) -> None:
        super().__init__()
        self.stack_every = max(1, stack_every)
        self.stack_budget = max(0, stack_budget)
        self.every_used = self.stack_every  # the sparsest sampling an interval had (stack_budget)
        self.user_stacks = user_stacks
        self.kernel_stacks = kernel_stacks
        self.blocked_entries = blocked_entries
        self.max_threads = 1 << max(1, max_threads - 1).bit_length()  # a power of two: the program masks into it
        self.ongoing_wanted = ongoing  # the live view: threads off the CPU right now, every interval
        self.out: Any = None
        self.table: StackTable | None = None
        self.sym: symbols.Symbols | None = None
        self.folded: dict[str, int] = defaultdict(int)
        self.lines: dict[tuple[str, int], str] = {}
        self.threads: dict[int, dict[str, Any]] = {}
        self.by_state: dict[str, int] = defaultdict(int)
        self.lost_ns = 0
        self.total_ns = 0
        self.slots: set[int] = set()
        self.still_off = 0
        self.ongoing: list[list[Any]] = []  # [tgid, tid, comm, state, stack frames, since_ns]
        self.header_written = False
        self.sharer = Sharer()

    def settings(self, ctx: CaptureContext) -> dict[str, Any]:
        return {"user_stacks": self.user_stacks, "kernel_stacks": self.kernel_stacks,
                "blocked_entries": self.blocked_entries, "max_threads": self.max_threads,
                "stack_every": self.stack_every, "stack_budget": self.stack_budget,
                "ongoing": self.ongoing_wanted}

    def open_outputs(self, ctx: CaptureContext) -> None:
        self.out = self.open_member(ctx, SLOTS)
        self.sym = symbols.acquire()
        self.table = StackTable(self.sym, lambda obj: self.out.write(json_line(obj)))

    def on_data(self, ctx: CaptureContext, msg: dict[str, Any]) -> None:
        assert self.table is not None
        self._header()
        self.table.learn(msg)
        self.every_used = max(self.every_used, int(msg.get("stack_every") or 0))
        parts: dict[int, list[list[Any]]] = defaultdict(list)
        rows = self.sharer.share(msg.get("rows") or [], key=lambda r: (r[3], r[5]), stack=lambda r: (r[6], r[7]),
                                 amounts=(8, 10), fractions=(9,), with_stack=lambda r, st: [*r[:6], st[0], st[1], *r[8:]])
        for slot, back, tgid, tid, comm, st, us, ks, total, count, head in rows:
            c = comm_text(comm)
            stack = self.table.id(tgid, us, ks)
            for s, ns in spread(slot, back, total, count, head, self.slot_ns):
                parts[s].append([tid, tgid, c, STATES.get(st, "other"), stack, ns, round(count, 2) if s == slot else 0])
            self._total(tgid, tid, c, st, us, ks, stack, total, count)
        end = self.end_ns
        for tgid, tid, comm, raw_state, us, ks, since in msg.get("still_off") or []:
            c, st = comm_text(comm), state_class(raw_state)
            weights = self.sharer.weights((tid, st)) if us == UNSAMPLED else {}
            total_w = sum(weights.values())
            shares = [((u, k), w / total_w) for (u, k), w in weights.items()] if total_w else [((us, ks), 1.0)]
            for (u, k), share in shares:
                stack = self.table.id(tgid, u, k)
                for s, ns in interval_parts(since, end, self.t0_ns, self.slot_ns):
                    parts[s].append([tid, tgid, c, STATES[st], stack, int(ns * share), 0])
                self._total(tgid, tid, c, st, u, k, stack, int(max(0, end - since) * share), 0)
            self.still_off += 1
        if "ongoing" in msg:
            self.ongoing = [[tgid, tid, comm_text(comm), STATES[state_class(raw)], self.table.frames[self.table.id(tgid, us, ks)],
                             since] for tgid, tid, comm, raw, us, ks, since in msg["ongoing"]]
        for s in sorted(parts):
            start, stop = self.slot_bounds(s)
            self.out.write(json_line({"kind": "slot", "slot": s, "t": round(start, 9), "end": round(stop, 9),
                                      "rows": parts[s]}))
            self.slots.add(s)

    def cleanup(self) -> None:
        if self.sym is not None:
            cpu = symbols.release(self.sym)
            if cpu and self.rec is not None:  # the last collector to let go says what naming cost
                self.rec.stats["symbolizer_cpu_seconds"] = cpu
            self.sym = None

    def _header(self) -> None:
        if not self.header_written:
            self.header_written = True
            self.out.write(json_line(header(FORMAT, self.t0_ns, self.slot_ns, states=list(STATES.values()),
                                            targets=self.pids)))

    def _total(self, pid: int, tid: int, comm: str, st: int, us: int, ks: int, stack: int, ns: int, count: float) -> None:
        assert self.table is not None
        state = STATES.get(st, "other")
        self.total_ns += ns
        self.by_state[state] += ns
        t = self.threads.setdefault(tid, {"tid": tid, "pid": pid, "comm": comm, "switches": 0,
                                          **{s: 0 for s in STATES.values()}})
        t[state] += ns
        t["switches"] += count
        if (us < 0 and us not in (-EFAULT, UNSAMPLED)) or (ks < 0 and ks != UNSAMPLED):
            self.lost_ns += ns
        line = self.lines.get((comm, stack))
        if line is None:  # one folded line per thread name and stack, built once (a drain has thousands of rows)
            line = self.lines[(comm, stack)] = f"{comm};{self.table.frames[stack]}".rstrip(";")
        self.folded[line] += ns

    def finish(self, ctx: CaptureContext, rec: CollectorRecord) -> None:
        c = self.counters
        lost_user = int(c.get("user_stack_collision", 0)) + int(c.get("user_stack_error", 0))
        lost_kernel = int(c.get("kernel_stack_collision", 0)) + int(c.get("kernel_stack_error", 0))
        dropped = int(c.get("shared_entry", 0)) + int(c.get("blocked_full", 0))
        self._header()
        self.out.write(json_line({"kind": "end", "ended": self.end_ns / 1e9, "counters": c, "slots": len(self.slots)}))
        with ctx.writer.open_member(MEMBER) as fh:
            fh.write("".join(f"{s} {n}\n" for s, n in sorted(self.folded.items()) if n > 0).encode())
        summary: dict[str, Any] = {
            "unit": "ns",
            "window": [self.t0_ns / 1e9, self.end_ns / 1e9],
            "by_state": {s: self.by_state.get(s, 0) for s in STATES.values()},
            "threads": sorted(({**t, "switches": round(t["switches"])} for t in self.threads.values()),
                              key=lambda t: t["tid"]),
            "lost": {"user_stacks": lost_user, "kernel_stacks": lost_kernel,
                     "no_user_stack": int(c.get("no_user_stack", 0)), "lost_ns": self.lost_ns,
                     "dropped_switches": dropped},
            "stack_map_entries": {"user": self.user_stacks, "kernel": self.kernel_stacks},
        }
        with ctx.writer.open_member(SUMMARY) as fh:
            fh.write((json.dumps(summary, indent=1, sort_keys=True) + "\n").encode())
        rec.files = [SLOTS, MEMBER, SUMMARY]
        rec.stats.update({
            "switches": int(c.get("switch_out", 0)),
            "blocked_ns": self.total_ns,
            "stacks": len(self.folded),
            "slots": len(self.slots),
            "still_off_at_stop": self.still_off,
            "stacks_sampled": int(c.get("stacks_sampled", 0)),
            "stack_every": self.stack_every,
            "stack_budget": self.stack_budget,
            "stack_every_max": self.every_used,
            "unsampled_shared": self.sharer.shared,
            "unsampled_kept": self.sharer.kept,
            "lost_user_stacks": lost_user,
            "lost_kernel_stacks": lost_kernel,
            "stack_collisions": int(c.get("user_stack_collision", 0)) + int(c.get("kernel_stack_collision", 0)),
            "lost_stack_ns": self.lost_ns,
            "dropped": dropped,
            "unit": "ns",
            **{f"{s}_ns": self.by_state.get(s, 0) for s in STATES.values()},
            "events": int(c.get("switch_out", 0)),
            "lost": lost_user + lost_kernel + dropped,
        })
        if self.sym is not None and self.sym.fallback:
            rec.stats["symbolizer"] = self.sym.fallback
        share = self.lost_ns / self.total_ns if self.total_ns else 0.0
        if share > LOST_SHARE_PARTIAL or dropped:
            rec.status = PARTIAL
            rec.reason = (f"{share:.1%} of blocked time has a lost stack ({lost_user} user, {lost_kernel} kernel"
                          f" stacks lost; stack maps {self.user_stacks}/{self.kernel_stacks} entries)"
                          + (f"; {dropped} switches dropped: maps full" if dropped else ""))
