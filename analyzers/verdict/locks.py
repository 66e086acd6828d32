"""Lock metrics of one target (analyzers layer): which user frames its threads wait for a futex in.

perf: from the off-CPU view's futex stacks (every sched_switch whose stack passes through futex
code, counted per thread), the top user frames. bcc: from the in-kernel totals (futex waits
per thread and per stack, off-CPU time per state).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from profiler.analyzers.verdict.model import StackEvidence
from profiler.analyzers.views import WaitTotals
from profiler.analyzers.views.stacks import FutexStacks

from profiler.bundle import members
from profiler.inputs import perfscript


def top_futex_stacks(by_tid: FutexStacks, tids: set[int], limit: int = 5) -> list[tuple[str, int]]:
    """Top user frames of the given threads switching out inside futex (all threads if tids is empty)."""
    if not by_tid:
        return []
    stacks: dict[tuple[str, ...], int] = {}
    for tid, per in by_tid.items():
        if tids and tid != -1 and tid not in tids:
            continue
        for stack, n in per.items():
            stacks[stack] = stacks.get(stack, 0) + n
    counts: dict[str, int] = {}
    for frame_lines, n in stacks.items():
        frames = [f for f in (perfscript.parse_frame(x) for x in frame_lines) if f is not None]
        user = [f.symbol for f in frames if not (f.dso or "").startswith("[kernel") and f.symbol and f.symbol != "[unknown]"]
        user = [sym for sym in user if not sym.startswith(("__GI_", "syscall", "__lll_", "futex", "pthread_cond",
                                                           "__pthread", "___pthread", "__futex"))] or user
        key = " <- ".join(user[:3]) or "(kernel only)"
        counts[key] = counts.get(key, 0) + n
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]


# libc/runtime frames that say "a futex wait" and not which lock: skipped when naming a stack
_FUTEX_PLUMBING = ("__GI_", "syscall", "__lll_", "futex", "pthread_cond", "__pthread", "___pthread", "__futex",
                   "[unknown]", "[lost user stack]")


def _stack_key(frames: list[str]) -> str:
    """The innermost three meaningful frames, innermost first (as top_futex_stacks names them)."""
    inner = list(reversed(frames))
    user = [f for f in inner if not f.startswith(_FUTEX_PLUMBING)] or [f for f in inner if f] or []
    return " <- ".join(user[:3]) or "(no user stack)"


def stack_evidence(figures: StackEvidence, futex_by_tid: FutexStacks, tids: set[int], waits: WaitTotals | None,
                   pid: int, comms: set[str] | None) -> StackEvidence:
    """The target's stack evidence: the thread pass's ``figures`` (target.stack_figures), the top
    futex wait stacks of its threads, and the bcc backend's wait totals when captured."""
    out = replace(figures, offcpu_futex_stacks=top_futex_stacks(futex_by_tid, tids))
    if waits is not None:
        out = replace(out, **bcc_lock_metrics(waits, pid, tids, comms))
    return out


def bcc_lock_metrics(waits: WaitTotals, pid: int, tids: set[int], comms: set[str] | None,
                     limit: int = 5) -> dict[str, Any]:
    """Futex waits and off-CPU state totals of one target from the bcc backend's summaries, as
    StackEvidence fields (those it has).

    The summaries list threads by tid (per-target totals are exact); the folded stacks carry
    only the thread's comm, so with several targets a stack counts for the target whose
    threads have that comm (``comms``; None: the only target, every stack is its own).
    """
    out: dict[str, Any] = {}

    def mine(th: dict[str, Any]) -> bool:
        return int(th.get("pid", -1)) == pid or int(th.get("tid", -1)) in tids

    if waits.has(members.FUTEX_SUMMARY):
        fs = waits.get(members.FUTEX_SUMMARY)
        ths = [th for th in fs.get("threads") or [] if mine(th)]
        if ths:
            out["futex_wait_s"] = sum(float(th.get("wait_ns", 0)) for th in ths) / 1e9
            out["futex_waits"] = sum(int(th.get("waits", 0)) for th in ths)
        elif comms is None:
            out["futex_wait_s"] = float(fs.get("wait_ns", 0)) / 1e9
            out["futex_waits"] = int(fs.get("waits", 0))
    if waits.has(members.FUTEX_FOLDED):
        by_key: dict[str, float] = {}
        for stack, ns in waits.get(members.FUTEX_FOLDED).items():
            frames = stack.split(";")
            if comms is not None and frames[0] not in comms:
                continue
            key = _stack_key(frames[1:])
            by_key[key] = by_key.get(key, 0.0) + ns / 1e9
        out["futex_wait_stacks"] = sorted(by_key.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
    if waits.has(members.OFFCPU_SUMMARY):
        os_ = waits.get(members.OFFCPU_SUMMARY)
        scale = 1e9 if os_.get("unit", "ns") == "ns" else 1.0
        states = ("runnable", "sleep", "disk", "other")
        ths = [th for th in os_.get("threads") or [] if mine(th)]
        if ths:
            out["offcpu_states"] = {k: sum(float(th.get(k, 0)) for th in ths) / scale for k in states}
        elif comms is None and isinstance(os_.get("by_state"), dict):
            out["offcpu_states"] = {k: float(os_["by_state"].get(k, 0)) / scale for k in states}
    return out
