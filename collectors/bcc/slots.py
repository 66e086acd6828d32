"""Blocked time per time slot and the stack table (collectors layer): shared by the off-CPU and futex collectors.

The kernel adds a wait to the slot where it *ended*, with ``back`` (how many slots earlier it
began) and ``head_ns`` (the part spent in that first slot); :func:`spread` gives each slot in
between its exact share, so a thread blocked for three seconds shows in all three. The member
they write, ``offcpu.slots.jsonl.gz`` / ``futex.slots.jsonl.gz`` (docs/bundle.md), is JSON lines:

    {"kind": "header", "format": "profiler.offcpu-slots", "version": 1, "unit": "ns", "t0": S, "slot_seconds": S}
    {"kind": "stack", "id": N, "pid": P, "frames": "outermost;...;innermost_[k]"}   before its first use
    {"kind": "slot", "slot": I, "t": S, "end": S, "rows": [[tid, pid, comm, state, stack, ns, count], ...]}
    {"kind": "end", ...}

A slot may appear in more than one line (a long wait ends after its first slots were written):
readers add them up.
"""

from __future__ import annotations

import json
from typing import Any

from profiler.collectors.bcc.symbols import Symbols

LOST_USER = "[lost user stack]"
LOST_KERNEL = "[lost kernel stack]_[k]"
EFAULT = 14
TRACING_FRAMES = ("__traceiter_", "__bpf_trace_", "bpf_trace_run", "perf_trace_", "trace_call_bpf",
                  "bpf_get_stackid", "__probestub_", "bpf_prog_")


def spread(slot: int, back: int, total: int, count: int, head: int, slot_ns: int) -> list[tuple[int, int]]:
    """(slot, ns) parts of ``count`` waits that ended in ``slot`` after starting ``back`` slots earlier."""
    if back <= 0 or slot - back < 0:
        return [(slot, total)]
    parts = [(slot - back, head)]
    middle = count * slot_ns
    parts += [(s, middle) for s in range(slot - back + 1, slot)]
    parts.append((slot, max(0, total - head - (back - 1) * middle)))
    return [(s, ns) for s, ns in parts if ns > 0]


def interval_parts(begin: int, end: int, t0: int, slot_ns: int) -> list[tuple[int, int]]:
    """(slot, ns) parts of one interval [begin, end] (ns, CLOCK_MONOTONIC)."""
    out = []
    t = max(begin, t0)
    while t < end:
        s = (t - t0) // slot_ns
        edge = min(end, t0 + (s + 1) * slot_ns)
        out.append((int(s), edge - t))
        t = edge
    return out


def trim_tracing(kernel: list[str]) -> list[str]:
    """Drop the tracepoint and BPF frames on top of a kernel stack (innermost first): they are ours."""
    i = 0
    while i < len(kernel) and kernel[i].startswith(TRACING_FRAMES):
        i += 1
    return kernel[i:]


class StackTable:
    """Stack ids (per process for user stacks) -> our stack numbers, named once, written before first use."""

    def __init__(self, sym: Symbols, write: Any) -> None:
        self.sym = sym
        self.write = write  # one JSON object -> the member
        self.ustacks: dict[int, list[int]] = {}
        self.kstacks: dict[int, list[int]] = {}
        self.ids: dict[tuple[int, int, int], int] = {}
        self.frames: list[str] = []

    def learn(self, msg: dict[str, Any]) -> None:
        for key, table in (("ustacks", self.ustacks), ("kstacks", self.kstacks)):
            for sid, addrs in (msg.get(key) or {}).items():
                table[int(sid)] = [int(a) for a in addrs]

    def user(self, pid: int, us: int) -> list[str]:
        if us >= 0:
            return self.sym.user(pid, self.ustacks.get(us, []))
        return [] if us == -EFAULT else [LOST_USER]

    def kernel(self, ks: int | None) -> list[str]:
        if ks is None:
            return []
        if ks < 0:
            return [LOST_KERNEL]
        return trim_tracing([self.sym.kernel(a) for a in self.kstacks.get(ks, [])])

    def id(self, pid: int, us: int, ks: int | None = None) -> int:
        key = (pid, us, -1 << 40 if ks is None else ks)
        n = self.ids.get(key)
        if n is None:
            # frames come innermost first from the kernel; folded stacks go root first
            frames = ";".join([*reversed(self.user(pid, us)), *reversed(self.kernel(ks))])
            n = self.ids[key] = len(self.frames)
            self.frames.append(frames)
            self.write({"kind": "stack", "id": n, "pid": pid, "frames": frames})
        return n


def header(fmt: str, t0_ns: int, slot_ns: int, **extra: Any) -> dict[str, Any]:
    return {"kind": "header", "format": fmt, "version": 1, "unit": "ns", "clock": "monotonic",
            "t0": t0_ns / 1e9, "slot_seconds": slot_ns / 1e9, **extra}


def json_line(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj, separators=(",", ":")) + "\n").encode()
