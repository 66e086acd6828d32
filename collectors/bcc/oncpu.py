"""The live view's on-CPU sampler (collectors layer): the targets' functions on the CPU, per thread pool, as they run.

perf's cpu-stacks are symbolized after the capture, so `--live` samples on its own:
collectors/bcc/bpf/oncpu.c, a perf_event program on every CPU's cpu-clock at ``freq`` Hz
(49 by default: a tenth of a percent of a CPU), counts the targets' samples per slot, thread
and stack in the kernel; its helper child (collectors/bcc/helper.py) sends the finished slots
every interval, and :meth:`LiveOnCpu.top` names the functions each thread pool was in over a
time range. A sample taken in the kernel is the kernel function the timer interrupted (marked
``[k]``); in user space, the innermost user frame. It writes nothing
to the bundle: the report's on-CPU evidence is cpu-stacks'.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from typing import Any

from profiler.collectors import host
from profiler.collectors.bcc import symbols, zygote
from profiler.collectors.bcc.slots import StackTable

NAME = "live-oncpu"
_ENTRY = ("asm_sysvec_", "asm_common_interrupt", "asm_exc_", "sysvec_", "irq_exit", "__irq_exit")
KEEP_SECONDS = 120.0


def leaf(kernel: list[str], user: list[str]) -> str:
    """The function a sample stands for (frames innermost first, kernel ones ending in ``_[k]``):
    a sample's kernel stack starts where the timer interrupted the thread, so when there is one
    the thread was in the kernel, in its first frame (an interrupt's own entry frames skipped);
    else in user space, in the innermost user frame."""
    frames = [f[:-4] if f.endswith("_[k]") else f for f in kernel]
    # a sample taken in user space may carry its user address as a lone "kernel" frame: not one
    inside = [f for f in frames if not f.startswith(_ENTRY) and f != "[unknown]"]
    if inside:
        return inside[0] + " [k]"
    return user[0] if user else "[unknown]"


class LiveOnCpu:
    """Start, read and stop the sampler; ``top(lo, hi)`` for the live view."""

    def __init__(self, pids: list[int], interval: float, freq: int = 49) -> None:
        self.pids = list(pids)
        self.slot_ns = max(int(interval * 1e9), 100_000_000)
        self.freq = freq
        self.t0_ns = 0
        self.zyg: zygote.Zygote | None = None
        self.sock: socket.socket | None = None
        self.sym: symbols.Symbols | None = None
        self.table: StackTable | None = None
        self.samples: dict[int, dict[tuple[str, str], int]] = {}  # slot -> (comm, function) -> samples
        self.names: dict[tuple[int, int, int], str] = {}  # (pid, ustack, kstack) -> function
        self.error: str | None = None
        self.lock = threading.Lock()
        self._reader: threading.Thread | None = None

    def start(self) -> None:
        tracefs = host.tracefs_path()
        if tracefs is None:
            self.error = "tracefs is not mounted"
            return
        settings = {"program": "oncpu.c", "tracefs": tracefs, "slot_ns": self.slot_ns, "targets": self.pids,
                    "freq": self.freq}
        try:
            self.zyg = zygote.acquire()
            self.sock = self.zyg.fork(NAME, settings)
        except OSError as exc:
            self.error = f"the sampler could not start: {exc.strerror or exc}"
            self.stop()
            return
        self.sym = symbols.acquire()
        self.table = StackTable(self.sym, lambda _obj: None)
        self._reader = threading.Thread(target=self._read, name="bcc-live-oncpu", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.sock is not None
        with self.sock.makefile("rb") as lines:
            for line in lines:
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if msg.get("kind") == "attached":
                    self.t0_ns = int(msg["t0"])
                elif msg.get("kind") == "error":
                    self.error = str(msg.get("message"))
                elif msg.get("kind") == "data":
                    try:
                        self._data(msg)
                    except Exception as exc:  # noqa: BLE001 - the live view says it; the capture goes on
                        self.error = f"{type(exc).__name__}: {exc}"

    def _data(self, msg: dict[str, Any]) -> None:
        assert self.table is not None
        self.table.learn(msg)
        for slot, tgid, _tid, comm, us, ks, n in msg.get("rows") or []:
            key = (tgid, us, ks)
            fn = self.names.get(key)
            if fn is None:
                fn = self.names[key] = leaf(self.table.kernel(ks) if ks >= 0 else [],
                                            self.table.user(tgid, us) if us >= 0 else [])
            with self.lock:
                d = self.samples.setdefault(int(slot), {})
                d[(comm, fn)] = d.get((comm, fn), 0) + int(n)
        with self.lock:
            old = int((time.monotonic_ns() - self.t0_ns) // self.slot_ns - KEEP_SECONDS * 1e9 // self.slot_ns)
            for s in [s for s in self.samples if s < old]:
                del self.samples[s]

    def top(self, lo: float, hi: float) -> tuple[dict[tuple[str, str], int], str]:
        """{(comm, function): samples} of the slots inside [lo, hi] (monotonic s), and a note when there are none."""
        if self.error:
            return {}, f"the on-CPU sampler: {self.error}"
        if not self.t0_ns:
            return {}, "the on-CPU sampler is starting"
        counts: dict[tuple[str, str], int] = {}
        with self.lock:
            for s, d in self.samples.items():
                t = (self.t0_ns + s * self.slot_ns) / 1e9
                if lo <= t and t + self.slot_ns / 1e9 <= hi + self.slot_ns / 1e9:
                    for k, n in d.items():
                        counts[k] = counts.get(k, 0) + n
        return counts, "" if counts else "no on-CPU samples of the targets in the window (idle?)"

    def stop(self) -> None:
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.sendall((json.dumps({"cmd": "stop", "end_ns": time.monotonic_ns()}) + "\n").encode())
        if self._reader is not None:
            self._reader.join(10)
        if self.zyg is not None:
            self.zyg.wait_exit(NAME, 10)
            zygote.release(self.zyg)
            self.zyg = None
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()
            self.sock = None
        if self.sym is not None:
            symbols.release(self.sym)
            self.sym = None
