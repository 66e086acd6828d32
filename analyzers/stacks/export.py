"""Stacks to hand to other tools, with what we know about them (analyzers layer).

The model the stack exporters (profiler/renderers/pprof_out.py, speedscope.py) write: folded
stacks (root first, ``;``-separated) with one value each, and what the values are (``cpu``/
nanoseconds from perf's cpu-clock periods, ``offcpu``/microseconds of blocked time,
``samples``/count, or a pprof input's own sample type). What the capture knew rides along:

- ``labeled``: each stack with its labels (thread, tid, pool, pid, target for perf samples; the
  wait reason and pool of off-CPU time; a pprof input's own labels, Top SQL digests included):
  the thread is a label, never a fake root function;
- ``files``: each function's binary (pprof's mappings);
- ``timed``: every sample in time order with its thread (speedscope's per-thread profiles);
- ``duration_ns``, ``period``/``period_unit``.

:class:`Labeler` builds one from perf samples (time, folded stack, value and the sample's comm,
pid and tid), the stack's root frame (the thread or pool name folding puts there) moved into
the labels.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from profiler.knowledge import pool_of

# our units -> pprof's (type, unit) when the input did not name them
_PPROF_TYPES = {"ns": ("cpu", "nanoseconds"), "us": ("offcpu", "microseconds"), "samples": ("samples", "count"),
                "goroutines": ("goroutine", "count"), "events": ("events", "count")}

Labels = tuple[tuple[str, str], ...]  # (key, value), sorted by key


@dataclass
class StackProfile:
    counts: dict[str, int]  # folded stack -> value (every label merged)
    sample_type: str = "samples"  # cpu | offcpu | samples | goroutine | a pprof input's type
    unit: str = "count"  # nanoseconds | microseconds | count | bytes ...
    name: str = ""  # what it is, for the file's title (the input and its event)
    duration_ns: int = 0
    period: int = 0  # the sampling period in ``period_unit`` (0: unknown)
    comments: list[str] = field(default_factory=list)
    labeled: dict[tuple[str, Labels], int] = field(default_factory=dict)  # (stack, labels) -> value; {}: counts
    files: dict[str, str] = field(default_factory=dict)  # function -> the binary it is in
    timed: list[tuple[str, float, str, int]] = field(default_factory=list)  # (thread, time, stack, value), time order
    period_type: str = ""  # what the period counts ("" : the sample type)
    period_unit: str = ""

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def stacks(self) -> list[tuple[list[str], int]]:
        """(frames root first, value), largest first, ties by stack text (deterministic output)."""
        rows = sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))
        return [(stack.split(";"), n) for stack, n in rows if n > 0]

    def labeled_stacks(self) -> list[tuple[list[str], int, Labels]]:
        """(frames root first, value, labels), largest first; without labels, each stack with none."""
        if not self.labeled:
            return [(frames, n, ()) for frames, n in self.stacks()]
        rows = sorted(self.labeled.items(), key=lambda kv: (-kv[1], kv[0]))
        return [(stack.split(";"), n, labels) for (stack, labels), n in rows if n > 0]


def sample_type_of(unit: str, event: str | None) -> tuple[str, str]:
    """(type, unit) for an export: a pprof input's ``cpu/nanoseconds`` kept, else from our unit."""
    if event and "/" in event and " " not in event:
        t, _, u = event.partition("/")
        return t, u
    return _PPROF_TYPES.get(unit, (unit or "samples", "count"))


class Labeler:
    """Perf samples into a labeled, timed StackProfile's parts; ``targets``: pid -> its label
    (``comm (pid)``) when a bundle names its targets."""

    def __init__(self, targets: dict[int, str] | None = None) -> None:
        self.targets = targets or {}
        self.counts: dict[str, int] = {}
        self.labeled: dict[tuple[str, Labels], int] = {}
        self.timed: list[tuple[str, float, str, int]] = []
        self._labels: dict[tuple[str, str | None, str], tuple[Labels, str]] = {}
        self.first: float | None = None
        self.last: float | None = None
        self.values: dict[int, int] = {}  # value -> samples with it (the period, for cpu-clock)

    def sample(self, t: float | None, stack: str, value: int, ids: tuple[str, str | None, str]) -> None:
        """One perf sample: ``stack`` with its root frame (thread or pool name), ``ids`` its
        (comm, pid, tid) as perf printed them."""
        got = self._labels.get(ids)
        if got is None:
            comm, pid, tid = ids[0].strip(), ids[1], ids[2]
            labels: list[tuple[str, str]] = [("pool", pool_of(comm)), ("thread", comm), ("tid", tid)]
            if pid is not None:
                labels.append(("pid", pid))
                if pid.isdigit() and int(pid) in self.targets:
                    labels.append(("target", self.targets[int(pid)]))
            got = self._labels[ids] = (tuple(sorted(labels)), f"{comm} ({tid})")
        labels_t, thread = got
        _, _, rest = stack.partition(";")
        rest = rest or "[no stack]"
        self.counts[rest] = self.counts.get(rest, 0) + value
        key = (rest, labels_t)
        self.labeled[key] = self.labeled.get(key, 0) + value
        self.values[value] = self.values.get(value, 0) + 1
        if t is not None:
            self.timed.append((thread, t, rest, value))
            self.first = t if self.first is None else min(self.first, t)
            self.last = t if self.last is None else max(self.last, t)

    def interval(self, lo: float, hi: float, stack: str, value: int, tid: int | None, pools: bool = True) -> None:
        """One off-CPU interval: ``stack`` is ``wait reason;pool;frames`` (``pools``, else
        ``wait reason;thread;frames``); the reason and the pool or thread become labels."""
        reason, _, rest = stack.partition(";")
        pool, _, frames = rest.partition(";")
        labels: list[tuple[str, str]] = [("pool" if pools else "thread", pool), ("wait", reason)]
        if tid is not None:
            labels.append(("tid", str(tid)))
        frames = frames or "[no stack]"
        self.counts[frames] = self.counts.get(frames, 0) + value
        key = (frames, tuple(sorted(labels)))
        self.labeled[key] = self.labeled.get(key, 0) + value
        self.timed.append((f"{pool} ({tid})" if tid is not None else pool, lo, frames, value))
        self.first = lo if self.first is None else min(self.first, lo)
        self.last = hi if self.last is None else max(self.last, hi)

    @property
    def period(self) -> int:
        """The value most samples carry (a cpu-clock sample's period), 0 when none dominates."""
        if not self.values:
            return 0
        value, n = max(self.values.items(), key=lambda kv: (kv[1], -kv[0]))
        return value if n * 2 >= sum(self.values.values()) else 0

    def into(self, profile: StackProfile) -> StackProfile:
        profile.counts = self.counts
        profile.labeled = self.labeled
        self.timed.sort(key=lambda r: r[1])
        profile.timed = self.timed
        if self.first is not None and self.last is not None and not profile.duration_ns:
            profile.duration_ns = round((self.last - self.first) * 1e9)
        return profile
