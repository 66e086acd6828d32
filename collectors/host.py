"""Facts about this host and a target process (collectors layer): perf, tracefs, events, cgroups, namespaces.

Everything here reads, except ``ensure_tracefs``: as root it mounts tracefs when it is not
mounted, as perf does. ``profiler doctor`` and the collectors' ``probe()`` share these checks
(``tracepoint_status`` is the one answer to "can this tracepoint be used, and if not, why and
what fixes it") so that what doctor says is what a capture will do.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import platform
import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

from profiler.bundle import HostInfo, TargetInfo, ThreadInfo

TRACEFS_CANDIDATES = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
MOUNT_TRACEFS = "mount -t tracefs nodev /sys/kernel/tracing"
UNLIMITED = 1 << 60  # cgroup v1 memory limits above this mean "no limit"


def read_text(path: str | Path, default: str | None = None) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return default


def read_int(path: str | Path) -> int | None:
    text = read_text(path)
    if text is None:
        return None
    try:
        return int(text.split()[0])
    except (ValueError, IndexError):
        return None


# --------------------------------------------------------------------------- perf


def perf_path() -> str | None:
    return shutil.which("perf")


@functools.lru_cache(maxsize=4)
def perf_version(perf: str = "perf") -> str | None:
    exe = shutil.which(perf)
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"version\s+(\S+)", out)
    return m.group(1) if m else (out.strip() or None)


def perf_stat_events(events: list[str], perf: str = "perf", system_wide: bool = False) -> dict[str, str]:
    """Ask perf whether each event can be counted here: 'ok', 'not supported' or an error word.

    Runs ``perf stat -x, -e EV... -- true`` once; hardware counters in a VM come back
    ``<not supported>``.
    """
    exe = shutil.which(perf)
    if not exe:
        return {ev: "perf missing" for ev in events}
    result: dict[str, str] = {}
    # One perf run for all events; perf stat -x, prints "value,unit,event,..." per event.
    argv = [exe, "stat", "-x,", "-e", ",".join(events)] + (["-a"] if system_wide else []) + ["--", "true"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=15)
        if proc.returncode == 0:
            for line in proc.stderr.splitlines():
                fields = line.split(",")
                if len(fields) >= 3 and fields[2] in events:
                    value = fields[0]
                    result[fields[2]] = (
                        "not supported" if value == "<not supported>"
                        else "not counted" if value == "<not counted>" else "ok"
                    )
            if len(result) == len(events):
                return result
    except (OSError, subprocess.SubprocessError):
        pass
    result = {}
    for ev in events:  # one at a time, to tell which event broke the batch
        argv = [exe, "stat", "-x,", "-e", ev]
        if system_wide:
            argv.append("-a")
        argv += ["--", "true"]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=15)
        except (OSError, subprocess.SubprocessError) as exc:
            result[ev] = f"error: {exc}"
            continue
        err = proc.stderr
        if "<not supported>" in err:
            result[ev] = "not supported"
        elif proc.returncode != 0:
            lines = [ln for ln in err.splitlines() if ln.strip()]
            msg = lines[0] if lines else f"exit {proc.returncode}"
            if "ermission" in err or "paranoid" in err:
                msg = "permission denied"
            elif "event syntax error" in err or "unknown tracepoint" in err or "not found" in err:
                msg = "not available"
            result[ev] = msg
        elif "<not counted>" in err:
            result[ev] = "not counted"
        else:
            result[ev] = "ok"
    return result


def hw_counters_supported(perf: str = "perf") -> bool:
    return perf_stat_events(["cycles"], perf).get("cycles") == "ok"


def perf_event_paranoid() -> int | None:
    return read_int("/proc/sys/kernel/perf_event_paranoid")


def kptr_restrict() -> int | None:
    return read_int("/proc/sys/kernel/kptr_restrict")


def is_root() -> bool:
    return os.geteuid() == 0


def nested_pid_namespace() -> bool:
    """True when this process runs in a PID namespace below the host's (a container, the
    namespaced hosts of the cluster tests): kernel threads are visible only from the host's.

    Tracepoint fields (``prev_pid``, ``next_pid``, ``common_pid``) then hold the host's thread
    ids, which differ from the ids this process sees; perf's own sample ids are translated into
    this namespace. The off-CPU and syscall collectors filter and map accordingly."""
    try:
        with open("/proc/2/comm") as fh:
            return fh.read().strip() != "kthreadd"
    except OSError:
        return True


# --------------------------------------------------------------------------- tracefs


def tracefs_mounts() -> list[str]:
    """Where tracefs is mounted, from /proc/mounts (readable by anyone)."""
    text = read_text("/proc/mounts") or ""
    return [f[1] for f in (ln.split() for ln in text.splitlines()) if len(f) > 2 and f[2] == "tracefs"]


def tracefs_path() -> str | None:
    """The mounted, readable tracefs directory, or None."""
    for cand in TRACEFS_CANDIDATES:
        if os.path.isfile(os.path.join(cand, "available_events")) or os.path.isdir(os.path.join(cand, "events")):
            return cand
    return None


_mount_error: str | None = None  # why the last ensure_tracefs() could not mount, if it tried
_mounted_note: str | None = None  # what this process mounted, said by every later ensure_tracefs()


def _mount(source: str, target: str, fstype: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(source.encode(), target.encode(), fstype.encode(), 0, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount -t {fstype} {source} {target}: {os.strerror(err)}")


def ensure_tracefs() -> tuple[str | None, str | None]:
    """The readable tracefs directory, mounting it first when it is not mounted and we are root,
    as perf does (tools/lib/api/fs/tracing_path.c): tracefs at /sys/kernel/tracing, else debugfs
    at /sys/kernel/debug and its tracing/ directory. Returns (path or None, what was done or None)."""
    global _mount_error, _mounted_note
    path = tracefs_path()
    if path is not None or not is_root():
        # mounted by an earlier call of this process (bcc's check runs before the session): say it again
        return path, _mounted_note if path is not None else None
    errors = []
    for source, target, fstype, sub in (("nodev", "/sys/kernel/tracing", "tracefs", ""),
                                        ("nodev", "/sys/kernel/debug", "debugfs", "tracing")):
        if fstype == "debugfs" and any(f[2] == "debugfs" for f in _mounts()):
            continue  # debugfs is there and tracing/ still is not readable: mounting it again will not help
        try:
            _mount(source, target, fstype)
        except OSError as exc:
            errors.append(exc.strerror or str(exc))
            continue
        path = tracefs_path()
        if path is not None:
            _mount_error = None
            if not sub:
                _mounted_note = f"tracefs was not mounted: mounted it at {target} (as perf does)"
            else:
                _mounted_note = (f"tracefs was not mounted: mounted debugfs at {target} (as perf does); "
                                 f"tracing is at {path}")
            return path, _mounted_note
    _mount_error = "; ".join(errors) or "no tracing directory appeared"
    return None, None


def _mounts() -> list[list[str]]:
    text = read_text("/proc/mounts") or ""
    return [ln.split() for ln in text.splitlines() if len(ln.split()) > 2]


def tracepoint_status(event: str) -> tuple[bool, str, str | None]:
    """Can this tracepoint be used here? (ok, why not, the fix): the one answer doctor and every
    collector's probe give."""
    root = tracefs_path()
    if root is None:
        mounts = tracefs_mounts()
        if mounts:
            return False, f"permission denied: tracefs is mounted at {mounts[0]} but only root can read it", \
                "run profiler as root (sudo)"
        if is_root():
            return False, f"tracefs is not mounted, and mounting it failed ({_mount_error or 'not tried'})", \
                MOUNT_TRACEFS + " (needs a kernel with CONFIG_TRACING)"
        return False, "tracefs is not mounted (profiler mounts it when run as root, as perf does)", \
            "run profiler as root (sudo), or as root: " + MOUNT_TRACEFS
    if not os.access(os.path.join(root, "events"), os.R_OK | os.X_OK):
        return False, f"permission denied: {root}/events is readable by root only", "run profiler as root (sudo)"
    if ":" in event and not tracepoint_available(event):
        group = event.split(":", 1)[0]
        return False, f"tracepoint {event} is not in this kernel", \
            f"a kernel built with the {group} tracepoints (every Debian/Ubuntu/RHEL kernel has them)"
    return True, "", None


