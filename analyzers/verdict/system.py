"""Host-wide metrics from the procfs sampler's system series (analyzers layer): CPU busy and
iowait shares, pressure stall (PSI), memory and swap, disks, and the other processes that use
the most CPU (the neighbours that take it when a target waits for one)."""

from __future__ import annotations

from profiler.analyzers.series import procfs as procmod
from profiler.analyzers.verdict.model import DiskMetrics, SystemMetrics


def system_metrics(pd: procmod.ProcData | None, host_cpus: int) -> SystemMetrics | None:
    if pd is None or pd.system is None or len(pd.system.t) < 2:
        return None
    s = pd.system
    span = float(s.t[-1] - s.t[0])
    deltas = {k: s.delta(f"cpu.{k}") or 0.0 for k in
              ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")}
    tot = sum(deltas.values())
    cpu: dict[str, float | None] = {"cpu_util": None, "iowait": None, "steal": None}
    if tot > 0:
        busy = tot - deltas["idle"] - deltas["iowait"]
        cpu = {"cpu_util": busy / tot, "iowait": deltas["iowait"] / tot, "steal": deltas["steal"] / tot}
    psi: dict[str, float] = {}
    for res in ("cpu", "io", "memory"):
        for kind_ in ("some", "full"):
            d = s.delta(f"psi.{res}.{kind_}_total")
            if d is not None and span > 0:
                psi[f"{res}_{kind_}"] = 100.0 * d / 1e6 / span
    mem_total = s.last("mem.total")
    av = s.mean("mem.available")
    si, so = s.rate("vm.pswpin"), s.rate("vm.pswpout")
    return SystemMetrics(
        ncpu=int(s.last("ncpu") or host_cpus or 0), **cpu,
        procs_blocked=s.mean("procs_blocked"), procs_running=s.mean("procs_running"), psi=psi,
        mem_total=mem_total, mem_available_share=av / mem_total if av is not None and mem_total else None,
        swap_used=s.last("mem.swap_used"),
        swap_io_rate=(si or 0.0) + (so or 0.0) if si is not None or so is not None else None,
        majflt_rate=s.rate("vm.pgmajfault"), direct_reclaim_rate=s.rate("vm.pgscan_direct"),
        disks=disk_metrics(s), neighbours=neighbours(pd))


def disk_metrics(s: procmod.Series) -> list[DiskMetrics]:
    """Each block device's utilisation, IOPS, bytes/s, await and queue (/proc/diskstats), busiest first."""
    out = []
    for disk in s.names_under("disks"):
        def r(f: str, disk: str = disk) -> float:
            return s.rate(f"disks.{disk}.{f}") or 0.0
        ios = r("reads") + r("writes")
        waited = r("read_ms") + r("write_ms")
        out.append(DiskMetrics(
            name=disk, util=min(1.0, r("io_ticks_ms") / 1000.0), iops=ios, read_iops=r("reads"), write_iops=r("writes"),
            read_bps=r("read_sectors") * 512, write_bps=r("write_sectors") * 512,
            await_ms=(waited / ios) if ios > 0 else None, queue_depth=r("time_in_queue_ms") / 1000.0))
    out.sort(key=lambda x: (-x.iops, x.name))
    return out


def neighbours(pd: procmod.ProcData, limit: int = 5) -> list[tuple[str, int, float]]:
    """The processes other than the targets that used the most CPU over the capture (cores),
    from the sampler's ``top`` records (each lists the top users since the previous one)."""
    if not pd.top:
        return []
    clk = float(pd.clk_tck or 100)
    span = sum(float(r.get("dt") or 0.0) for r in pd.top)
    if span <= 0:
        return []
    used: dict[tuple[int, str], float] = {}
    for r in pd.top:
        for row in r.get("procs") or []:
            try:
                pid, comm, ticks = int(row[0]), str(row[1]), float(row[2])
            except (TypeError, ValueError, IndexError):
                continue
            used[(pid, comm)] = used.get((pid, comm), 0.0) + ticks / clk
    best = sorted(used.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
    return [(comm, pid, secs / span) for (pid, comm), secs in best if secs / span >= 0.01]
