"""The flame graph model: a tree of frames from folded stacks, frame kinds and colours, the
off-CPU model (time blocked by wait reason) and the differential model (analyzers layer).

Everything here is pure: folded counts in, plain dataclasses out; the SVG renderer lays out
and draws them.
"""

from __future__ import annotations

import gc
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from profiler.analyzers.stacks.perfscript import Sample

__all__ = [
    "Node",
    "FlameGraph",
    "build_tree",
    "frame_kind",
    "frame_color",
    "diff_color",
    "KINDS",
    "differential",
    "offcpu_folded",
    "wait_reason",
    "OffCpuStats",
]


class Node:
    """One frame in the merged tree. `total` includes the children; `delta` is only set in a
    differential graph (after - normalised before)."""

    __slots__ = ("name", "total", "self_", "children", "delta", "offset")

    def __init__(self, name: str) -> None:
        self.name = name
        self.total = 0
        self.self_ = 0
        self.children: dict[str, Node] = {}
        self.delta = 0.0
        # count before this frame among its siblings (alphabetical), set when narrower siblings
        # were pruned away at build time; -1: derive it from the siblings present
        self.offset = -1

    def child(self, name: str) -> Node:
        c = self.children.get(name)
        if c is None:
            c = self.children[name] = Node(name)
        return c

    def sorted_children(self) -> list[Node]:
        """Alphabetical, as flame graphs merge and order frames (so graphs are comparable)."""
        return [self.children[k] for k in sorted(self.children)]

    def walk(self, depth: int = 0) -> Iterator[tuple[int, Node]]:
        stack = [(depth, self)]
        while stack:
            d, n = stack.pop()
            yield d, n
            stack.extend((d + 1, c) for c in n.children.values())

    def __repr__(self) -> str:
        return f"Node({self.name!r}, total={self.total}, children={len(self.children)})"


@dataclass
class FlameGraph:
    """What the renderer draws."""

    root: Node
    title: str = "Flame Graph"
    subtitle: str | None = None
    unit: str = "samples"  # samples | ns | us | events: what one count means
    differential: bool = False
    kernel_names: frozenset[str] = frozenset()
    notes: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.root.total


def build_tree(
    counts: dict[str, int] | Iterable[tuple[str, int]],
    root_name: str = "all",
    min_fraction: float = 0.0,
) -> Node:
    """Merge folded stacks into one tree.

    With `min_fraction` > 0 only frames holding at least that share of the total are built
    (their parents' totals still count everything): what a renderer that prunes narrow frames
    needs, at a cost that follows the visible frames rather than the unique stacks.
    """
    # Millions of small nodes: the cyclic GC would rescan them again and again while they are
    # created (they hold no cycles), so it stays off during the build.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        if min_fraction > 0:
            items = list(counts.items() if isinstance(counts, dict) else counts)
            if not any("\x00" in k or "\x01" in k for k, _ in items):  # the separator trick needs them free
                return _build_pruned(items, root_name, min_fraction)
            counts = items
        return _build(counts, root_name)
    finally:
        if was_enabled:
            gc.enable()


def _build_pruned(counts: dict[str, int] | Iterable[tuple[str, int]], root_name: str, min_fraction: float) -> Node:
    # With "\x00" as the separator (it sorts before any character of a name) the sorted stack
    # strings are in the order of their frame lists, stacks through one frame are contiguous,
    # and every stack of such a run shares the same prefix, so a frame is a slice at a known
    # offset and the end of its run one bisection away: no stack is ever split into frames.
    from bisect import bisect_left
    from itertools import accumulate

    pairs = sorted(
        (st.replace(";", "\x00"), n)
        for st, n in (counts.items() if isinstance(counts, dict) else counts)
        if n > 0
    )
    keys = [k for k, _ in pairs]
    prefix = [0, *accumulate(n for _, n in pairs)]
    root = Node(root_name)
    root.total = prefix[-1]
    min_count = min_fraction * root.total
    # (node, lo, hi, start): keys[lo:hi] all pass through node; their frames below it begin at
    # offset `start` (the shared prefix, separator included)
    work = [(root, 0, len(keys), 0)]
    while work:
        node, lo, hi, start = work.pop()
        i = lo
        # stacks that end at this node: exactly the prefix without its separator
        while i < hi and len(keys[i]) < start:
            i += 1
        node.self_ = prefix[i] - prefix[lo]
        first = i
        while i < hi:
            k = keys[i]
            sep = k.find("\x00", start)
            end_of_frame = len(k) if sep < 0 else sep
            frame = k[start:end_of_frame]
            j = bisect_left(keys, k[:end_of_frame] + "\x01", i + 1, hi)
            total = prefix[j] - prefix[i]
            if total >= min_count:
                c = node.children[frame] = Node(frame)
                c.total = total
                c.offset = prefix[i] - prefix[first]
                work.append((c, i, j, end_of_frame + 1))
            i = j
    return root


