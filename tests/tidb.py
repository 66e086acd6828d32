"""A TiDB cluster of real servers laid out as TiUP deploys it, on the namespaced hosts of
tests/hosts.py (test support).

The binaries come from ``PD_SERVER``, ``TIKV_SERVER`` and ``TIDB_SERVER`` (v8.5; :func:`missing`
says which are absent, for pytest.skip). Each instance gets TiUP's layout under the host's own
directory, which the host sees at ``/mnt`` (``DEPLOY = /mnt/tidb-deploy``):
``<DEPLOY>/<role>-<port>/{bin/<server>,conf/<role>.toml,data,log}``, the binary hard-linked from
the one given (copied across file systems), the config rendered from the topology's
``server_configs`` as TiUP renders it (plus what this machine needs: TiKV's RocksDB open-file
limits under the 20,000 file descriptors a process gets here, a small block cache, no reserved
space). Each server is started over SSH from its deploy directory, as TiUP's run scripts do,
listening on its host's address only; it dies with its host (the lab stops every host's PID
namespace).

Start-up, measured on the shared 2-CPU machine: PD healthy in 2-5 s, TiKV's store Up in PD in
10-40 s, TiDB answering SQL in 10-30 s after that (it bootstraps its system tables on first start).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.hosts import Host

ENV = {"pd": "PD_SERVER", "tikv": "TIKV_SERVER", "tidb": "TIDB_SERVER"}
BINARY = {"pd": "pd-server", "tikv": "tikv-server", "tidb": "tidb-server"}
PORTS = {"pd": (2379, 2380), "tikv": (20160, 20180), "tidb": (4000, 10080)}  # (port, peer/status port)
DEPLOY = "/mnt/tidb-deploy"
# What TiKV needs on this machine whatever the topology says (docs/cluster.md, /work/tidb notes).
TIKV_HERE: dict[str, Any] = {"rocksdb.max-open-files": 4096, "raftdb.max-open-files": 4096,
                             "storage.reserve-space": "0MB", "storage.reserve-raft-space": "0MB",
                             "storage.block-cache.capacity": "256MB"}


def missing(roles: tuple[str, ...] = ("pd", "tikv", "tidb")) -> list[str]:
    """The environment variables naming an absent or unusable binary (of these roles)."""
    return [ENV[r] for r in roles if not os.environ.get(ENV[r]) or not os.access(os.environ[ENV[r]], os.X_OK)]


def _toml(flat: dict[str, Any]) -> str:
    """Dotted knobs -> TOML tables, as TiUP writes an instance's config file."""
    tables: dict[str, dict[str, Any]] = {}
    for key, value in flat.items():
        table, _, name = key.rpartition(".")
        tables.setdefault(table, {})[name] = value

    def lit(v: Any) -> str:
        return json.dumps(v) if isinstance(v, str | bool | int | float) else json.dumps(str(v))

    out = [f"{k} = {lit(v)}" for k, v in tables.pop("", {}).items()]
    for table in sorted(tables):
        out += ["", f"[{table}]"] + [f"{k} = {lit(v)}" for k, v in tables[table].items()]
    return "\n".join(out) + "\n"


@dataclass
class Instance:
    host: Host
    role: str
    port: int
    status_port: int
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def deploy(self) -> str:
        return f"{DEPLOY}/{self.role}-{self.port}"

    @property
    def local(self) -> Path:
        """The deploy directory as this process sees it (the host's directory)."""
        return self.host.dir / "tidb-deploy" / f"{self.role}-{self.port}"

    @property
    def pid(self) -> int | None:
        pids = self.host.pids_of(BINARY[self.role][:15])
        return pids[0] if pids else None


