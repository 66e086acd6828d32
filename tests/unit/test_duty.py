"""Duty-cycled per-event collectors (syscalls, offcpu-stacks): the schedule, the window-aware
pairing, the opt-in full traces, and a real capture whose files cover only the traced windows."""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from profiler.collectors import registry
from profiler.collectors.base import CaptureContext, CaptureOptions, Target
from profiler.collectors.perf import offcpu, syscalls
from profiler.collectors.perf.duty import DutyCycle

from profiler.bundle import Bundle, BundleWriter, Manifest
from profiler.capture.session import Session
from profiler.capture.targets import target_from_pid
from profiler.formats import offcpu_intervals, syscall_pairs


@pytest.fixture
def ctx(tmp_path: Path) -> CaptureContext:
    writer = BundleWriter(tmp_path / "cap", Manifest())
    return CaptureContext(writer=writer, targets=[Target(pid=4242, comm="mariadbd")], options=CaptureOptions())


def _read_fifo(path: Path) -> list[str]:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        return os.read(fd, 4096).decode().split()
    finally:
        os.close(fd)


def test_duty_cycle_sends_enable_and_disable_on_schedule(tmp_path: Path) -> None:
    duty = DutyCycle(on=1.0, period=4.0)
    fifo = tmp_path / "ctl"
    duty.prepare(fifo)
    ack = DutyCycle.ack_path(fifo)
    words: list[str] = []

    def perf_acks(n: int) -> None:  # what perf does once it has acted on n commands
        words.extend(_read_fifo(fifo))
        fd = os.open(ack, os.O_WRONLY | os.O_NONBLOCK)
        os.write(fd, b"ack\n" * n)
        os.close(fd)

    try:
        duty.start(100.0)
        perf_acks(1)  # perf acted on the enable
        duty.tick(100.3)  # its ack is read: the 1 s runs from here, the window from one poll before
        duty.tick(101.0)
        assert duty.windows == [[pytest.approx(100.2), 100.3]] and words == ["enable"]
        duty.tick(101.3)
        assert duty.windows == [[pytest.approx(100.2), 101.3]]  # provisional end: the disable is not acknowledged yet
        perf_acks(1)
        for t in (101.5, 102.0, 104.0, 104.3):  # the next window opens a period after the first began
            duty.tick(t)
        perf_acks(1)
        duty.tick(104.4)  # enable acked
        duty.tick(105.4)  # the second disable, not acknowledged
        words.extend(_read_fifo(fifo))
        duty.stop(106.5)
        duty.stop(106.9)  # perf ended at 106.9: the unacknowledged window runs to it
    finally:
        duty.cleanup()
    assert words == ["enable", "disable", "enable", "disable"]
    assert duty.windows == [[pytest.approx(100.2), 101.5], [pytest.approx(104.3), 106.9]]  # a window ends when perf said it had stopped
    st = duty.stats(100.0, 106.9)
    assert st["sampled"] is True and st["sampled_seconds"] == 3.9 and st["duty"] == round(3.9 / 6.9, 4)
    assert not fifo.exists() and not ack.exists()


def test_duty_cycle_window_left_open_closes_at_stop(tmp_path: Path) -> None:
    duty = DutyCycle(on=1.0, period=10.0)
    duty.prepare(tmp_path / "ctl")
    duty.start(5.0)
    duty.tick(5.4)
    duty.stop(5.6)  # a capture shorter than one window
    duty.cleanup()
    assert duty.windows == [[5.0, 5.6]]
    assert duty.window_of(5.3) == 0 and duty.window_of(7.0) is None


def test_duty_cycle_refuses_an_impossible_schedule() -> None:
    with pytest.raises(ValueError):
        DutyCycle(on=5.0, period=1.0)


def test_default_argv_starts_disabled_under_control_and_full_trace_does_not(ctx: CaptureContext) -> None:
    for col in (syscalls.SyscallsCollector(), offcpu.OffCpuCollector()):
        argv = col.argv(ctx)
        assert argv[argv.index("-D") + 1] == "-1", col.name
        ctl = argv[argv.index("--control") + 1]
        assert ctl.startswith("fifo:")
        fifos = [Path(f) for f in ctl[5:].split(",")]
        assert [f.parent for f in fifos] == [ctx.writer.root] * 2 and fifos[1].name.endswith(".ack")
    for col in (syscalls.SyscallsCollector(full=True), offcpu.OffCpuCollector(full=True)):
        argv = col.argv(ctx)
        assert "-D" not in argv and "--control" not in argv, col.name