def _build(counts: dict[str, int] | Iterable[tuple[str, int]], root_name: str) -> Node:
    root = Node(root_name)
    items = counts.items() if isinstance(counts, dict) else counts
    prev: list[str] = []
    path: list[Node] = [root]
    for stack, n in sorted(items):
        if n <= 0:
            continue
        frames = stack.split(";")
        # length of the common prefix with the previous stack
        k = 0
        lim = min(len(frames), len(prev))
        while k < lim and frames[k] == prev[k]:
            k += 1
        del path[k + 1 :]
        node = path[-1]
        for fr in frames[k:]:
            c = node.children.get(fr)
            if c is None:
                c = node.children[fr] = Node(fr)
            path.append(c)
            node = c
        node.self_ += n
        for p in path:
            p.total += n
        prev = frames
    return root


# ---------------------------------------------------------------------------------------------
# Frame kinds and colours

KINDS = ("kernel", "user", "go-runtime", "go", "rust-std", "rust", "jit", "inlined", "unknown", "root")

_GO_RUNTIME = re.compile(r"^(runtime|internal/runtime|runtime/internal|sync/atomic)[./]")
_GO_FUNC = re.compile(r"^[a-z][\w\-]*(?:/[\w.\-]+)*\.(?:\(\*?[\w\[\]\.,]+\)\.)?[\w\[\]\.,]+(?:\.func\d+)*$")
_RUST_STD = re.compile(r"^<?(?:&(?:mut )?)?(?:core|alloc|hashbrown|parking_lot|crossbeam\w*|tokio|futures\w*)::")
# "std::" is shared with C++; C++'s library names use reserved "_Upper"/"__x" components.
_RUST_STD_STD = re.compile(r"^<?(?:&(?:mut )?)?std::")
_CXX_RESERVED = re.compile(r"::_(?:[A-Z]|_(?!rust))")
_KERNEL_ENTRY = re.compile(
    r"^(entry_SYSCALL|do_syscall_64|asm_(exc|sysvec|common)_|ret_from_fork|__x64_sys_|__do_sys_|"
    r"common_interrupt|irq_exit|__irq_exit|apic_timer|smp_apic|page_fault|do_page_fault|exc_page_fault)"
)
_KERNEL_THREAD = re.compile(r"^(kworker|ksoftirqd|migration|rcu_|kswapd|jbd2|kthreadd|swapper|irq/|cpuhp|idle_inject|watchdog)")


def frame_kind(name: str, parent_kind: str | None = None, kernel_names: frozenset[str] = frozenset()) -> str:
    """Classify a frame by its name (and its parent's kind: below a syscall entry all is kernel)."""
    if name.endswith("_[k]") or name in kernel_names:
        return "kernel"
    if name.endswith("_[j]"):
        return "jit"
    if name.endswith("_[i]"):
        return "inlined"
    if parent_kind == "kernel":
        return "kernel"
    if _KERNEL_ENTRY.match(name):
        return "kernel"
    if name.startswith("[") and name.endswith("]") or name in ("[unknown]", " "):
        return "unknown"
    if _GO_RUNTIME.match(name):
        return "go-runtime"
    if _RUST_STD.match(name) or (_RUST_STD_STD.match(name) and not _CXX_RESERVED.search(name)):
        return "rust-std"
    if "::" in name:
        if name.startswith(("<", "_R", "_ZN")) or "{{closure}}" in name or "{closure#" in name:
            return "rust"
        return "user"  # C++
    if _GO_FUNC.match(name) and ("/" in name or name.startswith("main.")):
        return "go"
    if name.startswith("L") and "/" in name and ";" not in name:
        return "jit"  # Java-style JIT names (perf-map-agent)
    return "user"


# Hue (degrees), saturation, lightness ranges per kind; the name's hash picks within the range.
_PALETTE: dict[str, tuple[int, int, int, int]] = {
    # kind: (hue, hue spread, saturation %, lightness %)
    "kernel": (25, 15, 85, 58),  # orange
    "user": (0, 15, 75, 60),  # red, as classic flame graphs draw native code
    "go-runtime": (195, 15, 60, 62),  # blue
    "go": (170, 15, 55, 55),  # teal
    "rust-std": (48, 10, 85, 55),  # yellow
    "rust": (10, 12, 70, 62),  # salmon
    "jit": (110, 20, 55, 50),  # green
    "inlined": (180, 10, 60, 70),  # aqua
    "unknown": (0, 0, 0, 72),  # grey
    "root": (220, 5, 15, 80),  # pale grey-blue
}