class TidbCluster:
    """PD, TiKV and TiDB instances on lab hosts; :meth:`topology` is the TiUP file describing them."""

    def __init__(self, server_configs: dict[str, dict[str, Any]] | None = None) -> None:
        self.server_configs = server_configs or {}
        self.instances: list[Instance] = []

    def add(self, host: Host, role: str) -> Instance:
        port, status = PORTS[role]
        cfg = dict(self.server_configs.get(role) or {})
        if role == "tikv":
            cfg = {**TIKV_HERE, **cfg}
        inst = Instance(host, role, port, status, cfg)
        self.instances.append(inst)
        return inst

    def of(self, role: str) -> list[Instance]:
        return [i for i in self.instances if i.role == role]

    def topology(self) -> str:
        sections: dict[str, Any] = {"global": {"user": "root", "ssh_port": 22, "deploy_dir": DEPLOY},
                                    "server_configs": self.server_configs}
        for role, key in (("pd", "pd_servers"), ("tikv", "tikv_servers"), ("tidb", "tidb_servers")):
            items = []
            for i in self.of(role):
                item: dict[str, Any] = {"host": i.host.addr}
                if role == "pd":
                    item.update(client_port=i.port, peer_port=i.status_port)
                else:
                    item.update(port=i.port, status_port=i.status_port)
                items.append(item)
            sections[key] = items
        return yaml.safe_dump(sections, sort_keys=False)

    # ---------------------------------------------------------------- deploy and start
    def deploy(self, inst: Instance) -> None:
        for d in ("bin", "conf", "data", "log"):
            (inst.local / d).mkdir(parents=True, exist_ok=True)
        src, dest = Path(os.environ[ENV[inst.role]]), inst.local / "bin" / BINARY[inst.role]
        try:
            os.link(src, dest)
        except OSError:
            shutil.copy2(src, dest)
        (inst.local / "conf" / f"{inst.role}.toml").write_text(_toml(inst.config))

    def start(self, timeout: float = 240.0) -> None:
        """Deploy and start every instance (PD, then TiKV, then TiDB), each ready before the next."""
        for inst in self.instances:
            self.deploy(inst)
        pd = self.of("pd")
        endpoints = ",".join(f"{i.host.addr}:{i.port}" for i in pd)
        initial = ",".join(f"pd-{i.host.addr}-{i.port}=http://{i.host.addr}:{i.status_port}" for i in pd)
        deadline = time.monotonic() + timeout
        for i in pd:
            a = i.host.addr
            self._run(i, f"bin/pd-server --name=pd-{a}-{i.port} --client-urls=http://{a}:{i.port} "
                         f"--advertise-client-urls=http://{a}:{i.port} --peer-urls=http://{a}:{i.status_port} "
                         f"--advertise-peer-urls=http://{a}:{i.status_port} --initial-cluster={initial} "
                         f"--data-dir=data --config=conf/pd.toml --log-file=log/pd.log")
        for i in pd:
            self._wait(i, deadline, lambda i=i: _http(f"http://{i.host.addr}:{i.port}/pd/api/v1/health"))
        for i in self.of("tikv"):
            a = i.host.addr
            self._run(i, f"bin/tikv-server --pd-endpoints={endpoints} --addr={a}:{i.port} --advertise-addr={a}:{i.port} "
                         f"--status-addr={a}:{i.status_port} --advertise-status-addr={a}:{i.status_port} "
                         f"--data-dir=data --config=conf/tikv.toml --log-file=log/tikv.log")
        pd0 = pd[0]
        for i in self.of("tikv"):
            self._wait(i, deadline, lambda i=i: _store_up(pd0, i))
        # without a TiKV, TiDB keeps its data in its embedded store (unistore): not a production
        # layout, but real PD and TiDB servers for the tests that need no TiKV
        store = f"--store=tikv --path={endpoints}" if self.of("tikv") else "--store=unistore --path=data/unistore"
        for i in self.of("tidb"):
            a = i.host.addr
            self._run(i, f"bin/tidb-server {store} --host={a} -P {i.port} "
                         f"--advertise-address={a} --status-host={a} --status={i.status_port} "
                         f"--config=conf/tidb.toml --log-file=log/tidb.log --temp-dir=data")
        for i in self.of("tidb"):
            self._wait(i, deadline, lambda i=i: _sql(i, "select 1"))

    def _run(self, inst: Instance, command: str) -> None:
        inst.host.start_server(f"sh -c 'cd {inst.deploy} && exec {command}'", f"{inst.deploy}/log/stderr.log")

    def _wait(self, inst: Instance, deadline: float, ready: Any) -> None:
        gone = 0
        while time.monotonic() < deadline:
            if ready():
                return
            gone = gone + 1 if inst.pid is None else 0
            if gone > 5:  # not running for 5 s: it exited
                break
            time.sleep(1)
        log = inst.local / "log"
        tails = []
        for name in (f"{inst.role}.log", "stderr.log"):
            p = log / name
            if p.is_file():
                tails.append(f"{name}: " + " | ".join(p.read_text(errors="replace").splitlines()[-5:]))
        raise RuntimeError(f"{inst.role} on {inst.host.addr} did not become ready: {'; '.join(tails)[-1500:]}")

    def sql(self, statement: str, db: str | None = None) -> str:
        return _sql(self.of("tidb")[0], statement, db, check=True)


def _http(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def _store_up(pd: Instance, kv: Instance) -> bool:
    try:
        with urllib.request.urlopen(f"http://{pd.host.addr}:{pd.port}/pd/api/v1/stores", timeout=2) as r:
            data = json.load(r)
    except (OSError, ValueError):
        return False
    return any(s.get("store", {}).get("address") == f"{kv.host.addr}:{kv.port}" and s.get("store", {}).get("state_name") == "Up"
               for s in data.get("stores") or [])


def _sql(inst: Instance, statement: str, db: str | None = None, check: bool = False) -> Any:
    argv = ["mysql", "-h", inst.host.addr, "-P", str(inst.port), "-u", "root", "--connect-timeout=3", "-N", "-e", statement]
    if db:
        argv += [db]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if check:
        if p.returncode != 0:
            raise RuntimeError(f"{statement!r}: {p.stderr.strip()[-400:]}")
        return p.stdout
    return p.returncode == 0
