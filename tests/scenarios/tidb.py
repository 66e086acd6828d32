"""Real TiDB servers for scenarios: tidb-server on its embedded unistore, or PD + TiKV + TiDB (test layer).

The binaries come from the environment (``TIDB_SERVER``, ``PD_SERVER``, ``TIKV_SERVER``, and the
load clients ``GO_YCSB``, ``GO_TPC``); a scenario that needs one that is not set is skipped
with the reason (:func:`missing`). Every server listens on 127.0.0.1 only, on free ports, keeps
its data and logs under the scenario's temporary directory, and is started through ``Procs``
(its own process group, stopped by pid). The scenarios read the servers' own account of
themselves here, independently of the profiler: their ``/metrics`` (summed with the tests' own
minimal reader), their goroutine dumps (``/debug/pprof/goroutine?debug=2``, text-matched), the
slow query log.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from tests.scenarios.procs import Procs, wait_for
from tests.scenarios.servers import free_port
from tests.workloads.goservers import prometheus_sums

ENV = {"tidb-server": "TIDB_SERVER", "pd-server": "PD_SERVER", "tikv-server": "TIKV_SERVER", "go-ycsb": "GO_YCSB",
       "go-tpc": "GO_TPC"}


def binary(name: str) -> str:
    path = os.environ.get(ENV[name], "")
    if not path:
        raise RuntimeError(f"{ENV[name]} is not set")
    return path


def missing(*names: str) -> str | None:
    """Why these binaries cannot be used (their variable unset, or not an executable file), or None."""
    for name in names:
        var = ENV[name]
        path = os.environ.get(var, "")
        if not path:
            return f"{var} is not set (the {name} binary to run)"
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            return f"{var}={path} is not an executable file"
    for prog in ("mariadb",):
        if subprocess.run(["sh", "-c", f"command -v {prog}"], capture_output=True).returncode != 0:
            return f"{prog} (the SQL client) is not installed"
    return None


def http_get(url: str, timeout: float = 10.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - our own server on 127.0.0.1
        return bytes(r.read()).decode("utf-8", "replace")


def goroutines_with(url: str, *frames: str) -> int:
    """Goroutines in a Go server's own text dump (``?debug=2``) whose stack holds any of these
    function names (matched as ``name(`` at the start of a line, package path or not)."""
    text = http_get(f"{url}/debug/pprof/goroutine?debug=2", 30)
    n = 0
    for block in text.split("\n\n"):
        if not block.startswith("goroutine "):
            continue
        lines = [ln.rsplit("/", 1)[-1] for ln in block.splitlines()[1:] if not ln.startswith("\t")]
        if any(ln.startswith(f + "(") for ln in lines for f in frames):
            n += 1
    return n


class TiDB:
    """tidb-server on 127.0.0.1: unistore in ``dir`` (``pd=None``) or a real cluster's PD."""

    def __init__(self, procs: Procs, dir: Path, pd: str | None = None, config: str = "",
                 env: dict[str, str] | None = None) -> None:
        self.procs, self.dir, self.pd, self.config, self.env = procs, dir, pd, config, env
        self.port, self.status = free_port(), free_port()
        self.pid = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.status}"

    @property
    def slow_log(self) -> Path:
        return self.dir / "slow.log"

    @property
    def log(self) -> Path:
        return self.dir / "tidb.log"

    def start(self, join: Callable[[], None] | None = None, timeout: float = 120.0) -> int:
        self.dir.mkdir(parents=True, exist_ok=True)
        cfg = self.dir / "tidb.toml"
        cfg.write_text(self.config)
        store = ["-store", "tikv", "-path", self.pd] if self.pd else ["-store", "unistore", "-path",
                                                                         str(self.dir / "unistore")]
        argv = [binary("tidb-server"), *store, "-host", "127.0.0.1", "-P", str(self.port), "-status-host",
                "127.0.0.1", "-status", str(self.status), "-config", str(cfg), "-L", "warn", "-log-file",
                str(self.log), "-log-slow-query", str(self.slow_log), "-temp-dir", str(self.dir / "tmp")]
        p = self.procs.spawn("tidb-server", argv, join=join, env=self.env)
        self.pid = p.pid
        wait_for(lambda: self._ping(p), timeout, "tidb-server to accept SQL", 0.5)
        self.sql("CREATE DATABASE IF NOT EXISTS sbtest")
        return self.pid

    def _ping(self, p: subprocess.Popen[bytes]) -> bool:
        if p.poll() is not None:
            tail = self.log.read_text(errors="replace").strip().splitlines()[-3:] if self.log.exists() else []
            raise RuntimeError(f"tidb-server exited with {p.returncode}: {tail}")
        r = subprocess.run(self._client("SELECT 1"), capture_output=True, timeout=10)
        return r.returncode == 0

    def _client(self, query: str) -> list[str]:
        return ["mariadb", "-h127.0.0.1", f"-P{self.port}", "-uroot", "--skip-ssl", "-N", "-B", "-e", query]

    def sql(self, query: str, timeout: float = 60.0) -> list[list[str]]:
        r = subprocess.run(self._client(query), capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"tidb: {query[:60]}: {r.stderr.strip()}")
        return [line.split("\t") for line in r.stdout.splitlines()]

    def metric_sums(self, *names: str) -> dict[str, float]:
        return prometheus_sums(http_get(f"{self.url}/metrics", 20), names)

    def goroutines_with(self, *frames: str) -> int:
        return goroutines_with(self.url, *frames)

    def slow_queries(self, field: str) -> tuple[int, float]:
        """Statements in the slow log so far and the sum of one of their figures (``# Field: value``,
        several to a line: ``# LockKeys_time: 0.49 Request_count: 1``)."""
        n, total = 0, 0.0
        try:
            text = self.slow_log.read_text(errors="replace")
        except OSError:
            return 0, 0.0
        for line in text.splitlines():
            if line.startswith("# Time:"):
                n += 1
            elif line.startswith("# ") and f"{field}: " in line:
                words = line[2:].split(" ")
                for k, v in zip(words, words[1:], strict=False):
                    if k == f"{field}:":
                        try:
                            total += float(v)
                        except ValueError:
                            pass
        return n, total

    def sysbench(self, test: str, *args: str) -> list[str]:
        return ["sysbench", test, "--db-driver=mysql", "--mysql-host=127.0.0.1", f"--mysql-port={self.port}",
                "--mysql-user=root", "--mysql-db=sbtest", *args]

    def go_ycsb(self, verb: str, *props: str, files: tuple[str, ...] = ()) -> list[str]:
        """go-ycsb against this server's MySQL port (its debug listener moved to loopback: pass
        ``debug.pprof=127.0.0.1:0``); ``files``: workload property files (``-P``)."""
        argv = [binary("go-ycsb"), verb, "mysql", "-p", "mysql.host=127.0.0.1", "-p", f"mysql.port={self.port}",
                "-p", "mysql.user=root", "-p", "mysql.db=test"]
        for f in files:
            argv += ["-P", f]
        for p in props:
            argv += ["-p", p]
        return argv

    def go_tpc(self, *args: str) -> list[str]:
        return [binary("go-tpc"), *args, "-H", "127.0.0.1", "-P", str(self.port), "-U", "root"]


