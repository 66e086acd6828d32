"""The collector protocol (capture layer): probe, build argv, start, stop; shared context.

A collector is one source of evidence. The capture session (profiler/capture/session.py) asks each
collector's ``probe`` whether this host can run it, starts the ones that can side by side,
and stops them all at the end (duration over, Ctrl-C, or every target gone). Building the
command line is separate from running it so the argv is testable without perf.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from profiler.bundle import BundleWriter, CollectorRecord
from profiler.capture.targets import Target


@dataclass
class CaptureOptions:
    duration: float | None = 30.0  # seconds; None = until Ctrl-C or the targets exit
    frequency: int = 99  # cpu-clock sampling frequency (Hz)
    call_graph: str = "fp"  # fp | dwarf | lbr
    interval: float = 1.0  # perf stat / syscall-rate interval (s)
    proc_hz: float = 20.0  # procfs sampler rate per thread (Hz)
    backend: str = "perf"  # perf | bcc | auto
    inline: bool = False  # resolve inlined frames in perf script (slow)


@dataclass
class CaptureContext:
    writer: BundleWriter
    targets: list[Target]
    options: CaptureOptions = field(default_factory=CaptureOptions)
    perf: str = "perf"  # perf executable

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

    def stop(self, ctx: CaptureContext) -> CollectorRecord:
        """Stop, flush and finish the bundle files; say ok, partial or failed, and why."""
        ...