def test_trace_names_swap_the_full_trace_into_the_default_set() -> None:
    opts = CaptureOptions()
    every = [c.name for c in registry.default_collectors(opts)]
    got = registry.by_name(opts, ["syscalls-trace"])
    assert [c.name for c in got] == every  # same names, same files
    sc = next(c for c in got if c.name == "syscalls")
    assert isinstance(sc, syscalls.SyscallsCollector) and sc.duty is None
    oc = next(c for c in got if c.name == "offcpu-stacks")
    assert isinstance(oc, offcpu.OffCpuCollector) and oc.duty is not None  # only what was asked for is traced in full
    got = registry.by_name(opts, ["procfs", "offcpu-trace"])
    assert [c.name for c in got] == ["procfs", "offcpu-stacks"]
    assert isinstance(got[1], offcpu.OffCpuCollector) and got[1].duty is None
    default = {c.name: c for c in registry.default_collectors(opts)}
    assert isinstance(default["syscalls"], syscalls.SyscallsCollector) and default["syscalls"].duty is not None


def _ev(comm: str, tid: int, t: float, enter: bool, nr: int) -> str:
    kind = "sys_enter: NR" if enter else "sys_exit: NR"
    return f"{comm:>16s} {tid:6d} {t:12.6f}: raw_syscalls:{kind} {nr} (0, 0, 0)"


def test_pairing_closes_calls_at_their_window_end_and_counts_continued_time() -> None:
    out = io.StringIO()
    windows = [[10.0, 11.0], [20.0, 21.0]]
    p = syscall_pairs.Pairing(out, t0=10.0, interval=1.0, names={202: "futex", 0: "read"}, windows=windows)
    for line in (
        _ev("db", 7, 10.1, True, 0), _ev("db", 7, 10.2, False, 0),     # read: 100 ms, inside window 0
        _ev("db", 8, 10.9, True, 202),                                  # futex: still blocked at 11.0
        _ev("db", 9, 10.05, False, 0),                                  # exit from before the capture: not counted
        _ev("db", 8, 20.3, False, 202),                                 # ...its exit 9 s later, in window 1
        _ev("db", 7, 20.4, True, 0), _ev("db", 7, 20.45, False, 0),
    ):
        p.feed(line)
    p.close()
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    by = {(r["time"], r["tid"], r["syscall"]): (int(r["count"]), int(r["total_ns"])) for r in rows}
    assert by[("10.000000", "7", "read")] == (1, 100_000_000)
    assert by[("10.000000", "8", "futex")] == (1, 100_000_000)  # cut at the window's end, not 9.4 s
    assert by[("20.000000", "8", "futex")] == (0, 300_000_000)  # its time inside window 1, no second count
    assert by[("20.000000", "7", "read")] == (1, 50_000_000)
    assert p.unpaired_exits == 1 and p.continued == 1
    assert sum(int(r["total_ns"]) for r in rows) <= 2.0e9  # never more time than the traced windows


def test_interval_writer_cuts_threads_still_off_at_window_end() -> None:
    out = io.StringIO()
    w = offcpu_intervals.IntervalWriter(out, windows=[[10.0, 11.0], [20.0, 21.0]])
    sw = "sched:sched_switch: prev_comm={} prev_pid={} prev_prio=120 prev_state={} ==> next_comm={} next_pid={} next_prio=120"
    lines = [
        "   7/7     10.100000: " + sw.format("db", 7, "S", "swapper/0", 0),
        "   0/0     10.300000: " + sw.format("swapper/1", 0, "R", "db", 7),
        "   7/8     10.900000: " + sw.format("db", 8, "D", "swapper/0", 0),
        "   7/7     20.100000: " + sw.format("db", 7, "S", "swapper/1", 0),
    ]
    for line in lines:
        w.feed(line)
    w.close()
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    got = [(r["tid"], float(r["off"]), float(r["on"]), r["state"]) for r in rows]
    assert got == [("7", 10.1, 10.3, "S"), ("8", 10.9, 11.0, "D"), ("7", 20.1, 21.0, "S")]
    assert w.cut == 2 and not w.pending


