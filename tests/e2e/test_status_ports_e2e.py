"""Attaching never harms the target (issue 27): real redis-server and mariadbd, their logs captured.

The server-status collector looks for each target's HTTP status port. A Redis takes an HTTP
request line for Cross Protocol Scripting ("Possible SECURITY ATTACK detected"), a MariaDB
counts a connection closed before its handshake as an aborted connect and (log_warnings=4) logs
it. `profiler attach` with every collector, as a user would run it, must leave no such line and
no such count. Each test first proves its own measure can see the harm (one bare connection, one
HTTP line), so a test that cannot fail fails.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from profiler.bundle import Bundle
from profiler.cli import main

pytestmark = [pytest.mark.privileged]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _attach(pid: int, out: Path) -> Bundle:
    """attach with the default collector set, as a user runs it (server-status included)."""
    rc = main(["attach", "--pid", str(pid), "-d", "3s", "-o", str(out), "--no-report"])
    assert rc in (0, 6), rc  # 6: a collector this host cannot run (no perf, no root) makes it partial
    b = Bundle.open(out)
    rec = b.manifest.collector("server-status")
    assert rec is not None and rec.status == "skipped" and "not asked" in (rec.reason or ""), rec
    return b


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int, Path]]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    port, log = _free_port(), tmp_path / "redis.log"
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--logfile", str(log), "--dir", str(tmp_path),
                             "--loglevel", "verbose"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while "Ready to accept connections" not in (log.read_text(errors="replace") if log.exists() else ""):
            assert proc.poll() is None and time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.1)
        yield proc, port, log
    finally:
        _stop(proc)


def test_attaching_to_redis_logs_no_security_warning(redis: tuple[subprocess.Popen[bytes], int, Path],
                                                     tmp_path: Path) -> None:
    proc, port, log = redis
    _attach(proc.pid, tmp_path / "cap")
    time.sleep(0.3)
    text = log.read_text(errors="replace")
    assert "SECURITY ATTACK" not in text, text[-600:]
    # the measure sees the harm: one HTTP request line is what an unguarded probe sent
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        s.recv(100)
    deadline = time.monotonic() + 5
    while "SECURITY ATTACK" not in log.read_text(errors="replace"):
        assert time.monotonic() < deadline, "redis did not log the probe: this test could not see the harm"
        time.sleep(0.1)


@pytest.fixture
def mariadb(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path, Path]]:
    for tool in ("mariadbd", "mariadb-install-db", "mariadb"):
        if shutil.which(tool) is None and not os.path.exists(f"/usr/sbin/{tool}"):
            pytest.skip(f"{tool} is not installed")
    data, sock, log = tmp_path / "data", tmp_path / "mysql.sock", tmp_path / "mariadb.err"
    subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=root", "--skip-test-db",
                    "--auth-root-authentication-method=normal"], check=True, capture_output=True, timeout=180)
    proc = subprocess.Popen([shutil.which("mariadbd") or "/usr/sbin/mariadbd", "--no-defaults", f"--datadir={data}",
                             "--user=root", "--bind-address=127.0.0.1", f"--port={_free_port()}", f"--socket={sock}",
                             f"--pid-file={tmp_path / 'pid'}", f"--log-error={log}", "--skip-log-bin",
                             "--innodb-buffer-pool-size=32M", "--innodb-use-native-aio=0", "--log-warnings=4"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        while _sql(sock, "SELECT 1") is None:
            assert proc.poll() is None and time.monotonic() < deadline, "mariadbd did not start"
            time.sleep(0.3)
        yield proc, sock, log
    finally:
        _stop(proc)


def _sql(sock: Path, query: str) -> str | None:
    r = subprocess.run(["mariadb", f"--socket={sock}", "-uroot", "-N", "-e", query], capture_output=True, text=True,
                       timeout=30)
    return r.stdout.strip() if r.returncode == 0 else None


def _aborted(sock: Path) -> int:
    out = _sql(sock, "SHOW GLOBAL STATUS LIKE 'Aborted_connects'")
    assert out is not None
    return int(out.split()[-1])


def _tcp_port(pid: int) -> int:
    from profiler.collectors.server.ports import listening_sockets

    found = listening_sockets(pid)
    assert found, "mariadbd listens on no TCP port"
    return found[0][1]


def test_attaching_to_mariadb_counts_no_aborted_connection(mariadb: tuple[subprocess.Popen[bytes], Path, Path],
                                                           tmp_path: Path) -> None:
    proc, sock, log = mariadb
    before = _aborted(sock)
    lines_before = log.read_text(errors="replace").count("Aborted connection")
    _attach(proc.pid, tmp_path / "cap")
    assert _aborted(sock) == before
    assert log.read_text(errors="replace").count("Aborted connection") == lines_before
    # the measure sees the harm: a connection closed before the handshake is counted and logged
    with socket.create_connection(("127.0.0.1", _tcp_port(proc.pid))) as s:
        s.recv(64)
    deadline = time.monotonic() + 10
    while _aborted(sock) == before:
        assert time.monotonic() < deadline, "mariadb did not count the bare connection: this test could not see the harm"
        time.sleep(0.2)
    assert log.read_text(errors="replace").count("Aborted connection") > lines_before
