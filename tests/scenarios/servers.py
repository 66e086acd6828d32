"""Private database servers for scenarios: our own mariadbd and redis-server (test layer).

Never the system services: each server gets a fresh data directory under the scenario's
temporary directory, a random free port on 127.0.0.1, a socket in the temporary directory,
and is started through `Procs` (its own process group, stopped by pid).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

from tests.scenarios.procs import Procs, wait_for
from tests.workloads.goservers import prometheus_sums


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
        self.extra: list[str] = []  # more redis-server arguments (e.g. --appendonly yes)

    def start(self, join: Callable[[], None] | None = None, timeout: float = 30.0) -> int:
        self.dir.mkdir(parents=True)
        p = self.procs.spawn(
            "redis-server",
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.dir), "--protected-mode", "yes", *self.extra],
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


def as_user(name: str, then: Callable[[], None] | None = None) -> Callable[[], None]:
    """A pre-exec hook: join the cgroups (``then``, as root) and drop to user ``name``."""
    import pwd

    pw = pwd.getpwnam(name)

    def hook() -> None:
        if then is not None:
            then()
        os.setgroups([])
        os.setgid(pw.pw_gid)
        os.setuid(pw.pw_uid)

    return hook


class Postgres:
    """A private PostgreSQL cluster in tmp/pg, run as the ``postgres`` user (it refuses root),
    listening on 127.0.0.1 and a socket in its own directory."""

    BIN = "/usr/lib/postgresql/15/bin"

    def __init__(self, procs: Procs, tmp: Path, **settings: object) -> None:
        import pwd

        self.procs = procs
        self.dir = tmp / "pg"
        self.datadir = self.dir / "data"
        self.port = free_port()
        self.settings = {"shared_buffers": "64MB", "max_connections": 50, "fsync": "on",
                         "synchronous_commit": "on", "log_min_messages": "warning", **settings}
        self.pid = 0
        self.uid = pwd.getpwnam("postgres").pw_uid

    @classmethod
    def bin(cls, name: str) -> str:
        path = Path(cls.BIN) / name
        return str(path) if path.exists() else (shutil.which(name) or name)

    def start(self, join: Callable[[], None] | None = None, timeout: float = 60.0) -> int:
        os.chmod(self.dir.parent, 0o755)
        self.dir.mkdir(parents=True)
        os.chown(self.dir, self.uid, -1)
        self.procs.run("initdb", [self.bin("initdb"), "-D", str(self.datadir), "-U", "postgres", "--auth=trust",
                                  "--no-sync", "-E", "UTF8"], timeout=120, join=as_user("postgres"))
        argv = [self.bin("postgres"), "-D", str(self.datadir), "-p", str(self.port), "-k", str(self.dir),
                "-c", "listen_addresses=127.0.0.1"]
        for k, v in self.settings.items():
            argv += ["-c", f"{k}={v}"]
        p = self.procs.spawn("postgres", argv, join=as_user("postgres", join))
        self.pid = p.pid

        def ready() -> bool:
            if p.poll() is not None:
                raise RuntimeError(f"postgres exited with {p.returncode}: {self.procs.log('postgres')[-300:]}")
            r = subprocess.run([self.bin("pg_isready"), "-h", str(self.dir), "-p", str(self.port)],
                               capture_output=True, timeout=10)
            return r.returncode == 0

        wait_for(ready, timeout, "postgres to accept connections", 0.2)
        return self.pid

    def psql(self, query: str, db: str = "postgres", timeout: float = 30.0) -> list[list[str]]:
        r = subprocess.run([self.bin("psql"), "-h", str(self.dir), "-p", str(self.port), "-U", "postgres", "-d", db,
                            "-At", "-F", "\t", "-c", query], capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"psql: {query[:60]}: {r.stderr.strip()}")
        return [line.split("\t") for line in r.stdout.splitlines()]

    def pgbench(self, *args: str) -> list[str]:
        return [self.bin("pgbench"), "-h", str(self.dir), "-p", str(self.port), "-U", "postgres", *args]

    def backends(self, application: str = "pgbench") -> list[int]:
        """Pids of the backends serving ``application`` (pg_stat_activity)."""
        rows = self.psql(f"SELECT pid FROM pg_stat_activity WHERE application_name = '{application}' "
                         "AND backend_type = 'client backend'")
        return sorted(int(r[0]) for r in rows if r and r[0].isdigit())

    def stat(self, query: str) -> float:
        rows = self.psql(query)
        try:
            return float(rows[0][0])
        except (IndexError, ValueError):
            return 0.0


class Etcd:
    """A private single-member etcd (Debian's etcd-server, a Go program) on 127.0.0.1."""

    def __init__(self, procs: Procs, tmp: Path) -> None:
        self.procs = procs
        self.dir = tmp / "etcd"
        self.port = free_port()
        self.peer = free_port()
        self.pid = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, join: Callable[[], None] | None = None, timeout: float = 30.0) -> int:
        self.dir.mkdir(parents=True)
        peer = f"http://127.0.0.1:{self.peer}"
        p = self.procs.spawn("etcd", [
            "etcd", "--name", "scn", "--data-dir", str(self.dir / "data"), "--listen-client-urls", self.endpoint,
            "--advertise-client-urls", self.endpoint, "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer, "--initial-cluster", f"scn={peer}",
            "--log-level", "warn", "--logger", "zap"], join=join)
        self.pid = p.pid

        def ready() -> bool:
            if p.poll() is not None:
                raise RuntimeError(f"etcd exited with {p.returncode}: {self.procs.log('etcd')[-300:]}")
            r = subprocess.run(self.ctl("endpoint", "health"), capture_output=True, timeout=10)
            return r.returncode == 0

        wait_for(ready, timeout, "etcd to answer endpoint health", 0.2)
        return self.pid

    def ctl(self, *args: str) -> list[str]:
        return ["etcdctl", f"--endpoints={self.endpoint}", *args]

    def metrics(self, *names: str) -> dict[str, float]:
        """Sums of the named Prometheus series (all label sets) from etcd's own /metrics."""
        import urllib.request

        with urllib.request.urlopen(f"{self.endpoint}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        return prometheus_sums(text, names)


class Memcached:
    """A private memcached on 127.0.0.1 (run as nobody: it refuses root without -u)."""

    def __init__(self, procs: Procs, threads: int = 4) -> None:
        self.procs = procs
        self.port = free_port()
        self.threads = threads
        self.pid = 0

    def start(self, join: Callable[[], None] | None = None, timeout: float = 20.0) -> int:
        p = self.procs.spawn("memcached", ["memcached", "-u", "nobody", "-l", "127.0.0.1", "-p", str(self.port),
                                           "-U", "0", "-t", str(self.threads), "-m", "64", "-c", "1024"], join=join)
        self.pid = p.pid
        wait_for(lambda: self.stats() is not None or (p.poll() is not None and _fail("memcached", p, self.procs)),
                 timeout, "memcached to answer stats", 0.1)
        return self.pid

    def stats(self) -> dict[str, float] | None:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
                s.sendall(b"stats\r\n")
                buf = b""
                while not buf.endswith(b"END\r\n"):
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
        except OSError:
            return None
        out: dict[str, float] = {}
        for line in buf.decode(errors="replace").splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[0] == "STAT":
                try:
                    out[parts[1]] = float(parts[2])
                except ValueError:
                    pass
        return out

    def slap(self, concurrency: int, seconds: int) -> list[str]:
        """memcslap get load for ``seconds`` (memcslap builds its keys up front, so it runs in short rounds)."""
        return ["timeout", str(seconds), "sh", "-c",
                f"while :; do memcslap --servers=127.0.0.1:{self.port} --concurrency={concurrency} "
                "--execute-number=20000 --test=get -q; done"]


class Nginx:
    """A private nginx serving a small static file on 127.0.0.1, ``workers`` worker processes."""

    def __init__(self, procs: Procs, tmp: Path, workers: int = 1) -> None:
        self.procs = procs
        self.dir = tmp / "nginx"
        self.port = free_port()
        self.workers = workers
        self.pid = 0

    def start(self, join: Callable[[], None] | None = None, timeout: float = 20.0) -> int:
        (self.dir / "html").mkdir(parents=True)
        (self.dir / "logs").mkdir()
        (self.dir / "html" / "index.html").write_text("x" * 512)
        conf = self.dir / "nginx.conf"
        conf.write_text(f"""daemon off;
master_process on;
worker_processes {self.workers};
pid {self.dir}/nginx.pid;
error_log {self.dir}/logs/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {self.dir}/body;
    proxy_temp_path {self.dir}/proxy;
    fastcgi_temp_path {self.dir}/fastcgi;
    uwsgi_temp_path {self.dir}/uwsgi;
    scgi_temp_path {self.dir}/scgi;
    server {{
        listen 127.0.0.1:{self.port};
        location / {{ root {self.dir}/html; }}
    }}
}}
""")
        os.chmod(self.dir.parent, 0o755)
        for d in (self.dir, self.dir / "html"):
            os.chmod(d, 0o755)
        p = self.procs.spawn("nginx", ["nginx", "-c", str(conf), "-p", str(self.dir)], join=join)
        self.pid = p.pid

        def ready() -> bool:
            if p.poll() is not None:
                raise RuntimeError(f"nginx exited with {p.returncode}: {self.procs.log('nginx')[-300:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=2):
                    return True
            except OSError:
                return False

        wait_for(ready, timeout, "nginx to listen", 0.1)
        return self.pid

    def wrk(self, threads: int, connections: int, seconds: int) -> list[str]:
        return ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", f"http://127.0.0.1:{self.port}/index.html"]


def _fail(name: str, p: subprocess.Popen[bytes], procs: Procs) -> bool:
    raise RuntimeError(f"{name} exited with {p.returncode}: {procs.log(name)[-300:]}")
