"""perf stat metrics of one target (analyzers layer): task-clock CPUs, context switches, migrations
and faults per second from stat.csv, and which counters the host could not count."""

from __future__ import annotations

from profiler.analyzers.series import perfstat
from profiler.analyzers.verdict.model import TargetMetrics


def perf_metrics(stat: perfstat.PerfStat | None, tm: TargetMetrics, single_target: bool) -> list[str]:
    """perf stat figures (stat.csv is for all targets together: attributed only when there is one);
    returns the unsupported counters."""
    if stat is None:
        return []
    if single_target:
        span = stat.span()
        tc = stat.total("task-clock")
        if tc is not None and span > 0:
            tm.perf["task_clock_cpus"] = tc / 1000.0 / span
        for ev, key in (("context-switches", "cs_rate"), ("cpu-migrations", "migrations_rate"),
                        ("page-faults", "faults_rate"), ("major-faults", "majflt_rate")):
            r = stat.rate(ev)
            if r is not None:
                tm.perf[key] = r
    return stat.unsupported
