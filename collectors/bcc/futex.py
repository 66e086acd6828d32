"""Futex waits by user stack and lock address with bcc (collectors layer): futex.folded.gz.

The direct evidence for user-space lock contention in Go and Rust servers: collectors/bcc/bpf/futex.c
times every waiting futex call (FUTEX_WAIT, WAIT_BITSET, LOCK_PI, LOCK_PI2, WAIT_REQUEUE_PI)
of the targets' threads, from syscalls:sys_enter_futex to sys_exit_futex, by the waiter's
user stack and by lock address. Folded stacks (value: nanoseconds waited, timed-out waits
included) go to futex.folded.gz as ``thread-comm;outermost;...;innermost NS``; per-thread
totals, the most waited-on lock addresses and the lost-stack counts go to futex.summary.json.

Idle worker pools also wait on futexes (Go's runtime.futexsleep under runtime.stopm, Rust's
parking_lot/crossbeam parkers): the stack tells a lock from an idle pool, so the analyzers,
not this collector, decide which waits are contention.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from profiler.collectors.base import CaptureContext
from profiler.collectors.bcc.common import (
    BccCollector,
    Symbolizer,
    comm_text,
    read_counters,
    stack_addresses,
)

from profiler.bundle import PARTIAL, CollectorRecord, members

MEMBER = members.FUTEX_FOLDED
SUMMARY = members.FUTEX_SUMMARY
COUNTERS = ["entered", "paired", "fstart_full", "waits_full", "locks_full", "user_stack_collision", "user_stack_error"]
EEXIST = 17
TOP_LOCKS = 50
LOST_SHARE_PARTIAL = 0.01
LOST_USER = "[lost user stack]"


class BccFutex(BccCollector):
    name = "futex-waits"
    source = "futex.c"
    tracepoints = (
        ("syscalls:sys_enter_futex", "pf_futex_enter"),
        ("syscalls:sys_exit_futex", "pf_futex_exit"),
    )

    def __init__(self, user_stacks: int = 16384, wait_entries: int = 32768, lock_entries: int = 16384,
                 max_threads: int = 16384) -> None:
        super().__init__()
        self.user_stacks = user_stacks
        self.wait_entries = wait_entries
        self.lock_entries = lock_entries
        self.max_threads = max_threads

    def defines(self, ctx: CaptureContext) -> dict[str, int | str]:
        return {"USER_STACKS": self.user_stacks, "WAIT_ENTRIES": self.wait_entries,
                "LOCK_ENTRIES": self.lock_entries, "MAX_THREADS": self.max_threads}

    def finish(self, ctx: CaptureContext, rec: CollectorRecord) -> None:
        sym = Symbolizer()
        ustacks = self.bpf[b"ustacks"]
        folded: dict[str, int] = defaultdict(int)
        threads: dict[int, dict[str, Any]] = {}
        cache: dict[tuple[int, int, str], str] = {}
        total_ns = lost_ns = waits = timeouts = eagain = 0
        for k, v in self.bpf[b"waits"].items():
            pid, tid, us = int(k.tgid), int(k.tid), int(k.ustack)
            comm = comm_text(bytes(k.comm))
            ns = int(v.total_ns)
            t = threads.setdefault(tid, {"tid": tid, "pid": pid, "comm": comm, "wait_ns": 0, "waits": 0,
                                         "timeouts": 0, "eagain": 0, "max_ns": 0})
            t["wait_ns"] += ns
            t["waits"] += int(v.count)
            t["timeouts"] += int(v.timeouts)
            t["eagain"] += int(v.eagain)
            t["max_ns"] = max(t["max_ns"], int(v.max_ns))
            total_ns += ns
            waits += int(v.count)
            timeouts += int(v.timeouts)
            eagain += int(v.eagain)
            if ns <= 0:
                continue
            if us < 0:
                lost_ns += ns
            key = (pid, us, comm)
            line = cache.get(key)
            if line is None:
                frames = [sym.user(pid, a) for a in stack_addresses(ustacks, us)] if us >= 0 else [LOST_USER]
                line = cache[key] = ";".join([comm, *reversed(frames)])
            folded[line] += ns
        locks: list[dict[str, Any]] = [{"pid": int(k.tgid), "uaddr": f"0x{int(k.uaddr):x}", "wait_ns": int(v.total_ns),
                  "waits": int(v.count), "max_ns": int(v.max_ns)} for k, v in self.bpf[b"locks"].items()]
        locks.sort(key=lambda x: (-x["wait_ns"], x["pid"], x["uaddr"]))
        with ctx.writer.open_member(MEMBER) as fh:
            fh.write("".join(f"{s} {n}\n" for s, n in sorted(folded.items())).encode())
        counters = read_counters(self.bpf, COUNTERS)
        lost = counters["user_stack_collision"] + counters["user_stack_error"]
        dropped = counters["fstart_full"] + counters["waits_full"]
        summary: dict[str, Any] = {
            "unit": "ns",
            "window": [self.t0_ns / 1e9, self.end_ns / 1e9],
            "wait_ns": total_ns,
            "waits": waits,
            "timeouts": timeouts,
            "eagain": eagain,
            "threads": sorted(threads.values(), key=lambda t: t["tid"]),
            "locks": locks[:TOP_LOCKS],
            "lock_addresses": len(locks),
            "lost": {"user_stacks": lost, "lost_ns": lost_ns, "dropped_waits": dropped,
                     "locks_map_full": counters["locks_full"]},
            "stack_map_entries": self.user_stacks,
        }
        with ctx.writer.open_member(SUMMARY) as fh:
            fh.write((json.dumps(summary, indent=1, sort_keys=True) + "\n").encode())
        rec.files = [MEMBER, SUMMARY]
        rec.stats = {"waits": waits, "wait_ns": total_ns, "timeouts": timeouts, "eagain": eagain,
                     "stacks": len(folded), "lock_addresses": len(locks), "lost_user_stacks": lost,
                     "stack_collisions": counters["user_stack_collision"], "lost_stack_ns": lost_ns,
                     "dropped": dropped, "unit": "ns", "events": waits, "lost": lost + dropped}
        share = lost_ns / total_ns if total_ns else 0.0
        if share > LOST_SHARE_PARTIAL or dropped:
            rec.status = PARTIAL
            rec.reason = (f"{share:.1%} of futex wait time has a lost stack ({lost} stacks lost; stack map "
                          f"{self.user_stacks} entries)" + (f"; {dropped} waits dropped: maps full" if dropped else ""))
