"""Target resolution for ``--pid`` (capture layer): names and numbers to live processes.

Rules, in order, for each ``--pid`` value:

1. digits: that pid (it must exist and be a process, not a thread of another);
2. a name: every process whose comm equals it; if none, whose executable's basename equals it;
   if none, whose comm or executable basename contains it (``tikv`` finds ``tikv-server``);
   if none, the processes of the container it names (as ``--container`` does); if none, whose
   command line contains it. Several matches mean several targets.

``--container NAME|ID`` (and a ``--pid`` name no process has) takes every process of a running
container: docker, podman, containerd or a Kubernetes pod's, found through the processes' cgroup
paths and named by the runtime's state on disk (collectors/containers/), by its name, a
Kubernetes ``[NAMESPACE/]POD[/CONTAINER]``, its id or a unique id prefix.

The profiler itself and its ancestors (the shell, sudo) never match: their command lines
contain the name being searched for. ``Target`` itself lives with the collectors, which
capture it (collectors/base.py).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable

try:
    import psutil
except ImportError:  # a remote host of a cluster capture may have only python3: read /proc ourselves
    psutil = None  # type: ignore[assignment]

from profiler.collectors import containers as ctr
from profiler.collectors.base import Target
from profiler.errors import TargetError

__all__ = ["Target", "closest", "match_name", "resolve", "resolve_container", "target_from_pid"]


def _pid_max() -> int:
    try:
        with open("/proc/sys/kernel/pid_max") as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return 4194304


def _excluded() -> set[int]:
    """Our own pid and our ancestors."""
    out = {os.getpid()}
    if psutil is None:
        pid = os.getpid()
        while pid > 1:
            out.add(pid)
            pid = _proc_ppid(pid)
        return out
    try:
        p: psutil.Process | None = psutil.Process()
        while p is not None:
            out.add(p.pid)
            p = p.parent()
    except (psutil.Error, OSError):
        pass
    return out


def _snapshot(excluded: set[int]) -> list[tuple[int, str, str | None, tuple[str, ...]]]:
    procs = []
    if psutil is None:
        for name in os.listdir("/proc"):
            if name.isdigit() and int(name) not in excluded:
                info = _proc_info(int(name))
                if info is not None:
                    procs.append((int(name), info[0], info[1], info[2]))
        return procs
    for p in psutil.process_iter(["pid", "name", "exe", "cmdline"]):
        info = p.info
        if info["pid"] in excluded:
            continue
        cmd = tuple(info.get("cmdline") or ())
        procs.append((info["pid"], info.get("name") or "", info.get("exe") or None, cmd))
    return procs


def target_from_pid(pid: int, query: str | None = None) -> Target:
    if pid <= 0:
        raise TargetError(f"invalid pid {pid}: pids are positive numbers")
    if pid > _pid_max():
        raise TargetError(f"invalid pid {pid}: above this host's pid_max ({_pid_max()})")
    if psutil is None:
        info = _proc_info(pid)
        if info is None:
            raise TargetError(f"no process with pid {pid}")
        comm, exe, cmd, state = info[0], info[1], info[2], info[3]
        if state == "Z":
            raise TargetError(f"pid {pid} ({comm}) has exited (zombie)")
        _check_leader(pid)
        return Target(pid=pid, comm=comm, exe=exe, cmdline=cmd, matched_by="pid", query=query or str(pid))
    try:
        p = psutil.Process(pid)
        with p.oneshot():
            comm = p.name()
            try:
                exe = p.exe() or None
            except (psutil.AccessDenied, psutil.ZombieProcess, OSError):
                exe = None
            try:
                cmd = tuple(p.cmdline())
            except (psutil.AccessDenied, psutil.ZombieProcess, OSError):
                cmd = ()
            if p.status() == psutil.STATUS_ZOMBIE:
                raise TargetError(f"pid {pid} ({comm}) has exited (zombie)")
    except psutil.NoSuchProcess:
        raise TargetError(f"no process with pid {pid}") from None
    except psutil.AccessDenied:
        raise TargetError(f"permission denied inspecting pid {pid}: run as root") from None
    _check_leader(pid)
    return Target(pid=pid, comm=comm, exe=exe, cmdline=cmd, matched_by="pid", query=query or str(pid))


def _check_leader(pid: int) -> None:
    """A tid of a thread that is not a thread-group leader is not a process target."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("Tgid:"):
                    tgid = int(line.split()[1])
                    if tgid != pid:
                        raise TargetError(f"{pid} is a thread of process {tgid}; pass --pid {tgid}")
                    break
    except OSError:
        pass


