"""The procfs sampler on real processes the test starts: thread churn, exits, the bundle format."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import threading
import time

import pytest
from profiler.analyzers.series import procfs as procmod
from profiler.collectors.procfs import files as procfs_files
from profiler.collectors.procfs import sampler as procfs

CHURN = r"""
import threading, time, sys
def short():
    time.sleep(0.3)
def long():
    while True:
        time.sleep(0.005)
threading.Thread(target=long, daemon=True).start()
print("ready", flush=True)
time.sleep(0.4)
for _ in range(3):
    t = threading.Thread(target=short); t.start()
time.sleep(0.5)
with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as fh:
    fh.write("<b>main&x</b>")
time.sleep(float(sys.argv[1]))
"""


def _run_sampler(pids: list[int], seconds: float, hz: float = 20.0) -> tuple[procfs.Sampler, list[dict]]:
    buf = io.BytesIO()
    gz = gzip.GzipFile(fileobj=buf, mode="wb")
    s = procfs.Sampler(pids, gz, hz=hz)
    s.write_host()
    th = threading.Thread(target=s.run)
    th.start()
    th.join(timeout=seconds)
    s.stop_event.set()
    th.join()
    gz.close()
    lines = gzip.decompress(buf.getvalue()).decode().splitlines()
    return s, [json.loads(x) for x in lines]


def test_threads_come_and_go_and_exit_is_recorded() -> None:
    proc = subprocess.Popen([sys.executable, "-c", CHURN, "0.6"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        s, recs = _run_sampler([proc.pid], seconds=5.0)
    finally:
        proc.kill()
        proc.wait()
    kinds = {r["kind"] for r in recs}
    assert {"host", "thread", "process", "system"} <= kinds
    assert recs[0]["kind"] == "host" and recs[0]["syscall_names"]
    tids = {r["tid"] for r in recs if r["kind"] == "thread"}
    assert len(tids) >= 5  # main, the long thread, three short ones
    # short threads vanish: their last record is well before the end
    last = {}
    for r in recs:
        if r["kind"] == "thread":
            last[r["tid"]] = r["t"]
    end = max(last.values())
    assert sum(1 for t in last.values() if t < end - 0.3) >= 3
    # the process exiting ends the sampler by itself, with an event
    assert any(r["kind"] == "event" and r["what"] == "target-exited" for r in recs)
    assert s.stats()["targets_exited"] == [proc.pid]
    # the renamed thread's new name is seen (comm from stat, each tick)
    assert any(r.get("comm") == "<b>main&x</b>" for r in recs if r["kind"] == "thread")
    # thread record fields per docs/bundle.md
    th = next(r for r in recs if r["kind"] == "thread" and r["state"] != "R")
    for key in ("pid", "tid", "comm", "state", "utime", "stime", "run_delay_ns", "syscall"):
        assert key in th
    # the analyzer reads it back
    pd = procmod.parse_lines(json.dumps(r) for r in recs)
    assert len(pd.threads) == len(tids) and pd.bad_lines == 0


def test_states_and_syscalls_of_a_sleeping_thread() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(30)"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        time.sleep(0.1)
        _, recs = _run_sampler([proc.pid], seconds=0.6)
    finally:
        proc.kill()
        proc.wait()
    ths = [r for r in recs if r["kind"] == "thread"]
    assert ths and all(r["state"] == "S" for r in ths)
    names = {int(k): v for k, v in recs[0]["syscall_names"].items()}
    assert {names.get(r["syscall"]) for r in ths} <= {"clock_nanosleep", "select", "nanosleep", "pselect6"}
    assert procmod.classify("S", names[ths[0]["syscall"]], ths[0].get("wchan")) == procmod.SLEEP


def test_syscall_table_comes_from_the_system() -> None:
    table, source = procfs_files.syscall_table()
    if not table:
        pytest.skip("no syscall table on this host (no ausyscall, no unistd_64.h)")
    assert source != "none"
    if os.uname().machine == "x86_64":
        assert table[0] == "read" and table[202] == "futex" and table[74] == "fsync"


def test_parsers_survive_odd_text() -> None:
    assert procfs_files.parse_stat("123 (a) b)) S 1 2 3")[0] == "S"
    assert procfs_files.parse_syscall("running") is None
    assert procfs_files.parse_syscall("-1 0x7ffd 0x0") == -1
    assert procfs_files.parse_syscall("202 0x1 0x2 0x3 0x4 0x5 0x6 0x7ffd 0x7f") == 202
    assert procfs_files.parse_status_ctxt("voluntary_ctxt_switches:\t5\nnonvoluntary_ctxt_switches:\t7\n") == (5, 7)


def test_a_cut_off_file_still_parses() -> None:
    lines = ['{"kind":"host","t":1,"clk_tck":100,"syscall_names":{"0":"read"}}',
             '{"kind":"thread","t":1.0,"pid":1,"tid":1,"comm":"a","state":"S","utime":0,"stime":0,"syscall":0}',
             '{"kind":"thread","t":1.05,"pid":1,"tid":1,"comm":"a","state":"R","utime":5,"stime":0,"syscall":null}',
             '{"kind":"thread","t":1.1,"pid":1,"ti']
    pd = procmod.parse_lines(lines)
    assert pd.bad_lines == 1
    s = pd.threads[(1, 1)]
    assert list(s.wait) == [procmod.IDLE, procmod.RUNNING]
    assert s.delta(s.cpu) == pytest.approx(0.05)


def test_a_number_is_read_the_same_on_the_usual_path_and_the_careful_one() -> None:
    from profiler.analyzers.series import procfs as P

    big = [(1 << 53) - 1, 1 << 53, (1 << 63) - 1, 1 << 63, -(1 << 63), 10 ** 400, -(10 ** 400)]
    for v in [0, 1, -1, 0.0, -0.0, 1.5, 1e18, 9.3e18, -9.3e18, float("inf"), float("-inf"), float("nan"), True,
              False, None, "1", [1], *big]:
        got = P._num(v)  # noqa: SLF001 - the reader under test
        if isinstance(v, bool) or not isinstance(v, int | float):
            want = float("nan")
        else:
            try:
                want = float(v)
            except OverflowError:
                want = float("nan")
            want = want if abs(want) < P.MAX_VALUE else float("nan")
        assert repr(got) == repr(want), v  # 2^63 - 1 rounds to 2^63 as a float: past the 64-bit cap
