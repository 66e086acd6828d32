"""The collector protocol (collectors layer): what the session calls; the target, options and context.

A collector is one source of evidence. The capture session (profiler/capture/session.py) asks each
collector's ``probe`` whether this host can run it, starts the ones that can side by side,
checks a moment later that each really started (``check_started``), polls them while the
capture runs (``poll``, ``size``), asks them all to stop at the same moment
(``request_stop``) and then lets each finish its files (``stop``). Building the command line
is separate from running it so the argv is testable without perf. ``CollectorBase`` gives
the defaults of the optional steps, so a collector writes only what it needs.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from profiler.bundle import SKIPPED, BundleWriter, CollectorRecord, EarlyReads
from profiler.knowledge import target_kind


@dataclass(frozen=True)
class Target:
    """A live process to capture (profiler/capture/targets.py resolves ``--pid`` values to these)."""

    pid: int
    comm: str
    exe: str | None = None
    cmdline: tuple[str, ...] = field(default_factory=tuple)
    matched_by: str = "pid"  # pid | comm | exe | name-substring | container | cmdline
    query: str = ""

    @property
    def kind(self) -> str | None:
        return target_kind(self.comm, self.exe, list(self.cmdline))

    def describe(self) -> str:
        return f"{self.comm} (pid {self.pid})"


@dataclass
class CaptureOptions:
    duration: float | None = 30.0  # seconds; None = until Ctrl-C or the targets exit
    frequency: int = 99  # cpu-clock sampling frequency (Hz)
    call_graph: str = "fp"  # fp | dwarf | lbr
    interval: float = 1.0  # perf stat / syscall-rate interval (s)
    proc_hz: float = 20.0  # procfs sampler rate per thread (Hz)
    backend: str = "perf"  # perf | bcc | auto
    inline: bool = False  # resolve inlined frames in perf script (slow)
    status_interval: float = 5.0  # server-status: seconds between /metrics scrapes
    status_urls: list[str] = field(default_factory=list)  # server-status: [PID=]URL the user names
    server_cpu_profile: bool = True  # server-status: also take the server's own CPU profile


@dataclass
class CaptureContext:
    writer: BundleWriter
    targets: list[Target]
    options: CaptureOptions = field(default_factory=CaptureOptions)
    perf: str = "perf"  # perf executable
    early: EarlyReads | None = None  # attach/run: what the report takes in while members are written

    @property
    def pids(self) -> list[int]:
        return [t.pid for t in self.targets]


@dataclass(frozen=True)
class Probe:
    """Whether a collector can run here; if not, why and how to fix it."""

    ok: bool
    reason: str = ""
    fix: str | None = None


@runtime_checkable
class Collector(Protocol):
    """Everything the capture session calls on a collector, in the order it calls it."""

    name: str  # unique within a bundle, e.g. "perf-stat", "cpu-stacks", "block-io", "procfs"
    backend: str  # "perf", "tracefs", "procfs", "bcc"

    def probe(self, ctx: CaptureContext) -> Probe:
        """Can this host run the collector for these targets? Must not change anything."""
        ...

    def argv(self, ctx: CaptureContext) -> list[str]:
        """The command line it will run ([] for in-process collectors)."""
        ...

    def start(self, ctx: CaptureContext) -> None:
        """Start capturing in the background; return quickly."""
        ...

    def check_started(self, ctx: CaptureContext) -> None:
        """A moment after every collector started: raise, in the helper's own words, if it died at once."""
        ...

    def poll(self) -> str | None:
        """None while capturing; a word on how it ended ("ended", or why it died) once it has."""
        ...

    def size(self) -> int:
        """Bytes written so far (for the progress line; 0 when unknown)."""
        ...

    def request_stop(self) -> None:
        """Stop capturing now without waiting, so every collector's window ends at the same moment."""
        ...

    def stop(self, ctx: CaptureContext) -> CollectorRecord:
        """Stop, flush and finish the bundle files; say ok, partial or failed, and why."""
        ...

    @property
    def rec(self) -> CollectorRecord | None:
        """What the collector has recorded so far (None if it keeps none): the session keeps it if ``stop`` raises."""
        ...


class CollectorBase:
    """Defaults for the optional steps of the protocol: nothing to check, no state to report, nothing to ask."""

    name: str
    backend: str
    rec: CollectorRecord | None = None

    def check_started(self, ctx: CaptureContext) -> None:
        """Nothing to check: an in-process collector fails in ``start`` or not at all."""

    def poll(self) -> str | None:
        return None

    def size(self) -> int:
        return 0

    def request_stop(self) -> None:
        """Nothing to do before ``stop``."""


def skipped(name: str, backend: str, reason: str) -> CollectorRecord:
    """The record of a collector this host cannot run."""
    return CollectorRecord(name=name, backend=backend, status=SKIPPED, reason=reason)


def disk_reason(exc: OSError) -> str:
    """A collector's reason when writing the bundle failed: disk full, permission, or the OS's words."""
    if exc.errno == errno.ENOSPC:
        return "disk full while writing the bundle (ENOSPC): kept what was written"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"permission denied: {exc.filename or exc}"
    return f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")
