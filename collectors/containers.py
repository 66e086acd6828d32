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

Everything is read with bounded sizes and any file may be missing or unreadable: a container
without a known name is still found by its id.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

ID_RE = re.compile(r"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")
# a pod's UID in a cgroup path: "pod<uid>" with dashes (cgroupfs) or underscores (systemd)
POD_RE = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
QOS_RE = re.compile(r"kubepods[-/.](burstable|besteffort)")
MAX_STATE_FILE = 4 << 20  # bytes read of any runtime state file
MAX_STATE_FILES = 4096  # state files read per scan

# runtime state locations (globs); docker's and podman's roots also come from running daemons
PODMAN_ROOTS = ("/var/lib/containers/storage", "/root/.local/share/containers/storage",
                "/home/*/.local/share/containers/storage")
DOCKER_ROOTS = ("/var/lib/docker",)
CONTAINERD_TASKS = ("/run/containerd/io.containerd.runtime.v2.task/*/*",
                    "/run/docker/containerd/daemon/io.containerd.runtime.v2.task/*/*",
                    "/run/k3s/containerd/io.containerd.runtime.v2.task/*/*")
CRI_ANN = "io.kubernetes.cri."  # containerd's CRI plugin
CRIO_ANN = "io.kubernetes."  # CRI-O: io.kubernetes.pod.name, io.kubernetes.container.name


@dataclass(frozen=True)
class CgroupRef:
    """What a cgroup path says about the container a process runs in."""

    runtime: str  # docker | podman | containerd | cri-o | kubernetes (a CRI runtime not named in the path)
    id: str  # the container's 64-hex id
    pod_uid: str | None = None  # Kubernetes: the pod's UID (dashes, as the API shows it)
    qos: str | None = None  # Kubernetes: guaranteed | burstable | besteffort
    path: str = ""  # the cgroup path it was read from


@dataclass
class State:
    """A container as its runtime's state on disk describes it."""

    runtime: str
    id: str
    name: str | None = None
    image: str | None = None
    pod: str | None = None  # Kubernetes pod name, namespace, UID, and the container's name in the pod
    namespace: str | None = None
    pod_uid: str | None = None
    container: str | None = None
    sandbox: bool = False  # the pod's pause container
    source: str = ""  # the file this came from


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


# --------------------------------------------------------------------------- cgroup paths


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


def scan(proc: str = "/proc") -> dict[str, Container]:
    """Every container with a process on this host: id -> its cgroup and pids (thread-group leaders)."""
    out: dict[str, Container] = {}
    try:
        entries = os.listdir(proc)
    except OSError:
        return out
    for e in entries:
        if not e.isdigit():
            continue
        ref = process_ref(e, proc)
        if ref is None:
            continue
        c = out.get(ref.id)
        if c is None:
            c = out[ref.id] = Container(ref=ref)
        c.pids.append(int(e))
    for c in out.values():
        c.pids.sort()
    return out


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


# --------------------------------------------------------------------------- runtime state


def runtime_state(ids: set[str] | None = None, proc: str = "/proc") -> dict[str, State]:
    """id -> what the runtimes' files on disk say about each container (all, or only ``ids``)."""
    out: dict[str, State] = {}
    budget = [MAX_STATE_FILES]
    for root in _podman_roots(proc):
        for st in _containers_storage(root, ids, budget):
            out.setdefault(st.id, st)
    for root in _docker_roots(proc):
        for st in _docker(root, ids, budget):
            out.setdefault(st.id, st)
    for pattern in CONTAINERD_TASKS + _containerd_states(proc):
        for d in sorted(glob.glob(pattern)):
            cid = os.path.basename(d)
            if not ID_RE.fullmatch(cid) or (ids is not None and cid not in ids) or not _spend(budget):
                continue
            st = _containerd_task(d, cid)
            prev = out.get(cid)
            if prev is None:
                out[cid] = st
            elif st.pod and not prev.pod:  # docker named it, containerd's annotations say the pod
                prev.pod, prev.namespace, prev.pod_uid, prev.container = st.pod, st.namespace, st.pod_uid, st.container
    return out


