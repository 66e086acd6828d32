"""A private tracefs instance (collectors layer): made by one capture, removed at its stop, at exit, and when a killed profiler left one.

``instances/profiler-<pid>-s<start ticks>-<n>[-ns<pid namespace>]``: the name says whose it is,
even after the pid was reused, so a capture removes only the instances of profilers that are
gone, never another running capture's (nor the global buffer other tools use). The block-io
collector (blockio.py) traces into one; the session sweeps stale ones at start.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import re
import shutil
import time

from profiler.collectors.tracefs.counting import parse_cpu_stats

TOTAL_BUFFER_MB = 64  # ring buffer budget over all CPUs; the reader drains it continuously
INSTANCE_PREFIX = "profiler-"
# profiler-<pid>-s<its start time, clock ticks since boot>-<n>[-ns<pid namespace>]: whose it is, even
# after the pid was reused (names without the start time come from older versions)
_STALE = re.compile(r"^profiler-(\d+)-(?:s(\d+)-)?(\d+)(?:-ns(\d+))?$")


def start_ticks(pid: int | str) -> int | None:
    """When the process started (field 22 of /proc/PID/stat, clock ticks since boot), None when gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
        return int(stat[stat.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def instance_name(seq: int) -> str:
    """This process's next instance name: its pid and start time, so that another profiler can
    tell it from one a killed profiler left (whose pid may have been reused meanwhile)."""
    ns = _pidns_tag()
    return f"{INSTANCE_PREFIX}{os.getpid()}-s{start_ticks('self') or 0}-{seq}" + (f"-ns{ns}" if ns else "")


def stale_instances(root: str) -> list[str]:
    """Instances a killed profiler left behind: its process is gone (no such pid, or that pid is
    another process now, started at another time). Every other instance is someone's running capture."""
    out = []
    with contextlib.suppress(OSError):
        for name in os.listdir(os.path.join(root, "instances")):
            m = _STALE.match(name)
            # tracefs is one per kernel: only our own PID namespace's instances can be judged by pid
            if not m or m.group(4) != _pidns_tag():
                continue
            started = start_ticks(m.group(1))
            if started is None or (m.group(2) is not None and started != int(m.group(2))):
                out.append(os.path.join(root, "instances", name))
    return out


def remove_stale_instances(root: str | None) -> list[str]:
    """Remove what :func:`stale_instances` finds (root only); the names removed."""
    gone = []
    for path in stale_instances(root) if root else []:
        with contextlib.suppress(OSError):
            os.rmdir(path)
            gone.append(os.path.basename(path))
    return gone


def _pidns_tag() -> str | None:
    """None in the host's PID namespace; else the namespace's inode, so profilers in several
    namespaces (containers, the namespaced hosts of the cluster tests) sharing one kernel's
    tracefs neither take each other's instance names nor remove each other's instances."""
    from profiler.collectors import host

    if not host.nested_pid_namespace():
        return None
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return None


class TracefsInstance:
    """A private ftrace instance: created, configured, and always removed."""

    def __init__(self, root: str, name: str) -> None:
        self.root = root
        self.path = os.path.join(root, "instances", name)
        self.created = False

    def create(self) -> None:
        os.mkdir(self.path)
        self.created = True
        atexit.register(self.remove)

    def write(self, rel: str, value: str) -> None:
        with open(os.path.join(self.path, rel), "w") as fh:
            fh.write(value)

    def read(self, rel: str) -> str:
        with open(os.path.join(self.path, rel)) as fh:
            return fh.read()

    def has(self, rel: str) -> bool:
        return os.path.exists(os.path.join(self.path, rel))

    def entries(self) -> int:
        """Events still waiting in the ring buffer, over every CPU."""
        n = 0
        with contextlib.suppress(OSError):
            for cpu in os.listdir(os.path.join(self.path, "per_cpu")):
                with contextlib.suppress(OSError):
                    n += parse_cpu_stats(self.read(f"per_cpu/{cpu}/stats")).get("entries", 0)
        return n

    def lost(self) -> int:
        """Events the ring buffer overwrote or dropped, over every CPU."""
        n = 0
        with contextlib.suppress(OSError):
            for cpu in os.listdir(os.path.join(self.path, "per_cpu")):
                with contextlib.suppress(OSError):
                    st = parse_cpu_stats(self.read(f"per_cpu/{cpu}/stats"))
                    n += st.get("overrun", 0) + st.get("dropped events", 0)
        return n

    def remove(self) -> None:
        if not self.created:
            return
        with contextlib.suppress(OSError):
            self.write("tracing_on", "0")
        with contextlib.suppress(OSError):
            for ev in os.listdir(os.path.join(self.path, "events", "block")):
                p = os.path.join(self.path, "events", "block", ev, "enable")
                if os.path.exists(p):
                    with contextlib.suppress(OSError), open(p, "w") as fh:
                        fh.write("0")
        for _ in range(20):
            try:
                os.rmdir(self.path)
                break
            except FileNotFoundError:
                break
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    break
                time.sleep(0.05)  # a reader still has trace_pipe open
        self.created = os.path.exists(self.path)
        if not self.created:
            with contextlib.suppress(Exception):
                atexit.unregister(self.remove)


def tool(name: str) -> str | None:
    """A coreutils-level helper (cat, gzip): from PATH, else where Debian keeps it."""
    found = shutil.which(name)
    if found:
        return found
    for d in ("/usr/bin", "/bin"):
        if os.access(os.path.join(d, name), os.X_OK):
            return os.path.join(d, name)
    return None


def buffer_kb_per_cpu(ncpu: int, total_mb: int = TOTAL_BUFFER_MB) -> int:
    """Per-CPU ring size: a total budget spread over the CPUs, 1 to 32 MiB each (the in-process
    reader may be held up by the interpreter's lock for a moment: 8 MiB, 0.7 s of events at
    97K IOPS on the CPU taking the interrupts, overran once here)."""
    return max(1024, min(32768, total_mb * 1024 // max(1, ncpu)))
