"""The capture session's logic with small in-process collectors (no perf): skips, failures, stop reasons."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from profiler.collectors.base import CaptureContext, CaptureOptions, CollectorBase, Probe

from profiler.bundle import Bundle, CollectorRecord
from profiler.capture.session import Session
from profiler.capture.targets import target_from_pid


class Ticker(CollectorBase):
    """A real in-process collector: writes the monotonic time at start and at stop."""

    backend = "procfs"

    def __init__(self, name: str = "ticker", probe_ok: bool = True, reason: str = "",
                 fail_start: bool = False, fail_stop: OSError | None = None, lost: int = 0) -> None:
        self.name = name
        self.lost = lost  # events "lost to a busy host": partial, as perf's buffer overruns make it
        self.probe_ok, self.reason = probe_ok, reason
        self.fail_start, self.fail_stop = fail_start, fail_stop
        self.t0 = 0.0

    def probe(self, ctx: CaptureContext) -> Probe:
        return Probe(self.probe_ok, self.reason)

    def argv(self, ctx: CaptureContext) -> list[str]:
        return []

    def start(self, ctx: CaptureContext) -> None:
        if self.fail_start:
            raise RuntimeError("cannot open the thing")
        self.t0 = time.monotonic()

    def stop(self, ctx: CaptureContext) -> CollectorRecord:
        rec = CollectorRecord(name=self.name, backend=self.backend, started=self.t0)
        with ctx.writer.open_member(f"{self.name}.txt") as fh:
            rec.files = [f"{self.name}.txt"]
            fh.write(f"{self.t0} {time.monotonic()}\n".encode())
            if self.fail_stop is not None:
                raise self.fail_stop
        rec.ended = time.monotonic()
        rec.status = "ok"
        if self.lost:
            rec.stats["lost"] = self.lost
            rec.status, rec.reason = "partial", f"lost {self.lost} events (buffer overrun)"
        return rec


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _session(tmp_path: Path, pid: int, cols: list[Ticker], duration: float | None = 0.5,
             load: list[str] | None = None) -> Session:
    return Session([target_from_pid(pid)], tmp_path / "cap", CaptureOptions(duration=duration), list(cols), load=load)


def test_duration_reached_gives_an_ok_bundle(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    t0 = time.monotonic()
    result = _session(tmp_path, sleeper.pid, [Ticker()], duration=0.5).run()
    assert 0.5 <= time.monotonic() - t0 < 5
    b = Bundle.open(tmp_path / "cap")
    assert b.manifest.status == "ok" and result.stop_reason == "duration reached"
    rec = b.manifest.collector("ticker")
    assert rec is not None and rec.status == "ok" and rec.ended is not None and rec.ended - rec.started >= 0.5
    assert b.manifest.targets[0].pid == sleeper.pid and b.manifest.targets[0].threads


def test_host_limit_skip_keeps_ok_but_perf_missing_makes_partial(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    cols = [Ticker(), Ticker("lbr", probe_ok=False, reason="needs hardware LBR")]
    _session(tmp_path, sleeper.pid, cols).run()
    m = Bundle.open(tmp_path / "cap").manifest
    assert m.status == "ok"
    lbr = m.collector("lbr")
    assert lbr is not None and lbr.status == "skipped" and lbr.reason == "needs hardware LBR"

    cols = [Ticker(), Ticker("perfy", probe_ok=False, reason="perf not found ('perf' is not on PATH)")]
    result = _session(tmp_path / "2", sleeper.pid, cols).run()
    m = Bundle.open(tmp_path / "2" / "cap").manifest
    assert m.status == "partial" and "perf not found" in (m.reason or "")
    assert result.fault is not None and "perf not found" in result.fault  # the user must act: exit 6


def test_a_collector_that_cannot_start_does_not_stop_the_others(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    result = _session(tmp_path, sleeper.pid, [Ticker("bad", fail_start=True), Ticker()]).run()
    assert result.fault is not None and "cannot open the thing" in result.fault
    m = Bundle.open(tmp_path / "cap").manifest
    bad, good = m.collector("bad"), m.collector("ticker")
    assert bad is not None and bad.status == "failed" and "cannot open the thing" in (bad.reason or "")
    assert good is not None and good.status == "ok"
    assert m.status == "partial"


def test_events_lost_to_a_busy_host_are_partial_but_no_fault(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    """Lost events leave the bundle partial (the report says how much), but the capture did what was
    asked: no fault, so attach exits 0 with a warning (as perf record does on lost events)."""
    result = _session(tmp_path, sleeper.pid, [Ticker("busy", lost=361), Ticker()]).run()
    m = Bundle.open(tmp_path / "cap").manifest
    assert m.status == "partial" and "lost 361 events" in (m.reason or "")
    assert result.fault is None


def test_disk_full_while_stopping_keeps_the_bundle_partial(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    full = OSError(errno.ENOSPC, "No space left on device")
    result = _session(tmp_path, sleeper.pid, [Ticker("full", fail_stop=full), Ticker()]).run()
    assert result.fault is not None and "disk full" in result.fault
    b = Bundle.open(tmp_path / "cap")
    rec = b.manifest.collector("full")
    assert rec is not None and rec.status == "partial" and "disk full" in (rec.reason or "")
    assert b.has("full.txt")  # what was written before the error is kept
    assert b.manifest.status == "partial"


def test_capture_ends_when_every_target_exits(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.8)"])
    try:
        t0 = time.monotonic()
        result = _session(tmp_path, proc.pid, [Ticker()], duration=30).run()
        assert time.monotonic() - t0 < 10
    finally:
        proc.kill()
        proc.wait()
    m = Bundle.open(tmp_path / "cap").manifest
    assert result.stop_reason == "every target exited"
    assert m.status == "partial" and "target exited" in (m.reason or "")
    assert result.fault is not None and "target exited" in result.fault
    assert m.targets[0].exited is not None


def test_load_command_output_and_exit_code(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    load = [sys.executable, "-c", "import sys; print('qps 1234'); sys.exit(3)"]
    result = _session(tmp_path, sleeper.pid, [Ticker()], duration=None, load=load).run()
    b = Bundle.open(tmp_path / "cap")
    assert result.load_exit_code == 3 and result.stop_reason == "the load command exited"
    assert b.manifest.load is not None and b.manifest.load.exit_code == 3
    assert "qps 1234" in b.read_text("load.log")
    assert b.manifest.status == "ok"


def test_missing_load_command_is_recorded(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    result = _session(tmp_path, sleeper.pid, [Ticker()], duration=None, load=["/nonexistent/load"]).run()
    m = Bundle.open(tmp_path / "cap").manifest
    assert result.load_exit_code == 127 and m.status == "failed"


def test_refuses_to_overwrite_without_force(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    from profiler.errors import OutputExists

    (tmp_path / "cap").mkdir()
    (tmp_path / "cap" / "x").write_text("keep me")
    with pytest.raises(OutputExists):
        _session(tmp_path, sleeper.pid, [Ticker()]).run()
    assert (tmp_path / "cap" / "x").read_text() == "keep me"


def test_an_unexpected_error_still_finishes_the_bundle(tmp_path: Path, sleeper: subprocess.Popen[bytes],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug in the capture loop (injected here) still leaves a finished bundle, then propagates."""
    import profiler.capture.session as session_mod

    def bad_poll(c: object) -> str | None:
        raise RuntimeError("bug in the loop")

    monkeypatch.setattr(session_mod, "_poll", bad_poll)
    with pytest.raises(RuntimeError):
        _session(tmp_path, sleeper.pid, [Ticker()], duration=5).run()
    m = Bundle.open(tmp_path / "cap").manifest
    assert m.status == "partial" and "bug in the loop" in (m.reason or "")
    rec = m.collector("ticker")
    assert rec is not None and rec.status == "ok" and rec.files == ["ticker.txt"]