def _spend(budget: list[int]) -> bool:
    budget[0] -= 1
    return budget[0] >= 0


def _podman_roots(proc: str) -> list[str]:
    roots: list[str] = []
    for pattern in PODMAN_ROOTS:
        roots += sorted(glob.glob(pattern))
    for argv in _daemon_argvs(proc, ("conmon",)):
        # podman passes its storage root on to conmon's exit command: --exit-command-arg --root --exit-command-arg DIR
        vals = [a for a in argv if a != "--exit-command-arg"]
        for i, a in enumerate(vals[:-1]):
            if a == "--root":
                roots.append(vals[i + 1])
    return list(dict.fromkeys(os.path.normpath(r) for r in roots))


def _docker_roots(proc: str) -> list[str]:
    roots = list(DOCKER_ROOTS)
    for argv in _daemon_argvs(proc, ("dockerd",)):
        for i, a in enumerate(argv):
            if a in ("--data-root", "-g", "--graph") and i + 1 < len(argv):
                roots.append(argv[i + 1])
            elif a.startswith("--data-root="):
                roots.append(a.split("=", 1)[1])
    return list(dict.fromkeys(os.path.normpath(r) for r in roots if r))


def _containerd_states(proc: str) -> tuple[str, ...]:
    """Task bundle globs of running containerds with their own state directory (``--state DIR``,
    or ``state = "DIR"`` in their ``--config`` file: dockerd's own containerd keeps it under its
    exec root)."""
    out: list[str] = []
    for argv in _daemon_argvs(proc, ("containerd",)):
        for i, a in enumerate(argv[:-1]):
            if a == "--state":
                out.append(argv[i + 1])
            elif a in ("--config", "-c"):
                m = re.search(r'^state\s*=\s*"([^"]+)"', _read(argv[i + 1], 64 << 10) or "", re.M)
                if m:
                    out.append(m.group(1))
    return tuple(f"{os.path.normpath(d)}/io.containerd.runtime.v2.task/*/*" for d in dict.fromkeys(out)
                 if d.startswith("/"))


def _daemon_argvs(proc: str, comms: tuple[str, ...]) -> list[list[str]]:
    out: list[list[str]] = []
    try:
        entries = os.listdir(proc)
    except OSError:
        return out
    for e in entries:
        if not e.isdigit():
            continue
        comm = (_read(f"{proc}/{e}/comm", 64) or "").strip()
        if comm not in comms:
            continue
        raw = _read_bytes(f"{proc}/{e}/cmdline", 64 << 10)
        if raw:
            out.append([a.decode(errors="replace") for a in raw.split(b"\0") if a])
    return out


def _containers_storage(root: str, ids: set[str] | None, budget: list[int]) -> list[State]:
    out = []
    for path in sorted(glob.glob(os.path.join(root, "*-containers", "containers.json"))):
        if not _spend(budget):
            break
        data = _json(path)
        if not isinstance(data, list):
            continue
        for entry in data:
            if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
                continue
            cid = entry["id"]
            if not ID_RE.fullmatch(cid) or (ids is not None and cid not in ids):
                continue
            names = [n for n in entry.get("names") or [] if isinstance(n, str)]
            meta = _json_text(entry.get("metadata"))
            image = meta.get("image-name") if isinstance(meta.get("image-name"), str) else None
            st = State(runtime="podman", id=cid, name=names[0] if names else None, image=image, source=path)
            if meta.get("pod-name") or meta.get("pod-id"):  # CRI-O keeps the pod in the metadata
                st.runtime = "cri-o"
                st.pod = _s(meta.get("pod-name"))
            bundle = os.path.join(os.path.dirname(path), cid, "userdata", "config.json")
            if os.path.isfile(bundle) and _spend(budget):
                _annotations(st, _json(bundle))
            out.append(st)
    return out


