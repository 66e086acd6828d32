"""perf.data read directly (profiler.formats.perfdata): the same answers as `perf script` on real
recordings we make ourselves, a batch at a time or all at once.

- syscall pairs and off-CPU intervals decoded straight from perf.data equal those paired from
  `perf script` text of the same file;
- a copy keeping one process's samples prints, through perf script --pid, what the original does;
- merging identical stacks folds to the same stacks, byte for byte;
- the pairing gives the same rows whatever the batch size (state carried between batches).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from profiler.analyzers.stacks.folding import FoldOptions, collapse_text
from profiler.collectors.perf import syscalls

from profiler.formats import offcpu_intervals, syscall_pairs
from profiler.formats import perfdata as pd
from profiler.formats import perfdata_reduce as pr
from tests.conftest import ROOT, have_perf, is_root, requires_perf, requires_root

SAMPLES = ROOT / "samples" / "perf-script-collectors"

# Two threads handing a token back and forth (futex waits, context switches) and making syscalls.
PINGPONG = """
import os, threading, time
a, b = threading.Event(), threading.Event()
def other():
    while True:
        a.wait(); a.clear(); os.getppid(); b.set()
threading.Thread(target=other, daemon=True).start()
end = time.time() + 30
while time.time() < end:
    a.set(); b.wait(); b.clear(); os.getppid()
