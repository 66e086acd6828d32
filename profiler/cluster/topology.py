"""Which hosts to capture (cluster layer): a TiUP topology file or repeated ``--host`` flags -> node specs.

TiUP's topology file (``tiup cluster deploy NAME VERSION topology.yaml``) names every instance::

    global: {user: tidb, ssh_port: 22, deploy_dir: /tidb-deploy}
    pd_servers:   [{host: 10.0.1.4, client_port: 2379}]
    tidb_servers: [{host: 10.0.1.7, port: 4000, status_port: 10080}]
    tikv_servers: [{host: 10.0.1.1, port: 20160, status_port: 20180, ssh_port: 22}]

Each instance becomes one node: role ``pd``/``tidb``/``tikv``, target the server binary
(``pd-server`` ...), narrowed to the instance's deploy directory (TiUP's default
``<global deploy_dir>/<role>-<port>``) when several instances share a host. Other sections
(monitoring, grafana, tiflash...) are listed as ignored.

``server_configs`` (``tikv: {server.grpc-concurrency: 2, readpool: {...}}``) and an instance's own
``config`` (which wins) become the node's knobs, dotted names (profiler.knowledge.knobs): the
node's bundle records them and the cluster report shows each beside the pool it sizes.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profiler.bundle.cluster import node_name
from profiler.errors import UsageError
from profiler.knowledge.knobs import flatten

# TiUP section -> (role, server binary, the port that names an instance, its default)
TIUP_ROLES: dict[str, tuple[str, str, str, int]] = {
    "pd_servers": ("pd", "pd-server", "client_port", 2379),
    "tidb_servers": ("tidb", "tidb-server", "port", 4000),
    "tikv_servers": ("tikv", "tikv-server", "port", 20160),
}
_IGNORED_OK = {"global", "server_configs", "monitored"}
MAX_TOPOLOGY_BYTES = 1 << 20  # a TiUP topology is a few KB; anything larger is not one
MAX_NODES = 1000

# a user or host name never starts with "-": ssh would take it as an option (-oProxyCommand=...)
_USER = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9._-]{0,63}$")
_HOST_NAME = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9._:-]{0,252}$")
_HOST = re.compile(r"^(?:(?P<user>[A-Za-z0-9._][A-Za-z0-9._-]*)@)?(?:\[(?P<v6>[0-9A-Fa-f:.%]+)\]|(?P<host>[A-Za-z0-9._][A-Za-z0-9._-]*))(?::(?P<port>\d+))?$")


@dataclass(frozen=True)
class TargetSpec:
    """What to capture on a node: a ``--pid`` value, optionally narrowed to a deploy directory."""

    query: str
    deploy_dir: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"query": self.query, "deploy_dir": self.deploy_dir}


@dataclass
class NodeSpec:
    host: str
    role: str
    targets: list[TargetSpec]
    user: str | None = None
    port: int | None = None  # SSH port
    instance_port: int | None = None  # the server's own port (names instances sharing a host)
    status_port: int | None = None
    name: str = ""
    notes: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)  # the role's knobs, dotted (server_configs + instance config)

    @property
    def destination(self) -> str:
        return (f"{self.user}@" if self.user else "") + self.host


def parse_host(text: str) -> tuple[str | None, str, int | None]:
    """``[USER@]HOST[:PORT]`` (``[v6addr]:PORT`` for IPv6) -> (user, host, port)."""
    m = _HOST.match(text.strip())
    if not m or text.strip().startswith("-"):
        raise UsageError(f"--host {text!r}: use [USER@]HOST[:PORT], e.g. tidb@10.0.1.1:22")
    port = int(m.group("port")) if m.group("port") else None
    if port is not None and not 0 < port < 65536:
        raise UsageError(f"--host {text!r}: port {port} is out of range")
    return m.group("user"), m.group("v6") or m.group("host") or "", port


def from_flags(hosts: list[str], roles: list[str], pids: list[str]) -> list[NodeSpec]:
    """Repeated ``--host``, with the n-th ``--role`` and ``--pid`` going with the n-th host.

    One ``--role`` or one ``--pid`` given once applies to every host; ``--pid`` takes
    comma-separated values for several targets on one host.
    """
    if not hosts:
        raise UsageError("no host: pass --topology FILE or --host [USER@]HOST[:PORT] (repeatable)")
    for what, vals in (("--role", roles), ("--pid", pids)):
        if len(vals) not in (1, len(hosts)):
            raise UsageError(f"{len(hosts)} --host but {len(vals)} {what}: give one {what} per --host, or one for all")
    nodes = []
    for i, h in enumerate(hosts):
        user, host, port = parse_host(h)
        role = (roles[i] if len(roles) > 1 else roles[0]).strip()
        if not re.match(r"^[A-Za-z0-9_.-]{1,32}$", role):
            raise UsageError(f"--role {role!r}: use a short name like tikv, tidb, pd")
        raw = pids[i] if len(pids) > 1 else pids[0]
        queries = [q.strip() for q in raw.split(",") if q.strip()]
        if not queries:
            raise UsageError(f"--pid for {h} is empty")
        nodes.append(NodeSpec(host=host, role=role, targets=[TargetSpec(q) for q in queries], user=user, port=port))
    return _name_nodes(nodes)


def load_topology(path: Path) -> tuple[list[NodeSpec], list[str]]:
    """A TiUP topology file -> (nodes, notes about what was left out)."""
    try:
        import yaml
    except ImportError:  # pragma: no cover - a declared dependency
        raise UsageError("reading a topology file needs PyYAML (pip install pyyaml)") from None
    text = read_topology_text(Path(path))
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        raise UsageError(f"topology {path} is not valid YAML{at}") from None
    except RecursionError:
        raise UsageError(f"topology {path} nests too deeply to be a topology") from None
    from profiler.cluster import kubernetes  # a TidbCluster (TiDB Operator) instead of a TiUP file

    try:
        if kubernetes.is_kubernetes(data):
            return kubernetes.to_nodes(kubernetes.from_manifest(data, str(path)))
        return from_topology(data, str(path))
    except RecursionError:  # configs nested just under the parser's limit, walked once more
        raise UsageError(f"topology {path} nests too deeply to be a topology") from None


def read_topology_text(path: Path) -> str:
    """The topology file's text: a regular file of at most 1 MiB (a device like /dev/zero, a FIFO
    nobody writes to, a directory or a 17 MB file is one UsageError line, never read forever)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise UsageError(f"cannot read topology {path}: {exc.strerror or exc}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UsageError(f"topology {path} is not a regular file")
    with os.fdopen(fd, "rb") as fh:
        if st.st_size > MAX_TOPOLOGY_BYTES:
            raise UsageError(f"topology {path} is larger than {MAX_TOPOLOGY_BYTES >> 20} MiB: not a TiUP topology")
        try:
            data = fh.read(MAX_TOPOLOGY_BYTES + 1)
        except OSError as exc:
            raise UsageError(f"cannot read topology {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_TOPOLOGY_BYTES:
        raise UsageError(f"topology {path} is larger than {MAX_TOPOLOGY_BYTES >> 20} MiB: not a TiUP topology")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"topology {path} is not UTF-8 text (byte {exc.start})") from None


def from_topology(data: Any, where: str = "topology") -> tuple[list[NodeSpec], list[str]]:
    if not isinstance(data, dict):
        raise UsageError(f"{where}: expected a mapping with pd_servers, tidb_servers, tikv_servers")
    glob = data.get("global") or {}
    if not isinstance(glob, dict):
        raise UsageError(f"{where}: 'global' should be a mapping")
    user = _opt_user(glob.get("user"), f"{where}: global.user")
    ssh_port = _opt_port(glob.get("ssh_port"), f"{where}: global.ssh_port")
    deploy = _opt_str(glob.get("deploy_dir"), f"{where}: global.deploy_dir")
    notes = []
    nodes: list[NodeSpec] = []
    server_configs = data.get("server_configs") or {}
    if not isinstance(server_configs, dict):
        raise UsageError(f"{where}: 'server_configs' should be a mapping of role to settings")
    for key in data:
        if key not in TIUP_ROLES and key not in _IGNORED_OK:
            notes.append(f"{key}: not captured (only pd, tidb and tikv servers are)")
    for section, (role, binary, port_key, port_default) in TIUP_ROLES.items():
        items = data.get(section) or []
        if not isinstance(items, list):
            raise UsageError(f"{where}: {section} should be a list")
        for i, inst in enumerate(items):
            if len(nodes) >= MAX_NODES:
                raise UsageError(f"{where} names more than {MAX_NODES} instances: at most {MAX_NODES} are captured at once")
            at = f"{where}: {section}[{i}]"
            if not isinstance(inst, dict) or not isinstance(inst.get("host"), str) or not inst["host"].strip():
                raise UsageError(f"{at} has no host")
            host = inst["host"].strip()
            if not _HOST_NAME.match(host):
                raise UsageError(f"{at}: host {host!r} is not a host name or address")
            iport = _opt_port(inst.get(port_key), f"{at}.{port_key}") or port_default
            own = inst.get("config") or {}
            if not isinstance(own, dict):
                raise UsageError(f"{at}.config should be a mapping of settings")
            inst_deploy = _opt_str(inst.get("deploy_dir"), f"{at}.deploy_dir")
            if inst_deploy is None and deploy is not None:
                inst_deploy = f"{deploy.rstrip('/')}/{role}-{iport}"
            elif inst_deploy is not None and not inst_deploy.startswith("/") and deploy is not None:
                inst_deploy = f"{deploy.rstrip('/')}/{inst_deploy}"
            nodes.append(NodeSpec(
                host=host, role=role, targets=[TargetSpec(binary, inst_deploy)],
                user=_opt_user(inst.get("ssh_user"), f"{at}.ssh_user") or user,
                port=_opt_port(inst.get("ssh_port"), f"{at}.ssh_port") or ssh_port,
                instance_port=iport,
                status_port=_opt_port(inst.get("status_port"), f"{at}.status_port"),
                config={**flatten(server_configs.get(role)), **flatten(own)},
            ))
    if not nodes:
        raise UsageError(f"{where} names no pd_servers, tidb_servers or tikv_servers")
    return _name_nodes(nodes), notes


def _name_nodes(nodes: list[NodeSpec]) -> list[NodeSpec]:
    """``<host>-<role>``, with the instance port (or a number) where a host has two of a role."""
    count: dict[tuple[str, str], int] = {}
    for n in nodes:
        count[(n.host, n.role)] = count.get((n.host, n.role), 0) + 1
    seen: dict[str, int] = {}
    for n in nodes:
        suffix = None
        if count[(n.host, n.role)] > 1:
            suffix = str(n.instance_port) if n.instance_port else None
        name = node_name(n.host, n.role, suffix)
        if name in seen:
            seen[name] += 1
            name = node_name(n.host, n.role, f"{suffix or ''}{seen[name]}")
        else:
            seen[name] = 1
        n.name = name
    return nodes


def _opt_str(v: Any, where: str) -> str | None:
    if v is None:
        return None
    if not isinstance(v, str) or not v.strip():
        raise UsageError(f"{where} should be a non-empty string")
    return v.strip()


def _opt_user(v: Any, where: str) -> str | None:
    user = _opt_str(v, where)
    if user is not None and not _USER.match(user):
        raise UsageError(f"{where} {user!r} is not a user name")
    return user


def _opt_port(v: Any, where: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | str) or not str(v).isdigit() or not 0 < int(v) < 65536:
        raise UsageError(f"{where} should be a port number")
    return int(v)
