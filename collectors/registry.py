"""The collectors a capture runs by default (capture layer): one small, obvious list."""

from __future__ import annotations

from profiler.collectors.base import CaptureOptions, Collector
from profiler.collectors.bcc_backend import choose, with_backend
from profiler.collectors.blockio import BlockIO
from profiler.collectors.cpu_stacks import CpuStacks
from profiler.collectors.offcpu import OffCpu
from profiler.collectors.perf_stat import PerfStat
from profiler.collectors.procfs import ProcfsCollector
from profiler.collectors.syscalls import Syscalls


def default_collectors(options: CaptureOptions, keep_perf_data: bool = False) -> list[Collector]:
    """Every collector, in start order; the session probes each and skips what cannot run here.

    ``options.backend`` bcc (or auto where bcc works) swaps in the bcc collectors of the same
    names and adds futex-waits (collectors/bcc_backend.py).
    """
    perf: list[Collector] = [
        PerfStat(),
        ProcfsCollector(),
        CpuStacks(keep_perf_data),
        OffCpu(keep_perf_data),
        BlockIO(),
        Syscalls(keep_perf_data),
    ]
    chosen, _used, _why = with_backend(perf, options.backend)
    return chosen


def backend_choice(options: CaptureOptions) -> tuple[str, str]:
    """(backend used, why) for the manifest's options: what --backend auto decided."""
    return choose(options.backend)


def by_name(options: CaptureOptions, names: list[str], keep_perf_data: bool = False) -> list[Collector]:
    """Only the named collectors (``--collectors``), in the default order."""
    every = default_collectors(options, keep_perf_data)
    known = {c.name for c in every}
    unknown = [n for n in names if n not in known]
    if unknown:
        from profiler.errors import UsageError

        raise UsageError(f"unknown collector {', '.join(unknown)}: choose from {', '.join(sorted(known))}")
    return [c for c in every if c.name in names]
