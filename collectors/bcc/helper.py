"""The bcc helper processes (collectors layer): each collector's BPF programs in a process of their own.

``python -m profiler.collectors.bcc.helper`` is started once per capture by the first bcc
collector (collectors/bcc/zygote.py). It imports the loader and reads the prebuilt objects, then
waits on its control socket (its stdin, a SOCK_SEQPACKET socketpair) for requests: each is one
collector's settings with one end of a socketpair. For each it forks a child that serves that
collector alone, so a collector's helper is a process of its own, as bcc's own tools are,
without paying an interpreter's start-up per collector (four processes starting side by side
on a busy 2-CPU host took a second and more). Whatever goes wrong in a child (a fault in libbcc
or clang when it has to compile, a signal, a Python error) ends that child and that one
collector, never the capture; the parent reports each child's pid, and its exit status and CPU
time when it ends, on the control socket:

    {"forked": NAME, "pid": PID}        {"exited": NAME, "pid": PID, "status": CODE or -SIGNAL, "cpu": S}

A child loads its program (the prebuilt object when it fits this kernel, else compiled with
bcc: collectors/bcc/objects.py), writes the capture's settings to its `cfg` map and attaches;
then every ``slot_ns`` it moves the finished slots out of the maps (collectors/bcc/sides.py)
and writes them on its socket, one JSON message a line:

    {"kind": "attached", "t0": NS, "how": "prebuilt"|"compiled", "why": "...", "load_seconds": S}
    {"kind": "data", ...}            every interval (and once more at the stop, "final": true)
    {"kind": "end", "misses": N, ...} after the stop: detached, everything sent
    {"kind": "error", "message": "..."} and exit 1 when it cannot go on

It stops on a ``{"cmd": "stop", "end_ns": NS}`` line, or when its socket closes (the profiler
is gone). The programs are detached by closing their perf events and raw tracepoint links, and
freed with the child's descriptors however it ends. The helper itself ends when its control
socket closes and its children have ended; it dies with the profiler (parent-death signal).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import sys
import time
from typing import Any

from profiler.collectors.bcc import bpfsys, objects
from profiler.collectors.bcc.sides import SIDES, Side

SETTLE_NS = 50_000_000  # a slot is drained once it ended this long ago


class Channel:
    """One collector's socket: JSON lines out, command lines in."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def emit(self, msg: dict[str, Any]) -> None:
        data = (json.dumps(msg, separators=(",", ":")) + "\n").encode()
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]


def candidates(program: str, prefer: str) -> list[tuple[str, str]]:
    """(object name, "prebuilt" | "compiled") to try in order: the raw-tracepoint build where this
    kernel gives the raw arguments it reads (objects.preferred), then the classic one; each
    prebuilt first, compiled by bcc after."""
    names = list(dict.fromkeys([objects.preferred(program), program]))
    ways = ["compiled"] if prefer == "compile" else ["prebuilt", "compiled"]
    return [(n, w) for n in names for w in ways]


def describe(name: str, how: str, obj: objects.BpfObject) -> str:
    kind = "raw tracepoints" if name.endswith(objects.RAW) else "tracepoints"
    if how == "prebuilt":
        return f"prebuilt object, {kind} (built with bcc {obj.built.get('bcc', '?')})"
    return f"compiled with bcc, {kind}"


