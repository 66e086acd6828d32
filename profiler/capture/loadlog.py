"""The load's output, copied into the bundle line by line with the time each line arrived (capture layer).

``profiler run`` gives the load command a pipe instead of a file: a thread copies every line
into ``load.log`` as it comes (so the log is readable while the load runs) and notes the
CLOCK_MONOTONIC time it read the line. ``profiler attach --load-log FILE`` follows a file
another process writes the same way: what the file held before the capture is copied without
times, every line appended during the capture gets its arrival time. A load tool prints a
progress report when its interval ends, so these times put each interval on the capture's
clock without trusting the tool's own (docs/load.md). The times go to ``load.times.csv.gz``
(``line,t``; line numbers count ``\\n``-terminated lines of load.log from 1). :class:`Load`
is that lifecycle for a session: start or follow, then stop and finish the members.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from profiler.bundle import BundleWriter, LoadInfo, members
from profiler.collectors import process as _proc
from profiler.errors import CapabilityError, OutputError, UsageError
from profiler.files import create_growing

CHUNK = 1 << 16  # bytes read at once: every line completed in a read gets the read's time
FOLLOW_EVERY = 0.1  # s between looks at a followed file


@dataclass(frozen=True)
class LoadStart:
    """When a load followed by ``attach --load-log`` started (``--load-start``): an absolute
    CLOCK_MONOTONIC time, or an offset from the capture's start."""

    text: str  # as given, for the manifest
    monotonic: float | None = None
    offset: float | None = None

    def resolve(self, capture_start: float) -> float:
        if self.monotonic is not None:
            return self.monotonic
        return capture_start + (self.offset or 0.0)


class TimesSink:
    """``load.times.csv.gz`` written as the lines come (``line,t``): memory stays flat however
    many lines the load prints (a load printing 10M lines kept 10M tuples: 2.6 GB). The member is
    opened at the first timed line; :meth:`close` names it (None when no line was timed)."""

    def __init__(self, writer: BundleWriter) -> None:
        self.writer = writer
        self.rows = 0
        self._lock = threading.Lock()  # the copier's thread adds, the session closes
        self._closed = False
        self._stack: contextlib.ExitStack | None = None
        self._fh: IO[bytes] | None = None

    def add(self, first: int, count: int, t: float) -> None:
        """Lines ``first`` .. ``first + count - 1`` of load.log arrived at ``t``."""
        if count <= 0:
            return
        stamp = f",{t:.6f}\n"
        rows = "".join(f"{n}{stamp}" for n in range(first, first + count)).encode()
        with self._lock:
            if self._closed:
                return
            if self._fh is None:
                self._stack = contextlib.ExitStack()
                self._fh = self._stack.enter_context(self.writer.open_member(members.LOAD_TIMES))
                self._fh.write(b"line,t\n")
            self._fh.write(rows)
            self.rows += count

    def close(self) -> str | None:
        with self._lock:
            self._closed = True
            if self._stack is not None:
                self._stack.close()  # the member is renamed into place (what was written, even on a full disk)
                self._stack, self._fh = None, None
        return members.LOAD_TIMES if self.rows else None


class _Lines:
    """Counts the lines copied so far and hands the arrival time of each one completed to the sink."""

    def __init__(self, out: IO[bytes], clock: Callable[[], float], times: TimesSink | None) -> None:
        self.out = out
        self.clock = clock
        self.sink = times
        self.lines = 0  # complete lines copied
        self.bytes = 0

    def copy(self, data: bytes, *, timed: bool) -> None:
        if not data:
            return
        self.out.write(data)
        self.out.flush()
        self.bytes += len(data)
        n = data.count(b"\n")
        if timed and n and self.sink is not None:
            self.sink.add(self.lines + 1, n, self.clock())
        self.lines += n


