"""Block IO requests, system-wide, through a private tracefs instance (capture layer) -> block.trace.gz.

Why not ``perf record -a -e block:block_rq_issue,block:block_rq_complete``: measured on a mostly
idle 2-core VM it kept 83K of 725K completions (completions run in the idle task's interrupt
context) and wrote no lost-event record. A tracefs instance buffer keeps them all, and its
per-CPU ``overrun`` / ``dropped events`` counters say when it did not.

The collector creates ``instances/profiler-<pid>-<n>`` (never touching the global buffer other
tools use), sets ``trace_clock=mono`` (the bundle's clock), enables block_rq_issue,
block_rq_complete (and block_rq_requeue, block_rq_merge where the kernel has them), and a
thread streams ``trace_pipe`` into block.trace.gz. Independently, ``perf stat -a`` counts the
same two events; at stop the trace's counts are checked against it (``stats.balance``), and
lost events make the collector ``partial`` with the reason. The instance is removed at stop,
on errors and at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import itertools
import os
import re
import select
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import IO, Any

from profiler.collectors import _proc
from profiler.collectors.base import CaptureContext, Probe

from profiler.bundle import FAILED, OK, PARTIAL, CollectorRecord

OUTPUT = "block.trace.gz"
EVENTS = ["block_rq_issue", "block_rq_complete"]
OPTIONAL_EVENTS = ["block_rq_requeue", "block_rq_merge"]
BUFFER_KB = 4096  # per CPU; the reader drains it continuously
INSTANCE_PREFIX = "profiler-"
_SEQ = itertools.count(1)
_STALE = re.compile(r"^profiler-(\d+)-(\d+)$")
# "  kworker/u8:2-1234    [001] d..1.  123.456789: block_rq_issue: ..." -> tid
_TASK_TID = re.compile(rb"^\s*.*?-(\d+)\s+\[\d+\]")


def counter_argv(perf: str, out: Path) -> list[str]:
    """The independent count: perf stat keeps exact counts even where perf record loses samples."""
    return [perf, "stat", "-a", "-x", ",", "-e",
            ",".join(f"block:{e}" for e in EVENTS), "-o", str(out)]


def parse_counter(text: str) -> dict[str, int]:
    """perf stat -x, output -> {'block_rq_issue': n, 'block_rq_complete': n}."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        f = line.split(",")
        if len(f) >= 3 and f[2].startswith("block:"):
            with contextlib.suppress(ValueError):
                out[f[2].split(":", 1)[1]] = int(f[0])
    return out


