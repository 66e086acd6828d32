"""The off-CPU model: time blocked, from sched_switch samples, by wait reason (analyzers layer).

A thread's blocked interval runs from its switch-out (a sched_switch sample with its stack and
prev_state) to its switch-in; the width of a frame is the time blocked under it, and the root
frame says why the thread waited (lock, idle polling, IO, sleep...), read from its kernel stack.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from profiler.analyzers.stacks.naming import frame_name

from profiler.inputs.perfscript import ScriptSample, iter_samples, parse_frame, parse_header
from profiler.inputs.window import WHOLE, TimeWindow
from profiler.knowledge import pool_of
from profiler.tolerant import ReadLog

__all__ = ["FutexStacks", "OffCpuStats", "SwitchFolder", "WaitStacks", "fold_switch_text", "offcpu_by_reason", "offcpu_folded",
           "wait_reason"]

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
    samples: int = 0  # samples read (switch-outs, switch-ins, side-band records)
    limited: bool = False  # stopped folding at the sample limit (the futex stacks still count every sample)
    notes: list[str] = field(default_factory=list)


FutexStacks = dict[int, dict[tuple[str, ...], int]]  # tid -> raw frame lines -> switch-outs
# tid -> (prev_state, raw frame lines...) -> switch-outs: every switch-out, for wait classification
WaitStacks = dict[int, dict[tuple[str, ...], int]]


class _Stack:
    """One call chain as folding needs it, computed once per distinct frame text."""

    __slots__ = ("frames", "futex", "lines", "reasons", "tail", "waits")

    def __init__(self, frames: list[str], futex: tuple[str, ...] | None, lines: tuple[str, ...] = ()) -> None:
        # the tracepoint's own machinery sits on top of every stack: it says nothing
        while frames and (frames[0].startswith("__traceiter_") or frames[0] == "__schedule"):
            frames.pop(0)
        self.frames = frames  # symbols, leaf first
        self.tail = ";".join(frame_name(n) for n in reversed(frames))  # folded frames, root first
        self.futex = futex  # the raw frame lines when the stack passes through futex code
        self.lines = lines  # the raw frame lines
        self.reasons: dict[str, str] = {}
        self.waits: dict[str, tuple[str, ...]] = {}  # prev_state -> (prev_state, *lines)

    def reason(self, state: str) -> str:
        r = self.reasons.get(state)
        if r is None:
            r = self.reasons[state] = wait_reason(state, self.frames)
        return r


# The header and payload of a sched_switch sample as the offcpu-stacks collector prints it
# (``-F comm,pid,tid,cpu,time,period,event,ip,sym,symoff,dso,trace``), in one search; any other
# layout goes through the general parser (profiler.inputs.perfscript).
_SWITCH = re.compile(
    r"\s(?:-?\d{1,10}/)?(?P<tid>-?\d{1,10})\s+(?:\[\d{1,6}\]\s+)?(?P<time>\d{1,12}\.\d{1,12}):\s+(?:\d{1,18}\s+)?"
    r"sched:sched_switch:\s+prev_comm=(?P<comm>.*?) prev_pid=(?P<prev>-?\d{1,10}) .*?prev_state=(?P<state>\S+) ==> "
    r"next_comm=.*? next_pid=(?P<next>-?\d{1,10})\b")
# (digits bounded: a damaged header with a 5,000-digit id or a 400-digit time is no fast-path
# sample; the general parser skips and counts it)
CACHE_CHARS = 64 << 20  # frame text held in the stack cache before it is started afresh


class SwitchFolder:
    """Folds sched_switch samples into blocked time per stack, in ``unit`` seconds (µs default).

    A thread's blocked interval runs from its switch-out (the sample: its stack, its prev_state)
    to its switch-in, taken from, in order: ``intervals`` ({(tid, off time in µs): on time}, the
    collectors' offcpu.csv.gz, read by ``profiler.inputs.bundles.read_intervals``), a
    ``PERF_RECORD_SWITCH IN`` record of the thread, or a sched_switch with next_pid = tid. When
    none was recorded (perf record -p only sees events in the target's own context), the
    interval ends at the thread's next switch-out instead: an upper bound that includes its next
    run, noted in stats.
    Root frames: wait reason (when by_reason), then the thread name (or its pool). Blocked time
    is clipped to ``window`` (a relative one counts from the first sample's time).

    Speed: ``feed`` takes perf script text in any chunking and works on whole samples; a lock
    storm repeats the same few call chains millions of times, so each distinct frame text is
    parsed and named once (``_Stack``), and a sample costs one regular-expression search of its
    header. ``limit``: fold at most that many samples (the rest still count for ``futex``).
    ``futex``: count, per thread, every switch-out's stack with its prev_state (``stacks``: the
    wait classification's evidence) and apart those passing through futex code (``futex``: the
    lock metrics'). ``on_interval`` sees each blocked interval counted: (from, to, folded stack);
    while it runs, ``thread`` is the interval's thread id.
    ``log``: where samples whose header cannot be read are counted (profiler.tolerant.ReadLog).
    """

    def __init__(self, *, by_reason: bool = True, pools: bool = False, window: TimeWindow = WHOLE,
                 unit: float = 1e-6, intervals: Mapping[tuple[int, int], float] | None = None,
                 futex: bool = False, limit: int | None = None,
                 on_interval: Callable[[float, float, str], None] | None = None, log: ReadLog | None = None) -> None:
        self.stats = OffCpuStats()
        self.counts: dict[str, int] = {}
        self.futex: FutexStacks = {}
        self.stacks: WaitStacks = {}  # with futex: every sample's (prev_state, frame lines) per thread
        self.on_interval = on_interval
        self.thread = 0  # the thread of the interval on_interval is seeing
        self.log = log  # samples the general parser cannot read are counted here
        self.by_reason = by_reason
        self.pools = pools
        self.unit = unit
        self.intervals = intervals
        self.count_futex = futex
        self.limit = limit
        self._rebase = window.relative and window.bounded
        self._window = window
        self._from, self._to = window.start, window.end
        self._pending: dict[int, tuple[float, str, str, _Stack]] = {}  # tid -> (t_out, comm, state, stack)
        self._stacks: dict[str, _Stack] = {}
        self._lines: dict[str, str] = {}  # frame line -> symbol ("" for a line that is no frame)
        self._cached = 0
        self._roots: dict[str, str] = {}
        self._rest = ""

    # -- text
    def feed(self, text: str) -> None:
        if self._rest:
            text = self._rest + text
        cut = text.rfind("\n\n")
        if cut < 0:
            self._rest = text
            return
        self._rest = text[cut + 2 :]
        for block in text[:cut].split("\n\n"):
            if block:
                self._block(block)

    def close(self) -> tuple[dict[str, int], OffCpuStats]:
        rest, self._rest = self._rest, ""
        rest = rest.rstrip("\n")
        if rest:
            self._block(rest, last=True)
        st = self.stats
        st.open_at_end = len(self._pending)
        if st.upper_bound and not st.with_switch_in and not st.notes:
            st.notes.append("widths are upper bounds (no switch-ins recorded: blocked until the next switch-out)")
        return self.counts, st

    def _block(self, block: str, last: bool = False) -> None:
        if block[0] == "\n":
            block = block.lstrip("\n")
            if not block:
                return
        nl = block.find("\n")
        header, body = (block, "") if nl < 0 else (block[:nl], block[nl + 1 :])
        m = _SWITCH.search(header)
        if m is None or header[0] == "#" or "\n#" in block:
            self._general(block, last)
            return
        stack = self._stacks.get(body)
        if stack is None:
            stack = self._parse_body(body)
            if stack is None:
                self._general(block, last)
                return
        if self.count_futex:
            tid = int(m.group("tid"))
            state = m.group("state")
            key = stack.waits.get(state)
            if key is None:
                key = stack.waits[state] = (state, *stack.lines)
            per = self.stacks.setdefault(tid, {})
            per[key] = per.get(key, 0) + 1
            if stack.futex is not None or (header[0] in " \t" and "futex" in header):
                self._count_futex(tid, stack, body)
        if self.limit is not None and self.stats.samples >= self.limit:
            self.stats.limited = True
            return
        self.stats.samples += 1
        # the task leaving is the one the sample was taken in: its id from the header, which is
        # the capture's own even in a nested PID namespace (where prev_pid is the host's)
        self.switch(float(m.group("time")), int(m.group("tid")), m.group("comm"), m.group("state"),
                    int(m.group("next")), stack)

    def _parse_body(self, body: str) -> _Stack | None:
        """The frames of one sample's frame text, or None when it is not plain frame lines."""
        frames: list[str] = []
        if body:
            lines = self._lines
            for line in body.split("\n"):
                sym = lines.get(line)
                if sym is None:
                    if line[:1] not in ("\t", " ") or not line.strip():
                        return None  # a header without its blank line, a whitespace-only line: the slow path
                    f = parse_frame(line)
                    if f is None:
                        if parse_header(line) is not None:
                            return None
                        sym = lines[line] = ""  # not a frame (a source line...): skipped
                        continue
                    sym = lines[line] = _symbol(f.symbol, f.dso)
                elif not sym:
                    continue
                frames.append(sym)
        raw = tuple(body.split("\n")) if body else ()
        stack = _Stack(frames, raw if "futex" in body else None, raw)
        self._cached += len(body)
        if self._cached > CACHE_CHARS:
            self._stacks.clear()  # bounded memory on huge inputs
            self._lines.clear()
            self._cached = 0
        self._stacks[body] = stack
        return stack

    def _count_futex(self, tid: int, stack: _Stack, body: str) -> None:
        per = self.futex.setdefault(tid, {})
        key = stack.futex if stack.futex is not None else tuple(body.split("\n"))
        per[key] = per.get(key, 0) + 1

    def _general(self, block: str, last: bool) -> None:
        """Samples the fast search does not take: parsed line by line (profiler.inputs.perfscript)."""
        lines = block.split("\n")
        if self.count_futex:
            _count_futex_lines(self.futex, self.stacks, lines)
        for s in iter_samples(lines, self.log):
            if last and s.truncated:
                s.truncated = False
            if self.limit is not None and self.stats.samples >= self.limit:
                self.stats.limited = True
                return
            self.stats.samples += 1
            self.sample(s)

    # -- samples
    def sample(self, s: ScriptSample) -> None:
        """One parsed sample (a sched_switch, a PERF_RECORD_SWITCH, anything else is ignored)."""
        if s.time is None:
            return
        if s.tid is None:
            self._rebased(s.time)
            return
        if s.event == "PERF_RECORD_SWITCH":
            self._rebased(s.time)
            if (s.payload or "").startswith("IN") and s.tid in self._pending:
                self._close(s.tid, s.time, True)
            return
        if s.payload is None or "sched_switch" not in (s.event or ""):
            self._rebased(s.time)
            return
        m = _PREV.search(s.payload)
        if m is None:
            self._rebased(s.time)
            return
        nm = _NEXT.search(s.payload)
        stack = _Stack([_symbol(f.symbol, f.dso) for f in s.frames], None)
        self.switch(s.time, s.tid, m.group("comm"), m.group("state"),
                    int(nm.group("pid")) if nm is not None else None, stack)

    def _rebased(self, t: float) -> None:
        if self._rebase:
            self._rebase = False
            self._window = self._window.rebased(t)
            self._from, self._to = self._window.start, self._window.end

    def switch(self, t: float, prev_pid: int, comm: str, state: str, next_pid: int | None, stack: _Stack) -> None:
        """One sched_switch: ``prev_pid`` leaves the CPU with ``stack``, ``next_pid`` comes back."""
        if self._rebase:
            self._rebased(t)
        pending = self._pending
        if next_pid is not None and next_pid in pending:
            self._close(next_pid, t, True)
        if prev_pid == 0:
            return  # the idle task
        self.stats.switches += 1
        if prev_pid in pending:
            self._close(prev_pid, t, False)
        if self.intervals is not None:
            t_in = self.intervals.get((prev_pid, round(t * 1e6)))
            if t_in is not None:
                self.thread = prev_pid
                if self._emit(t, t_in, comm, state, stack):
                    self.stats.with_switch_in += 1
                return
        pending[prev_pid] = (t, comm, state, stack)

    def _close(self, tid: int, t_in: float, exact: bool) -> None:
        t_out, comm, state, stack = self._pending.pop(tid)
        self.thread = tid
        if self._emit(t_out, t_in, comm, state, stack):
            if exact:
                self.stats.with_switch_in += 1
            else:
                self.stats.upper_bound += 1

    def _emit(self, t_out: float, t_in: float, comm: str, state: str, stack: _Stack) -> bool:
        lo = t_out if self._from is None else max(t_out, self._from)
        hi = t_in if self._to is None else min(t_in, self._to)
        if hi <= lo:
            return False
        width = round((hi - lo) / self.unit)
        if width <= 0:
            return False
        root = self._roots.get(comm)
        if root is None:
            root = self._roots[comm] = (pool_of(comm) if self.pools else comm).replace(" ", "_")
        key = (stack.reason(state) + ";" + root) if self.by_reason else root
        if stack.tail:
            key += ";" + stack.tail
        out = self.counts
        out[key] = out.get(key, 0) + width
        if self.on_interval is not None:
            self.on_interval(lo, hi, key)
        return True


_HEADER_TID = re.compile(r"\s(\d{1,10})(?:/(\d{1,10}))?\s+(?:\[\d+\]\s+)?\d+\.\d+:")


_PREV_STATE = re.compile(r"prev_state=(\S+)")


def _count_futex_lines(by_tid: FutexStacks, waits: WaitStacks, lines: list[str]) -> None:
    """Per thread, every sample's stack with its prev_state (``waits``), and apart those whose
    stack passes through futex code (a plain substring test: identical stacks are only counted
    here, and parsed once later, by analyzers.stacks.waits and analyzers.verdict.locks)."""
    block: list[str] = []
    hit = False

    def flush() -> None:
        if not block:
            return
        m = _HEADER_TID.search(block[0])
        tid = int(m.group(2) or m.group(1)) if m is not None else -1
        key = tuple(block[1:])
        ps = _PREV_STATE.search(block[0])
        wkey = (ps.group(1) if ps is not None else "?", *key)
        per = waits.setdefault(tid, {})
        per[wkey] = per.get(wkey, 0) + 1
        if hit:
            stacks = by_tid.setdefault(tid, {})
            stacks[key] = stacks.get(key, 0) + 1

    for line in lines:
        line = line.rstrip("\r")
        if line.strip():
            block.append(line)
            if not hit and "futex" in line and line.startswith(("\t", " ")):
                hit = True
            continue
        flush()
        block, hit = [], False
    flush()


def offcpu_folded(
    samples: Iterable[ScriptSample],
    *,
    by_reason: bool = True,
    pools: bool = False,
    window: TimeWindow = WHOLE,
    unit: float = 1e-6,
    intervals: Mapping[tuple[int, int], float] | None = None,
    on_interval: Callable[[float, float, str], None] | None = None,
) -> tuple[dict[str, int], OffCpuStats]:
    """Fold parsed sched_switch samples into blocked time per stack (see :class:`SwitchFolder`,
    which also reads perf script text directly, faster). ``on_interval`` sees each blocked
    interval counted: (from, to, folded stack)."""
    f = SwitchFolder(by_reason=by_reason, pools=pools, window=window, unit=unit, intervals=intervals,
                     on_interval=on_interval)
    for s in samples:
        f.sample(s)
    return f.close()


def fold_switch_text(chunks: Iterable[str], **options: Any) -> SwitchFolder:
    """perf script text of sched_switch samples (chunks in any cut) through a :class:`SwitchFolder`."""
    f = SwitchFolder(**options)
    for chunk in chunks:
        f.feed(chunk)
    f.close()
    return f


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