def _docker(root: str, ids: set[str] | None, budget: list[int]) -> list[State]:
    out = []
    for d in sorted(glob.glob(os.path.join(root, "containers", "*"))):
        cid = os.path.basename(d)
        if not ID_RE.fullmatch(cid) or (ids is not None and cid not in ids) or not _spend(budget):
            continue
        path = os.path.join(d, "config.v2.json")
        data = _json(path)
        if not isinstance(data, dict):
            continue
        cfg = _dict(data.get("Config"))
        st = State(runtime="docker", id=cid, name=_s(data.get("Name"), "/"), image=_s(cfg.get("Image")), source=path)
        _k8s_labels(st, _dict(cfg.get("Labels")))  # dockershim named the pod in labels
        out.append(st)
    return out


def _containerd_task(d: str, cid: str) -> State:
    path = os.path.join(d, "config.json")
    ns = os.path.basename(os.path.dirname(d))
    st = State(runtime="docker" if ns == "moby" else "containerd", id=cid, source=path)
    _annotations(st, _json(path))
    return st


def _annotations(st: State, spec: Any) -> None:
    """OCI annotations: containerd CRI's ``io.kubernetes.cri.*``, CRI-O's ``io.kubernetes.*``, nerdctl's name."""
    ann = spec.get("annotations") if isinstance(spec, dict) else None
    if not isinstance(ann, dict):
        return
    if CRI_ANN + "sandbox-name" in ann:
        st.pod = _s(ann.get(CRI_ANN + "sandbox-name"))
        st.namespace = _s(ann.get(CRI_ANN + "sandbox-namespace"))
        st.pod_uid = _s(ann.get(CRI_ANN + "sandbox-uid"))
        st.container = _s(ann.get(CRI_ANN + "container-name"))
        st.sandbox = ann.get(CRI_ANN + "container-type") == "sandbox"
        st.image = st.image or _s(ann.get(CRI_ANN + "image-name"))
    elif CRIO_ANN + "pod.name" in ann:
        st.runtime = "cri-o"
        st.pod = _s(ann.get(CRIO_ANN + "pod.name"))
        st.namespace = _s(ann.get(CRIO_ANN + "pod.namespace"))
        st.pod_uid = _s(ann.get(CRIO_ANN + "pod.uid"))
        st.container = _s(ann.get(CRIO_ANN + "container.name"))
        st.sandbox = ann.get("io.kubernetes.cri-o.ContainerType") == "sandbox"
    if st.name is None:
        st.name = _s(ann.get("nerdctl/name")) or (f"{st.pod}/{st.container}" if st.pod and st.container else None)


def _k8s_labels(st: State, labels: dict[str, Any]) -> None:
    if "io.kubernetes.pod.name" in labels:
        st.pod = _s(labels.get("io.kubernetes.pod.name"))
        st.namespace = _s(labels.get("io.kubernetes.pod.namespace"))
        st.pod_uid = _s(labels.get("io.kubernetes.pod.uid"))
        st.container = _s(labels.get("io.kubernetes.container.name"))
        st.sandbox = st.container == "POD"


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _s(v: Any, strip: str = "") -> str | None:
    if not isinstance(v, str) or not v.strip(strip):
        return None
    return v.strip(strip)[:256]


def _json_text(v: Any) -> dict[str, Any]:
    if not isinstance(v, str):
        return {}
    with contextlib.suppress(ValueError, RecursionError):
        data = json.loads(v)
        if isinstance(data, dict):
            return data
    return {}


def _json(path: str) -> Any:
    raw = _read_bytes(path, MAX_STATE_FILE)
    if raw is None or len(raw) >= MAX_STATE_FILE:
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def _read_bytes(path: str, limit: int) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(limit)
    except OSError:
        return None


def _read(path: str, limit: int) -> str | None:
    raw = _read_bytes(path, limit)
    return raw.decode(errors="replace") if raw is not None else None


# --------------------------------------------------------------------------- one process


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
