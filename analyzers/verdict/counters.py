"""perf stat metrics of one target (analyzers layer): task-clock CPUs, context switches, migrations
and faults per second from stat.csv, and which counters the host could not count."""

from __future__ import annotations

from profiler.analyzers.series import perfstat


def perf_metrics(stat: perfstat.PerfStatSeries | None, single_target: bool) -> tuple[dict[str, float], list[str]]:
    """perf stat figures (stat.csv is for all targets together: attributed only when there is one)
    and the counters the host could not count."""
    perf: dict[str, float] = {}
    if stat is None:
        return perf, []
    if single_target:
        span = stat.span()
        tc = stat.total("task-clock")
        if tc is not None and span > 0:
            perf["task_clock_cpus"] = tc / 1000.0 / span
        for ev, key in (("context-switches", "cs_rate"), ("cpu-migrations", "migrations_rate"),
                        ("page-faults", "faults_rate"), ("major-faults", "majflt_rate")):
            r = stat.rate(ev)
            if r is not None:
                perf[key] = r
    return perf, stat.unsupported
