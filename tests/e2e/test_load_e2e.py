"""End to end: the load on the timeline and thread sweeps, with sysbench against our own MariaDB.

One private mariadbd (tests/scenarios/servers.py: its own data directory, a random port on
127.0.0.1, stopped by pid) serves every test here, inside a cgroup v1 CPU group whose quota the
sweep test sets: a server held to 5% of a core must stop scaling with client threads (a quota
well under what the busy shared host leaves it, so the cap, not the neighbours, decides), and
the group's own throttling counters confirm it independently of the profiler. Each load is
bounded by sysbench --time. About 2 minutes in all.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from profiler.bundle import Bundle, members
from profiler.cli import main
from tests.conftest import TESTS
from tests.scenarios import cgroup
from tests.scenarios.procs import Procs, wait_for
from tests.scenarios.servers import MariaDB, Postgres, have

pytestmark = [
    pytest.mark.privileged,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CI runs as root)"),
    pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed"),
    pytest.mark.skipif(have("mariadbd", "mariadb-install-db", "mariadb", "sysbench") is not None,
                       reason=have("mariadbd", "mariadb-install-db", "mariadb", "sysbench") or ""),
    pytest.mark.skipif(cgroup.available(("cpu",)) is not None, reason=cgroup.available(("cpu",)) or ""),
]

TABLE = ("--tables=2", "--table-size=10000")


@dataclass
class Server:
    db: MariaDB
    group: cgroup.Group

    def sysbench(self, *args: str) -> list[str]:
        return self.db.sysbench("oltp_point_select", *TABLE, *args)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("load-mariadb")
    procs = Procs(tmp)
    group = cgroup.Group(f"profiler-load-{os.getpid()}-{uuid.uuid4().hex[:6]}", controllers=("cpu",)).create()
    try:
        db = MariaDB(procs, tmp)
        db.start(join=group.join_self)
        procs.run("sysbench-prepare", db.sysbench("oltp_point_select", *TABLE, "prepare"), timeout=120)
        yield Server(db, group)
    finally:
        for p in reversed(procs.started):
            procs.stop(p)
        problems = group.destroy()
        assert not problems, problems


def report_json(bundle: Path, capsys: pytest.CaptureFixture[str]) -> dict:  # type: ignore[type-arg]
    capsys.readouterr()
    assert main(["report", str(bundle), "--format", "json"]) == 0
    return dict(json.loads(capsys.readouterr().out))


def test_run_series_matches_sysbench_summary(server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cap"
    rc = main(["run", "--pid", str(server.db.pid), "-o", str(out), "--",
               *server.sysbench("--threads=2", "--time=12", "--report-interval=1", "run")])
    assert rc == 0
    b = Bundle.open(out)
    assert b.manifest.load is not None and b.manifest.load.source == "run"
    assert b.manifest.load.times == members.LOAD_TIMES and b.has(members.LOAD_TIMES)
    d = report_json(out, capsys)
    load = d["load"]
    assert load["tool"] == "sysbench" and load["status"] == "ok"
    assert load["placed_by"] == "the time each report line was read"
    series = load["series"]
    assert len(series) >= 10
    # the reports arrive a second apart (sysbench's reporter may be late by a tick on a busy host),
    # inside the capture
    ts = [p["t"] for p in series]
    gaps = sorted(b2 - b1 for b1, b2 in zip(ts, ts[1:], strict=False))
    assert 0.9 < gaps[len(gaps) // 2] < 1.1 and gaps[0] > 0.2, gaps
    assert 0 < ts[0] and ts[-1] < (b.manifest.ended or 0) - b.manifest.clock.monotonic_start + 0.5
    # sysbench's own summary against the series: the intervals account for every transaction but
    # those of the unreported tail (--time=12 prints 11 lines; the summary covers ~12 s), and the
    # tail holds no more than its length at the run's best rate. A wrong scale or a lost or doubled
    # interval fails this; a slow last second (the mean against the summary was 5.4% off once on a
    # fresh CI host) does not. Each line's interval is its nominal second (dt) while sysbench's
    # reporter thread wakes a little late, so the reported seconds run up to a few ms past the sum
    # of dt: the tail is counted from the summary's length less that sum, plus 10 ms of such drift
    # (a fresh CI run printed 12 lines, leaving a 2.6 ms tail that held 363 transactions at 95,672/s)
    summary = load["summary"]
    covered = sum(p["tps"] * p["dt"] for p in series)
    tail_s = summary["seconds"] - sum(p["dt"] for p in series)
    tail = summary["transactions"] - covered
    assert 0 < tail_s < 2.5, (summary, len(series))
    drift_s = 0.010
    assert -len(series) <= tail <= (tail_s + drift_s) * max(p["tps"] for p in series) * 1.1 + 1, (covered, summary)
    assert all(p["p95_ms"] is not None for p in series)
    html = (out / "report.html").read_text()
    assert "Throughput (sysbench)" in html and 'id="load"' in html and "Latency p95 (sysbench)" in html


@pytest.mark.skipif(have("psql", "pg_isready") is not None or not Path(Postgres.bin("postgres")).exists(),
                    reason="PostgreSQL is not installed")
def test_run_with_sysbench_against_postgresql(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same reading for sysbench's pgsql driver, against our own PostgreSQL (its postmaster is
    the target: the backends sysbench's connections fork are its children)."""
    home = Path(tempfile.mkdtemp(prefix="profiler-load-pg-"))  # the postgres user must reach it (pytest's tmp is 0700)
    os.chmod(home, 0o755)
    procs = Procs(home)
    pg = Postgres(procs, home)
    try:
        pg.start()
        pg.psql("CREATE DATABASE sbtest")
        base = ["sysbench", "oltp_point_select", "--db-driver=pgsql", f"--pgsql-host={pg.dir}", f"--pgsql-port={pg.port}",
                "--pgsql-user=postgres", "--pgsql-db=sbtest", *TABLE]
        procs.run("sysbench-prepare", [*base, "prepare"], timeout=120)
        out = tmp_path / "cap"
        rc = main(["run", "--pid", str(pg.pid), "-o", str(out), "--collector", "procfs", "--collector", "cpu-stacks", "--",
                   *base, "--threads=2", "--time=8", "--report-interval=1", "run"])
        assert rc == 0
    finally:
        for p in reversed(procs.started):
            procs.stop(p)
        shutil.rmtree(home, ignore_errors=True)
    load = report_json(out, capsys)["load"]
    assert load["tool"] == "sysbench" and load["status"] == "ok" and len(load["series"]) >= 6
    series = load["series"]
    mean = sum(p["tps"] * p["dt"] for p in series) / sum(p["dt"] for p in series)
    assert abs(mean / load["summary"]["tps"] - 1) < 0.05, (mean, load["summary"]["tps"])
    assert "Throughput (sysbench)" in (out / "report.html").read_text()


