"""Child processes that never outlive us (collectors layer): spawn, stop in order, reap, kill leftovers.

Every helper process (perf record, perf stat, the load command) is started with
``PR_SET_PDEATHSIG`` set to SIGKILL (so a profiler killed outright takes them along), in its
own session unless told otherwise (so a Ctrl-C typed at the terminal reaches only the
profiler, which then stops its children in order). Stopping is SIGINT (perf flushes and
writes its data), then SIGTERM, then SIGKILL. Every child still running is remembered, so
the session can make sure none is left (``kill_all_children``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Protocol

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
    stdin: int | None = None,
) -> subprocess.Popen[bytes]:
    """Start a helper that cannot outlive the profiler (parent-death signal).

    Helpers get their own session (a terminal Ctrl-C reaches only the profiler, which stops
    them in order). ``new_session=False`` is for the load command of ``profiler run``: a new
    session would also put it in a new scheduler autogroup, which changes how it shares the
    CPUs with the server it drives (measured: a third less sysbench throughput against a
    MariaDB of the same session), so the load stays in ours. ``stdin``: an open descriptor the
    child gets as its standard input (the bcc helpers' control socket).
    """
    proc = subprocess.Popen(
        argv,
        stdin=stdin if stdin is not None else (subprocess.PIPE if stdin_pipe else subprocess.DEVNULL),
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
    """Where a helper's output goes: a file, or a filter in front of one (collectors/runtime/gosym.py)."""

    def write(self, data: bytes, /) -> int: ...


def reap(proc: subprocess.Popen[bytes], on_cpu: Callable[[float], None] | None = None) -> int:
    """Wait for a child and return its exit code; ``on_cpu`` hears the CPU seconds (user + system)
    it used, from the kernel's own accounting of the reaped child."""
    if on_cpu is None or proc.returncode is not None:
        return proc.wait()
    try:
        _, status, ru = os.wait4(proc.pid, 0)
    except ChildProcessError:  # reaped elsewhere
        return proc.wait()
    proc.returncode = os.waitstatus_to_exitcode(status)
    on_cpu(ru.ru_utime + ru.ru_stime)
    return proc.returncode


def run_to_file(
    argv: list[str], out: BytesSink, *, timeout: float, stderr_path: Path | None = None,
    on_chunk: Callable[[bytes], None] | None = None, on_cpu: Callable[[float], None] | None = None,
) -> int:
    """Run a finite helper (perf script) streaming its stdout into ``out``; kill it at ``timeout``.

    ``on_chunk`` sees every block of output on the way (to count samples without parsing lines);
    ``on_cpu`` the helper's CPU seconds once it has ended.
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
            rc = reap(proc, on_cpu)
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
