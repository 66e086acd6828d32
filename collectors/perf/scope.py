"""Where a collector's perf events live (collectors layer): on the CPUs (system-wide, filtered) or on the target's threads.

A perf event opened on a thread (``perf record -p PID``) is scheduled in and out with that
thread at every context switch. Measured on this project's VM (bench/micro_events.py, a futex
ping-pong of two threads): one such event costs the target 2-6 µs of CPU per round trip, a
``cpu-clock`` sampler ~12 µs (it re-arms a timer each time), and a context-switch-heavy
server like MariaDB under sysbench lost 8-11% of its throughput to each per-thread collector.
An event opened on each CPU (``perf record -a``) is not touched by context switches at all.

So the perf collectors open their events system-wide and narrow them to the targets:

- ``cpu-clock`` samples the CPUs at the same frequency (``:I``: not while they are idle) and
  ``perf script --pid`` keeps the targets' samples: the same samples ``-p`` would have taken.
- tracepoints take a kernel filter on the thread id (``tracepoint_filter``): ranges of the
  targets' thread ids when the capture starts. The kernel evaluates the filter before it
  copies anything. Threads a target starts later are not in the filter (``untraced_threads``
  counts them at the end: servers like TiKV start their pools at startup); an open range
  above the highest id would follow them, but it also catches every task started after the
  targets, perf itself included, and perf tracing its own syscalls feeds on itself.

Without root (and ``perf_event_paranoid`` above 0) system-wide events are not allowed;
``cpu-stacks`` then falls back to the targets' threads (``-p``), tracepoints need root anyway.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

# The kernel copies a filter string of at most a page; stay well inside it.
MAX_FILTER_CHARS = 3000


def thread_ids(pids: Iterable[int]) -> list[int]:
    """Every thread id of these processes, now (a process that is gone contributes its pid)."""
    tids: set[int] = set()
    for pid in pids:
        tids.add(pid)
        try:
            tids.update(int(t) for t in os.listdir(f"/proc/{pid}/task") if t.isdigit())
        except OSError:
            pass
    return sorted(tids)


def with_descendants(pids: Iterable[int]) -> list[int]:
    """These processes and every live process descended from them (a server that forks a
    process per connection, like PostgreSQL: per-thread events followed the children by
    inheritance; a system-wide capture keeps their samples through this list)."""
    parent: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        try:  # "pid (comm) state ppid ...": the comm may hold spaces and parentheses
            parent[int(name)] = int(stat[stat.rindex(b")") + 2:].split()[1])
        except (ValueError, IndexError):
            continue
    roots = set(pids)
    out = set(roots)
    for pid in parent:
        chain, p, seen = [], pid, set()
        while p in parent and p not in out and p not in seen and p > 1:
            seen.add(p)
            chain.append(p)
            p = parent[p]
        if p in out:
            out.update(chain)
    return sorted(out)


def tid_ranges(tids: Iterable[int], max_ranges: int = 64) -> list[tuple[int, int]]:
    """Sorted ids -> the fewest inclusive ranges covering them, merged across the smallest gaps
    until at most ``max_ranges`` remain (a wider filter only lets a few more events through,
    which ``perf script --pid`` drops)."""
    ids = sorted(set(tids))
    if not ids:
        return []
    ranges: list[list[int]] = [[ids[0], ids[0]]]
    for t in ids[1:]:
        if t == ranges[-1][1] + 1:
            ranges[-1][1] = t
        else:
            ranges.append([t, t])
    while len(ranges) > max(1, max_ranges):
        # merge the pair with the smallest gap between them
        i = min(range(len(ranges) - 1), key=lambda k: ranges[k + 1][0] - ranges[k][1])
        ranges[i][1] = ranges[i + 1][1]
        del ranges[i + 1]
    return [(a, b) for a, b in ranges]


def tracepoint_filter(fields: Iterable[str], tids: Iterable[int]) -> str:
    """A tracepoint filter matching these thread ids in any of ``fields`` (e.g. ``prev_pid``,
    ``next_pid``, ``common_pid``)."""
    fields = list(fields)
    ids = sorted(set(tids))
    if not ids or not fields:
        raise ValueError("a thread filter needs thread ids and at least one field")
    max_ranges = 64
    while True:
        terms: list[str] = []
        ranges = tid_ranges(ids, max_ranges)
        for f in fields:
            for a, b in ranges:
                terms.append(f"{f}=={a}" if a == b else f"({f}>={a}&&{f}<={b})")
        text = "||".join(terms)
        if len(text) <= MAX_FILTER_CHARS or max_ranges == 1:
            return text
        max_ranges //= 2


_NUMBERED = re.compile(r"[^A-Za-z0-9]*[0-9]+(?:[^A-Za-z0-9]+[0-9]+)*$")


def comm_filter(fields: Iterable[str], comms: Iterable[str], max_names: int = 48) -> str | None:
    """A tracepoint filter matching these thread names in any of ``fields`` (``prev_comm``,
    ``next_comm``, ``comm``), for a nested PID namespace where the thread ids in the events are
    the host's (collectors/host.py). Past ``max_names`` names, numbered ones become one pattern
    per pool (``raftstore-0-1``, ``raftstore-1-0`` -> ``raftstore*``, matched with ``~``, the
    filter language's glob). None when there are still too many, or a name the language cannot
    quote: then the caller filters less in the kernel and keeps the targets' samples by their ids."""
    names = sorted({c for c in comms if c})
    if not names or any('"' in c or "\\" in c or not c.isprintable() for c in names):
        return None
    exact, globs = names, []
    if len(names) > max_names:
        pools = {n: _NUMBERED.sub("", n) for n in names}
        exact = sorted({n for n, p in pools.items() if not p or any(ch in p for ch in "*?[")})
        globs = sorted({p for n, p in pools.items() if n not in exact})
        if len(exact) + len(globs) > max_names:
            return None
    text = "||".join([f'{f}=="{c}"' for f in fields for c in exact] + [f'{f}~"{g}*"' for f in fields for g in globs])
    return text if len(text) <= MAX_FILTER_CHARS else None


def thread_comms(pids: Iterable[int]) -> list[str]:
    """The names of every thread of these processes, now."""
    out: set[str] = set()
    for pid in pids:
        try:
            tids = [t for t in os.listdir(f"/proc/{pid}/task") if t.isdigit()]
        except OSError:
            continue
        for t in tids:
            try:
                with open(f"/proc/{pid}/task/{t}/comm", encoding="utf-8", errors="replace") as fh:
                    out.add(fh.read().rstrip("\n"))
            except OSError:
                continue
    return sorted(out)


def system_wide_allowed() -> bool:
    """May this process open system-wide (per-CPU) perf events? Root, or perf_event_paranoid <= 0."""
    from profiler.collectors import host

    if host.is_root():
        return True
    paranoid = host.perf_event_paranoid()
    return paranoid is not None and paranoid <= 0


def untraced_threads(pids: Iterable[int], traced: Iterable[int]) -> int:
    """How many threads the targets have now that were not among the ``traced`` ones."""
    known = set(traced)
    return sum(1 for t in thread_ids(pids) if t not in known)