def tracepoint_available(event: str) -> bool:
    """'block:block_rq_issue' -> is there an events/block/block_rq_issue directory in tracefs."""
    root = tracefs_path()
    if root is None or ":" not in event:
        return False
    group, name = event.split(":", 1)
    if name == "*":
        return os.path.isdir(os.path.join(root, "events", group))
    return os.path.isdir(os.path.join(root, "events", group, name))


def kprobes_available() -> bool:
    root = tracefs_path()
    return bool(root) and os.path.exists(os.path.join(root, "kprobe_events"))  # type: ignore[arg-type]


def uprobes_available() -> bool:
    root = tracefs_path()
    return bool(root) and os.path.exists(os.path.join(root, "uprobe_events"))  # type: ignore[arg-type]


def task_delayacct() -> int | None:
    return read_int("/proc/sys/kernel/task_delayacct")


def psi_available() -> bool:
    return os.path.isfile("/proc/pressure/cpu")


# --------------------------------------------------------------------------- cgroups


def cgroup_version() -> int | None:
    if os.path.isfile("/sys/fs/cgroup/cgroup.controllers"):
        return 2
    if os.path.isdir("/sys/fs/cgroup/cpu") or os.path.isdir("/sys/fs/cgroup/memory"):
        return 1
    return None


def cgroup_paths(pid: int) -> dict[str, str]:
    """controller -> cgroup path for a process (v1: per controller; v2: key '' )."""
    out: dict[str, str] = {}
    text = read_text(f"/proc/{pid}/cgroup")
    if text is None:
        return out
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, ctrls, path = parts
        for c in ctrls.split(",") if ctrls else [""]:
            out[c] = path
    return out


