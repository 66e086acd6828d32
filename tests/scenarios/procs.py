"""Processes a scenario starts, each in its own process group, stopped by pid (test layer).

Every process is started with `start_new_session=True`, so its pid is also its process group
id and anything it forks stays in that group; `stop_all` signals the groups it made (TERM,
then KILL), newest first, and reports anything still alive. Nothing here matches processes
by name.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def alive(pid: int) -> bool:
    """True while pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def children(pid: int) -> list[int]:
    """Direct children of pid (all its threads' children)."""
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                out.extend(int(x) for x in fh.read().split())
        except OSError:
            pass
    return sorted(out)


def comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def wait_for(pred: Callable[[], T], timeout: float, what: str, interval: float = 0.1) -> T:
    """Poll pred until it returns something truthy; raise RuntimeError after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


@dataclass
class Procs:
    """The processes one scenario started."""

    logdir: Path
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)
    names: dict[int, str] = field(default_factory=dict)

    def spawn(
        self,
        name: str,
        argv: list[str],
        *,
        cwd: Path | None = None,
        join: Callable[[], None] | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start argv in its own session; stdout+stderr go to logdir/<name>.log."""
        log = open(self.logdir / f"{name}.log", "ab")  # noqa: SIM115 - the child keeps it
        try:
            p = subprocess.Popen(
                argv,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=join,
                env=env,
            )
        finally:
            log.close()
        self.started.append(p)
        self.names[p.pid] = name
        return p

    def run(self, name: str, argv: list[str], *, timeout: float, cwd: Path | None = None,
            join: Callable[[], None] | None = None) -> str:
        """Run a preparation step to completion (bounded); return its output, raise on failure."""
        p = self.spawn(name, argv, cwd=cwd, join=join)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop(p)
            raise RuntimeError(f"{name}: still running after {timeout:.0f}s") from None
        out = self.log(name)
        if rc != 0:
            tail = " | ".join(out.strip().splitlines()[-3:])
            raise RuntimeError(f"{name}: exit code {rc}: {tail}")
        return out

    def log(self, name: str) -> str:
        try:
            return (self.logdir / f"{name}.log").read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, p: subprocess.Popen[bytes], grace: float = 5.0) -> None:
        """TERM the process group, then KILL it after `grace` seconds."""
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        # Whatever is left in the group (the leader gone, a child lingering) gets KILL.
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass

    def stop_all(self, grace: float = 5.0) -> list[str]:
        """Stop every group, newest first; return what could not be stopped (empty: clean)."""
        for p in reversed(self.started):
            self.stop(p, grace)
        return [f"{self.names[p.pid]} (pid {p.pid}) still alive" for p in self.started if alive(p.pid)]

    def group_alive(self) -> list[int]:
        """Pids of any process still in one of our process groups."""
        groups = {p.pid for p in self.started}
        out = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    rest = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(rest[2]) in groups and rest[0] not in ("Z", "X"):
                out.append(int(entry))
        return out
