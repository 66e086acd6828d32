"""One metrics object per target and per capture, from the bundle views (analyzers layer).

Inputs, each optional (analyzers.views reads them): the procfs samples, perf stat counters,
syscalls, block IO (per-IO events or in-kernel histograms), off-CPU futex stacks and the bcc
backend's wait totals. A missing input leaves its fields None and is listed in
``Metrics.missing``; the verdict turns that into lower confidence, never into a crash.

Each idea is its own module: thread time (threads.py), a target's procfs figures (target.py),
the host (system.py), block IO (io.py), syscalls (syscalls.py), perf stat (counters.py),
locks (locks.py), the server (server.py): each a pure function returning its own record
(model.py). This module puts them together.
"""

from __future__ import annotations

from dataclasses import replace

from profiler.analyzers.verdict.counters import perf_metrics
from profiler.analyzers.verdict.io import io_metrics, io_metrics_from_hist
from profiler.analyzers.verdict.locks import stack_evidence
from profiler.analyzers.verdict.model import (
    CounterEvidence,
    DiskMetrics,
    IOGroup,
    IOMetrics,
    LimitsEvidence,
    Metrics,
    PoolMetrics,
    ProcessEvidence,
    StackEvidence,
    SystemMetrics,
    TargetMetrics,
    ThreadEvidence,
    jsonable,
)
from profiler.analyzers.verdict.server import server_evidence
from profiler.analyzers.verdict.syscalls import syscall_metrics
from profiler.analyzers.verdict.system import system_metrics
from profiler.analyzers.verdict.target import procfs_evidence
from profiler.analyzers.views import SOURCES, BundleViews

from profiler.bundle import members
from profiler.knowledge import tidb_store


def _error(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"


def compute(views: BundleViews) -> Metrics:
    """Every target's evidence records and the capture's (host, IO), each from its own source."""
    m = views.manifest
    pd = views.proc
    host_cpus = int(m.host.cpus or (pd.host.get("ncpu") if pd else 0) or 0)
    sources = {name: views.source_status(col, files) for name, (col, files) in SOURCES.items()}
    missing = [k for k, v in sources.items() if v != "ok" and not v.startswith("partial")]
    warnings: list[str] = []  # (malformed proc.jsonl.gz lines are in the member's ReadLog: views.warnings)
    sysm = system_metrics(pd, host_cpus)
    disk_bps = sum(d.read_bps + d.write_bps for d in sysm.disks) if sysm is not None and sysm.disks else None
    targets = []
    single = len(m.targets) == 1
    unsupported: list[str] = []
    all_tids: set[int] = set()
    futex_by_tid = views.offcpu.futex if views.offcpu is not None else {}
    stacks_by_tid = views.offcpu.stacks if views.offcpu is not None else {}
    syscalls_rec = m.collector("syscalls")
    for t in m.targets:
        pe = procfs_evidence(t, pd, host_cpus, stacks_by_tid, disk_bps)
        tids = {s.tid for s in pd.threads_of(t.pid)} if pd is not None else set()
        tids |= {th.tid for th in t.threads}
        all_tids |= tids
        counters = syscall_metrics(views.syscalls, syscalls_rec, tids, pe.time.window, single)
        perf, unsup = perf_metrics(views.stat, single)
        unsupported = unsup or unsupported
        comms = {s.comm for s in pd.threads_of(t.pid)} if pd is not None else set()
        comms |= {th.comm for th in t.threads if th.comm}
        try:
            stacks = stack_evidence(pe.stacks, futex_by_tid, tids, views.waits, t.pid, comms if not single else None)
        except Exception as exc:  # noqa: BLE001 - a broken summary lowers confidence, never crashes
            warnings.append(f"futex/off-CPU summaries could not be read: {_error(exc)}")
            stacks = stack_evidence(pe.stacks, futex_by_tid, tids, None, t.pid, None)
        server = None
        try:
            server = server_evidence(views.server, views.cpu, t.pid, pe.runtime, pe.process.cpu_cores, comms | {t.comm})
            if server is not None and pe.kind == "tidb":
                server.storage = tidb_store(t.cmdline)
        except Exception as exc:  # noqa: BLE001 - what a server says is extra evidence, never a crash
            warnings.append(f"server-status evidence could not be computed: {_error(exc)}")
        targets.append(TargetMetrics(
            pid=t.pid, comm=t.comm, kind=pe.kind, runtime=pe.runtime, label=f"{t.comm} (pid {t.pid})",
            exited=pe.exited, time=pe.time, process=pe.process, limits=pe.limits, stacks=stacks,
            counters=replace(counters, perf=perf),
            server=server))
    window = max((t.time.window for t in targets), default=0.0)
    if not window and m.ended and m.clock.monotonic_start:
        window = m.ended - m.clock.monotonic_start
    io = views.io
    iom = None
    if io is not None:
        for member in (members.BLOCK_EVENTS, members.BLOCK_TRACE):
            if member in io.errors:
                warnings.append(f"{member} could not be read: {_error(io.errors[member])}")
        iom = io_metrics(io.events, all_tids, window)
        if iom is None and io.events is None:
            try:
                if members.BLOCK_HIST in io.errors:
                    raise io.errors[members.BLOCK_HIST]
                if io.hist is not None:
                    iom = io_metrics_from_hist(io.hist, all_tids, window)
            except Exception as exc:  # noqa: BLE001 - broken histograms lower confidence, never crash
                warnings.append(f"{members.BLOCK_HIST} could not be read: {_error(exc)}")
    warnings.extend(views.warnings)
    if views.server is not None:
        warnings.extend(views.server.warnings)
    return Metrics(window=window, t0=pd.t0 if pd else None, targets=targets, system=sysm, io=iom, sources=sources,
                   missing=missing, unsupported_counters=unsupported, warnings=warnings,
                   proc_hz=float(pd.host["hz"]) if pd and pd.host.get("hz") else None,
                   delayacct=(pd.host.get("task_delayacct") == 1) if pd and pd.host else None)


__all__ = ["CounterEvidence", "DiskMetrics", "IOGroup", "IOMetrics", "LimitsEvidence", "Metrics", "PoolMetrics",
           "ProcessEvidence", "StackEvidence", "SystemMetrics", "TargetMetrics", "ThreadEvidence", "compute",
           "jsonable"]
