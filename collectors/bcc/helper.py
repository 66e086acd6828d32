"""The bcc helper process (collectors layer): one collector's BPF programs, in a process of their own.

``python -m profiler.collectors.bcc.helper`` is started by a bcc collector (collectors/bcc/common.py),
as bcc's own tools are each a process: whatever goes wrong in it (a fault in libbcc or clang when it
has to compile, a signal) ends this process and that one collector, never the capture. It reads
one JSON line of settings on stdin, loads the program (the prebuilt object when it fits this
kernel, else compiled with bcc: collectors/bcc/objects.py), writes the capture's settings to its
`cfg` map and attaches; then every ``slot_ns`` it moves the finished slots out of the maps
(collectors/bcc/sides.py) and writes them to stdout, one JSON message a line:

    {"kind": "attached", "t0": NS, "how": "prebuilt"|"compiled", "why": "...", "load_seconds": S}
    {"kind": "data", ...}            every interval (and once more at the stop, "final": true)
    {"kind": "end", "misses": N, ...} after the stop: detached, everything sent
    {"kind": "error", "message": "..."} and exit 1 when it cannot go on

It stops on a ``{"cmd": "stop", "end_ns": NS}`` line, or when stdin closes (the profiler is
gone; its death signal would end us anyway). The programs are detached by closing their perf
events, and freed with this process's descriptors however it ends.
"""

from __future__ import annotations

import json
import os
import select
import sys
import time
from typing import Any

from profiler.collectors.bcc import bpfsys, objects
from profiler.collectors.bcc.sides import SIDES, Side

SETTLE_NS = 50_000_000  # a slot is drained once it ended this long ago


def emit(msg: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(msg, separators=(",", ":")) + "\n")
    sys.stdout.flush()


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
    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
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
            emit({"kind": "attached", "t0": self.side.t0, "attached": time.monotonic_ns(), "how": how, "why": why,
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
                                int(self.settings.get("kstack_every", 1)))
            objects.attach(obj, loaded, self.tracefs)
        except BaseException:
            loaded.close()
            raise
        self.obj, self.loaded = obj, loaded

    def drain(self, final: bool, end_ns: int = 0) -> None:
        cutoff = None if final else (time.monotonic_ns() - SETTLE_NS - self.side.t0) // self.side.slot_ns
        msg = self.side.drain(cutoff)
        if final:
            last = self.side.final(end_ns)
            msg = dict(msg or {})
            for key in ("ustacks", "kstacks"):  # both name stacks not sent before: keep both
                if key in last:
                    last[key] = {**msg.get(key, {}), **last[key]}
            msg.update(last, final=True)
        if msg is not None:
            emit({"kind": "data", **msg})

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
        fd = sys.stdin.fileno()
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
        emit({"kind": "end", "misses": self.misses(), "detached": time.monotonic_ns()})
        self.loaded.close()


def main() -> int:
    line = sys.stdin.readline()
    if not line:
        return 1
    run = Run(json.loads(line))
    try:
        run.start()
    except Exception as exc:  # noqa: BLE001 - said to the collector, which records it
        emit({"kind": "error", "stage": "start", "message": str(exc) or type(exc).__name__})
        return 1
    try:
        run.loop()
    except Exception as exc:  # noqa: BLE001
        emit({"kind": "error", "stage": "capture", "message": f"{type(exc).__name__}: {exc}"})
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
