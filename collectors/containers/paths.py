"""Which container a process runs in, from its cgroup path (collectors layer): the layouts of
docker, podman, containerd, CRI-O and the kubelet (cgroup v1 and v2, cgroupfs and systemd
drivers, kind's nesting); the package's docstring has the table.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

ID_RE = re.compile(r"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")
# a pod's UID in a cgroup path: "pod<uid>" with dashes (cgroupfs) or underscores (systemd)
POD_RE = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
QOS_RE = re.compile(r"kubepods[-/.](burstable|besteffort)")


@dataclass(frozen=True)
class CgroupRef:
    """What a cgroup path says about the container a process runs in."""

    runtime: str  # docker | podman | containerd | cri-o | kubernetes (a CRI runtime not named in the path)
    id: str  # the container's 64-hex id
    pod_uid: str | None = None  # Kubernetes: the pod's UID (dashes, as the API shows it)
    qos: str | None = None  # Kubernetes: guaranteed | burstable | besteffort
    path: str = ""  # the cgroup path it was read from


def parse_cgroup_path(path: str) -> CgroupRef | None:
    """The container a cgroup path names (its last container id), or None for a host process."""
    parts = [p for p in path.split("/") if p]
    for i in range(len(parts) - 1, -1, -1):
        comp = parts[i]
        m = ID_RE.search(comp)
        if m is None:
            continue
        if "conmon" in comp:
            return None  # podman's / CRI-O's monitor process, beside the container
        cid = m.group(0)
        prefix = comp[:m.start()]
        above = "/".join(parts[:i])
        pod = POD_RE.search(above)
        runtime = _runtime_of(prefix, parts[i - 1] if i else "", above)
        qos = None
        if pod is not None:
            q = QOS_RE.search(above)
            qos = q.group(1) if q else "guaranteed"
        return CgroupRef(runtime=runtime, id=cid, pod_uid=pod.group(1).replace("_", "-") if pod else None,
                         qos=qos, path=path)
    return None


def _runtime_of(prefix: str, parent: str, above: str) -> str:
    if prefix.startswith("docker") or (not prefix and parent == "docker"):
        return "docker"
    if prefix.startswith("libpod") or parent.startswith("libpod"):
        return "podman"
    if prefix.startswith("crio"):
        return "cri-o"
    if prefix.startswith(("cri-containerd", "nerdctl")):
        return "containerd"
    if "kubepods" in above:
        return "kubernetes"
    return "containerd" if not prefix else prefix.rstrip("-") or "unknown"


def process_ref(pid: int | str, proc: str = "/proc") -> CgroupRef | None:
    """The container process ``pid`` runs in, from ``/proc/PID/cgroup`` (v2 line first, else the
    first v1 hierarchy whose path names one)."""
    text = _read(f"{proc}/{pid}/cgroup", 64 << 10)
    if not text:
        return None
    v1: CgroupRef | None = None
    for line in text.splitlines():
        hid, _, rest = line.partition(":")
        ctrls, _, path = rest.partition(":")
        ref = parse_cgroup_path(path)
        if ref is None:
            continue
        if hid == "0" and not ctrls:
            return ref
        v1 = v1 or ref
    return v1


def scan_refs(proc: str = "/proc") -> dict[str, tuple[CgroupRef, list[int]]]:
    """Every container with a process on this host: id -> (its cgroup, its pids: thread-group leaders)."""
    out: dict[str, tuple[CgroupRef, list[int]]] = {}
    try:
        entries = os.listdir(proc)
    except OSError:
        return out
    for e in entries:
        if not e.isdigit():
            continue
        ref = process_ref(e, proc)
        if ref is not None:
            out.setdefault(ref.id, (ref, []))[1].append(int(e))
    for _, pids in out.values():
        pids.sort()
    return out


def _read(path: str, limit: int) -> str | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode(errors="replace")
    except OSError:
        return None