"""


def _perf(argv: list[str]) -> None:
    r = subprocess.run(["perf", *argv], capture_output=True, timeout=120, check=False)
    if r.returncode != 0:
        pytest.skip(f"perf cannot record here: {r.stderr.decode(errors='replace').strip()[-200:]}")


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int]]:
    """System-wide sched_switch (with stacks), raw_syscalls and cpu-clock recordings while a
    ping-pong workload runs; yields (directory, the workload's pid)."""
    if not (is_root() and have_perf()):
        pytest.skip("needs root and perf")
    d = tmp_path_factory.mktemp("direct")
    proc = subprocess.Popen([sys.executable, "-c", PINGPONG], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        common = ["-a", "-k", "CLOCK_MONOTONIC", "--sample-cpu", "-N", "-B", "-q"]
        jobs = [
            ["record", *common, "-e", "sched:sched_switch", "--call-graph", "fp", "-o", str(d / "switch.data"), "--",
             "sleep", "1.5"],
            ["record", *common, "-e", "raw_syscalls:sys_enter", "-e", "raw_syscalls:sys_exit", "-m", "1024",
             "-o", str(d / "sys.data"), "--", "sleep", "1.5"],
            ["record", *common, "-e", "cpu-clock", "-F", "499", "-g", "-o", str(d / "cpu.data"), "--", "sleep", "1.5"],
        ]
        threads = [threading.Thread(target=_perf, args=(j,)) for j in jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for name in ("switch.data", "sys.data", "cpu.data"):
            if not (d / name).exists():
                pytest.skip(f"perf recorded no {name}")
        yield d, proc.pid
    finally:
        proc.kill()
        proc.wait()


def _script(data: Path, *args: str) -> bytes:
    return subprocess.run(["perf", "script", "-i", str(data), *args], capture_output=True, timeout=120,
                          check=False).stdout


@pytest.mark.privileged
@requires_root
@requires_perf
@pytest.mark.parametrize("windowed", [False, True])
def test_offcpu_intervals_from_perf_data_equal_those_from_perf_script(recordings: tuple[Path, int],
                                                                      windowed: bool) -> None:
    d, pid = recordings
    data = d / "switch.data"
    text = _script(data, "-F", offcpu_intervals.PAIR_FIELDS).decode(errors="replace")
    times = [float(m.group("time")) for m in map(offcpu_intervals._LINE.match, text.splitlines()) if m]
    assert len(times) > 100, "the workload switched too little to compare"
    windows = None
    if windowed:  # two traced windows with a gap, as the duty cycle makes
        t0, t1 = times[0], times[-1]
        span = t1 - t0
        windows = [[t0, t0 + span * 0.3], [t0 + span * 0.6, t1]]
    old = io.StringIO()
    w = offcpu_intervals.IntervalWriter(old, windows, {pid})
    for line in text.splitlines():
        w.feed(line)
    w.close()
    new = io.StringIO()
    box: dict[str, offcpu_intervals.SwitchPairs] = {}

    def consume(batch: np.ndarray, states: list[str], comms: list[str]) -> None:
        if "p" not in box:
            box["p"] = offcpu_intervals.SwitchPairs(new, windows, {pid}, states, comms)
        box["p"].feed(batch)

    offcpu_intervals.read_switches(data, consume)
    box["p"].close()
    assert w.intervals > 10
    assert sorted(new.getvalue().splitlines()) == sorted(old.getvalue().splitlines())
    assert box["p"].cut == w.cut and box["p"].switch_outs >= w.intervals


@pytest.mark.privileged
@requires_root
@requires_perf
def test_syscall_pairs_from_perf_data_equal_those_from_perf_script(recordings: tuple[Path, int]) -> None:
    d, pid = recordings
    data = d / "sys.data"
    text = _script(data, "-F", syscall_pairs.PAIR_FIELDS, "--pid", str(pid)).decode(errors="replace")
    first = next(p for p in map(syscall_pairs.parse_line, text.splitlines()) if p is not None)
    names = syscalls.syscall_names()
    old = io.StringIO()
    p = syscall_pairs.Pairing(old, first[2], 0.25, names)
    for line in text.splitlines():
        p.feed(line)
    p.close()
    new = io.StringIO()
    q, _lost = syscall_pairs.read_direct(data, {pid}, lambda comm: syscall_pairs.SyscallPairs(new, first[2], 0.25, names, None, comm))
    q.close()
    assert p.calls > 100 and q.calls == p.calls and q.rows == p.rows and q.unpaired_exits == p.unpaired_exits

    def rows(out: io.StringIO) -> dict[tuple[str, ...], tuple[int, int]]:
        got = {}
        for line in out.getvalue().splitlines()[1:]:
            t, tid, comm, name, n, ns = line.rsplit(",", 5)
            got[(t, tid, comm, name)] = (int(n), int(ns))
        return got

    a, b = rows(old), rows(new)
    assert a.keys() == b.keys()
    for k, (n, ns) in a.items():
        # perf script prints microseconds; perf.data holds nanoseconds
        assert b[k][0] == n and abs(b[k][1] - ns) <= 1000 * max(n, 1) + 1000, (k, a[k], b[k])


@pytest.mark.privileged
@requires_root
@requires_perf
def test_a_copy_with_one_process_samples_prints_what_perf_script_pid_prints(recordings: tuple[Path, int],
                                                                             tmp_path: Path) -> None:
    d, pid = recordings
    copy = tmp_path / "mine.data"
    kept, dropped = pr.filter_samples(d / "cpu.data", copy, lambda p, t, tm: p == pid)
    assert kept > 0 and dropped > 0  # a system-wide recording: other processes' samples too
    fields = "comm,pid,tid,cpu,time,period,event,ip,sym,symoff,dso"
    assert _script(copy, "-F", fields, "--pid", str(pid)) == _script(d / "cpu.data", "-F", fields, "--pid", str(pid))
    assert pr.count_samples(copy, lambda p, t, tm: p == pid)[0] == kept


@pytest.mark.privileged
@requires_root
@requires_perf
@pytest.mark.parametrize("opts", [FoldOptions(), FoldOptions(include_tid=True), FoldOptions(count_samples=True)])
def test_merged_stacks_fold_the_same(recordings: tuple[Path, int], tmp_path: Path, opts: FoldOptions) -> None:
    d, _ = recordings
    fields = "comm,pid,tid,time,period,event,ip,sym,dso"
    whole = collapse_text(_script(d / "cpu.data", "-F", fields).decode(errors="replace"), opts)
    merged = tmp_path / "merged.data"
    m = pr.merge_samples(d / "cpu.data", merged, by_tid=opts.include_tid, count_samples=opts.count_samples)
    assert m.written < m.samples  # a profile repeats its stacks
    weighted = FoldOptions(include_tid=opts.include_tid)  # the merged period is the weight
    assert collapse_text(_script(merged, "-F", fields).decode(errors="replace"), weighted) == whole


def test_thinning_is_uniform_and_deterministic() -> None:
    t = np.arange(200_000, dtype=np.int64) * 1000
    tid = np.tile(np.array([7, 8], np.int64), 100_000)  # a ping-pong: every other sample is the other thread
    keep = pr.thinning(0.1)(tid, tid, t)
    assert 0.09 < keep.mean() < 0.11
    assert 0.09 < keep[tid == 7].mean() < 0.11 and 0.09 < keep[tid == 8].mean() < 0.11
    assert (pr.thinning(0.1)(tid, tid, t) == keep).all()
    assert pr.thinning(1.0)(tid, tid, t).all()


def test_state_letters_follow_the_print_format() -> None:
    flags = [(1, "S"), (2, "D"), (4, "T"), (8, "t"), (16, "X"), (32, "Z"), (64, "P"), (128, "I")]
    letters = pd.state_letters(flags)
    assert letters(0) == "R" and letters(1) == "S" and letters(2) == "D" and letters(256) == "R+"
    assert letters(0x80) == "I" and letters(3) == "S|D"


def test_files_it_cannot_read_say_so(tmp_path: Path) -> None:
    bad = tmp_path / "bad.data"
    bad.write_bytes(b"PERFILE2" + b"\x00" * 200)
    with pytest.raises(pd.PerfDataUnsupported):
        pd.PerfFile(bad)
    bad.write_bytes(b"not perf")
    with pytest.raises(pd.PerfDataUnsupported):
        pd.PerfFile(bad)
    with pytest.raises(pd.PerfDataUnsupported):
        pd.PerfFile(tmp_path / "missing.data")


@pytest.mark.parametrize("batch", [1, 3, 1 << 16])
def test_syscall_pairing_is_the_same_whatever_the_batch(batch: int, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = (SAMPLES / "raw-syscalls-pairs.txt").read_text().splitlines()
    first = syscall_pairs.parse_line(lines[0])
    assert first is not None
    outs = []
    for size in (batch, 1 << 20):
        monkeypatch.setattr(syscall_pairs.Pairing, "BATCH", size)
        out = io.StringIO()
        p = syscall_pairs.Pairing(out, first[2], 0.001, {230: "clock_nanosleep", 110: "getppid"},
                             windows=[[first[2], first[2] + 0.004], [first[2] + 0.006, first[2] + 1]])
        for line in lines:
            p.feed(line)
        p.close()
        outs.append((out.getvalue(), p.calls, p.continued, p.unpaired_exits))
    assert outs[0] == outs[1] and outs[0][1] > 0


@pytest.mark.parametrize("batch", [1, 5, 1 << 16])
def test_offcpu_pairing_is_the_same_whatever_the_batch(batch: int, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = (SAMPLES / "sched-switch-offcpu.txt").read_text().splitlines()
    times = [float(m.group("time")) for m in map(offcpu_intervals._LINE.match, lines) if m]
    windows = [[times[0], times[len(times) // 3]], [times[len(times) // 2], times[-1]]]
    outs = []
    for size in (batch, 1 << 20):
        monkeypatch.setattr(offcpu_intervals.IntervalWriter, "BATCH", size)
        out = io.StringIO()
        w = offcpu_intervals.IntervalWriter(out, windows, {11598})
        for line in lines:
            w.feed(line)
        w.close()
        outs.append((sorted(out.getvalue().splitlines()), w.intervals, w.cut))
    assert outs[0] == outs[1] and outs[0][1] > 5


def test_a_chunk_boundary_inside_records_reads_the_same(tmp_path: Path) -> None:
    """The record walk hands an incomplete last record to the next chunk."""
    if not os.path.exists("/proc/self"):
        pytest.skip("Linux only")
    recs = b""
    for i in range(50):
        body = bytes([i]) * (8 * (i % 5 + 1))
        recs += (3).to_bytes(4, "little") + (0).to_bytes(2, "little") + (8 + len(body)).to_bytes(2, "little") + body
    offs, end = pd.walk(recs)
    assert len(offs) == 50 and end == len(recs)
    offs2, end2 = pd.walk(recs[:-5])
    assert len(offs2) == 49 and end2 == offs[-1]


def test_plain_python_pairing_agrees_with_numpy_batches() -> None:
    """Where numpy is missing (the cluster agent's bare python3) the line-by-line pairings run:
    same rows as the batched ones on real perf script text, windows and all."""
    lines = (SAMPLES / "raw-syscalls-pairs.txt").read_text().splitlines()
    first = syscall_pairs.parse_line(lines[0])
    assert first is not None
    names = {230: "clock_nanosleep", 110: "getppid"}
    windows = [[first[2], first[2] + 0.004], [first[2] + 0.006, first[2] + 1]]
    got = []
    for cls in (syscall_pairs.Pairing, syscall_pairs.PyPairing):
        out = io.StringIO()
        p = cls(out, first[2], 0.001, names, windows)
        for line in lines:
            p.feed(line)
        still = p.close()
        got.append((out.getvalue().splitlines(), p.calls, p.continued, p.unpaired_exits, still))
    assert got[0] == got[1] and got[0][1] > 0

    lines = (SAMPLES / "sched-switch-offcpu.txt").read_text().splitlines()
    times = [float(m.group("time")) for m in map(offcpu_intervals._LINE.match, lines) if m]
    windows = [[times[0], times[len(times) // 3]], [times[len(times) // 2], times[-1]]]
    rows = []
    for wcls in (offcpu_intervals.IntervalWriter, offcpu_intervals.PyIntervalWriter):
        out = io.StringIO()
        w = wcls(out, windows, {11598})
        for line in lines:
            w.feed(line)
        w.close()
        rows.append((sorted(out.getvalue().splitlines()), w.intervals, w.cut, round(w.off_seconds, 6)))
    assert rows[0] == rows[1] and rows[0][1] > 5


def test_collectors_import_without_numpy(tmp_path: Path) -> None:
    """The cluster agent ships the collectors to hosts with nothing but python3: they import,
    and pick the plain-Python pairings."""
    code = ("import sys; sys.modules['numpy'] = None; "
            "from profiler.collectors.perf import offcpu, syscalls, cpu_stacks; from profiler.formats import perfdata, offcpu_intervals, syscall_pairs; "
            "import io; assert isinstance(offcpu_intervals.interval_writer(io.StringIO()), offcpu_intervals.PyIntervalWriter); "
            "assert isinstance(syscall_pairs.pairing(io.StringIO(), 0.0, 1.0, {}), syscall_pairs.PyPairing); "
            "print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


@pytest.mark.privileged
@requires_root
@requires_perf
def test_lost_records_carry_the_time_they_were_written(tmp_path: Path) -> None:
    """A one-page buffer under a syscall storm loses events: every LOST record is counted, and its
    time (the sample_id trailer) lies inside the recording, so the loss can be placed in its window."""
    storm = subprocess.Popen([sys.executable, "-c", "import os\nwhile True: os.getppid()"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    data = tmp_path / "lossy.data"
    try:
        t0 = time.monotonic_ns()
        _perf(["record", "-a", "-k", "CLOCK_MONOTONIC", "-N", "-B", "-q", "-m", "1", "-e", "raw_syscalls:sys_enter",
               "-e", "raw_syscalls:sys_exit", "-o", str(data), "--", "sleep", "1"])
        t1 = time.monotonic_ns()
    finally:
        storm.kill()
        storm.wait()
    lost_at: list[tuple[int, int]] = []
    _pairs, lost = syscall_pairs.read_direct(
        data, {storm.pid}, lambda comm: syscall_pairs.SyscallPairs(io.StringIO(), t0 / 1e9, 1.0, {}, None, comm), lost_at)
    if not lost:
        pytest.skip("perf lost nothing with a one-page buffer here")
    assert sum(n for _t, n in lost_at) == lost
    assert all(t0 <= t <= t1 for t, _n in lost_at), (t0, t1, lost_at[:5])
