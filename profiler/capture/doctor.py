"""Host and target checks behind `profiler doctor` (capture layer): what can be captured, how to fix the rest.

Each check is one line: a status word (ok, warn, fail, info), what was found, and the fix.
``fail`` means a collector will be skipped; ``warn`` means it runs with less evidence.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

from profiler.collectors import cgroup_limits, containers, host
from profiler.collectors.base import Target
from profiler.collectors.bcc.common import bcc_status

OK, WARN, FAIL, INFO = "ok", "warn", "fail", "info"

SOFTWARE_EVENTS = ["cpu-clock", "task-clock", "context-switches", "cpu-migrations", "page-faults", "major-faults"]
TRACEPOINTS = [
    ("block:block_rq_issue", "block IO latency (issue)"),
    ("block:block_rq_complete", "block IO latency (completion)"),
    ("raw_syscalls:sys_enter", "syscall rates"),
    ("raw_syscalls:sys_exit", "syscall times"),
    ("sched:sched_switch", "off-CPU / blocked time"),
    ("syscalls:sys_enter_futex", "futex (lock) waits"),
]
HW_EVENTS = ["cycles", "instructions", "cache-misses"]


@dataclass
class Check:
    name: str
    status: str
    detail: str
    fix: str | None = None
    scope: str = "host"  # "host" or "pid N"

    def line(self) -> str:
        fix = f"  -> {self.fix}" if self.fix else ""
        return f"{self.status:<5} {self.name:<28} {self.detail}{fix}"


def host_checks(perf: str = "perf") -> list[Check]:
    checks: list[Check] = []
    root = host.is_root()
    checks.append(Check("user", OK if root else WARN,
                        "root" if root else f"uid {os.geteuid()}: only your own processes, no system-wide tracepoints",
                        None if root else "run profiler as root (sudo) to trace other users' processes and block IO"))

    version = host.perf_version(perf)
    perf_ok = version is not None
    checks.append(Check("perf", OK if perf_ok else FAIL,
                        f"perf {version} at {host.perf_path()}" if perf_ok else "perf not found on PATH",
                        None if perf_ok else "apt-get install linux-perf (Debian) / linux-tools-$(uname -r) (Ubuntu)"))

    paranoid = host.perf_event_paranoid()
    if paranoid is None:
        checks.append(Check("perf_event_paranoid", FAIL, "no /proc/sys/kernel/perf_event_paranoid: kernel without perf events"))
    elif root or paranoid <= 1:
        checks.append(Check("perf_event_paranoid", OK, f"{paranoid}" + (" (root is exempt)" if root and paranoid > 1 else "")))
    else:
        checks.append(Check("perf_event_paranoid", WARN,
                            f"{paranoid}: unprivileged users may profile only their own processes, user space only",
                            "sysctl -w kernel.perf_event_paranoid=1 (or run as root)"))

    kptr = host.kptr_restrict()
    if kptr is None:
        pass
    elif kptr == 0 or (kptr == 1 and root):
        checks.append(Check("kptr_restrict", OK, f"{kptr}: kernel symbols visible"))
    else:
        checks.append(Check("kptr_restrict", WARN, f"{kptr}: kernel frames will show as [unknown]",
                            "sysctl -w kernel.kptr_restrict=0 (or run as root when it is 1)"))

    # As attach does: as root, mount tracefs when it is not mounted (as perf does), then look.
    tfs, mounted = host.ensure_tracefs()
    if tfs:
        readable = os.access(os.path.join(tfs, "events"), os.R_OK | os.X_OK)
        detail = f"mounted at {tfs}" + ("" if readable else " but not readable by this user")
        if mounted:
            detail = mounted + "; attach and run do the same"
        checks.append(Check("tracefs", OK if readable else WARN, detail, None if readable else "run profiler as root (sudo)"))
    else:
        _ok, why, fix = host.tracepoint_status("sched:sched_switch")
        checks.append(Check("tracefs", FAIL, why + ": block IO, syscall and sched tracepoints unavailable", fix))

    if perf_ok:
        sw = host.perf_stat_events(SOFTWARE_EVENTS, perf)
        bad = {ev: st for ev, st in sw.items() if st != "ok"}
        checks.append(Check("software events", OK if not bad else WARN,
                            "cpu-clock, task-clock, context-switches, faults: ok" if not bad
                            else "; ".join(f"{ev}: {st}" for ev, st in bad.items())))
        hw = host.perf_stat_events(HW_EVENTS, perf)
        supported = [ev for ev, st in hw.items() if st == "ok"]
        if len(supported) == len(HW_EVENTS):
            checks.append(Check("hardware counters", OK, "cycles, instructions, cache-misses supported"))
        else:
            detail = ", ".join(f"{ev}: {st}" for ev, st in hw.items())
            checks.append(Check("hardware counters", INFO,
                                f"{detail} (usual in VMs); IPC and cache-miss metrics will be left out",
                                "none needed; on bare metal or with a vPMU they are counted"))

    for event, purpose in TRACEPOINTS:
        # the same answer the collectors' probes give (collectors/host.py tracepoint_status)
        ok, why, fix = host.tracepoint_status(event)
        checks.append(Check(event, OK, f"present ({purpose})") if ok else Check(event, FAIL, f"{why} ({purpose})", fix))

    checks.append(Check("kprobes", OK if host.kprobes_available() else INFO,
                        "available" if host.kprobes_available()
                        else "not built into this kernel: tracepoint-based collectors are used instead"))
    checks.append(Check("uprobes", OK if host.uprobes_available() else INFO,
                        "available" if host.uprobes_available() else "not available"))

    delay = host.task_delayacct()
    if delay is None:
        checks.append(Check("task_delayacct", INFO, "not in this kernel: per-thread IO delay unavailable"))
    elif delay:
        checks.append(Check("task_delayacct", OK, "on: per-thread block-IO delay is counted"))
    else:
        checks.append(Check("task_delayacct", OK if root else WARN,
                            "off: captures turn it on for their duration and put it back" if root
                            else "off, and only root can turn it on",
                            None if root else "sysctl -w kernel.task_delayacct=1"))

    checks.append(Check("PSI", OK if host.psi_available() else INFO,
                        "/proc/pressure present" if host.psi_available() else "no /proc/pressure: pressure stall info unavailable",
                        None if host.psi_available() else "boot with psi=1"))
    cgv = host.cgroup_version()
    checks.append(Check("cgroups", OK if cgv else INFO, f"cgroup v{cgv}" if cgv else "no cgroup filesystem found"))

    # The same check `--backend auto` uses: bcc importable, headers, a tracepoint program loads.
    ok, reason, bcc_fix = bcc_status()
    checks.append(Check("bcc backend", OK if ok else INFO,
                        reason + ("" if ok else ": the perf backend is used"), None if ok else bcc_fix))
    return checks


def target_checks(target: Target) -> list[Check]:
    scope = f"pid {target.pid}"
    checks: list[Check] = []
    kind = target.kind
    checks.append(Check("target", OK, f"{target.comm} (pid {target.pid})" + (f": recognised as {kind}" if kind else ""),
                        scope=scope))
    if not os.path.exists(f"/proc/{target.pid}"):
        checks.append(Check("target alive", FAIL, "the process has exited", scope=scope))
        return checks
    cg = cgroup_limits.target_cgroup(target.pid)
    cores = cgroup_limits.cpu_quota_cores(cg)
    ncpu = os.cpu_count() or 1
    allowed = host.cpus_allowed(target.pid)
    cpu_detail = f"quota {cores:.2f} cores" if cores else "no CFS quota"
    cpu_detail += f", {len(allowed) or ncpu} of {ncpu} CPUs allowed"
    pinned = allowed and len(allowed) < ncpu
    if pinned:
        by = "cpuset" if set(allowed) >= set(cg.get("cpuset_cpus") or [-1]) else "affinity"
        cpu_detail += f" (pinned to CPU{'s' if len(allowed) > 1 else ''} {','.join(map(str, allowed))} by {by})"
    checks.append(Check("cpu limit", WARN if (cores and cores < ncpu) or pinned else OK, cpu_detail, scope=scope))
    mem = cg.get("memory_limit_bytes")
    checks.append(Check("memory limit", WARN if mem else OK,
                        f"{mem / 2**20:.0f} MiB" if mem else "none", scope=scope))
    thr = cg.get("blkio_throttle") or {}
    if thr:
        parts = [f"{k} {dev}={v}" for k, d in sorted(thr.items()) for dev, v in sorted(d.items())]
        checks.append(Check("blkio throttle", WARN, ", ".join(parts), scope=scope))
    elif cg.get("io_max"):
        checks.append(Check("io.max", WARN, cg["io_max"], scope=scope))
    else:
        checks.append(Check("blkio throttle", OK, "none", scope=scope))
    ci = containers.info(target.pid)
    if ci is not None:
        where = f"{ci.runtime} container {ci.name or ci.id[:12]}" + (f" (pod {ci.namespace}/{ci.pod})" if ci.pod else "")
        checks.append(Check("container", WARN, f"{where}, id {ci.id[:12]}, cgroup {ci.cgroup}: its limits above are "
                            f"the container's; symbols resolved through /proc/{target.pid}/root",
                            "keep the container running until the capture has finished symbolizing", scope=scope))
    elif host.in_container(target.pid):
        hint = host.container_hint(target.pid)
        checks.append(Check("container", WARN,
                            f"in another mount namespace{f' ({hint})' if hint else ''}: symbols resolved through /proc/{target.pid}/root",
                            "keep the container running until the capture has finished symbolizing", scope=scope))
    else:
        checks.append(Check("container", OK, "same mount namespace as profiler", scope=scope))
    return checks


def summary(checks: list[Check]) -> dict[str, Any]:
    return {
        "checks": [asdict(c) for c in checks],
        "failed": sum(c.status == FAIL for c in checks),
        "warnings": sum(c.status == WARN for c in checks),
    }
