"""Containers on this host (collectors layer): which container a process runs in, read from its
cgroup path, and the container's name from its runtime's state on disk. No daemon API is asked.

Every runtime puts a container's processes in a cgroup named by the container's id (64 hex
digits); the path says which runtime and, under Kubernetes, which pod (its UID):

| runtime | cgroupfs driver | systemd driver |
| --- | --- | --- |
| docker | ``/docker/ID`` | ``/system.slice/docker-ID.scope`` |
| podman | ``/libpod_parent/libpod-ID`` | ``/machine.slice/libpod-ID.scope`` |
| containerd (nerdctl) | ``/NAMESPACE/ID`` | ``/system.slice/nerdctl-ID.scope`` |
| Kubernetes (any CRI) | ``/kubepods/burstable/podUID/ID`` | ``/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podUID.slice/cri-containerd-ID.scope`` (``crio-ID``, ``docker-ID``) |

The last id in the path is the container (kind nests a pod's container under its node's
container: ``/docker/NODE/kubelet.slice/.../cri-containerd-ID.scope``); a path component that
names conmon (``libpod-conmon-ID``, ``crio-conmon-ID``) is the runtime's monitor, not the
container. The kernel prints the same path for cgroup v1 (one line per hierarchy) and v2.

Names come from what the runtimes keep on disk (root may read all of it):

- podman and CRI-O (containers/storage): ``STORAGE/*-containers/containers.json`` (``names``,
  the image in ``metadata``), the OCI bundle ``.../ID/userdata/config.json`` (CRI-O's
  ``io.kubernetes.*`` annotations); the storage roots are ``/var/lib/containers/storage``, any
  ``--root`` a running conmon was told, and rootless users' ``~/.local/share/containers/storage``;
- docker: ``DATA_ROOT/containers/ID/config.v2.json`` (``Name``, ``Config.Image``), the data root
  being ``/var/lib/docker`` or a running dockerd's ``--data-root``;
- containerd (CRI, nerdctl, docker's own containerd): each running task's OCI bundle
  ``STATE/io.containerd.runtime.v2.task/NAMESPACE/ID/config.json`` (STATE: ``/run/containerd``,
  or a running containerd's ``--state`` or its config file's ``state``), whose annotations
  name a Kubernetes container and its pod (``io.kubernetes.cri.container-name``,
  ``...sandbox-name``, ``...sandbox-namespace``, ``...sandbox-uid``).

A daemon in another mount namespace (kind: a node's containerd runs inside the node's own
container) has its paths read through ``/proc/PID/root``. Everything is read with bounded sizes
and any file may be missing or unreadable: a container without a known name is still found by
its id.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from profiler.collectors.containers.paths import (
    CgroupRef,
    parse_cgroup_path,
    process_ref,
    scan_refs,
)
from profiler.collectors.containers.state import State, runtime_state

from profiler.bundle import ContainerInfo

__all__ = ["CgroupRef", "Container", "State", "container_of", "info", "match", "parse_cgroup_path", "pod_pids",
           "process_ref", "running", "runtime_state", "scan"]


@dataclass
class Container:
    """A running container: its id, what its runtime calls it, and its processes (host pids)."""

    ref: CgroupRef
    pids: list[int] = field(default_factory=list)
    state: State | None = None

    @property
    def id(self) -> str:
        return self.ref.id

    @property
    def runtime(self) -> str:
        return self.state.runtime if self.state and self.ref.runtime == "kubernetes" else self.ref.runtime

    @property
    def name(self) -> str | None:
        return self.state.name if self.state else None

    def label(self) -> str:
        """``tikv1 (podman 3f2a9c1b7d0e)``, or the id alone."""
        return f"{self.name or self.id[:12]} ({self.runtime} {self.id[:12]})"

    def to_dict(self) -> dict[str, Any]:
        """The manifest's ``TargetInfo.container_info``."""
        st = self.state
        out: dict[str, Any] = {"runtime": self.runtime, "id": self.id, "name": self.name,
                               "image": st.image if st else None, "cgroup": self.ref.path,
                               "pod": (st.pod if st else None), "namespace": st.namespace if st else None,
                               "pod_uid": self.ref.pod_uid or (st.pod_uid if st else None),
                               "container": st.container if st else None, "qos": self.ref.qos,
                               "state": st.source if st else None}
        return out



def scan(proc: str = "/proc") -> dict[str, Container]:
    """Every container with a process on this host: id -> its cgroup and pids (thread-group leaders)."""
    return {cid: Container(ref=ref, pids=pids) for cid, (ref, pids) in scan_refs(proc).items()}


def pod_pids(pod_uid: str, container_id: str | None = None, proc: str = "/proc") -> dict[str, list[int]]:
    """A Kubernetes pod's containers on this node (container id -> host pids), found by the pod's
    UID (and optionally one container id, as ``containerStatuses[].containerID`` gives it after
    ``containerd://``) in the processes' cgroup paths."""
    uid = pod_uid.strip().lower().replace("_", "-")
    want = container_id.split("://", 1)[-1].strip().lower() if container_id else None
    out: dict[str, list[int]] = {}
    for c in scan(proc).values():
        if c.ref.pod_uid != uid or (want is not None and c.id != want):
            continue
        out[c.id] = c.pids
    return out


def container_of(pid: int, proc: str = "/proc") -> Container | None:
    """The container ``pid`` runs in, named from its runtime's state when that is readable."""
    ref = process_ref(pid, proc)
    if ref is None:
        return None
    states = runtime_state({ref.id}, proc)
    return Container(ref=ref, pids=[pid], state=states.get(ref.id))


def running(proc: str = "/proc") -> list[Container]:
    """Every running container on this host with its processes and, where known, its name."""
    found = scan(proc)
    states = runtime_state(set(found), proc) if found else {}
    for cid, c in found.items():
        c.state = states.get(cid)
    return sorted(found.values(), key=lambda c: (c.name or "~", c.id))


def info(pid: int) -> ContainerInfo | None:
    """The manifest's record of the container the target runs in, if any."""
    c = container_of(pid)
    return ContainerInfo(**c.to_dict()) if c is not None else None


MIN_ID_PREFIX = 4  # hex digits of an id prefix that may name a container (docker takes any unique prefix)


def match(query: str, found: list[Container]) -> tuple[str, list[Container]]:
    """The containers a ``--container`` value names, and by which rule, most exact first:
    a name; a Kubernetes ``NAMESPACE/POD/CONTAINER``, ``POD/CONTAINER`` or ``POD`` (every
    container of the pod but its pause container); an id or an id prefix of 4+ hex digits."""
    q = query.strip()
    named = [c for c in found if c.name == q]
    if named:
        return "name", named
    parts = q.split("/")
    pods = []
    for c in found:
        st = c.state
        if st is None or st.pod is None or st.sandbox:
            continue
        if (len(parts) == 3 and [st.namespace, st.pod, st.container] == parts) or \
           (len(parts) == 2 and ([st.pod, st.container] == parts or [st.namespace, st.pod] == parts)) or \
           (len(parts) == 1 and st.pod == q):
            pods.append(c)
    if pods:
        return "pod", pods
    h = q.lower()
    if len(h) >= MIN_ID_PREFIX and re.fullmatch(r"[0-9a-f]+", h):
        return "id", [c for c in found if c.id.startswith(h)]
    return "", []
