"""The bcc helper process, as the profiler sees it (collectors layer): one per capture, a child per collector.

collectors/bcc/helper.py forks a child for each bcc collector from one helper process, so each
collector's programs run in a process of their own for the price of one interpreter start-up.
``acquire()`` starts it on first use (the first bcc collector's ``start``) and ``release()``
closes its control socket once the last collector let go; ``fork(name, settings)`` asks for a
child and returns the collector's end of its socket. What the helper reports about its
children (pid, exit status and CPU) is kept per collector name.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Any

from profiler.collectors import process as _proc
from profiler.collectors.bcc.symbols import reap_within


@dataclass
class Child:
    pid: int | None = None
    status: int | None = None  # exit code, or -signal
    cpu: float | None = None


class Zygote:
    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = _proc.spawn([sys.executable, "-m", "profiler.collectors.bcc.helper"], stdin=theirs.fileno(),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        finally:
            theirs.close()
        self.ctl = ours
        self.children: dict[str, Child] = {}
        self.changed = threading.Condition()
        self.stderr: list[str] = []
        self._reader = threading.Thread(target=self._read, name="bcc-helper", daemon=True)
        self._reader.start()
        threading.Thread(target=self._read_stderr, name="bcc-helper-err", daemon=True).start()

    def fork(self, name: str, settings: dict[str, Any]) -> socket.socket:
        """A child serving collector ``name``; the returned socket carries its messages."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with self.changed:
                self.children[name] = Child()
            socket.send_fds(self.ctl, [json.dumps({**settings, "collector": name}).encode()], [theirs.fileno()])
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        return ours

    def child(self, name: str) -> Child:
        with self.changed:
            return self.children.setdefault(name, Child())

    def wait_exit(self, name: str, timeout: float) -> Child:
        """The child's end as the helper reported it (status None: not reported in time)."""
        with self.changed:
            self.changed.wait_for(lambda: self.children.get(name, Child()).status is not None
                                  or not self._reader.is_alive(), timeout)
            return self.children.setdefault(name, Child())

    def _read(self) -> None:
        while True:
            try:
                data = self.ctl.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            try:
                msg = json.loads(data)
            except ValueError:
                continue
            with self.changed:
                if "forked" in msg:
                    self.children.setdefault(str(msg["forked"]), Child()).pid = int(msg["pid"])
                elif "exited" in msg:
                    c = self.children.setdefault(str(msg["exited"]), Child())
                    c.status, c.cpu = int(msg["status"]), float(msg.get("cpu") or 0.0)
                self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            text = line.decode("utf-8", "replace").strip()
            if text:
                self.stderr = (self.stderr + [text[:300]])[-20:]

    def close(self) -> float | None:
        """No more children will be asked for: the helper ends once its children have. Its own CPU
        seconds (what the kernel reports for it includes the children it reaped: taken out)."""
        with contextlib.suppress(OSError):
            self.ctl.shutdown(socket.SHUT_WR)
        _rc, cpu = reap_within(self.proc, 60.0)
        self._reader.join(5.0)
        with contextlib.suppress(OSError):
            self.ctl.close()
        if cpu is None:
            return None
        with self.changed:
            return max(0.0, cpu - sum(c.cpu or 0.0 for c in self.children.values()))


_SHARED: Zygote | None = None
_USERS = 0
_LOCK = threading.Lock()


def acquire() -> Zygote:
    global _SHARED, _USERS
    with _LOCK:
        if _SHARED is None or _SHARED.proc.poll() is not None:
            _SHARED = Zygote()
        _USERS += 1
        return _SHARED


def release(z: Zygote) -> float | None:
    """Give the helper back; the last user closes it and gets its own CPU seconds."""
    global _SHARED, _USERS
    with _LOCK:
        _USERS -= 1
        if _USERS > 0 or _SHARED is not z:
            return None
        _SHARED = None
    return z.close()
