"""What a scenario is: a workload, its known cause, and how to confirm the cause (test layer)."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.scenarios.cgroup import DISK, Group, disk_devno
from tests.scenarios.procs import Procs
from tests.scenarios.sampler import Observation

CATEGORIES = ("cpu", "io_wait", "memory", "lock_contention", "not_saturated")


@dataclass
class Check:
    """One independent confirmation: `value op threshold`."""

    name: str
    value: float
    op: str  # ">=" or "<="
    threshold: float
    note: str = ""

    @property
    def ok(self) -> bool:
        if self.value is None or (isinstance(self.value, float) and math.isnan(self.value)):
            return False
        return self.value >= self.threshold if self.op == ">=" else self.value <= self.threshold

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "value": round(float(self.value), 4), "op": self.op,
                "threshold": self.threshold, "ok": self.ok, **({"note": self.note} if self.note else {})}

    def __str__(self) -> str:
        mark = "ok" if self.ok else "NO"
        return f"{self.name}={self.value:.3g} {self.op} {self.threshold:g} [{mark}]"


@dataclass
class Ctx:
    """Everything a scenario's start() may use; the runner tears it all down."""

    name: str
    tmp: Path
    procs: Procs
    window: float
    load_seconds: int  # how long a load must last: warm-up + window + slack
    groups: dict[str, Group] = field(default_factory=dict)
    # What the runner removes at teardown besides ``tmp`` (a scenario's directory on tmpfs)
    dirs: list[Path] = field(default_factory=list)

    def group(self, role: str = "", controllers: tuple[str, ...] = ("cpu", "memory", "blkio")) -> Group:
        """A fresh cgroup `profiler-scn-<name>-<pid>[-role]`, destroyed by the runner."""
        name = f"profiler-scn-{self.name}-{os.getpid()}" + (f"-{role}" if role else "")
        g = Group(name, controllers, devno=disk_devno(str(self.tmp)) if "blkio" in controllers else DISK)
        self.groups[role or "main"] = g
        g.create()
        return g


@dataclass
class Started:
    """What start() hands back: the pid to attach to and optional extra evidence."""

    pid: int
    # Called at the window's start and end; the deltas land in Observation.extra.
    probe: Callable[[], dict[str, float]] | None = None
    # Sampled about twice a second through the window (a server's own gauges, e.g. sessions waiting
    # on a lock); the means land in Observation.extra as "mean:<key>".
    gauge: Callable[[], dict[str, float]] | None = None
    # Number of threads doing the work (for lock/IO checks); 0: unknown.
    workers: int = 0
    # More processes that serve the work (PostgreSQL backends, nginx workers): attached to and
    # sampled with ``pid``.
    more_pids: list[int] = field(default_factory=list)

    @property
    def pids(self) -> list[int]:
        return [self.pid, *self.more_pids]


Confirm = Callable[[Observation, "Started"], list[Check]]


@dataclass
class Scenario:
    name: str
    category: str
    programs: tuple[str, ...]
    cause: str  # the known cause, one line
    start: Callable[[Ctx], Started]
    confirm: Confirm
    sub_cause: str | None = None  # the sub-cause a right verdict names, in words
    # Any of these words (lower case) in the verdict's sub_cause text makes it a match.
    sub_cause_words: tuple[str, ...] = ()
    warmup: float = 3.0
    fast: bool = False  # in the CI subset
    requires: tuple[str, ...] = ()  # programs that must be installed
    # Two causes at once (both confirmed by ``confirm``): a verdict naming any of ``category`` and
    # ``also`` first is right; the scoreboard shows which one it ranks first and why.
    also: tuple[str, ...] = ()
    # Why the host cannot run it (a binary named by an environment variable is not set), or None;
    # checked before the programs on PATH.
    skip: Callable[[], str | None] | None = None

    @property
    def accepted(self) -> tuple[str, ...]:
        return (self.category, *self.also)

    def __post_init__(self) -> None:
        assert self.category in CATEGORIES, self.category
        assert all(c in CATEGORIES and c != self.category for c in self.also), self.also
