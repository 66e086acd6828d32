"""Running collector helpers (capture layer): child processes that never outlive us, perf plumbing.

Every helper process (perf record, perf stat) is started in its own session (so a Ctrl-C
typed at the terminal reaches only the profiler, which then stops its children in order)
with ``PR_SET_PDEATHSIG`` set to SIGKILL (so a profiler killed outright takes them along).
Stopping is SIGINT (perf flushes and writes its data), then SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Protocol

from profiler.collectors.base import CaptureContext, Probe

from profiler.bundle import FAILED, OK, PARTIAL, SKIPPED, CollectorRecord

_PR_SET_PDEATHSIG = 1

# Every child still running, so the session (and atexit) can make sure none is left.
_LIVE: dict[int, subprocess.Popen[bytes]] = {}
_LIVE_LOCK = threading.Lock()


def _child_setup() -> None:  # pragma: no cover - runs in the child between fork and exec
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except OSError:
        pass
    # The parent may have died between fork and prctl: then nobody would reap us.
    if os.getppid() == 1:
        os._exit(1)


def spawn(
    argv: list[str],
    *,
    stdout: IO[bytes] | int | None = subprocess.DEVNULL,
    stderr: IO[bytes] | int | None = subprocess.DEVNULL,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    stdin_pipe: bool = False,
    new_session: bool = True,
) -> subprocess.Popen[bytes]:
    """Start a helper that cannot outlive the profiler (parent-death signal).

    Helpers get their own session (a terminal Ctrl-C reaches only the profiler, which stops
    them in order). ``new_session=False`` is for the load command of ``profiler run``: a new
    session would also put it in a new scheduler autogroup, which changes how it shares the
    CPUs with the server it drives (measured: a third less sysbench throughput against a
    MariaDB of the same session), so the load stays in ours.
    """
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        start_new_session=new_session,
        preexec_fn=_child_setup,
        env=env,
        cwd=cwd,
        close_fds=True,
    )
    with _LIVE_LOCK:
        _LIVE[proc.pid] = proc
    return proc


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 10.0, first: int = signal.SIGINT) -> int:
    """Stop a helper: ``first`` (SIGINT lets perf flush), then SIGTERM, then SIGKILL; reap it."""
    try:
        for sig, wait in ((first, timeout), (signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
            if proc.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
            try:
                proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        rc = proc.wait(5.0) if proc.returncode is None else proc.returncode
        return rc
    finally:
        with _LIVE_LOCK:
            _LIVE.pop(proc.pid, None)


def cpu_seconds(pid: int) -> float | None:
    """user + system CPU seconds a live process has used (its own threads), or None."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def forget(proc: subprocess.Popen[bytes]) -> None:
    with _LIVE_LOCK:
        _LIVE.pop(proc.pid, None)


def kill_all_children() -> list[int]:
    """Last resort (session finally, atexit): kill every helper still running; returns their pids."""
    with _LIVE_LOCK:
        procs = list(_LIVE.values())
    killed = []
    for proc in procs:
        if proc.poll() is None:
            killed.append(proc.pid)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5.0)
        forget(proc)
    return killed


class BytesSink(Protocol):
    """Where a helper's output goes: a file, or a filter in front of one (collectors/gosym.py)."""

    def write(self, data: bytes, /) -> int: ...


def run_to_file(
    argv: list[str], out: BytesSink, *, timeout: float, stderr_path: Path | None = None,
    on_chunk: Callable[[bytes], None] | None = None,
) -> int:
    """Run a finite helper (perf script) streaming its stdout into ``out``; kill it at ``timeout``.

    ``on_chunk`` sees every block of output on the way (to count samples without parsing lines).
    """
    err: IO[bytes] | int = subprocess.DEVNULL
    errfh = None
    if stderr_path is not None:
        errfh = open(stderr_path, "ab")
        err = errfh
    try:
        proc = spawn(argv, stdout=subprocess.PIPE, stderr=err)
        def _kill_if_running() -> None:
            if proc.poll() is None:
                proc.kill()

        timer = threading.Timer(timeout, _kill_if_running)
        timer.daemon = True
        timer.start()
        try:
            assert proc.stdout is not None
            while True:
                chunk = proc.stdout.read(1 << 20)
                if not chunk:
                    break
                if on_chunk is not None:
                    on_chunk(chunk)
                out.write(chunk)
            rc = proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            forget(proc)
        if rc == -signal.SIGKILL:
            raise TimeoutError(f"{argv[0]} {argv[1] if len(argv) > 1 else ''} took more than {timeout:.0f}s")
        return rc
    finally:
        if errfh is not None:
            errfh.close()


