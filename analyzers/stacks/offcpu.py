"""The off-CPU model: time blocked, from sched_switch samples, by wait reason (analyzers layer).

A thread's blocked interval runs from its switch-out (a sched_switch sample with its stack and
prev_state) to its switch-in; the width of a frame is the time blocked under it, and the root
frame says why the thread waited (lock, idle polling, IO, sleep...), read from its kernel stack.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from profiler.analyzers.stacks.naming import frame_name

from profiler.inputs.perfscript import Sample
from profiler.inputs.window import WHOLE, TimeWindow
from profiler.knowledge import pool_of

__all__ = ["OffCpuStats", "offcpu_by_reason", "offcpu_folded", "pool_roots", "wait_reason"]

_PREV = re.compile(r"prev_comm=(?P<comm>.*?) prev_pid=(?P<pid>-?\d{1,10}) .*?prev_state=(?P<state>\S+)")
_NEXT = re.compile(r"next_comm=(?P<comm>.*?) next_pid=(?P<pid>-?\d{1,10})\b")

# Wait reasons from the blocked thread's kernel stack (leaf first), first match wins.
_REASONS: list[tuple[str, tuple[str, ...]]] = [
    ("lock (futex)", ("futex_wait", "futex_do_wait", "__futex_wait", "do_futex", "futex_")),
    ("idle (epoll/poll)", ("ep_poll", "do_epoll_wait", "do_sys_poll", "do_select", "core_sys_select", "io_uring_enter")),
    ("sleep", ("hrtimer_nanosleep", "do_nanosleep", "clock_nanosleep", "schedule_timeout")),
    ("network", ("tcp_recvmsg", "sk_wait_data", "inet_csk_accept", "unix_stream_read", "sock_recvmsg")),
    ("pipe", ("pipe_read", "pipe_write")),
    ("io (fsync/journal)", ("jbd2", "file_write_and_wait", "fsync", "blkdev_issue_flush", "wait_on_page_writeback", "folio_wait_writeback")),
    ("io (read/page cache)", ("folio_wait_bit", "filemap_", "wait_on_page_bit", "io_schedule", "blk_mq_", "submit_bio")),
    ("memory (reclaim/fault)", ("do_page_fault", "handle_mm_fault", "shrink_", "reclaim", "compact_")),
    ("wait (child/signal)", ("do_wait", "sigsuspend", "sigtimedwait")),
]


def wait_reason(state: str, frames: list[str]) -> str:
    """Why a thread went off CPU: its prev_state and the kernel functions on its stack."""
    st = state.rstrip("+")
    if st in ("R", ""):
        return "preempted (runnable)"
    joined = " ".join(frames[:20])
    for reason, keys in _REASONS:
        if any(k in joined for k in keys):
            if st == "D" and not reason.startswith("io"):
                return "io (uninterruptible): " + reason
            return reason
    if st.startswith("D"):
        return "io (uninterruptible)"
    return "other (" + st + ")"


def _symbol(symbol: str, dso: str | None) -> str:
    if symbol and symbol != "[unknown]":
        return symbol
    if dso and dso != "[unknown]":
        return "[" + dso.rsplit("/", 1)[-1] + "]"
    return "[unknown]"


@dataclass
class OffCpuStats:
    switches: int = 0
    with_switch_in: int = 0  # blocked intervals closed by an observed switch-in
    upper_bound: int = 0  # closed by the thread's next switch-out (no switch-in recorded)
    open_at_end: int = 0  # still blocked when the capture ended (not counted)
    notes: list[str] = field(default_factory=list)


def offcpu_folded(
    samples: Iterable[Sample],
    *,
    by_reason: bool = True,
    pools: bool = False,
    window: TimeWindow = WHOLE,
    unit: float = 1e-6,
    intervals: dict[tuple[int, int], float] | None = None,
) -> tuple[dict[str, int], OffCpuStats]:
    """Fold sched_switch samples into blocked time per stack, in `unit` seconds (µs default).

    A thread's blocked interval runs from its switch-out (the sample: its stack, its prev_state)
    to its switch-in, taken from, in order: `intervals` ({(tid, off time in µs): on time}, the
    collectors' offcpu.csv.gz, read by ``profiler.inputs.bundles.read_intervals``), a
    ``PERF_RECORD_SWITCH IN`` record of the thread, or a sched_switch with next_pid = tid. When
    none was recorded (perf record -p only sees events in the target's own context), the
    interval ends at the thread's next switch-out instead: an upper bound that includes its next
    run, noted in stats.
    Root frames: wait reason (when by_reason), then the thread name (or its pool). Blocked time
    is clipped to `window` (a relative one counts from the first sample's time).
    """
    stats = OffCpuStats()
    rebase = window.relative and window.bounded
    time_from, time_to = window.start, window.end
    pending: dict[int, tuple[float, str, str, list[str]]] = {}  # tid -> (t_out, comm, state, frames)
    out: dict[str, int] = {}

    def emit(t_out: float, t_in: float, comm: str, state: str, frames: list[str]) -> bool:
        lo = t_out if time_from is None else max(t_out, time_from)
        hi = t_in if time_to is None else min(t_in, time_to)
        if hi <= lo:
            return False
        width = round((hi - lo) / unit)
        if width <= 0:
            return False
        root = [wait_reason(state, frames)] if by_reason else []
        root.append((pool_of(comm) if pools else comm).replace(" ", "_"))
        key = ";".join(root + [frame_name(n) for n in reversed(frames)])
        out[key] = out.get(key, 0) + width
        return True

    def close(tid: int, t_in: float, exact: bool) -> None:
        t_out, comm, state, frames = pending.pop(tid)
        if emit(t_out, t_in, comm, state, frames):
            if exact:
                stats.with_switch_in += 1
            else:
                stats.upper_bound += 1

    for s in samples:
        if s.time is None:
            continue
        if rebase:
            rebase = False
            window = window.rebased(s.time)
            time_from, time_to = window.start, window.end
        if s.tid is None:
            continue
        if s.event == "PERF_RECORD_SWITCH":
            if (s.payload or "").startswith("IN") and s.tid in pending:
                close(s.tid, s.time, True)
            continue
        if s.payload is None or "sched_switch" not in (s.event or ""):
            continue
        m = _PREV.search(s.payload)
        if m is None:
            continue
        prev_pid = int(m.group("pid"))
        nm = _NEXT.search(s.payload)
        if nm is not None:
            nxt = int(nm.group("pid"))
            if nxt in pending:
                close(nxt, s.time, True)
        if prev_pid == 0:
            continue  # the idle task
        stats.switches += 1
        if prev_pid in pending:
            close(prev_pid, s.time, False)
        frames = [_symbol(f.symbol, f.dso) for f in s.frames]
        # the tracepoint's own machinery sits on top of every stack: it says nothing
        while frames and (frames[0].startswith("__traceiter_") or frames[0] == "__schedule"):
            frames.pop(0)
        if intervals is not None:
            t_in = intervals.get((prev_pid, round(s.time * 1e6)))
            if t_in is not None:
                if emit(s.time, t_in, m.group("comm"), m.group("state"), frames):
                    stats.with_switch_in += 1
                continue
        pending[prev_pid] = (s.time, m.group("comm"), m.group("state"), frames)
    stats.open_at_end = len(pending)
    if stats.upper_bound and not stats.with_switch_in:
        stats.notes.append("widths are upper bounds (no switch-ins recorded: blocked until the next switch-out)")
    return out, stats


_PREEMPT_HINTS = ("irqentry_exit", "exit_to_user_mode", "preempt_schedule", "__cond_resched", "_cond_resched")


def offcpu_by_reason(folded: dict[str, int]) -> dict[str, int]:
    """Put a wait-reason root over folded off-CPU stacks that carry none (bcc's offcpu.folded.gz:
    ``comm;user...;kernel_[k]...``; the state is not in the stack, so it is read from the frames)."""
    out: dict[str, int] = {}
    for stack, n in folded.items():
        frames = stack.split(";")
        leaf_first = [f[:-4] if f.endswith("_[k]") else f for f in reversed(frames[1:])]
        reason = wait_reason("S", leaf_first)
        if reason.startswith("other"):
            joined = " ".join(leaf_first[:12])
            reason = "preempted (runnable)" if any(h in joined for h in _PREEMPT_HINTS) else "other"
        key = reason + ";" + stack
        out[key] = out.get(key, 0) + n
    return out


def pool_roots(folded: dict[str, int]) -> dict[str, int]:
    """Root frames (thread names) replaced by their thread pool: ``grpc-server-3`` -> ``grpc-server``."""
    out: dict[str, int] = {}
    for k, v in folded.items():
        root, sep, rest = k.partition(";")
        key = pool_of(root) + sep + rest
        out[key] = out.get(key, 0) + v
    return out