def _hash01(name: str) -> float:
    return (zlib.crc32(name.encode("utf-8", "replace")) & 0xFFFF) / 0xFFFF


def frame_color(name: str, kind: str) -> str:
    """A deterministic colour: the kind picks the hue band, the name's hash the shade."""
    hue, spread, sat, light = _PALETTE.get(kind, _PALETTE["user"])
    h = _hash01(name)
    return f"hsl({(hue + round((h - 0.5) * 2 * spread)) % 360},{sat}%,{light + round((h - 0.5) * 10)}%)"


def diff_color(delta: float, scale: float) -> str:
    """Red where a frame grew, blue where it shrank, white where it did not change."""
    if scale <= 0 or delta == 0:
        return "rgb(250,250,250)"
    r = min(1.0, abs(delta) / scale)
    v = round(250 - 200 * r)
    return f"rgb(250,{v},{v})" if delta > 0 else f"rgb({v},{v},250)"


# ---------------------------------------------------------------------------------------------
# Differential


def differential(
    before: dict[str, int],
    after: dict[str, int],
    before_work: float | None = None,
    after_work: float | None = None,
) -> tuple[Node, float]:
    """A tree sized by `after`, each frame carrying `delta` = after - before x scale.

    The scale normalises `before` to the same amount of work as `after`: by the work each
    capture did (operations: throughput x duration) when both are known, so that a frame whose
    cost per operation did not change shows no delta; else by total samples. Returns
    (tree, scale).
    """
    if before_work and after_work:
        scale = after_work / before_work
    else:
        tb = sum(before.values())
        scale = sum(after.values()) / tb if tb else 1.0
    root = build_tree(after)
    old = build_tree(before)
    _set_delta(root, old, scale)
    return root, scale


def _set_delta(new: Node, old: Node | None, scale: float) -> None:
    stack = [(new, old)]
    while stack:
        n, o = stack.pop()
        n.delta = n.total - (o.total * scale if o is not None else 0.0)
        for name, c in n.children.items():
            stack.append((c, o.children.get(name) if o is not None else None))


# ---------------------------------------------------------------------------------------------
# Off-CPU: time blocked, from sched_switch samples

_PREV = re.compile(r"prev_comm=(?P<comm>.*?) prev_pid=(?P<pid>-?\d+) .*?prev_state=(?P<state>\S+)")
_NEXT = re.compile(r"next_comm=(?P<comm>.*?) next_pid=(?P<pid>-?\d+)")

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


def _frame_name(symbol: str) -> str:
    """The same naming as folding: demangle leftovers, cut argument lists, no ';'."""
    from profiler.analyzers.stacks.demangle import demangle
    from profiler.analyzers.stacks.folding import fix_half_demangled_rust, tidy_args

    if symbol.startswith(("_R", "_ZN")):
        symbol = demangle(symbol)
    name: str = tidy_args(fix_half_demangled_rust(symbol))
    return name


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
    time_from: float | None = None,
    time_to: float | None = None,
    unit: float = 1e-6,
    intervals: dict[tuple[int, int], float] | None = None,
) -> tuple[dict[str, int], OffCpuStats]:
    """Fold sched_switch samples into blocked time per stack, in `unit` seconds (µs default).

    A thread's blocked interval runs from its switch-out (the sample: its stack, its prev_state)
    to its switch-in, taken from, in order: `intervals` ({(tid, off time in µs): on time}, the
    collectors' offcpu.csv.gz), a ``PERF_RECORD_SWITCH IN`` record of the thread, or a
    sched_switch with next_pid = tid. When none was recorded (perf record -p only sees events in
    the target's own context), the interval ends at the thread's next switch-out instead: an
    upper bound that includes its next run, noted in stats.
    Root frames: wait reason (when by_reason), then the thread name (or its pool).
    """
    from profiler.knowledge import pool_of

    stats = OffCpuStats()
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
        key = ";".join(root + [_frame_name(n) for n in reversed(frames)])
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
        if s.time is None or s.tid is None:
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


def read_intervals(lines: Iterable[str]) -> dict[tuple[int, int], float]:
    """offcpu.csv.gz (``tid,comm,off,on,state``) -> {(tid, off in µs): on}."""
    import csv

    out: dict[tuple[int, int], float] = {}
    for row in csv.DictReader(lines):
        try:
            out[(int(row["tid"]), round(float(row["off"]) * 1e6))] = float(row["on"])
        except (KeyError, TypeError, ValueError):
            continue
    return out


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