def tail(path: Path, lines: int = 3) -> str:
    """The last meaningful lines of a helper's stderr, as one line (for a manifest reason)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    keep = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    keep = [ln for ln in keep if not ln.startswith("'trace' not valid")]
    return "; ".join(keep[-lines:])


# --------------------------------------------------------------------------- perf helpers

_LOST = re.compile(r"lost\s+(\d+)\s+chunks|Lost\s+(\d+)\s+events|(\d+)\s+samples?\s+lost", re.I)


def lost_from_stderr(text: str) -> int:
    """Lost-event counts perf prints on stderr ('Processed N events and lost M chunks!')."""
    n = 0
    for m in _LOST.finditer(text):
        n += int(next(g for g in m.groups() if g))
    return n


def perf_probe(ctx: CaptureContext, events: list[str]) -> Probe:
    """The common checks for a perf collector: perf present, root or a permissive paranoid, events exist."""
    from profiler.collectors import host

    if shutil.which(ctx.perf) is None:
        return Probe(False, f"perf not found ({ctx.perf!r} is not on PATH)", "apt-get install linux-perf")
    if not host.is_root():
        paranoid = host.perf_event_paranoid()
        if paranoid is None or paranoid > 1 or any(":" in e for e in events):
            return Probe(False, "permission denied: run as root (perf_event_paranoid is "
                         f"{paranoid}, tracepoints need root)", "sudo profiler ...")
    for ev in events:
        if ":" in ev and not host.tracepoint_available(ev):
            return Probe(False, f"tracepoint {ev} is not available on this kernel")
    return Probe(True)


def perf_permission_error(stderr: str) -> str | None:
    if "ermission" in stderr or "paranoid" in stderr or "Operation not permitted" in stderr:
        return "permission denied"
    if "No such file" in stderr and "perf" in stderr:
        return "perf missing"
    return None


class PerfCollector:
    """A collector that runs one long-lived perf process on the targets until stopped.

    Subclasses give ``name``, ``events`` and ``argv``; they finish their files in ``finish``.
    """

    name = "perf"
    backend = "perf"
    events: list[str] = []
    stop_timeout = 15.0
    max_bytes: int | None = None  # bound on perf.data; None: unbounded (low-rate collectors)

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.rec = CollectorRecord(name=self.name, backend=self.backend)
        self.started: float | None = None
        self.errpath: Path | None = None
        self.died: str | None = None  # why perf ended before it was asked to
        self.stopping = False
        self.capped: str | None = None  # why perf was stopped before the end of the capture

    # -- protocol
    def probe(self, ctx: CaptureContext) -> Probe:
        return perf_probe(ctx, self.events)

    def argv(self, ctx: CaptureContext) -> list[str]:
        raise NotImplementedError

    def start(self, ctx: CaptureContext) -> None:
        argv = self.argv(ctx)
        self.rec.argv = argv
        self.errpath = ctx.writer.root / f".{self.name}.stderr"
        self.prepare(ctx)
        with open(self.errpath, "wb") as err:
            self.started = time.monotonic()
            self.proc = spawn(argv, stderr=err, stdout=self.stdout_target(ctx))
        self.rec.started = self.started

    def check_started(self, ctx: CaptureContext) -> None:
        """Called a moment after every collector started: perf fails fast on bad events,
        missing pids or permissions; raise with perf's own words if it did."""
        if self.proc is not None and self.proc.poll() not in (None, 0):
            rc = self.proc.returncode
            msg = (tail(self.errpath) if self.errpath else "") or (
                f"killed by signal {signal.Signals(-rc).name}" if rc < 0 else f"exit code {rc}")
            forget(self.proc)
            self.cleanup(ctx)
            raise RuntimeError(f"perf exited at once: {msg}")

    def stdout_target(self, ctx: CaptureContext) -> IO[bytes] | int | None:
        return subprocess.DEVNULL

    def prepare(self, ctx: CaptureContext) -> None:
        """Before perf starts (open output files, change tracing state)."""

    def cleanup(self, ctx: CaptureContext) -> None:
        """Undo ``prepare`` (always called once perf is gone)."""

    def poll(self) -> str | None:
        """None while perf runs; a word on how it ended once it has (self.died says why if badly).

        Also keeps the output bounded: past ``max_bytes`` of perf.data, perf is asked to stop
        (it finishes its file properly) and the collector will say it stopped early.
        """
        if self.proc is None:
            return "not started"
        if (self.max_bytes and not self.stopping and self.capped is None
                and self.proc.poll() is None and self.size() > self.max_bytes):
            elapsed = time.monotonic() - (self.started or time.monotonic())
            self.capped = (f"stopped early after {elapsed:.1f}s: perf.data reached {self.max_bytes >> 20} MiB "
                           "(the bound that keeps long captures on busy targets finite)")
            self.request_stop()
        rc = self.proc.poll()
        if rc is None:
            return None
        if rc != 0 and self.died is None and not self.stopping:
            self.died = self._death_reason(rc)
        return self.died or "ended"

    def _death_reason(self, rc: int) -> str:
        if rc < 0:
            return f"perf was killed by signal {signal.Signals(-rc).name} during the capture"
        msg = tail(self.errpath) if self.errpath else ""
        return f"perf exited with code {rc} during the capture" + (f": {msg}" if msg else "")

    def note_cpu(self) -> None:
        """Record the CPU time perf itself used during the capture (what the collector costs in user space)."""
        if self.proc is not None and "perf_cpu_seconds" not in self.rec.stats:
            used = cpu_seconds(self.proc.pid)
            if used is not None:
                self.rec.stats["perf_cpu_seconds"] = round(used, 2)

    def request_stop(self) -> None:
        """Ask perf to stop (SIGINT) without waiting, so every collector stops at the same moment."""
        self.stopping = True
        self.note_cpu()
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGINT)

    def size(self) -> int:
        return 0

    def stop(self, ctx: CaptureContext) -> CollectorRecord:
        rec = self.rec
        rc: int | None = None
        t0 = time.monotonic()
        try:
            if self.proc is not None:
                self.poll()  # notes a death that happened before the stop was asked for
                self.note_cpu()
                self.stopping = True
                rc = stop_process(self.proc, self.stop_timeout)
                if self.died is None and rc not in (0, -signal.SIGINT, 130, 2):
                    self.died = self._death_reason(rc)
            rec.ended = time.monotonic()
            rec.stats["stop_seconds"] = round(rec.ended - t0, 3)
            stderr = self.errpath.read_text(errors="replace") if self.errpath and self.errpath.exists() else ""
            lost = lost_from_stderr(stderr)
            if lost:
                rec.stats["lost"] = lost
            t1 = time.monotonic()
            self.finish(ctx, rec, stderr)
            rec.stats["finish_seconds"] = round(time.monotonic() - t1, 3)
            if rec.status in ("pending", "running"):
                rec.status = OK
            if self.died:
                # perf's own end comes first in the reason: later errors (perf script refusing a
                # perf.data whose header was never finished) follow from it
                rec.reason = self.died + (f"; {rec.reason}" if rec.reason and self.died not in rec.reason else "")
                if rec.status == OK:
                    rec.status = PARTIAL
                if rec.stats.get("samples") == 0 and rec.status == PARTIAL:
                    rec.status = FAILED
            if self.capped:
                rec.stats["stopped_early"] = True
                if rec.status == OK:
                    rec.status, rec.reason = PARTIAL, self.capped
            if lost and rec.status == OK:
                rec.status, rec.reason = PARTIAL, f"perf lost {lost} events (buffer overrun)"
        except OSError as exc:
            rec.ended = rec.ended or time.monotonic()
            rec.status = PARTIAL if any(ctx.writer.path(f).exists() for f in rec.files) else FAILED
            rec.reason = disk_reason(exc)
        finally:
            self.cleanup(ctx)
            if self.errpath is not None:
                with contextlib.suppress(OSError):
                    self.errpath.unlink()
        return rec

    def finish(self, ctx: CaptureContext, rec: CollectorRecord, stderr: str) -> None:
        """Turn perf's output into bundle files; set rec.files, rec.stats, maybe rec.status."""


def disk_reason(exc: OSError) -> str:
    if exc.errno == errno.ENOSPC:
        return "disk full while writing the bundle (ENOSPC): kept what was written"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"permission denied: {exc.filename or exc}"
    return f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")


def skipped(name: str, backend: str, reason: str) -> CollectorRecord:
    return CollectorRecord(name=name, backend=backend, status=SKIPPED, reason=reason)


def pid_list(pids: list[int]) -> str:
    return ",".join(str(p) for p in pids)


def file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def read_file(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return None


def write_file(path: str, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)