class PD:
    """One pd-server on 127.0.0.1, data and log in ``dir``."""

    def __init__(self, procs: Procs, dir: Path) -> None:
        self.procs, self.dir = procs, dir
        self.client, self.peer = free_port(), free_port()
        self.pid = 0

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client}"

    @property
    def url(self) -> str:
        return f"http://{self.endpoint}"

    def start(self, join: Callable[[], None] | None = None, timeout: float = 60.0) -> int:
        self.dir.mkdir(parents=True, exist_ok=True)
        peer = f"http://127.0.0.1:{self.peer}"
        argv = [binary("pd-server"), "--name", "pd1", "--data-dir", str(self.dir / "data"),
                "--client-urls", self.url, "--advertise-client-urls", self.url, "--peer-urls", peer,
                "--advertise-peer-urls", peer, "--initial-cluster", f"pd1={peer}", "--log-file",
                str(self.dir / "pd.log"), "-L", "warn"]
        p = self.procs.spawn("pd-server", argv, join=join)
        self.pid = p.pid
        wait_for(lambda: self._ok(p), timeout, "pd-server to answer", 0.5)
        return self.pid

    def _ok(self, p: subprocess.Popen[bytes]) -> bool:
        if p.poll() is not None:
            raise RuntimeError(f"pd-server exited with {p.returncode}")
        try:
            http_get(f"{self.url}/pd/api/v1/health", 5)
            return True
        except OSError:
            return False

    def stores_up(self) -> int:
        import json

        data = json.loads(http_get(f"{self.url}/pd/api/v1/stores", 5))
        return sum(1 for s in data.get("stores") or [] if (s.get("store") or {}).get("state_name") == "Up")


