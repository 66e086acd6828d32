"""The flame graph model: a tree of frames from folded stacks, frame kinds and colours (analyzers layer).

Everything here is pure: folded counts in, plain dataclasses out; the SVG renderer lays out
and draws them. The off-CPU model (time blocked, by wait reason) is in ``offcpu.py``, the
differential one (what grew, what shrank) in ``differential.py``.
"""

from __future__ import annotations

import gc
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

__all__ = [
    "Node",
    "FlameGraph",
    "FoldedStacks",
    "build_tree",
    "frame_kind",
    "frame_color",
    "diff_color",
    "KINDS",
]


class Node:
    """One frame in the merged tree. `total` includes the children; `delta` is only set in a
    differential graph (after - normalised before)."""

    __slots__ = ("name", "total", "self_", "children", "delta", "offset", "pruned")

    def __init__(self, name: str) -> None:
        self.name = name
        self.total = 0
        self.self_ = 0
        self.children: dict[str, Node] = {}
        self.delta = 0.0
        # count before this frame among its siblings (alphabetical), set when narrower siblings
        # were pruned away at build time; -1: derive it from the siblings present
        self.offset = -1
        self.pruned = 0.0  # the root of a tree that held too many frames: the share a frame needed

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


@dataclass
class FoldedStacks:
    """A capture's stacks as folded counts, before any tree is built (an analysis keeps these;
    whoever draws or merges them builds what it needs: the report's range graphs, a cluster's
    per-role graph)."""

    counts: dict[str, int]
    unit: str = "samples"
    subtitle: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


MAX_NODES = 100_000  # frames one tree holds: beyond it, the narrowest are left out (``Node.pruned`` says how far)


class _TooMany(Exception):
    pass


def build_tree(
    counts: dict[str, int] | Iterable[tuple[str, int]],
    root_name: str = "all",
    min_fraction: float = 0.0,
    max_nodes: int = MAX_NODES,
) -> Node:
    """Merge folded stacks into one tree.

    With `min_fraction` > 0 only frames holding at least that share of the total are built
    (their parents' totals still count everything): what a renderer that prunes narrow frames
    needs, at a cost that follows the visible frames rather than the unique stacks. At most
    ``max_nodes`` frames are built whatever the input: past them the share a frame needs is
    raised fourfold until the tree fits, and the root's ``pruned`` holds the share used (a few
    KB of profile naming thousands of deep stacks would otherwise be millions of frames).
    """
    # Millions of small nodes: the cyclic GC would rescan them again and again while they are
    # created (they hold no cycles), so it stays off during the build.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        items = list(counts.items() if isinstance(counts, dict) else counts)
        frac = min_fraction
        while True:
            try:
                root = _build_any(items, root_name, frac, max_nodes)
            except _TooMany:
                frac = max(frac * 4, 1e-6)
                continue
            if frac > min_fraction:
                root.pruned = frac
            return root
    finally:
        if was_enabled:
            gc.enable()


def _build_any(items: list[tuple[str, int]], root_name: str, frac: float, max_nodes: int) -> Node:
    if frac <= 0:
        return _build(items, root_name, max_nodes)
    # the separator trick needs "\x00" and "\x01" free, and costs depth x length per stack
    if not any("\x00" in k or "\x01" in k or len(k) > DEEP_STACK for k, _ in items):
        return _build_pruned(items, root_name, frac, max_nodes)
    return _build_pruned_ids(items, root_name, frac, max_nodes)


DEEP_STACK = 16 << 10  # characters: longer stacks take _build_pruned_ids (slicing is quadratic in their depth)


def _build_pruned_ids(items: list[tuple[str, int]], root_name: str, min_fraction: float, max_nodes: int) -> Node:
    """_build_pruned for deep stacks (or names holding its separators): each stack a tuple of
    frame ranks (names in sorted order, so tuples sort as the frame lists do), a frame's run
    found by bisecting on the frame at its depth. Only the frames drawn become nodes: a few KB
    of profile naming thousands of deep stacks must not become millions of nodes."""
    from bisect import bisect_left
    from itertools import accumulate

    names = sorted({f for st, n in items if n > 0 for f in st.split(";")})
    rank = {f: i for i, f in enumerate(names)}
    pairs = sorted((tuple(rank[f] for f in st.split(";")), n) for st, n in items if n > 0)
    keys = [k for k, _ in pairs]
    prefix = [0, *accumulate(n for _, n in pairs)]
    root = Node(root_name)
    root.total = prefix[-1]
    min_count = min_fraction * root.total
    work = [(root, 0, len(keys), 0)]  # keys[lo:hi] pass through node, their next frame at depth
    nodes = 0
    while work:
        node, lo, hi, depth = work.pop()
        i = lo
        while i < hi and len(keys[i]) <= depth:  # stacks that end at this node sort first
            i += 1
        node.self_ = prefix[i] - prefix[lo]
        first = i
        while i < hi:
            fid = keys[i][depth]
            j = bisect_left(keys, fid + 1, i + 1, hi, key=lambda k, d=depth: k[d])  # type: ignore[misc]
            total = prefix[j] - prefix[i]
            if total >= min_count:
                nodes += 1
                if nodes > max_nodes:
                    raise _TooMany
                c = node.children[names[fid]] = Node(names[fid])
                c.total = total
                c.offset = prefix[i] - prefix[first]
                work.append((c, i, j, depth + 1))
            i = j
    return root


def _build_pruned(counts: dict[str, int] | Iterable[tuple[str, int]], root_name: str, min_fraction: float,
                  max_nodes: int) -> Node:
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
    nodes = 0
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
                nodes += 1
                if nodes > max_nodes:
                    raise _TooMany
                c = node.children[frame] = Node(frame)
                c.total = total
                c.offset = prefix[i] - prefix[first]
                work.append((c, i, j, end_of_frame + 1))
            i = j
    return root


def _build(counts: dict[str, int] | Iterable[tuple[str, int]], root_name: str, max_nodes: int) -> Node:
    root = Node(root_name)
    items = counts.items() if isinstance(counts, dict) else counts
    prev: list[str] = []
    path: list[Node] = [root]
    nodes = 0
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
                nodes += 1
                if nodes > max_nodes:
                    raise _TooMany
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
GO_NAME_MAX = 256  # longer names are not tested as Go's (the pattern backtracks polynomially on hostile ones)
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
    if len(name) <= GO_NAME_MAX and _GO_FUNC.match(name) and ("/" in name or name.startswith("main.")):
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