def test_failing_load_keeps_the_capture_and_passes_its_exit_code(server: Server, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cap"
    argv = [a for a in server.sysbench("--threads=2", "--time=3", "run") if not a.startswith("--mysql-socket")]
    rc = main(["run", "--pid", str(server.db.pid), "-o", str(out), "--collector", "procfs", "--",
               *argv, "--mysql-socket=/nonexistent/mysqld.sock"])
    assert rc == 1  # sysbench's own exit code
    load = report_json(out, capsys)["load"]
    assert load["exit_code"] == 1 and load["status"] == "no-figures"
    assert load["why"].startswith("sysbench printed no figures: FATAL:")
    assert "sysbench printed no figures" in (out / "report.html").read_text()


def test_unknown_tool_is_said_and_its_log_kept(server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cap"
    rc = main(["run", "--pid", str(server.db.pid), "-o", str(out), "--collector", "procfs", "--",
               sys.executable, "-c", "import time; print('warming caches'); time.sleep(1.5); print('done: 42 ops')"])
    assert rc == 0
    assert (out / members.LOAD_LOG).read_text() == "warming caches\ndone: 42 ops\n"
    load = report_json(out, capsys)["load"]
    assert load["status"] == "unrecognised" and load["tool"] is None and load["unknown_lines"] == 2
    assert "the tool was not recognised" in load["why"]


def test_attach_follows_a_load_started_elsewhere(server: Server, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "sysbench.log"
    with open(log, "wb") as fh:
        load = subprocess.Popen(server.sysbench("--threads=2", "--time=9", "--report-interval=1", "run"),
                                stdout=fh, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: "[ 1s ]" in log.read_text(errors="replace"), 20, "sysbench's first report")
        out = tmp_path / "cap"
        rc = main(["attach", "--pid", str(server.db.pid), "-d", "4s", "--load-log", str(log), "-o", str(out),
                   "--collector", "procfs", "--no-report"])
        assert rc == 0
    finally:
        load.wait(timeout=30)
    b = Bundle.open(out)
    assert b.manifest.load is not None and b.manifest.load.source == "attach" and b.manifest.load.file == str(log)
    copied = (out / members.LOAD_LOG).read_text()
    assert copied.startswith("sysbench 1.0") and log.read_text().startswith(copied)
    d = report_json(out, capsys)["load"]
    assert d["placed_by"] == "the time each report line was read"
    assert any("worked out from the report lines" in n for n in d["notes"])
    inside = [p for p in d["series"] if 0 < p["t"] < 5]
    assert len(inside) >= 3
    ts = [p["t"] for p in d["series"]]
    assert ts[0] < 0.5  # the report(s) written before the capture, placed from the worked-out start
    gaps = sorted(b2 - b1 for b1, b2 in zip(ts, ts[1:], strict=False))
    assert 0.8 < gaps[len(gaps) // 2] < 1.2 and gaps[0] > 0.2, gaps


def test_attach_load_start_places_a_log_without_times(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        out = tmp_path / "cap"
        src = TESTS / "data" / "load" / "sysbench-oltp-point-select-report-interval-1.txt"
        log = tmp_path / "old.log"
        shutil.copy(src, log)
        rc = main(["attach", "--pid", str(sleeper.pid), "-d", "2s", "--load-log", str(log), "--load-start", "-5s",
                   "-o", str(out), "--collector", "procfs", "--no-report"])
        assert rc == 0
    finally:
        sleeper.kill()
        sleeper.wait()
    b = Bundle.open(out)
    assert b.manifest.load is not None and b.manifest.load.start_from == "-5s"
    assert not b.has(members.LOAD_TIMES)  # nothing was written during the capture
    d = report_json(out, capsys)["load"]
    assert d["placed_by"] == "the load's start plus the tool's own times"
    assert [p["t"] for p in d["series"]] == pytest.approx([-4.0, -3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0], abs=0.01)
    assert main(["attach", "--pid", "1", "--load-start", "-5s", "-o", str(tmp_path / "x")]) == 2  # needs --load-log


def test_sweep_finds_the_knee_of_a_capped_server(server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sweep"
    before = server.group.stats().get("cpu.nr_throttled", 0)
    server.group.cpu_limit(0.05)
    try:
        rc = main(["sweep", "--threads", "1,2,4,8,16", "--pid", str(server.db.pid), "-o", str(out), "--pause", "0s",
                   "--collector", "procfs", "--collector", "perf-stat", "--",
                   *server.sysbench("--threads={threads}", "--time=3", "--report-interval=1", "run")])
        throttled = server.group.stats().get("cpu.nr_throttled", 0) - before
    finally:
        server.group.write("cpu", "cpu.cfs_quota_us", -1)
    assert rc == 0
    sw = json.loads((out / "sweep.json").read_text())["sweep"]
    assert not sw["partial"] and [s["value"] for s in sw["steps"]] == ["1", "2", "4", "8", "16"]
    assert all(s["status"] == "ok" and s["tps"] > 0 and s["p95_ms"] is not None for s in sw["steps"])
    knee = sw["knee"]
    assert knee["threads"] is not None and knee["threads"] <= 8, sw["conclusion"]
    at = next(s for s in sw["steps"] if s["threads"] == knee["threads"])
    assert at["targets"][0]["comm"] == "mariadbd" and at["targets"][0]["cpu_available"] == pytest.approx(0.05)
    assert at["verdict"]["category"] in ("cpu", "not_saturated", "io_wait", "memory", "lock_contention")
    assert at["verdict"]["headline"].startswith("mariadbd")
    # independent of the profiler: the kernel throttled the group while the sweep ran
    assert throttled > 0
    assert sw["conclusion"].startswith(f"throughput stops scaling past {knee['threads']:g} threads")
    for s in sw["steps"]:
        step = out / s["bundle"]
        assert Bundle.open(step).manifest.status == "ok" and (step / "report.html").is_file()
    html = (out / "report.html").read_text()
    assert f"knee at {knee['threads']:g} threads" in html and "Throughput against threads" in html


def test_sweep_interrupted_keeps_finished_steps(server: Server, tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    argv = [sys.executable, "-m", "profiler", "sweep", "--threads", "1,2,4", "--pid", str(server.db.pid), "-o", str(out),
            "--pause", "0s", "--collector", "procfs", "--",
            *server.sysbench("--threads={threads}", "--time=6", "--report-interval=1", "run")]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: (out / "sweep.json").is_file(), 60, "the first step to finish")
        time.sleep(1.5)  # into the second step's load
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, err.decode()
    sw = json.loads((out / "sweep.json").read_text())["sweep"]
    assert sw["partial"] and "interrupted" in sw["reason"]
    assert sw["steps"][0]["status"] == "ok" and sw["steps"][1]["status"] == "interrupted"
    assert Bundle.open(out / "step-2").manifest.status == "partial"
    assert not (out / "step-4").exists()
    assert "partial" in (out / "report.html").read_text()