def read_kv_ints(path: str | Path) -> dict[str, int]:
    """A ``key value`` file (cpu.stat, memory.stat, /proc/vmstat, blkio throttle limits): the lines
    of two words whose value is an integer; others are skipped, a missing file is empty."""
    out: dict[str, int] = {}
    for line in (read_text(path) or "").splitlines():
        parts = line.split()
        if len(parts) == 2:
            with contextlib.suppress(ValueError):
                out[parts[0]] = int(parts[1])
    return out


# --------------------------------------------------------------------------- namespaces


def _ns(pid: int | str, kind: str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return None


def in_container(pid: int) -> bool:
    """Is the target in another mount namespace (its files, and so its symbols, live elsewhere)?"""
    mine, theirs = _ns("self", "mnt"), _ns(pid, "mnt")
    return bool(mine and theirs and mine != theirs)


def container_hint(pid: int) -> str | None:
    text = read_text(f"/proc/{pid}/cgroup") or ""
    for word in ("docker", "kubepods", "containerd", "libpod", "lxc"):
        if word in text:
            return word
    return None


# --------------------------------------------------------------------------- targets


def threads_of(pid: int) -> list[ThreadInfo]:
    out: list[ThreadInfo] = []
    try:
        tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return out
    for tid in tids:
        comm = read_text(f"/proc/{pid}/task/{tid}/comm")
        if comm is not None:
            out.append(ThreadInfo(tid=tid, comm=comm))
    return out


def cpus_allowed(pid: int) -> list[int]:
    try:
        return sorted(os.sched_getaffinity(pid))
    except OSError:
        return []


def target_info(pid: int, comm: str, exe: str | None, cmdline: list[str], kind: str | None) -> TargetInfo:
    """Everything the manifest records about a target, read at capture start."""
    from profiler.collectors import cgroup_limits, containers  # read once per target
    from profiler.collectors.runtime import (
        detect as runtime,  # the ELF readers load only when a capture starts
    )

    container = in_container(pid)
    rt = runtime.detect(pid)
    return TargetInfo(
        pid=pid,
        comm=comm,
        exe=exe,
        cmdline=list(cmdline),
        kind=kind,
        runtime=rt.name if rt is not None else None,
        runtime_info=rt,
        threads=threads_of(pid),
        cgroup=cgroup_limits.target_cgroup(pid),
        cpus_allowed=cpus_allowed(pid),
        root=f"/proc/{pid}/root" if container else None,
        container=container,
        container_info=containers.info(pid),
    )


# --------------------------------------------------------------------------- host


def memory_total() -> int:
    text = read_text("/proc/meminfo") or ""
    m = re.search(r"^MemTotal:\s+(\d+) kB", text, re.M)
    return int(m.group(1)) * 1024 if m else 0


def host_info(capabilities: dict[str, Any] | None = None) -> HostInfo:
    uname = platform.uname()
    return HostInfo(
        hostname=socket.gethostname(),
        kernel=uname.release,
        machine=uname.machine,
        cpus=os.cpu_count() or 0,
        memory_bytes=memory_total(),
        perf_version=perf_version(),
        cgroup_version=cgroup_version(),
        capabilities=dict(capabilities or {}),
    )
