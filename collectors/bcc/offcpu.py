"""Off-CPU (blocked) time by stack from sched:sched_switch with bcc (collectors layer): offcpu.folded.gz.

collectors/bcc/bpf/offcpu.c takes the user and kernel stacks of a target thread as it switches
out and adds the time until it switches back in, per thread, state and stack pair, in the
kernel. At stop the stacks are symbolized (the targets must still be alive for user frames)
and written as folded stacks whose value is nanoseconds blocked:
``thread-comm;user outermost;...;user innermost;kernel outermost_[k];...;kernel innermost_[k] NS``.
Per-thread, per-state totals (runnable = preempted and waiting for a CPU, sleep = S,
disk = D, other) and the lost-stack counts go to offcpu.summary.json and the manifest.

Stack maps are hash tables without chaining: a stack whose bucket is taken by another is
lost (``-EEXIST``), silently in most tools. Here every lost stack is counted, its time kept
under a ``[lost user stack]`` / ``[lost kernel stack]`` frame, and the capture is marked
partial when more than 1% of the blocked time has a lost stack.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from profiler.collectors import host
from profiler.collectors.base import CaptureContext
from profiler.collectors.bcc.common import (
    BccCollector,
    Symbolizer,
    comm_text,
    read_counters,
    stack_addresses,
)

from profiler.bundle import PARTIAL, CollectorRecord, members

MEMBER = members.OFFCPU_FOLDED
SUMMARY = members.OFFCPU_SUMMARY
STATES = {0: "runnable", 1: "sleep", 2: "disk", 3: "other"}
COUNTERS = ["switch_out", "switch_in", "offstart_full", "blocked_full",
            "user_stack_collision", "user_stack_error", "kernel_stack_collision", "kernel_stack_error",
            "no_user_stack", "kernel_stack_reused"]
EFAULT, EEXIST = 14, 17
LOST_SHARE_PARTIAL = 0.01
LOST_USER = "[lost user stack]"
LOST_KERNEL = "[lost kernel stack]" + "_[k]"


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


TRACING_FRAMES = ("__traceiter_", "__bpf_trace_", "bpf_trace_run", "perf_trace_", "trace_call_bpf",
                  "bpf_get_stackid", "__probestub_", "bpf_prog_")


def trim_tracing(kernel: list[str]) -> list[str]:
    """Drop the tracepoint and BPF frames on top of a kernel stack (innermost first): they are ours."""
    i = 0
    while i < len(kernel) and kernel[i].startswith(TRACING_FRAMES):
        i += 1
    return kernel[i:]


def fold_frames(comm: str, user: list[str], kernel: list[str]) -> str:
    """Frames are innermost first in the maps; folded stacks go root first."""
    return ";".join([comm, *reversed(user), *reversed(kernel)])


class BccOffCpu(BccCollector):
    name = "offcpu-stacks"
    source = "offcpu.c"
    tracepoints = (("sched:sched_switch", "pf_sched_switch"),)

    def __init__(self, user_stacks: int = 16384, kernel_stacks: int = 8192, blocked_entries: int = 65536,
                 max_threads: int = 16384, kernel_stack_every: int = 8) -> None:
        super().__init__()
        self.kernel_stack_every = max(1, kernel_stack_every)
        self.user_stacks = user_stacks
        self.kernel_stacks = kernel_stacks
        self.blocked_entries = blocked_entries
        self.max_threads = max_threads

    def defines(self, ctx: CaptureContext) -> dict[str, int | str]:
        return {"USER_STACKS": self.user_stacks, "KERNEL_STACKS": self.kernel_stacks,
                "BLOCKED_ENTRIES": self.blocked_entries, "MAX_THREADS": self.max_threads,
                "KSTACK_EVERY": self.kernel_stack_every}

    def _still_off(self) -> list[tuple[int, int, int, int, str, int, int, int]]:
        """Threads switched out in the window and not back when it ended: their time up to the end."""
        out = []
        for k, o in self.bpf[b"offstart"].items():
            tid, ts = int(k.value), int(o.ts)
            if not self.t0_ns <= ts <= self.end_ns:
                continue
            comm = host.read_text(f"/proc/{int(o.tgid)}/task/{tid}/comm")
            if comm is None:
                continue  # the thread exited while off the CPU
            out.append((int(o.tgid), tid, int(o.ustack), int(o.kstack), comm_text(comm.encode()),
                        state_class(int(o.state)), self.end_ns - ts, 0))
        return out

    def finish(self, ctx: CaptureContext, rec: CollectorRecord) -> None:
        sym = Symbolizer()
        ustacks, kstacks = self.bpf[b"ustacks"], self.bpf[b"kstacks"]
        folded: dict[str, int] = defaultdict(int)
        threads: dict[int, dict[str, Any]] = {}
        by_state: dict[str, int] = defaultdict(int)
        cache: dict[tuple[int, int, int, str], str] = {}
        lost_ns = total_ns = 0
        entries = [(int(k.tgid), int(k.tid), int(k.ustack), int(k.kstack), comm_text(bytes(k.comm)),
                    int(k.state), int(v.total_ns), int(v.count)) for k, v in self.bpf[b"blocked"].items()]
        still_off = self._still_off()
        entries += still_off
        for pid, tid, us, ks, comm, st, ns, count in entries:
            state = STATES.get(st, "other")
            total_ns += ns
            by_state[state] += ns
            t = threads.setdefault(tid, {"tid": tid, "pid": pid, "comm": comm, "switches": 0,
                                         **{s: 0 for s in STATES.values()}})
            t[state] += ns
            t["switches"] += count
            if (us < 0 and us != -EFAULT) or ks < 0:
                lost_ns += ns
            key = (pid, us, ks, comm)
            line = cache.get(key)
            if line is None:
                user = [sym.user(pid, a) for a in stack_addresses(ustacks, us)] if us >= 0 else (
                    [] if us == -EFAULT else [LOST_USER])
                kernel = trim_tracing([sym.kernel(a) for a in stack_addresses(kstacks, ks)]) if ks >= 0 else [LOST_KERNEL]
                line = cache[key] = fold_frames(comm, user, kernel)
            folded[line] += ns
        with ctx.writer.open_member(MEMBER) as fh:
            fh.write("".join(f"{s} {n}\n" for s, n in sorted(folded.items()) if n > 0).encode())
        counters = read_counters(self.bpf, COUNTERS)
        lost_user = counters["user_stack_collision"] + counters["user_stack_error"]
        lost_kernel = counters["kernel_stack_collision"] + counters["kernel_stack_error"]
        summary: dict[str, Any] = {
            "unit": "ns",
            "window": [self.t0_ns / 1e9, self.end_ns / 1e9],
            "by_state": {s: by_state.get(s, 0) for s in STATES.values()},
            "threads": sorted(threads.values(), key=lambda t: t["tid"]),
            "lost": {"user_stacks": lost_user, "kernel_stacks": lost_kernel,
                     "no_user_stack": counters["no_user_stack"], "lost_ns": lost_ns,
                     "dropped_switches": counters["offstart_full"] + counters["blocked_full"]},
            "stack_map_entries": {"user": self.user_stacks, "kernel": self.kernel_stacks},
        }
        with ctx.writer.open_member(SUMMARY) as fh:
            fh.write((json.dumps(summary, indent=1, sort_keys=True) + "\n").encode())
        rec.files = [MEMBER, SUMMARY]
        rec.stats = {
            "switches": counters["switch_out"],
            "blocked_ns": total_ns,
            "stacks": len(folded),
            "still_off_at_stop": len(still_off),
            "kernel_stacks_reused": counters["kernel_stack_reused"],
            "kernel_stack_every": self.kernel_stack_every,
            "lost_user_stacks": lost_user,
            "lost_kernel_stacks": lost_kernel,
            "stack_collisions": counters["user_stack_collision"] + counters["kernel_stack_collision"],
            "lost_stack_ns": lost_ns,
            "dropped": summary["lost"]["dropped_switches"],
            "unit": "ns",
            **{f"{s}_ns": by_state.get(s, 0) for s in STATES.values()},
        }
        rec.stats["events"] = counters["switch_out"]
        rec.stats["lost"] = lost_user + lost_kernel + rec.stats["dropped"]
        share = lost_ns / total_ns if total_ns else 0.0
        if share > LOST_SHARE_PARTIAL or rec.stats["dropped"]:
            rec.status = PARTIAL
            rec.reason = (f"{share:.1%} of blocked time has a lost stack ({lost_user} user, {lost_kernel} kernel"
                          f" stacks lost; stack maps {self.user_stacks}/{self.kernel_stacks} entries)"
                          + (f"; {rec.stats['dropped']} switches dropped: maps full" if rec.stats["dropped"] else ""))
