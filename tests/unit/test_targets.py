"""Target resolution: numbers, names (comm, exe, substring, cmdline), several matches, errors."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from profiler.capture.targets import closest, match_name, resolve
from profiler.errors import TargetError

PROCS = [
    (101, "tikv-server", "/usr/bin/tikv-server", ("tikv-server", "--pd", "127.0.0.1:2379")),
    (102, "tikv-server", "/usr/bin/tikv-server", ("tikv-server", "--pd", "127.0.0.1:2379")),
    (103, "tikv-server", "/usr/bin/tikv-server", ("tikv-server", "--pd", "127.0.0.1:2379")),
    (200, "tidb-server", "/opt/tidb/bin/tidb-server", ("tidb-server", "-P", "4000")),
    (300, "go-ycsb", "/root/go-ycsb/bin/go-ycsb", ("./bin/go-ycsb", "load", "tikv", "-p", "tikv.pd=x")),
    (400, "python3", "/usr/bin/python3.11", ("python3", "/srv/mysvc.py")),
]


def test_comm_exact_matches_every_instance() -> None:
    assert match_name("tikv-server", PROCS) == ("comm", [101, 102, 103])


def test_substring_of_name_beats_command_line() -> None:
    # `tikv` finds the three tikv-server, not the go-ycsb client whose command line says "tikv".
    assert match_name("tikv", PROCS) == ("name-substring", [101, 102, 103])


def test_exe_basename() -> None:
    assert match_name("python3.11", PROCS) == ("exe", [400])


def test_command_line_last() -> None:
    assert match_name("mysvc", PROCS) == ("cmdline", [400])


def test_no_match_names_closest() -> None:
    assert match_name("tikvv-server", PROCS) == ("", [])
    assert closest("tikvv-server", PROCS)[0].startswith("tikv-server (pid")


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    time.sleep(0.2)
    yield proc
    proc.kill()
    proc.wait()


def test_resolve_live_pid_and_dedupe(sleeper: subprocess.Popen[bytes]) -> None:
    targets = resolve([str(sleeper.pid), str(sleeper.pid)])
    assert [t.pid for t in targets] == [sleeper.pid]
    assert targets[0].matched_by == "pid"


def test_resolve_by_cmdline_excludes_self(sleeper: subprocess.Popen[bytes]) -> None:
    # Our own command line (pytest) never matches; the sleeper's does.
    targets = resolve(["time.sleep(60)"])
    assert sleeper.pid in [t.pid for t in targets]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("0", "invalid pid 0"),
        ("-5", "invalid pid -5"),
        ("99999999999", "above this host's pid_max"),
        ("no-such-process-name-xyz", "no running process matches"),
        ("", "empty --pid"),
    ],
)
def test_bad_targets(query: str, message: str) -> None:
    with pytest.raises(TargetError, match=message):
        resolve([query])


def test_dead_pid() -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()
    with pytest.raises(TargetError, match=f"no process with pid {proc.pid}"):
        resolve([str(proc.pid)])


def test_thread_id_is_not_a_process() -> None:
    import threading

    ready = threading.Event()
    stop = threading.Event()
    tids: list[int] = []

    def body() -> None:
        import threading as th

        tids.append(th.get_native_id())
        ready.set()
        stop.wait(5)

    t = threading.Thread(target=body)
    t.start()
    ready.wait(5)
    try:
        with pytest.raises(TargetError, match="is a thread of process"):
            resolve([str(tids[0])])
    finally:
        stop.set()
        t.join()