def test_progress_goes_through_the_progress_protocol(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    """The session says how far it got through profiler.progress.Progress (the CLI draws it): the
    window's seconds against the duration, the bytes written, then the collectors finished."""
    calls: list[tuple[str, float, float | None, str]] = []

    def progress(task: str, done: float, total: float | None = None, unit: str = "") -> None:
        calls.append((task, done, total, unit))

    Session([target_from_pid(sleeper.pid)], tmp_path / "cap", CaptureOptions(duration=1.2), [Ticker("a"), Ticker("b")],
            progress=progress).run()
    capturing = [c for c in calls if c[0] == "capturing"]
    assert capturing and all(c[2] == 1.2 and c[3] == "s" for c in capturing)
    assert [c[1] for c in capturing] == sorted(c[1] for c in capturing) and capturing[-1][1] < 1.2
    assert any(c[0] == "writing the bundle" and c[3] == "B" for c in calls)
    assert calls[-1] == ("stopping: finishing files", 2, 2, "collectors")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_ends_the_capture_partial_and_names_it(tmp_path: Path, sleeper: subprocess.Popen[bytes],
                                                              sig: int) -> None:
    """Ctrl-C, SIGTERM and SIGHUP all end a capture the same way: every collector stopped and
    its files kept, the bundle partial with the signal named, the handlers given back."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    timer = threading.Timer(0.8, os.kill, (os.getpid(), sig))
    timer.start()
    try:
        result = _session(tmp_path, sleeper.pid, [Ticker()], duration=30).run()
    finally:
        timer.cancel()
    name = "Ctrl-C" if sig == signal.SIGINT else signal.Signals(sig).name
    assert result.interrupted and result.signal == sig and result.stop_reason == f"interrupted ({name})"
    m = Bundle.open(tmp_path / "cap").manifest
    assert m.status == "partial" and (m.reason or "").startswith(f"interrupted ({name})")
    rec = m.collector("ticker")
    assert rec is not None and rec.status == "ok" and (tmp_path / "cap" / "ticker.txt").read_text()
    assert {s: signal.getsignal(s) for s in before} == before