def _proc_ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
        return int(stat[stat.rindex(b")") + 2:].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _proc_info(pid: int) -> tuple[str, str | None, tuple[str, ...], str] | None:
    """(comm, exe, cmdline, state) from /proc, as psutil would give them; None if it is gone."""
    try:
        with open(f"/proc/{pid}/comm", "rb") as fh:
            comm = fh.read().decode(errors="replace").rstrip("\n")
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
        state = stat[stat.rindex(b")") + 2:].split()[0].decode()
    except (OSError, ValueError, IndexError):
        return None
    try:
        exe: str | None = os.readlink(f"/proc/{pid}/exe") or None
    except OSError:
        exe = None
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = tuple(a.decode(errors="replace") for a in fh.read().split(b"\0") if a)
    except OSError:
        cmd = ()
    return comm, exe, cmd, state


def _base(path: str | None) -> str:
    return path.rsplit("/", 1)[-1] if path else ""


def match_name(query: str, procs: list[tuple[int, str, str | None, tuple[str, ...]]]) -> tuple[str, list[int]]:
    """Apply the name rules to a process snapshot; returns (rule, pids)."""
    tiers: list[tuple[str, Callable[[str, str | None, tuple[str, ...]], bool]]] = [
        ("comm", lambda c, e, a: c == query or (len(query) > 15 and c == query[:15])),
        ("exe", lambda c, e, a: _base(e) == query or (bool(a) and _base(a[0]) == query)),
        ("name-substring", lambda c, e, a: query in c or query in _base(e)),
        ("cmdline", lambda c, e, a: bool(a) and query in " ".join(a)),
    ]
    for rule, pred in tiers:
        pids = sorted(pid for pid, comm, exe, cmd in procs if pred(comm, exe, cmd))
        if pids:
            return rule, pids
    return "", []


def closest(query: str, procs: list[tuple[int, str, str | None, tuple[str, ...]]], n: int = 3) -> list[str]:
    names: dict[str, int] = {}
    for pid, comm, exe, _ in procs:
        for nm in {comm, _base(exe)}:
            if nm:
                names.setdefault(nm, pid)
    best = difflib.get_close_matches(query, list(names), n=n, cutoff=0.5)
    return [f"{nm} (pid {names[nm]})" for nm in best]


def resolve(queries: list[str], containers: list[str] | None = None) -> list[Target]:
    """Resolve every ``--pid`` and ``--container`` value; raises TargetError with a one-line reason."""
    if not queries and not containers:
        raise TargetError("no target given: pass --pid NAME, --pid PID or --container NAME")
    targets: dict[int, Target] = {}
    procs: list[tuple[int, str, str | None, tuple[str, ...]]] | None = None
    running: list[ctr.Container] | None = None
    for raw in containers or []:
        q = raw.strip()
        if not q:
            raise TargetError("empty --container value")
        running = running if running is not None else ctr.running()
        for t in resolve_container(q, running):
            targets.setdefault(t.pid, t)
    for raw in queries:
        q = raw.strip()
        if not q:
            raise TargetError("empty --pid value")
        if q.lstrip("-").isdigit():
            t = target_from_pid(int(q), q)
            targets.setdefault(t.pid, t)
            continue
        if procs is None:
            procs = _snapshot(_excluded())
        rule, pids = match_name(q, procs)
        if rule in ("", "cmdline"):
            # a container's name (docker run --name tikv1) before a word somewhere in a command line
            running = running if running is not None else ctr.running()
            if ctr.match(q, running)[1]:
                for t in resolve_container(q, running):
                    targets.setdefault(t.pid, t)
                continue
        if not pids:
            near = closest(q, procs)
            hint = f"; closest: {', '.join(near)}" if near else ""
            raise TargetError(f"no running process matches {q!r}{hint}")
        for pid in pids:
            try:
                t = target_from_pid(pid, q)
            except TargetError:
                continue  # it exited between the snapshot and now
            targets.setdefault(pid, Target(t.pid, t.comm, t.exe, t.cmdline, rule, q))
        if not any(t.query == q for t in targets.values()) and not set(pids) & set(targets):
            raise TargetError(f"every process matching {q!r} exited before the capture started")
    return [targets[p] for p in sorted(targets)]


def resolve_container(query: str, running: list[ctr.Container]) -> list[Target]:
    """Every process of the container ``query`` names (collectors/containers/: its rules)."""
    rule, found = ctr.match(query, running)
    if not found:
        stopped = [st for st in ctr.runtime_state().values() if query in (st.name, st.id) and st.id not in
                   {c.id for c in running}]
        if stopped:
            st = stopped[0]
            raise TargetError(f"container {st.name or st.id[:12]} ({st.runtime} {st.id[:12]}) is not running")
        names = ", ".join(c.label() for c in running[:6]) + (", ..." if len(running) > 6 else "")
        hint = f"; running: {names}" if running else \
            "; no container runs on this host (docker, podman, containerd and Kubernetes containers are found by their cgroups)"
        raise TargetError(f"no running container matches {query!r}{hint}")
    if rule == "id" and len(found) > 1:
        raise TargetError(f"container id prefix {query!r} matches {len(found)} containers "
                          f"({', '.join(c.label() for c in found[:4])}): give more digits")
    excluded = _excluded()
    out = []
    for c in found:
        for pid in c.pids:
            if pid in excluded:
                continue
            try:
                t = target_from_pid(pid, query)
            except TargetError:
                continue  # it exited since the scan
            out.append(Target(t.pid, t.comm, t.exe, t.cmdline, "container", query))
    if not out:
        raise TargetError(f"container {found[0].label()} has no process left to capture")
    return out
