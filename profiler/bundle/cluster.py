"""The cluster bundle (bundle layer): ``DIR/cluster.json`` plus one normal bundle per node under ``DIR/nodes/``.

A cluster capture writes one directory::

    DIR/cluster.json              this manifest: the window, every node's status, reason, clock
    DIR/nodes/<host>-<role>/      each a normal capture bundle (manifest.json, members)
    DIR/load.log                  the load command's output (``profiler cluster run``)

The manifest is versioned like a bundle's; older versions load with defaults filled in,
newer ones are refused. Every node directory it names must stay under ``DIR/nodes/``.
Clock offsets are the node's wall clock minus the controller's, with their uncertainty
(half the round trip of the best sample): a node time ``t`` is controller time ``t - offset``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profiler import __version__
from profiler.bundle import members
from profiler.bundle.manifest import build_checked, load_checked_json
from profiler.errors import BundleError
from profiler.files import contained, write_output

SCHEMA = "profiler.cluster"
VERSION = 1
CLUSTER_MANIFEST = "cluster.json"
NODES_DIR = "nodes"
LOAD_LOG = members.LOAD_LOG  # the load's output, named as in a node's bundle

# Node status words: how far a node got. ok/partial/failed are the node bundle's own status;
# the others say why there is no bundle (or only what was saved before the connection dropped).
OK, PARTIAL, FAILED = "ok", "partial", "failed"
UNREACHABLE = "unreachable"  # no SSH connection could be made
LOST = "lost"  # the SSH connection dropped during the capture
NODE_STATUSES = (OK, PARTIAL, FAILED, UNREACHABLE, LOST, "pending", "running")

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclass
class ClockOffset:
    """Node wall clock minus controller wall clock, measured over SSH round trips."""

    offset: float | None = None  # seconds
    uncertainty: float | None = None  # seconds (half the best round trip)
    rtt: float | None = None  # seconds, best round trip
    samples: int = 0


@dataclass
class RemoteInfo:
    """What the node offered and what the capture left there."""

    python: str | None = None
    perf: str | None = None
    profiler: str | None = None  # version installed on the node, if any
    psutil: bool | None = None
    shipped: bool = False  # the zipapp was copied over
    shipped_bytes: int = 0
    workdir: str | None = None
    left: str | None = None  # a path left on the node (e.g. after the connection dropped)
    nested_pid_namespace: bool | None = None


@dataclass
class NodeRecord:
    name: str  # "<host>-<role>", also the directory under nodes/
    host: str
    role: str
    port: int | None = None
    user: str | None = None
    targets: list[str] = field(default_factory=list)  # what was asked (names, pids)
    resolved: list[dict[str, Any]] = field(default_factory=list)  # pid, comm per target found
    status: str = "pending"
    reason: str | None = None
    dir: str | None = None  # "nodes/<name>" once a bundle was pulled back
    clock: ClockOffset = field(default_factory=ClockOffset)
    remote: RemoteInfo = field(default_factory=RemoteInfo)
    started: float | None = None  # capture start, controller wall clock (offset applied)
    ended: float | None = None
    start_skew: float | None = None  # started - the window's planned start (s)
    pulled_bytes: int = 0
    pull_seconds: float | None = None
    timings: dict[str, float] = field(default_factory=dict)  # connect, stage, clock, pull, cleanup (s)


@dataclass
class Window:
    planned_start: float | None = None  # controller wall clock
    duration: float | None = None
    ended: float | None = None
    stop_reason: str = ""


@dataclass
class ClusterLoad:
    argv: list[str] = field(default_factory=list)
    exit_code: int | None = None
    log: str | None = None
    started: float | None = None
    ended: float | None = None


@dataclass
class ClusterManifest:
    schema: str = SCHEMA
    version: int = VERSION
    tool_version: str = __version__
    created: str = ""
    status: str = "running"  # ok | partial | failed
    reason: str | None = None
    engine: str = "ssh"
    controller: str = ""
    topology: str | None = None  # the topology file's name, if one was given
    window: Window = field(default_factory=Window)
    nodes: list[NodeRecord] = field(default_factory=list)
    load: ClusterLoad | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True) + "\n"

    def node(self, name: str) -> NodeRecord | None:
        return next((n for n in self.nodes if n.name == name), None)


def node_name(host: str, role: str, suffix: str | None = None) -> str:
    """``<host>-<role>[-suffix]`` made safe as one directory name."""
    raw = f"{host}-{role}" + (f"-{suffix}" if suffix else "")
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", raw).strip("._-") or "node"
    return safe[:128]


def check_node_dir(name: str) -> str:
    """A node directory named by a manifest must be ``nodes/<one safe name>``."""
    parts = name.split("/") if isinstance(name, str) else []
    if len(parts) != 2 or parts[0] != NODES_DIR or not _NAME.match(parts[1]) or parts[1] in (".", ".."):
        raise BundleError(f"{CLUSTER_MANIFEST} names a node directory outside {NODES_DIR}/: {name!r}")
    return name


def parse_cluster_manifest(text: str, where: str = CLUSTER_MANIFEST) -> ClusterManifest:
    try:
        data = load_checked_json(text)
    except json.JSONDecodeError as exc:
        raise BundleError(f"{where} is truncated or corrupted ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise BundleError(f"{where} nests objects too deeply to be a cluster manifest") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise BundleError(f"{where} is not a profiler cluster manifest (schema is not {SCHEMA!r})")
    version = data.get("version")
    if not isinstance(version, int) or version < 1:
        raise BundleError(f"{where} has no valid version number")
    if version > VERSION:
        raise BundleError(f"cluster bundle format v{version} was written by a newer profiler "
                          f"({data.get('tool_version', '?')}); this one ({__version__}) reads up to v{VERSION}")
    try:
        m: ClusterManifest = build_checked(ClusterManifest, data, "")  # every field by type and range
    except BundleError as exc:
        raise BundleError(f"{where}: {exc}") from None
    for n in m.nodes:
        if n.dir is not None:
            check_node_dir(n.dir)
    return m


def is_cluster_bundle(path: str | os.PathLike[str]) -> bool:
    """Whether DIR/cluster.json is there (a directory that cannot be looked into is no cluster
    bundle here: opening it as a bundle says why it cannot be read)."""
    try:
        return (Path(path) / CLUSTER_MANIFEST).is_file()
    except OSError:
        return False


def load_cluster(path: str | os.PathLike[str]) -> ClusterManifest:
    root = Path(path)
    try:
        text = (root / CLUSTER_MANIFEST).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BundleError(f"cannot read {root / CLUSTER_MANIFEST}: {exc}") from None
    return parse_cluster_manifest(text, str(root / CLUSTER_MANIFEST))


def node_path(root: str | os.PathLike[str], node: NodeRecord) -> Path | None:
    """The node's bundle directory, refusing one that leaves DIR/nodes by name or by link at any
    level (``nodes`` itself a link to someone else's captures included): the real location is
    compared with the cluster bundle's own, never with a level a link has moved too."""
    if node.dir is None:
        return None
    check_node_dir(node.dir)
    base = Path(root)
    p = base / node.dir
    if (base / NODES_DIR).is_symlink() or p.is_symlink() or (
            os.path.lexists(p) and not contained(base / NODES_DIR, p)):
        raise BundleError(f"node directory {node.dir!r} points outside the cluster bundle")
    return p


def write_cluster_manifest(root: str | os.PathLike[str], manifest: ClusterManifest) -> None:
    """Rewrite DIR/cluster.json atomically (through a temporary name and a rename)."""
    write_output(Path(root) / CLUSTER_MANIFEST, manifest.to_json().encode(), force=True, fsync=True, root=root)
