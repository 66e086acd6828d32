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
UNSAMPLED = -1000  # common.h: an event whose stacks were not walked
# stacks walked a second at most, per collector (sides.Side.budget_stacks): the sampling thins out
# past stack_every when events are denser than this (a busy server), never below it
STACK_BUDGET = 256
NOT_SAMPLED = "[stack not sampled]"
EFAULT = 14
TRACING_FRAMES = ("__traceiter_", "__bpf_trace_", "bpf_trace_run", "perf_trace_", "trace_call_bpf",
                  "bpf_get_stackid", "__probestub_", "bpf_prog_")


def spread(slot: int, back: int, total: int, count: float, head: int, slot_ns: int) -> list[tuple[int, int]]:
    """(slot, ns) parts of ``count`` waits that ended in ``slot`` after starting ``back`` slots earlier."""
    if back <= 0 or slot - back < 0:
        return [(slot, total)]
    parts = [(slot - back, int(head))]
    middle = int(round(count * slot_ns))  # count may be a share of waits (Sharer): a fraction
    parts += [(s, middle) for s in range(slot - back + 1, slot)]
    parts.append((slot, max(0, int(total) - int(head) - (back - 1) * middle)))
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
        if us == UNSAMPLED:
            return [NOT_SAMPLED]
        return [] if us == -EFAULT else [LOST_USER]

    def kernel(self, ks: int | None) -> list[str]:
        if ks is None or ks == UNSAMPLED:
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


class Sharer:
    """Shares out the time of events whose stacks were not sampled (the programs walk stacks for a
    random one in ``stack_every``) among the stacks sampled from the same thread and kind (the
    off-CPU state; futex: one kind), in proportion to their time: the sampled stacks of the same
    message (one drain: the same second or two) when there are any, else of the capture so far.
    Every event's time is kept; the split by stack is an estimate. A thread none of whose events
    was sampled yet keeps its time under ``[stack not sampled]``."""

    def __init__(self) -> None:
        self.profile: dict[tuple[int, int], dict[tuple[int, int], float]] = {}  # (tid, kind) -> stacks -> ns
        self.shared = 0  # events whose time was shared out
        self.kept = 0  # events that kept [stack not sampled]

    def share(self, rows: list[list[Any]], key: Any, stack: Any, amounts: tuple[int, ...],
              with_stack: Any, fractions: tuple[int, ...] = ()) -> list[list[Any]]:
        """``key(row)`` -> (tid, kind); ``stack(row)`` -> (ustack, kstack); ``amounts``: the row
        fields (nanoseconds) split in whole numbers that add up; ``fractions``: fields split as
        they come (counts: a stack's share of a count may be a fraction); ``with_stack(row,
        stack)`` -> a copy of the row with that stack."""
        here: dict[tuple[int, int], dict[tuple[int, int], float]] = {}
        for r in rows:
            st = stack(r)
            if st[0] != UNSAMPLED:
                k = key(r)
                for d in (here.setdefault(k, {}), self.profile.setdefault(k, {})):
                    d[st] = d.get(st, 0.0) + float(r[amounts[0]] or 0) + 1.0
        out: list[list[Any]] = []
        for r in rows:
            if stack(r)[0] != UNSAMPLED:
                out.append(r)
                continue
            k = key(r)
            weights = here.get(k) or self.profile.get(k)
            if not weights:
                self.kept += 1
                out.append(r)
                continue
            self.shared += 1
            total = sum(weights.values())
            parts: list[list[Any]] = []
            for st, w in weights.items():
                nr = with_stack(r, st)
                for i in (*amounts, *fractions):
                    nr[i] = float(r[i]) * w / total
                parts.append(nr)
            # whole numbers that add up to the row's: the largest part takes the rounding
            for i in amounts:
                rounded = [int(p[i]) for p in parts]
                rounded[max(range(len(parts)), key=lambda j: parts[j][i])] += int(r[i]) - sum(rounded)
                for p, v in zip(parts, rounded, strict=True):
                    p[i] = v
            out.extend(p for p in parts if any(p[i] for i in (*amounts, *fractions)))
        return out

    def weights(self, key: tuple[int, int]) -> dict[tuple[int, int], float]:
        return self.profile.get(key, {})