@pytest.mark.privileged
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CI runs as root)")
@pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed")
def test_sampled_capture_traces_only_its_windows(tmp_path: Path) -> None:
    code = "import os, time\nwhile True:\n    os.getppid(); time.sleep(0.0005)"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        cols = [syscalls.SyscallsCollector(duty=DutyCycle(on=0.5, period=1.5)), offcpu.OffCpuCollector(duty=DutyCycle(on=0.5, period=1.5))]
        Session([target_from_pid(proc.pid)], tmp_path / "cap", CaptureOptions(duration=3.6, interval=0.25), cols).run()
    finally:
        proc.kill()
        proc.wait()
    b = Bundle.open(tmp_path / "cap")
    rec = b.manifest.collector("syscalls")
    assert rec is not None and rec.status == "ok", rec
    assert rec.stats["sampled"] is True and len(rec.stats["windows"]) >= 2
    assert 0.2 < rec.stats["duty"] < 0.7
    windows = rec.stats["windows"]
    rows = list(csv.DictReader(b.iter_lines("syscalls.csv")))
    assert rows and any(r["syscall"] == "getppid" for r in rows)
    for r in rows:  # interval starts of rows: only intervals that overlap a traced window
        t = float(r["time"])
        assert any(a - 0.25 - 0.1 <= t <= b_ + 0.1 for a, b_ in windows), (t, windows)
    assert rec.stats["untraced_threads"] == 0
    off = b.manifest.collector("offcpu-stacks")
    assert off is not None and off.status == "ok" and off.stats["sampled"] is True
    ow = off.stats["windows"]
    iv = list(csv.DictReader(b.iter_lines("offcpu.csv.gz")))
    outside = [r for r in iv if not any(a - 0.1 <= float(r["off"]) <= b_ + 0.1 for a, b_ in ow)]
    assert iv and not outside, (ow, outside[:5])
    assert all(float(r["on"]) - float(r["off"]) < 0.6 for r in iv)  # no interval spans a gap
    assert not list(tmp_path.glob("cap/.*.ctl*"))  # control fifos removed


def test_lost_events_are_placed_in_the_window_they_were_lost_in() -> None:
    from profiler.collectors.perf.duty import note_lost

    from profiler.bundle import CollectorRecord

    d = DutyCycle()
    d.windows = [[100.0, 101.0], [110.0, 111.0], [120.0, 121.0]]
    rec = CollectorRecord(name="syscalls", backend="perf")
    # perf writes a LOST record when it can again: inside the window, or just after it closed
    note_lost(rec, [(int(100.5e9), 30), (int(110.2e9), 5), (int(111.4e9), 7), (-1, 2)], d)
    assert rec.stats["lost_per_window"] == [30, 12, 2]
    assert rec.stats["lost_at"] == [[-1.0, 2], [100.5, 30], [110.2, 5], [111.4, 7]]
    clean = CollectorRecord(name="syscalls", backend="perf")
    note_lost(clean, [], d)
    assert "lost_per_window" not in clean.stats and "lost_at" not in clean.stats


def test_untraced_seconds_are_gaps_in_the_syscall_timeline() -> None:
    from profiler.analyzers.series import timeline
    from profiler.analyzers.views import SyscallRow, SyscallsView

    t0 = 1000.0
    rows = [SyscallRow(time=t0 + 2.0, tid=1, syscall="read", count=500, total_ns=10),
            SyscallRow(time=t0 + 12.0, tid=1, syscall="read", count=300, total_ns=10)]
    cov = {"syscalls": ([(t0 + 2.0, t0 + 3.0), (t0 + 12.0, t0 + 12.5)], [(t0 + 12.2, 40)])}
    tl = timeline.build(None, [], t0=t0, t1=t0 + 20, syscalls=SyscallsView(rows=rows, rate=None), coverage=cov)
    calls = tl.panels["syscalls"].series["calls"]
    assert calls[2] == 500 and calls[12] == 600  # per traced second: 300 calls in half a second
    assert all(v is None for i, v in enumerate(calls) if i not in (2, 12))  # gaps, not zeros
    assert tl.coverage["syscalls"] == {"windows": [[2.0, 3.0], [12.0, 12.5]], "lost": [[12.2, 40.0]]}