class PipeCopier:
    """Copies a child's stdout pipe into the log as it comes, a read at a time (never a line at a
    time: a load printing millions of short lines costs one write and one time per read)."""

    def __init__(self, pipe: IO[bytes], log: IO[bytes], times: TimesSink | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.pipe = pipe
        self.lines = _Lines(log, clock, times)
        self.error: str | None = None
        self._thread = threading.Thread(target=self._run, name="profiler-load-log", daemon=True)

    def start(self) -> PipeCopier:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            fd = self.pipe.fileno()
            while True:
                data = os.read(fd, CHUNK)
                if not data:
                    return
                self.lines.copy(data, timed=True)
        except (OSError, ValueError) as exc:  # the disk filled, or the pipe was closed under us
            self.error = str(exc)

    def join(self, timeout: float) -> bool:
        """Wait for the end of the output; False when something still holds the pipe open."""
        self._thread.join(timeout)
        return not self._thread.is_alive()


class FileFollower:
    """Follows a growing log file: copies what it holds, then what is appended, with times."""

    def __init__(self, source: Path, log: IO[bytes], times: TimesSink | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.source = source
        self.lines = _Lines(log, clock, times)
        self.error: str | None = None
        self.note: str | None = None
        self._stop = threading.Event()
        self._fh: IO[bytes] | None = None
        self._thread = threading.Thread(target=self._run, name="profiler-load-follow", daemon=True)

    def start(self) -> FileFollower:
        """Copy what the file holds now (untimed: its lines were written before the capture), then follow it."""
        self._fh = open(self.source, "rb")  # noqa: SIM115 - closed by the thread
        held = os.fstat(self._fh.fileno()).st_size  # what it holds now: a writer faster than us cannot hold the start
        last = b"\n"
        while self._fh.tell() < held:
            data = self._fh.read(min(CHUNK, held - self._fh.tell()))
            if not data:
                break
            self.lines.copy(data, timed=False)
            last = data[-1:]
        for _ in range(16):  # the line it ended in was written before the capture too: untimed
            if last == b"\n":
                break
            data = self._fh.readline(CHUNK)
            if not data:
                break
            self.lines.copy(data, timed=False)
            last = data[-1:]
        self._thread.start()
        return self

    def _run(self) -> None:
        assert self._fh is not None
        fh = self._fh
        try:
            while True:
                stopping = self._stop.wait(FOLLOW_EVERY)
                self._drain(fh, final=stopping)
                if stopping or self.note:
                    return
        except OSError as exc:
            self.error = str(exc)
        finally:
            fh.close()

    def _drain(self, fh: IO[bytes], *, final: bool = False) -> None:
        with contextlib.suppress(OSError):
            if os.fstat(fh.fileno()).st_size < fh.tell():
                self.note = f"{self.source} was truncated during the capture: following stopped there"
                return
        pending = b""
        while True:
            data = fh.read(CHUNK)
            if not data:
                break
            pending += data
            cut = pending.rfind(b"\n")
            if cut >= 0:
                self.lines.copy(pending[: cut + 1], timed=True)
                pending = pending[cut + 1:]
            elif len(pending) > CHUNK * 16:  # a line without end: copied in pieces, never held whole
                self.lines.copy(pending, timed=False)
                pending = b""
        if pending and final:  # the capture ends in the middle of a line: keep what was written
            self.lines.copy(pending, timed=False)
        elif pending:  # a line still being written: read it again, whole, next time
            fh.seek(-len(pending), os.SEEK_CUR)

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        self._thread.join(timeout)


_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_OFFSET = re.compile(r"^([+-])\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?$")
_CLOCK = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?$")


WALL_RANGE = (0.0, 4102444800.0)  # Unix seconds: 1970 to 2100
MONO_RANGE = (-5e9, 1e10)  # CLOCK_MONOTONIC seconds (a wall time of 1970 is about -1.8e9 on a host booted today)
OFFSET_MAX = 1e9  # s either side of the capture's start (31 years)


def parse_load_start(text: str | None, now_wall: float | None = None, now_mono: float | None = None) -> LoadStart | None:
    """--load-start: a wall time, an offset from the capture's start, or a CLOCK_MONOTONIC time.
    Every form is checked here, at the option: NaN, infinities and times no clock holds are one
    UsageError line (exit 2), never a manifest that no verb can read."""
    if text is None:
        return None
    got = _parse_load_start(text, now_wall, now_mono)
    bad = f"--load-start {text!r}"
    if got.offset is not None and not (math.isfinite(got.offset) and abs(got.offset) <= OFFSET_MAX):
        raise UsageError(f"{bad}: an offset from the capture's start must be a finite number of seconds "
                         f"within {OFFSET_MAX:.0e}")
    if got.monotonic is not None and not (math.isfinite(got.monotonic) and MONO_RANGE[0] <= got.monotonic <= MONO_RANGE[1]):
        raise UsageError(f"{bad} is no time this host's clocks hold: give a wall time between 1970 and 2100, "
                         "an offset (-30s) or mono:SECONDS (a finite number)")
    return got


def _wall(value: float, text: str) -> float:
    if not (math.isfinite(value) and WALL_RANGE[0] <= value <= WALL_RANGE[1]):
        raise UsageError(f"--load-start {text!r}: a wall time between 1970 and 2100, in Unix seconds or as a date")
    return value


def _parse_load_start(text: str, now_wall: float | None, now_mono: float | None) -> LoadStart:
    t = text.strip()
    wall_now = time.time() if now_wall is None else now_wall
    mono_now = time.monotonic() if now_mono is None else now_mono
    m = _OFFSET.match(t)
    if m:
        secs = float(m.group(2)) * _UNIT_SECONDS[m.group(3) or "s"]
        return LoadStart(text=t, offset=-secs if m.group(1) == "-" else secs)
    if t.startswith("mono:"):
        try:
            return LoadStart(text=t, monotonic=float(t[5:]))
        except ValueError:
            raise UsageError(f"--load-start {text!r}: mono: wants CLOCK_MONOTONIC seconds, e.g. mono:12345.6") from None
    wall: float | None = None
    if t.startswith("@"):
        try:
            wall = _wall(float(t[1:]), text)
        except ValueError:
            raise UsageError(f"--load-start {text!r}: @ wants Unix seconds, e.g. @1795490424.5") from None
    elif (c := _CLOCK.match(t)) is not None:
        today = datetime.datetime.fromtimestamp(wall_now).astimezone()
        frac = float("0." + c.group(4)) if c.group(4) else 0.0
        try:
            when = today.replace(hour=int(c.group(1)), minute=int(c.group(2)), second=int(c.group(3) or 0),
                                 microsecond=round(frac * 1e6) % 1000000)
        except ValueError:
            raise UsageError(f"--load-start {text!r} is not a time of day") from None
        wall = when.timestamp()
    else:
        try:
            dt = datetime.datetime.fromisoformat(t.replace(" ", "T", 1) if "T" not in t else t)
        except ValueError:
            raise UsageError(f"cannot read --load-start {text!r}: use a wall time (2026-11-24T10:15:30, 10:15:30, "
                             "@1795490424.5), an offset from the capture start (-30s) or mono:SECONDS") from None
        try:  # a date at the ends of the calendar (0001-01-01) has no time zone offset nor timestamp
            wall = _wall((dt if dt.tzinfo else dt.astimezone()).timestamp(), text)
        except (OverflowError, ValueError, OSError):
            raise UsageError(f"--load-start {text!r}: a wall time between 1970 and 2100") from None
    return LoadStart(text=t, monotonic=wall - (wall_now - mono_now))


class Load:
    """The load of a capture: the command ``profiler run`` spawns beside it (its output on a pipe
    a thread copies into load.log, timing each line), or the log file ``attach --load-log``
    follows (``log``, its start ``start``). The session starts it once its collectors run and
    stops it on its own stop path, whatever ended the capture."""

    def __init__(self, argv: list[str] | None, log: Path | None, start: LoadStart | None) -> None:
        self.argv = argv
        self.log = log  # attach: a log file another process writes, followed during the capture
        self.start_at = start
        self._copier: PipeCopier | None = None
        self._follower: FileFollower | None = None
        self._times: TimesSink | None = None  # load.times.csv.gz, written as the load's lines come

    def start(self, writer: BundleWriter) -> tuple[subprocess.Popen[bytes] | None, LoadInfo]:
        """Spawn the load with its output on a pipe a thread copies into load.log, timing each line."""
        assert self.argv
        log_name = members.LOAD_LOG
        info = LoadInfo(argv=list(self.argv), log=log_name, started=time.monotonic(), source="run",
                        start_from="spawn")
        writer.manifest.load = info
        logfh = create_growing(writer.path(log_name), writer.root)  # the copier writes it; closed in stop()
        try:
            proc = _proc.spawn(list(self.argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               new_session=False)
        except OSError as exc:
            logfh.write(f"profiler: cannot start {self.argv[0]}: {exc.strerror or exc}\n".encode())
            logfh.close()
            info.exit_code = 127
            info.ended = time.monotonic()
            return None, info
        assert proc.stdout is not None
        self._times = TimesSink(writer)
        self._copier = PipeCopier(proc.stdout, logfh, self._times).start()
        with contextlib.suppress(OSError):
            writer.save()
        return proc, info

    def stop(self, proc: subprocess.Popen[bytes], info: LoadInfo) -> int:
        """Stop the spawned load (if it still runs) and finish its log and times; its exit code."""
        if proc.poll() is None:
            rc = _proc.stop_process(proc, timeout=5.0)
        else:
            rc = proc.returncode
            _proc.forget(proc)
        info.exit_code = rc if rc >= 0 else 128 - rc
        if info.ended is None:
            info.ended = time.monotonic()
        copier = self._copier
        if copier is not None:
            # the load is gone; its output ends unless a child it left behind still holds the pipe
            # (then the log ends here: the copier's writes to the closed log stop it)
            copier.join(2.0)
            copier.lines.out.close()
            info.times = self._close_times()
            if proc.stdout is not None and copier.join(0):
                proc.stdout.close()
        return info.exit_code

    def follow(self, writer: BundleWriter) -> None:
        """attach --load-log: copy the file into load.log and follow it while the capture runs."""
        assert self.log is not None
        m = writer.manifest
        info = LoadInfo(log=members.LOAD_LOG, source="attach", file=str(self.log))
        if self.start_at is not None:
            info.started = self.start_at.resolve(m.clock.monotonic_start)
            info.start_from = self.start_at.text
        m.load = info
        logfh = create_growing(writer.path(members.LOAD_LOG), writer.root)  # the follower writes it; closed in stop_follow()
        try:
            self._times = TimesSink(writer)
            self._follower = FileFollower(self.log, logfh, self._times).start()
        except OSError as exc:
            logfh.close()
            raise CapabilityError(f"cannot read --load-log {self.log}: {exc.strerror or exc}") from None
        with contextlib.suppress(OSError):
            writer.save()

    def stop_follow(self, writer: BundleWriter) -> None:
        f = self._follower
        if f is None or writer.manifest.load is None:
            return
        f.stop()
        f.lines.out.close()
        writer.manifest.load.times = self._close_times()

    def _close_times(self) -> str | None:
        """The load's line times member, finished (None when no line was timed)."""
        sink, self._times = self._times, None
        if sink is None:
            return None
        try:
            return sink.close()
        except (OSError, OutputError):  # a full disk: what reached it is kept under its name
            return members.LOAD_TIMES if sink.rows else None
