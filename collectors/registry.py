"""The collectors a capture runs by default (collectors layer): one small, obvious list."""

from __future__ import annotations

from collections.abc import Callable

from profiler.collectors.base import CaptureOptions, Collector
from profiler.collectors.bcc.backend import choose, with_backend
from profiler.collectors.perf.cpu_stacks import CpuStacksCollector
from profiler.collectors.perf.perf_stat import PerfStatCollector
from profiler.collectors.procfs.sampler import ProcfsCollector
from profiler.collectors.server.status import ServerStatusCollector


class _Later:
    """A collector built only if ``--backend`` keeps it. The perf syscalls and off-CPU
    collectors and the tracefs block-io one import the perf.data and block-event codecs, and
    with them numpy (0.15 s of start-up on an idle host, several times that on a busy one),
    which a capture whose bcc collectors take their place never needs."""

    def __init__(self, name: str, make: Callable[[], Collector]) -> None:
        self.name = name
        self.make = make


def _offcpu(keep_perf_data: bool, full: bool = False) -> Collector:
    from profiler.collectors.perf.offcpu import OffCpuCollector

    return OffCpuCollector(keep_perf_data, full=full)


def _syscalls(keep_perf_data: bool, full: bool = False) -> Collector:
    from profiler.collectors.perf.syscalls import SyscallsCollector

    return SyscallsCollector(keep_perf_data, full=full)


def _blockio() -> Collector:
    from profiler.collectors.tracefs.blockio import BlockIOCollector

    return BlockIOCollector()


def default_collectors(options: CaptureOptions, keep_perf_data: bool = False) -> list[Collector]:
    """Every collector, in start order; the session probes each and skips what cannot run here.
    ``options.backend`` bcc (or auto where bcc works) swaps in the bcc collectors of the same
    names and adds futex-waits (collectors/bcc/backend.py).
    """
    perf: list[Collector | _Later] = [
        PerfStatCollector(),
        ProcfsCollector(),
        CpuStacksCollector(keep_perf_data),
        _Later("offcpu-stacks", lambda: _offcpu(keep_perf_data)),
        _Later("block-io", _blockio),
        _Later("syscalls", lambda: _syscalls(keep_perf_data)),
        ServerStatusCollector(),
    ]
    chosen, _used, _why = with_backend(perf, options.backend)
    return [c.make() if isinstance(c, _Later) else c for c in chosen]


def backend_choice(options: CaptureOptions) -> tuple[str, str]:
    """(backend used, why) for the manifest's options: what --backend auto decided."""
    return choose(options.backend)


# Opt-in full traces: the same collector (same name, same files) tracing the whole capture
# instead of duty-cycled windows. Costly on busy servers (docs/collectors.md "Overhead").
FULL_TRACE = {"syscalls-trace": "syscalls", "offcpu-trace": "offcpu-stacks"}


def _full(name: str, keep_perf_data: bool) -> Collector:
    if name == "syscalls":
        return _syscalls(keep_perf_data, full=True)
    return _offcpu(keep_perf_data, full=True)


def by_name(options: CaptureOptions, names: list[str], keep_perf_data: bool = False) -> list[Collector]:
    """Only the named collectors (``--collector``), in the default order.

    ``syscalls-trace`` / ``offcpu-trace`` run that collector as a full trace of the whole
    capture; given without any plain collector name they swap the full trace into the
    default set (``--collector syscalls-trace`` = every default collector, syscalls traced in full).
    """
    every = default_collectors(options, keep_perf_data)
    known = {c.name for c in every}
    unknown = [n for n in names if n not in known and n not in FULL_TRACE]
    if unknown:
        from profiler.errors import UsageError

        choices = sorted(known) + sorted(FULL_TRACE)
        raise UsageError(f"unknown collector {', '.join(unknown)}: choose from {', '.join(choices)}")
    full = {FULL_TRACE[n] for n in names if n in FULL_TRACE}
    plain = {n for n in names if n in known}
    wanted = (plain | full) if plain else known
    out: list[Collector] = []
    for c in every:
        if c.name not in wanted:
            continue
        if c.name in full and c.backend == "perf":
            c = _full(c.name, keep_perf_data)
        out.append(c)
    return out