class Run:
    def __init__(self, settings: dict[str, Any], chan: Channel) -> None:
        self.settings = settings
        self.chan = chan
        self.side: Side = SIDES[settings["program"]](settings)
        self.tracefs = str(settings["tracefs"])
        self.loaded: objects.Loaded | None = None
        self.obj: objects.BpfObject | None = None

    def start(self) -> None:
        t = time.monotonic()
        failed: list[str] = []
        for name, how in candidates(self.side.program, str(self.settings.get("prefer", "prebuilt"))):
            try:
                self._try(name, how)
            except (objects.ObjectUnusable, OSError, RuntimeError, ImportError) as exc:
                failed.append(f"{name} {how}: {exc}")
                continue
            assert self.obj is not None
            why = describe(name, how, self.obj) + (f" ({failed[0]})" if failed else "")
            self.chan.emit({"kind": "attached", "t0": self.side.t0, "attached": time.monotonic_ns(), "how": how, "why": why,
                  "load_seconds": round(time.monotonic() - t, 4)})
            return
        raise RuntimeError("; ".join(failed) or "nothing to load")

    def _try(self, name: str, how: str) -> None:
        """Load and attach one object (OSError, ObjectUnusable: nothing is left loaded)."""
        if how == "prebuilt":
            obj = objects.shipped().get(name)
            if obj is None:
                raise objects.ObjectUnusable("not shipped")
        else:
            obj = objects.compile_object(name, self.tracefs)
        loaded = objects.load(obj, self.side.entries(), self.tracefs)
        try:
            self.side.bind(loaded.maps)
            self.side.configure(time.monotonic_ns(), list(self.settings.get("targets") or []),
                                int(self.settings.get("stack_every", 1)))
            objects.attach(obj, loaded, self.tracefs, int(self.settings.get("freq", 49)))
        except BaseException:
            loaded.close()
            raise
        self.obj, self.loaded = obj, loaded

    def drain(self, final: bool, end_ns: int = 0) -> None:
        cutoff = None if final else (time.monotonic_ns() - SETTLE_NS - self.side.t0) // self.side.slot_ns
        msg = self.side.drain(cutoff)
        if msg is not None and self.side.stack_events:
            msg["stack_every"] = self.side.stack_every  # what this interval's events were sampled at
            if not final:
                self.side.budget_stacks(msg.get("counters") or {})
        if final:
            last = self.side.final(end_ns)
            msg = dict(msg or {})
            for key in ("ustacks", "kstacks"):  # both name stacks not sent before: keep both
                if key in last:
                    last[key] = {**msg.get(key, {}), **last[key]}
            msg.update(last, final=True)
        if msg is not None:
            self.chan.emit({"kind": "data", **msg})

    def misses(self) -> int | None:
        assert self.loaded is not None
        total = 0
        for fd in self.loaded.progs.values():
            n = bpfsys.recursion_misses(fd)
            if n is None:
                return None
            total += n
        return total

    def loop(self) -> None:
        step = self.side.slot_ns / 1e9
        next_drain = time.monotonic() + step
        buf = b""
        fd = self.chan.fd
        while True:
            timeout = max(0.0, next_drain - time.monotonic())
            ready, _, _ = select.select([fd], [], [], timeout)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    self.stop(time.monotonic_ns())  # the profiler is gone
                    return
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    cmd = json.loads(line or b"{}")
                    if cmd.get("cmd") == "stop":
                        self.stop(int(cmd.get("end_ns") or time.monotonic_ns()))
                        return
            if time.monotonic() >= next_drain:
                self.drain(False)
                next_drain += step
                if next_drain < time.monotonic():  # fell behind (a busy host): no burst of catch-up drains
                    next_drain = time.monotonic() + step

    def stop(self, end_ns: int) -> None:
        assert self.loaded is not None
        self.loaded.detach()
        self.drain(True, end_ns)
        self.chan.emit({"kind": "end", "misses": self.misses(), "detached": time.monotonic_ns()})
        self.loaded.close()


def serve(settings: dict[str, Any], fd: int) -> int:
    """One collector, in a forked child: load, attach, drain until stopped."""
    chan = Channel(fd)
    run = Run(settings, chan)
    try:
        run.start()
    except Exception as exc:  # noqa: BLE001 - said to the collector, which records it
        chan.emit({"kind": "error", "stage": "start", "message": str(exc) or type(exc).__name__})
        return 1
    try:
        run.loop()
    except Exception as exc:  # noqa: BLE001
        chan.emit({"kind": "error", "stage": "capture", "message": f"{type(exc).__name__}: {exc}"})
        return 1
    return 0


def _report(ctl: socket.socket, msg: dict[str, Any]) -> None:
    try:
        ctl.send(json.dumps(msg).encode())
    except OSError:
        pass  # the profiler is gone: nobody to tell


def _fork(ctl: socket.socket, settings: dict[str, Any], fd: int) -> int:
    pid = os.fork()
    if pid == 0:  # the child: this collector only
        code = 1
        try:
            ctl.close()
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # stopped by its socket, never by a terminal's Ctrl-C
            code = serve(settings, fd)
        finally:
            os._exit(code)
    os.close(fd)
    return pid


def _reap(ctl: socket.socket, children: dict[int, str]) -> None:
    while children:
        try:
            pid, status, ru = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            children.clear()
            return
        if pid == 0:
            return
        name = children.pop(pid, "?")
        _report(ctl, {"exited": name, "pid": pid, "status": os.waitstatus_to_exitcode(status),
                      "cpu": round(ru.ru_utime + ru.ru_stime, 4)})


def zygote(ctl: socket.socket) -> int:
    """Fork one child per request until the control socket closes, then wait for them. Asleep in
    between: a request or a child's end (SIGCHLD, through a wakeup pipe) wakes it."""
    objects.shipped()  # read once here: every child has it
    children: dict[int, str] = {}
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda _sig, _frame: None)
    signal.set_wakeup_fd(wake_w)
    while True:
        ready, _, _ = select.select([ctl.fileno(), wake_r], [], [])
        if wake_r in ready:
            with contextlib.suppress(OSError):
                os.read(wake_r, 4096)
        _reap(ctl, children)
        if ctl.fileno() not in ready:
            continue
        try:
            data, fds, _flags, _addr = socket.recv_fds(ctl, 1 << 20, 4)
        except OSError:
            data, fds = b"", []
        if not data:
            break
        settings = json.loads(data)
        if not fds:
            continue
        pid = _fork(ctl, settings, fds[0])
        for extra in fds[1:]:
            os.close(extra)
        children[pid] = str(settings.get("collector", "?"))
        _report(ctl, {"forked": children[pid], "pid": pid})
    while children:  # the profiler stopped asking: the children end once their collectors stop them
        select.select([wake_r], [], [], 1.0)
        with contextlib.suppress(OSError):
            os.read(wake_r, 4096)
        _reap(ctl, children)
    return 0


def main() -> int:
    # stdin is the control socket; the parent-death signal was set by collectors/process.py
    return zygote(socket.socket(fileno=os.dup(sys.stdin.fileno())))


if __name__ == "__main__":
    raise SystemExit(main())