def parse_cpu_stats(text: str) -> dict[str, int]:
    """A tracefs per_cpu/cpuN/stats file -> {'overrun': n, 'dropped events': n, ...}."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        with contextlib.suppress(ValueError):
            out[key.strip()] = int(value.split()[0])
    return out


def balance(trace: dict[str, int], counted: dict[str, int] | None, ring_lost: int,
            window_ratio: float = 1.0) -> tuple[dict[str, Any], str | None]:
    """Compare the trace with the independent count; returns (stats, reason it is incomplete or None).

    The counter runs a little longer than the trace (it starts before and stops after):
    ``window_ratio`` is the trace's window over the counter's, and the events the counter saw
    outside the trace's window, plus IOs in flight at either edge, are allowed as slack.
    """
    stats: dict[str, Any] = {"trace": dict(trace), "ring_buffer_lost": ring_lost}
    reasons = []
    if ring_lost:
        reasons.append(f"the tracefs buffer lost {ring_lost} events (overrun)")
    if counted:
        stats["counted"] = dict(counted)
        for ev in EVENTS:
            want, got = counted.get(ev, 0), trace.get(ev, 0)
            slack = 64 + want // 100 + int(want * max(0.0, 1.0 - window_ratio))
            if want - got > slack:
                reasons.append(f"the trace holds {got} of {want} {ev} events counted by perf stat")
    issues, completes = trace.get("block_rq_issue", 0), trace.get("block_rq_complete", 0)
    stats["unpaired"] = abs(issues - completes)
    if issues and completes < issues // 2 - 64:
        reasons.append(f"only {completes} completions for {issues} issues: pairing is incomplete")
    return stats, "; ".join(reasons) or None


def stale_instances(root: str) -> list[str]:
    """Instances a killed profiler left behind (its pid no longer exists)."""
    out = []
    with contextlib.suppress(OSError):
        for name in os.listdir(os.path.join(root, "instances")):
            m = _STALE.match(name)
            if m and not os.path.exists(f"/proc/{m.group(1)}"):
                out.append(os.path.join(root, "instances", name))
    return out


class TracefsInstance:
    """A private ftrace instance: created, configured, and always removed."""

    def __init__(self, root: str, name: str) -> None:
        self.root = root
        self.path = os.path.join(root, "instances", name)
        self.created = False

    def create(self) -> None:
        os.mkdir(self.path)
        self.created = True
        atexit.register(self.remove)

    def write(self, rel: str, value: str) -> None:
        with open(os.path.join(self.path, rel), "w") as fh:
            fh.write(value)

    def read(self, rel: str) -> str:
        with open(os.path.join(self.path, rel)) as fh:
            return fh.read()

    def has(self, rel: str) -> bool:
        return os.path.exists(os.path.join(self.path, rel))

    def lost(self) -> int:
        """Events the ring buffer overwrote or dropped, over every CPU."""
        n = 0
        with contextlib.suppress(OSError):
            for cpu in os.listdir(os.path.join(self.path, "per_cpu")):
                with contextlib.suppress(OSError):
                    st = parse_cpu_stats(self.read(f"per_cpu/{cpu}/stats"))
                    n += st.get("overrun", 0) + st.get("dropped events", 0)
        return n

    def remove(self) -> None:
        if not self.created:
            return
        with contextlib.suppress(OSError):
            self.write("tracing_on", "0")
        with contextlib.suppress(OSError):
            for ev in os.listdir(os.path.join(self.path, "events", "block")):
                p = os.path.join(self.path, "events", "block", ev, "enable")
                if os.path.exists(p):
                    with contextlib.suppress(OSError), open(p, "w") as fh:
                        fh.write("0")
        for _ in range(20):
            try:
                os.rmdir(self.path)
                break
            except FileNotFoundError:
                break
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    break
                time.sleep(0.05)  # a reader still has trace_pipe open
        self.created = os.path.exists(self.path)
        if not self.created:
            with contextlib.suppress(Exception):
                atexit.unregister(self.remove)


class BlockIO:
    name = "block-io"
    backend = "tracefs"

    def __init__(self, buffer_kb: int = BUFFER_KB, check_balance: bool = True) -> None:
        self.buffer_kb = buffer_kb
        self.check_balance = check_balance
        self.rec = CollectorRecord(name=self.name, backend=self.backend)
        self.instance: TracefsInstance | None = None
        self.thread: threading.Thread | None = None
        self.stop_event = threading.Event()
        self.counts = {e: 0 for e in EVENTS + OPTIONAL_EVENTS}
        self.target_issues = 0
        self.bytes_written = 0
        self.error: BaseException | None = None
        self.counter: subprocess.Popen[bytes] | None = None
        self.counter_out: Path | None = None
        self.enabled: list[str] = []
        self._tgid: dict[int, int | None] = {}
        self.counter_t0 = self.counter_t1 = self.trace_t0 = 0.0
        self.trace_t1: float | None = None
        self._pids: set[int] = set()

    # ---------------------------------------------------------------- protocol
    def probe(self, ctx: CaptureContext) -> Probe:
        from profiler.collectors import host

        root = host.tracefs_path()
        if root is None:
            return Probe(False, "tracefs is not mounted", host.MOUNT_TRACEFS)
        if not os.access(os.path.join(root, "instances"), os.W_OK):
            return Probe(False, "permission denied: creating a tracefs instance needs root", "sudo profiler ...")
        for ev in EVENTS:
            if not host.tracepoint_available(f"block:{ev}"):
                return Probe(False, f"tracepoint block:{ev} is not available on this kernel")
        return Probe(True)

    def argv(self, ctx: CaptureContext) -> list[str]:
        return []  # in-process: tracefs files, no command line (the balance counter is in stats)

    def start(self, ctx: CaptureContext) -> None:
        from profiler.collectors import host

        root = host.tracefs_path()
        assert root is not None
        for path in stale_instances(root):
            with contextlib.suppress(OSError):
                os.rmdir(path)
        self._pids = set(ctx.pids)
        inst = TracefsInstance(root, f"{INSTANCE_PREFIX}{os.getpid()}-{next(_SEQ)}")
        self.instance = inst
        self.rec.stats["instance"] = inst.path
        try:
            inst.create()
            inst.write("tracing_on", "0")
            inst.write("trace_clock", "mono")
            inst.write("buffer_size_kb", str(self.buffer_kb))
            for ev in EVENTS + OPTIONAL_EVENTS:
                if inst.has(f"events/block/{ev}/enable"):
                    self.enabled.append(ev)
                elif ev in EVENTS:
                    raise RuntimeError(f"tracepoint block:{ev} is missing in the instance")
            if self.check_balance and shutil.which(ctx.perf):
                self.counter_out = ctx.writer.root / ".block-io.count.tmp"
                argv = counter_argv(ctx.perf, self.counter_out)
                self.rec.stats["counter_argv"] = argv
                self.counter_t0 = time.monotonic()
                self.counter = _proc.spawn(argv)
                time.sleep(0.15)  # let perf stat start counting before the trace starts
            for ev in self.enabled:
                inst.write(f"events/block/{ev}/enable", "1")
            inst.write("tracing_on", "1")
            self.trace_t0 = time.monotonic()
        except Exception:
            self._teardown()
            raise
        self.rec.started = time.monotonic()
        self.out_cm = ctx.writer.open_member(OUTPUT)
        self.out = self.out_cm.__enter__()
        self.rec.files = [OUTPUT]
        self.thread = threading.Thread(target=self._reader, name="block-io-reader", daemon=True)
        self.thread.start()

    def poll(self) -> str | None:
        if self.error is not None:
            return f"reader failed: {self.error}"
        if self.thread is not None and not self.thread.is_alive() and not self.stop_event.is_set():
            return "reader ended"
        return None

    def size(self) -> int:
        return self.bytes_written

    def request_stop(self) -> None:
        """Stop the trace and its counter at the same moment (before the other collectors finish)."""
        if self.instance is not None and self.trace_t1 is None:
            with contextlib.suppress(OSError):
                self.instance.write("tracing_on", "0")
            self.trace_t1 = time.monotonic()
        if self.counter is not None and self.counter.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.counter.send_signal(signal.SIGINT)
            self.counter_t1 = time.monotonic()

    def stop(self, ctx: CaptureContext) -> CollectorRecord:
        rec = self.rec
        try:
            self.request_stop()
            self.stop_event.set()
            if self.thread is not None:
                self.thread.join(30.0)
            rec.ended = time.monotonic()
            ring_lost = self.instance.lost() if self.instance is not None else 0
            counted = None
            if self.counter is not None:
                _proc.stop_process(self.counter, 5.0)
                self.counter = None
                if self.counter_out is not None and self.counter_out.exists():
                    counted = parse_counter(self.counter_out.read_text(errors="replace"))
            trace = {e: n for e, n in self.counts.items() if e in self.enabled}
            ratio = 1.0
            if counted and self.counter_t1 > self.counter_t0 and self.trace_t1:
                ratio = (self.trace_t1 - self.trace_t0) / (self.counter_t1 - self.counter_t0)
            stats, why = balance(trace, counted, ring_lost, ratio)
            stats["window_ratio"] = round(ratio, 4)
            rec.stats.update(stats)
            rec.stats["events"] = sum(trace.values())
            rec.stats["completions"] = trace.get("block_rq_complete", 0)
            rec.stats["target_issues"] = self.target_issues
            rec.stats["enabled"] = [f"block:{e}" for e in self.enabled]
            if self.error is not None:
                rec.status = PARTIAL
                err = self.error
                rec.reason = _proc.disk_reason(err) if isinstance(err, OSError) else f"reader failed: {err}"
            elif why:
                rec.status, rec.reason = PARTIAL, why
            else:
                rec.status = OK
        finally:
            self._teardown()
        if rec.status == OK and not rec.files:
            rec.status, rec.reason = FAILED, "no trace written"
        return rec

    # ---------------------------------------------------------------- internals
    def _teardown(self) -> None:
        self.stop_event.set()
        if self.thread is not None and self.thread.is_alive():
            self.thread.join(10.0)
        if getattr(self, "out_cm", None) is not None:
            with contextlib.suppress(Exception):
                self.out_cm.__exit__(None, None, None)
            self.out_cm = None
        if self.counter is not None:
            _proc.stop_process(self.counter, 5.0)
            self.counter = None
        if self.counter_out is not None:
            with contextlib.suppress(OSError):
                self.counter_out.unlink()
        if self.instance is not None:
            self.instance.remove()

    def _is_target(self, tid: int) -> bool:
        if tid in self._pids:
            return True
        tgid = self._tgid.get(tid, -1)
        if tgid == -1:
            tgid = None
            with contextlib.suppress(OSError, ValueError):
                with open(f"/proc/{tid}/status", "rb") as fh:
                    for line in fh:
                        if line.startswith(b"Tgid:"):
                            tgid = int(line.split()[1])
                            break
            self._tgid[tid] = tgid
        return tgid in self._pids

    def _count(self, data: bytes) -> None:
        for line in data.split(b"\n"):
            if b"block_rq_" not in line:
                continue
            for ev in self.enabled:
                if f" {ev}:".encode() in line:
                    self.counts[ev] += 1
                    if ev == "block_rq_issue":
                        m = _TASK_TID.match(line)
                        if m and self._is_target(int(m.group(1))):
                            self.target_issues += 1
                    break

    def _reader(self) -> None:
        assert self.instance is not None
        out: IO[bytes] = self.out
        fd = -1
        carry = b""
        try:
            fd = os.open(os.path.join(self.instance.path, "trace_pipe"), os.O_RDONLY | os.O_NONBLOCK)
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            draining_since: float | None = None
            while True:
                if self.stop_event.is_set() and draining_since is None:
                    draining_since = time.monotonic()
                poller.poll(50 if draining_since is not None else 200)
                got_any = False
                while True:
                    try:
                        chunk = os.read(fd, 1 << 16)
                    except BlockingIOError:
                        break
                    if not chunk:
                        break
                    got_any = True
                    out.write(chunk)
                    self.bytes_written += len(chunk)
                    data = carry + chunk
                    cut = data.rfind(b"\n")
                    if cut >= 0:
                        self._count(data[:cut])
                        carry = data[cut + 1:]
                    else:
                        carry = data
                if draining_since is not None and (not got_any or time.monotonic() - draining_since > 10):
                    break
            if carry:
                self._count(carry)
        except BaseException as exc:  # noqa: BLE001 - reported through poll()/stop()
            self.error = exc
        finally:
            if fd >= 0:
                os.close(fd)
