"""Private database servers for scenarios: our own mariadbd and redis-server (test layer).

Never the system services: each server gets a fresh data directory under the scenario's
temporary directory, a random free port on 127.0.0.1, a socket in the temporary directory,
and is started through `Procs` (its own process group, stopped by pid).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

from tests.scenarios.procs import Procs, wait_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def have(*programs: str) -> str | None:
    """None when every program is on PATH, else which one is missing."""
    for p in programs:
        if shutil.which(p) is None:
            return f"{p} is not installed"
    return None


class MariaDB:
    """A private mariadbd in tmp/mariadb, root without password over its socket."""

    def __init__(self, procs: Procs, tmp: Path, **options: object) -> None:
        self.procs = procs
        self.dir = tmp / "mariadb"
        self.datadir = self.dir / "data"
        self.socket = self.dir / "mysqld.sock"
        self.port = free_port()
        self.options = {
            "innodb-buffer-pool-size": "128M",
            "innodb-log-file-size": "48M",
            "max-connections": 200,
            **options,
        }
        self.pid = 0

    def start(self, join: Callable[[], None] | None = None, timeout: float = 60.0) -> int:
        self.dir.mkdir(parents=True)
        self.procs.run(
            "mariadb-install-db",
            ["mariadb-install-db", "--no-defaults", f"--datadir={self.datadir}", "--user=root",
             "--auth-root-authentication-method=normal", "--skip-test-db"],
            timeout=120,
        )
        argv = [
            shutil.which("mariadbd") or "/usr/sbin/mariadbd", "--no-defaults",
            f"--datadir={self.datadir}", f"--port={self.port}", "--bind-address=127.0.0.1",
            f"--socket={self.socket}", "--user=root", f"--pid-file={self.dir / 'mariadbd.pid'}",
            f"--log-error={self.dir / 'error.log'}", "--skip-log-bin", "--skip-name-resolve",
            "--innodb-use-native-aio=0",
        ]
        argv += [f"--{k}={v}" for k, v in self.options.items()]
        p = self.procs.spawn("mariadbd", argv, join=join)
        self.pid = p.pid
        wait_for(lambda: self._ping(p), timeout, "mariadbd to accept connections", 0.2)
        self.sql("CREATE DATABASE IF NOT EXISTS sbtest")
        return self.pid

    def _ping(self, p: subprocess.Popen[bytes]) -> bool:
        if p.poll() is not None:
            err = (self.dir / "error.log").read_text(errors="replace") if (self.dir / "error.log").exists() else ""
            raise RuntimeError(f"mariadbd exited with {p.returncode}: {err.strip().splitlines()[-1:]}")
        r = subprocess.run(["mariadb", f"--socket={self.socket}", "-uroot", "-e", "SELECT 1"],
                           capture_output=True, timeout=10)
        return r.returncode == 0

    def sql(self, query: str, timeout: float = 30.0) -> list[list[str]]:
        r = subprocess.run(["mariadb", f"--socket={self.socket}", "-uroot", "-N", "-B", "-e", query],
                           capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"mariadb: {query[:60]}: {r.stderr.strip()}")
        return [line.split("\t") for line in r.stdout.splitlines()]

    def status(self, *names: str) -> dict[str, float]:
        """SHOW GLOBAL STATUS values (numbers) for the given names."""
        rows = self.sql("SHOW GLOBAL STATUS WHERE Variable_name IN ({})".format(
            ",".join(f"'{n}'" for n in names)))
        out = {}
        for name, value in rows:
            try:
                out[name] = float(value)
            except ValueError:
                pass
        return out

    def sysbench(self, test: str, *args: str) -> list[str]:
        """argv for sysbench <test> against this server."""
        return ["sysbench", test, "--db-driver=mysql", f"--mysql-socket={self.socket}",
                "--mysql-user=root", "--mysql-db=sbtest", *args]


class Redis:
    """A private redis-server on 127.0.0.1, no persistence, data dir in tmp."""

    def __init__(self, procs: Procs, tmp: Path) -> None:
        self.procs = procs
        self.dir = tmp / "redis"
        self.port = free_port()
        self.pid = 0

    def start(self, join: Callable[[], None] | None = None, timeout: float = 30.0) -> int:
        self.dir.mkdir(parents=True)
        p = self.procs.spawn(
            "redis-server",
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.dir), "--protected-mode", "yes"],
            join=join,
        )
        self.pid = p.pid

        def ready() -> bool:
            if p.poll() is not None:
                raise RuntimeError(f"redis-server exited with {p.returncode}: {self.procs.log('redis-server')[-200:]}")
            r = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(self.port), "PING"],
                               capture_output=True, text=True, timeout=10)
            return r.stdout.strip() == "PONG"

        wait_for(ready, timeout, "redis-server to answer PING", 0.1)
        return self.pid

    def benchmark(self, *args: str) -> list[str]:
        return ["redis-benchmark", "-h", "127.0.0.1", "-p", str(self.port), *args]
