"""A capture from inside a nested PID namespace (a container, the namespaced hosts of the cluster
tests): the off-CPU and syscall traces must hold the target's threads under the ids the capture
sees, though the tracepoints carry the host's ids.

The test starts its own namespace (`unshare --pid --fork --mount-proc`), a two-thread Python
workload in it that contends on a lock and sleeps, and `profiler attach` in it; it checks the
bundle from outside. Needs root and perf (CI has them).
"""

from __future__ import annotations

import csv
import gzip
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from profiler.bundle import Bundle

pytestmark = [
    pytest.mark.privileged,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CI runs as root)"),
    pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed"),
    pytest.mark.skipif(shutil.which("unshare") is None, reason="unshare is not installed"),
]

WORKLOAD = """
import threading, time
lock = threading.Lock()
def holder():
    while True:
        with lock:
            time.sleep(0.004)
        time.sleep(0.0005)
def waiter():
    while True:
        with lock:
            pass
threading.Thread(target=holder, name="holder", daemon=True).start()
threading.Thread(target=waiter, name="waiter", daemon=True).start()
time.sleep(30)
"""

INSIDE = """
set -e
"$PY" -c "$WORKLOAD" &
W=$!
sleep 0.7
"$PY" -m profiler attach --backend perf --pid $W --duration 3s -o "$OUT" \
    --collector offcpu-stacks --collector syscalls --collector procfs --no-report || rc=$?
kill $W
exit ${rc:-0}
"""


def test_offcpu_and_syscalls_from_a_nested_pid_namespace(tmp_path: Path) -> None:
    out = tmp_path / "cap"
    env = {**os.environ, "PY": sys.executable, "WORKLOAD": WORKLOAD, "OUT": str(out)}
    proc = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", INSIDE], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    b = Bundle.open(out)
    m = b.manifest
    target = m.targets[0]
    assert target.pid < 100  # the namespace's own ids (the workload is one of its first processes)
    tids = {target.pid} | {t.tid for t in target.threads}
    off = m.collector("offcpu-stacks")
    sc = m.collector("syscalls")
    assert off is not None and off.status == "ok", off and off.reason
    assert sc is not None and sc.status == "ok", sc and sc.reason
    assert str(off.stats.get("pid_namespace", "")).startswith("nested")
    assert str(sc.stats.get("pid_namespace", "")).startswith("nested")
    # off-CPU intervals of the workload's threads, under the namespace's ids
    rows = list(csv.DictReader(io.StringIO(gzip.decompress(b.path("offcpu.csv.gz").read_bytes()).decode())))
    mine = [r for r in rows if int(r["tid"]) in tids]
    assert len(mine) >= 20 and len(mine) == len(rows), (len(mine), len(rows), sorted({r["tid"] for r in rows})[:10])
    assert all(r["comm"] for r in mine)
    # syscalls of those threads (the holder sleeps, the waiter waits on the lock's futex)
    sys_rows = list(csv.DictReader(io.StringIO(b.read_text("syscalls.csv"))))
    names = {r["syscall"] for r in sys_rows if int(r["tid"]) in tids}
    assert names & {"futex", "clock_nanosleep", "nanosleep", "select", "pselect6"}, names
    assert all(int(r["tid"]) in tids for r in sys_rows)


def test_many_thread_names_become_one_pattern_per_pool() -> None:
    """A TiKV-like server has more thread names than a filter should list: numbered names
    collapse into one glob per pool; names that cannot be quoted mean no name filter."""
    from profiler.collectors.perf.scope import comm_filter

    names = ([f"raftstore-{i}-{j}" for i in range(4) for j in range(4)] + [f"grpc-server-{i}" for i in range(10)]
             + [f"rocksdb:low{i}" for i in range(10)] + [f"unified-read-{i}" for i in range(12)]
             + ["tikv-server", "snap-handler", "0123"])
    filt = comm_filter(["prev_comm", "next_comm"], names)
    assert filt is not None
    terms = set(filt.split("||"))
    assert {'prev_comm~"raftstore*"', 'next_comm~"grpc-server*"', 'prev_comm~"rocksdb:low*"',
            'prev_comm=="0123"', 'prev_comm~"tikv-server*"'} <= terms
    assert len(terms) == 2 * 7
    assert comm_filter(["comm"], ["a", "b"]) == 'comm=="a"||comm=="b"'
    assert comm_filter(["comm"], ['say "hi"']) is None
    assert comm_filter(["comm"], [f"t{i}x{i}" for i in range(100)]) is None  # no pools: too many names


@pytest.mark.parametrize("writer", ["numpy", "python"])
def test_the_text_pairings_map_host_ids_too(writer: str) -> None:
    """The perf script fallbacks (perf.data not readable directly; the cluster agent's bare
    python3 without numpy) pair the same switches under the namespace's ids: the header's
    pid/tid are perf's translated ids, prev_pid/next_pid the host's."""
    from profiler.formats.offcpu_intervals import IntervalWriter, PyIntervalWriter

    def line(pid: int, tid: int, t: float, prev: int, nxt: int, state: str = "S") -> str:
        return (f"  {pid}/{tid}  {t:.6f}: sched:sched_switch: prev_comm=w prev_pid={prev} prev_prio=120 "
                f"prev_state={state} ==> next_comm=x next_pid={nxt} next_prio=120\n")

    lines = [
        line(7, 9, 1.000000, 5009, 0),       # our thread 9 (the host's 5009) leaves
        line(0, 0, 1.000100, 4321, 5009),    # another namespace's task leaves, ours comes back
        line(7, 9, 1.000300, 5009, 0, "D"),  # leaves again
        line(0, 0, 1.000900, 0, 5009),       # and comes back
        line(0, 0, 1.001000, 4321, 77),      # outsiders only: nothing
    ]
    out = io.StringIO()
    w: IntervalWriter | PyIntervalWriter
    w = IntervalWriter(out, None, {7}, to_own_ids=True) if writer == "numpy" else PyIntervalWriter(out, None, {7}, True)
    for s in lines:
        w.feed(s)
    w.close()
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert [(r["tid"], r["state"]) for r in rows] == [("9", "S"), ("9", "D")]
    assert [round(float(r["on"]) - float(r["off"]), 6) for r in rows] == [0.0001, 0.0006]
