"""Real Go servers for tests and scenarios: our Go workload and Debian's etcd (test layer).

Both listen on 127.0.0.1 only, keep their data under a directory the caller owns, and are
started through a ``spawn(name, argv)`` the caller gives (the scenario runner's ``Procs.spawn``,
or :class:`Children` in pytest), so they are stopped by pid, never by name.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.workloads import gobuild

Spawn = Callable[..., "subprocess.Popen[bytes]"]  # spawn(name, argv, join=None, env=None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - our own server on 127.0.0.1
        return bytes(r.read())


def prometheus_sums(text: str, names: tuple[str, ...] | list[str]) -> dict[str, float]:
    """Sums over label sets of the named series in Prometheus exposition text: the tests' own
    minimal reading of a server's counters, independent of the profiler's parser."""
    out = dict.fromkeys(names, 0.0)
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in out:
            try:
                out[name] += float(line.rsplit(" ", 1)[1])
            except ValueError:
                pass
    return out


def wait_http(url: str, proc: subprocess.Popen[bytes] | None, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before answering {url}")
        try:
            get(url, 2.0)
            return
        except OSError as exc:
            last = str(exc)
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not answer {url} within {timeout:.0f}s ({last})")


class Children:
    """pytest's spawner: each child in its own session, stopped by pid (TERM, then KILL)."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, name: str, argv: list[str], join: Callable[[], None] | None = None,
              env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = open(self.logdir / f"{name}.log", "ab")  # noqa: SIM115 - the child keeps it
        try:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True, preexec_fn=join, env=env)
        finally:
            log.close()
        self.procs.append(p)
        return p

    def stop_all(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()


@contextmanager
def children(logdir: Path) -> Iterator[Children]:
    c = Children(logdir)
    try:
        yield c
    finally:
        c.stop_all()


class GoWorkload:
    """tests/workloads/goworkload in one -mode, on a port we choose."""

    def __init__(self, mode: str, *args: str, exe: Path | None = None) -> None:
        self.mode = mode
        self.args = list(args)
        self.exe = exe
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def argv(self) -> list[str]:
        exe = self.exe or gobuild.build()
        return [str(exe), "-mode", self.mode, "-addr", f"127.0.0.1:{self.port}", "-stdin-exit=false", *self.args]

    def start(self, spawn: Spawn, timeout: float = 20.0, join: Callable[[], None] | None = None,
              env: dict[str, str] | None = None) -> int:
        self.proc = spawn(f"goworkload-{self.mode}", self.argv(), join=join, env=env)
        wait_http(f"{self.url}/stats", self.proc, timeout, f"goworkload -mode {self.mode}")
        return self.proc.pid

    def stats(self) -> dict[str, Any]:
        data = json.loads(get(f"{self.url}/stats"))
        assert isinstance(data, dict)
        return data


class Etcd:
    """Debian's etcd on 127.0.0.1 (client, peer and metrics ports of our choosing), data in ``dir``,
    net/http/pprof on (``--enable-pprof``)."""

    def __init__(self, dir: Path, *extra: str) -> None:
        self.dir = dir
        self.client = free_port()
        self.peer = free_port()
        self.extra = list(extra)
        self.proc: subprocess.Popen[bytes] | None = None

    @staticmethod
    def missing() -> str | None:
        for prog in ("etcd", "etcdctl"):
            if shutil.which(prog) is None:
                return f"{prog} is not installed (Debian: etcd-server, etcd-client)"
        return None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.client}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def argv(self) -> list[str]:
        return [shutil.which("etcd") or "etcd", "--name", "profiler-test", "--data-dir", str(self.dir / "data"),
                "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
                "--listen-peer-urls", f"http://127.0.0.1:{self.peer}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer}",
                "--initial-cluster", f"profiler-test=http://127.0.0.1:{self.peer}",
                "--enable-pprof", "--log-level", "warn", *self.extra]

    def start(self, spawn: Spawn, timeout: float = 30.0, join: Callable[[], None] | None = None,
              env: dict[str, str] | None = None) -> int:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.proc = spawn("etcd", self.argv(), join=join, env=env)
        wait_http(f"{self.url}/health", self.proc, timeout, "etcd")
        return self.proc.pid

    def metric_sums(self, *names: str) -> dict[str, float]:
        """Sums over label sets of the named series in etcd's own /metrics (read here, not by the profiler)."""
        return prometheus_sums(get(f"{self.url}/metrics", 10).decode("utf-8", "replace"), names)

    def put(self, key: str, value: str) -> None:
        import base64

        body = json.dumps({"key": base64.b64encode(key.encode()).decode(),
                           "value": base64.b64encode(value.encode()).decode()}).encode()
        req = urllib.request.Request(f"{self.url}/v3/kv/put", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310 - our own server on 127.0.0.1
            r.read()