TIKV_CONFIG = """\
[server]
grpc-concurrency = 2
[storage]
reserve-space = "0MB"
[storage.block-cache]
capacity = "256MB"
[rocksdb]
max-open-files = 4096
[raftdb]
max-open-files = 4096
"""


class TiKV:
    """One tikv-server on 127.0.0.1 joined to ``pd``, data and log in ``dir``."""

    def __init__(self, procs: Procs, dir: Path, pd: PD, config: str = TIKV_CONFIG) -> None:
        self.procs, self.dir, self.pd, self.config = procs, dir, pd, config
        self.port, self.status = free_port(), free_port()
        self.pid = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.status}"

    def start(self, join: Callable[[], None] | None = None, timeout: float = 120.0) -> int:
        self.dir.mkdir(parents=True, exist_ok=True)
        cfg = self.dir / "tikv.toml"
        cfg.write_text(self.config)
        argv = [binary("tikv-server"), "--pd-endpoints", self.pd.endpoint, "--addr", f"127.0.0.1:{self.port}",
                "--status-addr", f"127.0.0.1:{self.status}", "--data-dir", str(self.dir / "data"),
                "--log-file", str(self.dir / "tikv.log"), "--config", str(cfg)]
        p = self.procs.spawn("tikv-server", argv, join=join)
        self.pid = p.pid
        wait_for(lambda: self._up(p), timeout, "tikv-server to join PD", 0.5)
        return self.pid

    def _up(self, p: subprocess.Popen[bytes]) -> bool:
        if p.poll() is not None:
            log = self.dir / "tikv.log"
            tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
            raise RuntimeError(f"tikv-server exited with {p.returncode}: {tail}")
        try:
            return self.pd.stores_up() >= 1
        except (OSError, ValueError):
            return False

    def metric_sums(self, *names: str) -> dict[str, float]:
        return prometheus_sums(http_get(f"{self.url}/metrics", 20), names)


class Cluster:
    """PD + one TiKV + TiDB on 127.0.0.1 (``join``: per role, the hook that puts it in a cgroup)."""

    def __init__(self, procs: Procs, tmp: Path, tidb_config: str = "", tikv_config: str = TIKV_CONFIG) -> None:
        self.pd = PD(procs, tmp / "pd")
        self.tikv = TiKV(procs, tmp / "tikv", self.pd, tikv_config)
        self.tidb = TiDB(procs, tmp / "tidb", pd=self.pd.endpoint, config=tidb_config)

    def start(self, join: dict[str, Callable[[], None]] | None = None) -> None:
        join = join or {}
        self.pd.start(join.get("pd"))
        self.tikv.start(join.get("tikv"))
        t0 = time.monotonic()
        self.tidb.start(join.get("tidb"), timeout=180.0)
        self.started_in = time.monotonic() - t0

    @property
    def pids(self) -> list[int]:
        return [self.tidb.pid, self.tikv.pid, self.pd.pid]
