"""What the container runtimes keep on disk about their containers (collectors layer): names,
images, Kubernetes pods, read with bounded sizes; the package's docstring says where each lives.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
from dataclasses import dataclass
from typing import Any

from profiler.collectors.containers.paths import ID_RE

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
    for pattern in dict.fromkeys(CONTAINERD_TASKS + _containerd_states(proc)):
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
    for where, argv in _daemons(proc, ("conmon",)):
        # podman passes its storage root on to conmon's exit command: --exit-command-arg --root --exit-command-arg DIR
        vals = [a for a in argv if a != "--exit-command-arg"]
        for i, a in enumerate(vals[:-1]):
            if a == "--root":
                roots.append(where + vals[i + 1])
    return list(dict.fromkeys(os.path.normpath(r) for r in roots))


def _docker_roots(proc: str) -> list[str]:
    roots = list(DOCKER_ROOTS)
    for where, argv in _daemons(proc, ("dockerd",)):
        found = where + "/var/lib/docker" if where else ""
        for i, a in enumerate(argv):
            if a in ("--data-root", "-g", "--graph") and i + 1 < len(argv):
                found = where + argv[i + 1]
            elif a.startswith("--data-root="):
                found = where + a.split("=", 1)[1]
        roots.append(found)
    return list(dict.fromkeys(os.path.normpath(r) for r in roots if r))


def _containerd_states(proc: str) -> tuple[str, ...]:
    """Task bundle globs of running containerds: their ``--state DIR``, or ``state = "DIR"`` in
    their config file (``--config``, else /etc/containerd/config.toml; dockerd's own containerd
    keeps it under its exec root), else /run/containerd; read through the daemon's own root when
    it runs in another mount namespace (a kind node's containerd, inside the node's container)."""
    out: list[str] = []
    for where, argv in _daemons(proc, ("containerd",)):
        state, config = "", "/etc/containerd/config.toml"
        for i, a in enumerate(argv[:-1]):
            if a == "--state":
                state = argv[i + 1]
            elif a in ("--config", "-c"):
                config = argv[i + 1]
        if not state:
            m = re.search(r'^state\s*=\s*"([^"]+)"', _read(where + config, 64 << 10) or "", re.M)
            state = m.group(1) if m else "/run/containerd"
        if state.startswith("/"):
            out.append(where + os.path.normpath(state))
    return tuple(f"{d}/io.containerd.runtime.v2.task/*/*" for d in dict.fromkeys(out))


def _daemons(proc: str, comms: tuple[str, ...]) -> list[tuple[str, list[str]]]:
    """(root, argv) of each running process named one of ``comms``: root is "" when it shares our
    mount namespace, else ``/proc/PID/root``, through which the paths it was given are read."""
    out: list[tuple[str, list[str]]] = []
    try:
        entries = os.listdir(proc)
    except OSError:
        return out
    mine = _mnt_ns(f"{proc}/self")
    for e in entries:
        if not e.isdigit():
            continue
        comm = (_read(f"{proc}/{e}/comm", 64) or "").strip()
        if comm not in comms:
            continue
        raw = _read_bytes(f"{proc}/{e}/cmdline", 64 << 10)
        if raw:
            theirs = _mnt_ns(f"{proc}/{e}")
            where = "" if theirs is None or theirs == mine else f"{proc}/{e}/root"
            out.append((where, [a.decode(errors="replace") for a in raw.split(b"\0") if a]))
    return out


def _mnt_ns(path: str) -> str | None:
    try:
        return os.readlink(f"{path}/ns/mnt")
    except OSError:
        return None


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


