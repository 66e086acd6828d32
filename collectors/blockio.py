"""Block IO requests, system-wide, recorded in binary (collectors layer) -> block.events.bin.

``perf record -a -e block:block_rq_issue -e block:block_rq_complete`` (and block_rq_requeue,
block_rq_merge where the kernel has them), ``-k CLOCK_MONOTONIC`` (the bundle's clock), its
events switched on through its control fifo once perf is ready (``-D -1``, acknowledged), and
its output switched every 2 s (``--switch-output``): while the capture runs, a thread turns
each finished perf.data segment (~115 bytes an event) into the columnar member
(profiler/bundle/blockevents.py, ~5-15 bytes an event) and deletes it, so after the capture
only the last segment is left to convert. Measured at ~70-100K IOPS on 2 vCPUs: perf record
~9% of one CPU, the conversion ~1.2 us an event, against 38% for the text trace
(`cat trace_pipe | gzip`) it replaces, and no text is printed and parsed again afterwards.

Independently, ``perf stat -a`` counts the same two events; at stop the member's counts are
checked against it (``stats.balance``), and perf's lost-event records make the collector
``partial`` with the reason. Where numpy is missing (a cluster node's bare python3) the
segments are printed with ``perf script`` into the text member ``block.trace.gz`` instead.

(Bundles before v4 hold ``block.trace.gz`` from a private tracefs instance; the readers keep
reading it. An earlier note here said perf record kept 83K of 725K completions on this VM: not
reproduced with perf 6.1 on kernel 6.18, which kept every event perf stat counted at 74K IOPS.)
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from profiler.collectors import process as _proc
from profiler.collectors.base import CaptureContext, CollectorBase, Probe, disk_reason
from profiler.collectors.files import file_size

from profiler.bundle import OK, PARTIAL, CollectorRecord, members
from profiler.bundle import blockevents as be
from profiler.bundle import perfdata as pd

OUTPUT = members.BLOCK_EVENTS
TEXT_OUTPUT = members.BLOCK_TRACE  # without numpy: perf script text, as bundles before v4 held
EVENTS = ["block_rq_issue", "block_rq_complete"]
OPTIONAL_EVENTS = ["block_rq_requeue", "block_rq_merge"]
COUNTER_STOP_WAIT = 2.0  # s: how long the stop waits for the counter before stopping the trace
ENABLE_WAIT = 5.0  # s: how long the start waits for perf to acknowledge "enable"
SEGMENT = "2s"  # perf record --switch-output: each finished segment is converted during the capture
MMAP_PAGES = "4096"  # 16 MiB per CPU: ~145K events each; 4 MiB lost ~1.5% at 91K IOPS (segment switches)
DATA = ".block-io.perf.data"
# "  kworker/u8:2-1234    [001] d..1.  123.456789: block_rq_issue: ..." (ftrace) or
# "  kworker/u8:2  1234 [001]   123.456789: block:block_rq_issue: ..." (perf script) -> the issuing tid
# (the irq-flags column is optional; no lazy scan to the end of every line: issue lines only cost)
_ISSUER = re.compile(rb"[- ](\d+) +\[\d+\] +(?:[^ \n]+ +)?\d+\.\d+: +(?:block:)?block_rq_issue:")


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


def balance(trace: dict[str, int], counted: dict[str, int] | None, ring_lost: int,
            window_ratio: float = 1.0) -> tuple[dict[str, Any], str | None]:
    """Compare the trace with the independent count; returns (stats, reason it is incomplete or None).
    ``ring_lost``: the events the trace says it lost (perf's LOST records).

    The counter starts before the trace and is stopped before it (the stop waits for it):
    ``window_ratio`` is the trace's window over the counter's, and the events the counter may
    have seen outside the trace's window, plus IOs in flight at either edge, are allowed as slack.
    """
    stats: dict[str, Any] = {"trace": dict(trace), "ring_buffer_lost": ring_lost}
    reasons = []
    if ring_lost:
        reasons.append(f"perf lost {ring_lost} events (its buffers overran)")
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


def tool(name: str) -> str | None:
    """A coreutils-level helper (cat, gzip): from PATH, else where Debian keeps it."""
    found = shutil.which(name)
    if found:
        return found
    for d in ("/usr/bin", "/bin"):
        if os.access(os.path.join(d, name), os.X_OK):
            return os.path.join(d, name)
    return None


class TraceCounter:
    """Counts block events in ftrace text as it streams by (C-speed byte counts per chunk),
    and the issues made by the targets' own threads."""

    def __init__(self, events: list[str], is_target: Callable[[int], bool]) -> None:
        self.needles = {ev: f"{ev}:".encode() for ev in events}
        self.counts = {ev: 0 for ev in events}
        self.is_target = is_target
        self.target_issues = 0
        self.carry = b""

    def feed(self, chunk: bytes) -> None:
        data = self.carry + chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            self.carry = data
            return
        self.carry = data[cut + 1:]
        self._count(data[:cut + 1])

    def close(self) -> None:
        if self.carry:
            self._count(self.carry)
            self.carry = b""

    def _count(self, data: bytes) -> None:
        for ev, needle in self.needles.items():
            self.counts[ev] += data.count(needle)
        if b"block_rq_issue:" not in data:
            return
        # one is_target per distinct issuing thread, not per issue (millions on a high-IOPS host)
        for tid, n in Counter(_ISSUER.findall(data)).items():
            if self.is_target(int(tid)):
                self.target_issues += n




class Control:
    """perf record's control fifo: ``enable`` sent, its ``ack`` awaited."""

    def __init__(self, ctl: Path) -> None:
        self.ctl, self.ack = ctl, ctl.with_name(ctl.name + ".ack")
        self.fd: int | None = None
        self.ack_fd: int | None = None

    def argv(self) -> list[str]:
        return ["-D", "-1", "--control", f"fifo:{self.ctl},{self.ack}"]

    def open(self) -> None:
        for f in (self.ctl, self.ack):
            with contextlib.suppress(FileNotFoundError):
                f.unlink()
            os.mkfifo(f, 0o600)
        self.fd = os.open(self.ctl, os.O_RDWR | os.O_NONBLOCK)
        self.ack_fd = os.open(self.ack, os.O_RDWR | os.O_NONBLOCK)

    def enable(self, proc: subprocess.Popen[bytes], timeout: float = ENABLE_WAIT) -> bool:
        """Switch the events on; True once perf acknowledged (False: perf died or never answered)."""
        assert self.fd is not None and self.ack_fd is not None
        os.write(self.fd, b"enable\n")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(BlockingIOError):
                if b"ack" in os.read(self.ack_fd, 4096):
                    return True
            time.sleep(0.01)
        return False

    def close(self) -> None:
        for fd in (self.fd, self.ack_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.fd = self.ack_fd = None
        for f in (self.ctl, self.ack):
            with contextlib.suppress(OSError):
                f.unlink()


class SegmentConverter:
    """Turns perf.data segments into the member on a thread, oldest first, as they are handed
    over; the segments are deleted once read. One ordering runs across them (an event in a
    segment may be older than the last ones of the segment before: perf's rounds, see
    profiler.bundle.perfdata.ordered)."""

    def __init__(self, out: Any, is_target: Callable[[int], bool]) -> None:
        self.conv = be.Converter(out, is_target)
        self.queue: list[Path | None] = []
        self.cv = threading.Condition()
        self.error: BaseException | None = None
        self.cpu_seconds = 0.0  # the conversion thread's own CPU time
        self.thread = threading.Thread(target=self._run, name="block-io-convert", daemon=True)
        self.thread.start()

    def add(self, path: Path | None) -> None:
        with self.cv:
            self.queue.append(path)
            self.cv.notify()

    def _next(self) -> Path | None:
        with self.cv:
            while not self.queue:
                self.cv.wait()
            return self.queue.pop(0)

    def _run(self) -> None:
        t0 = time.thread_time()
        try:
            self.conv.run(iter(self._next, None), unlink=True)
            self.cpu_seconds = time.thread_time() - t0
        except BaseException as exc:  # noqa: BLE001 - said by finish()
            self.error = exc
            while self._next() is not None:  # drain: the collector's stop must not wait forever
                pass

    def finish(self, timeout: float = 120.0) -> be.Converted:
        self.add(None)
        self.thread.join(timeout)
        if self.error is not None:
            raise self.error
        return self.conv.result()


class BlockIO(CollectorBase):
    name = "block-io"
    backend = "perf"
    rec: CollectorRecord

    def __init__(self, check_balance: bool = True, segment: str = SEGMENT) -> None:
        self.check_balance = check_balance
        self.segment = segment
        self.rec = CollectorRecord(name=self.name, backend=self.backend)
        self.proc: subprocess.Popen[bytes] | None = None
        self.control: Control | None = None
        self.data: Path | None = None
        self.errpath: Path | None = None
        self.converter: SegmentConverter | None = None
        self.handed: set[Path] = set()
        self.files = ExitStack()
        self.counter: subprocess.Popen[bytes] | None = None
        self.counter_out: Path | None = None
        self.enabled: list[str] = []
        self._tgid: dict[int, int | None] = {}
        self._pids: set[int] = set()
        self.counter_t0 = self.counter_t1 = self.trace_t0 = 0.0
        self.trace_t1: float | None = None
        self.died: str | None = None
        self._tid_seen = 0.0

    # ---------------------------------------------------------------- protocol
    def probe(self, ctx: CaptureContext | None) -> Probe:
        from profiler.collectors import host

        for ev in EVENTS:
            ok, why, fix = host.tracepoint_status(f"block:{ev}")
            if not ok:
                return Probe(False, why, fix)
        perf = ctx.perf if ctx is not None else "perf"
        if shutil.which(perf) is None:
            return Probe(False, f"perf not found ({perf!r} is not on PATH)", "apt-get install linux-perf")
        if not host.is_root():
            return Probe(False, "permission denied: tracing block events system-wide needs root", "run profiler as root (sudo)")
        return Probe(True)

    def argv(self, ctx: CaptureContext) -> list[str]:
        from profiler.collectors import host

        self.enabled = list(EVENTS) + [e for e in OPTIONAL_EVENTS if host.tracepoint_status(f"block:{e}")[0]]
        events = [a for e in self.enabled for a in ("-e", f"block:{e}")]
        control = self.control.argv() if self.control is not None else []
        return [ctx.perf, "record", "-a", *events, "-k", "CLOCK_MONOTONIC", "-m", MMAP_PAGES, "-N", "-B",
                "--no-bpf-event", "--synth=no", f"--switch-output={self.segment}", *control,
                "-o", str(ctx.writer.root / DATA)]

    def start(self, ctx: CaptureContext) -> None:
        self._pids = set(ctx.pids)
        self._learn_threads()
        self.data = ctx.writer.root / DATA
        self.errpath = ctx.writer.root / ".block-io.stderr"
        try:
            self.control = Control(ctx.writer.root / ".block-io.ctl")
            self.control.open()
            self.rec.argv = self.argv(ctx)
            if be.HAVE_NUMPY:
                out = self.files.enter_context(ctx.writer.open_member(OUTPUT, compress=False))
                self.converter = SegmentConverter(out, self._is_target)
                self.rec.files = [OUTPUT]
            with open(self.errpath, "wb") as err:
                self.proc = _proc.spawn(self.rec.argv, stderr=err)
            if self.check_balance:
                self.counter_out = ctx.writer.root / ".block-io.count.tmp"
                argv = counter_argv(ctx.perf, self.counter_out)
                self.rec.stats["counter_argv"] = argv
                self.counter_t0 = time.monotonic()
                self.counter = _proc.spawn(argv)
                time.sleep(0.15)  # let perf stat start counting before the trace starts
            if not self.control.enable(self.proc):
                raise RuntimeError("perf record did not start: " + (self._stderr() or "no acknowledgement of 'enable'"))
            self.trace_t0 = time.monotonic()
        except Exception:
            self._teardown(ctx)
            raise
        self.rec.started = self.trace_t0

    def _stderr(self) -> str:
        with contextlib.suppress(OSError):
            if self.errpath is not None:
                lines = [ln for ln in self.errpath.read_text(errors="replace").splitlines() if ln.strip()]
                return "; ".join(lines[-3:])
        return ""

    def _learn_threads(self) -> None:
        """Remember the targets' thread ids while they live (IO is attributed after the capture)."""
        self._tid_seen = time.monotonic()
        for pid in self._pids:
            with contextlib.suppress(OSError, ValueError):
                for tid in os.listdir(f"/proc/{pid}/task"):
                    self._tgid[int(tid)] = pid

    def _segments(self) -> list[Path]:
        """perf.data segments perf has finished (``.block-io.perf.data.<timestamp>``), oldest first."""
        if self.data is None:
            return []
        root, prefix = self.data.parent, self.data.name + "."
        with contextlib.suppress(OSError):
            return sorted(root / n for n in os.listdir(root) if n.startswith(prefix) and n[len(prefix):].isdigit())
        return []

    def _hand_over(self) -> None:
        if self.converter is None:
            return
        for seg in self._segments():
            if seg not in self.handed:
                self.handed.add(seg)
                self.converter.add(seg)

    def poll(self) -> str | None:
        if time.monotonic() - self._tid_seen >= 1.0:
            self._learn_threads()
        self._hand_over()
        if self.proc is not None and self.proc.poll() is not None and self.trace_t1 is None and self.died is None:
            self.died = f"perf record exited with code {self.proc.returncode} during the capture" + (
                f": {self._stderr()}" if self._stderr() else "")
        return self.died

    def size(self) -> int:
        total = file_size(self.data) if self.data is not None else 0
        return total + sum(file_size(s) for s in self._segments())

    def request_stop(self) -> None:
        """Stop the trace and its counter at the same moment (before the other collectors finish)."""
        if self.trace_t1 is None and self.proc is not None:
            used = _proc.cpu_seconds(self.proc.pid)
            if used is not None:
                self.rec.stats["perf_cpu_seconds"] = round(used, 2)
        # The counter stops first and the trace only once it has gone: perf stat may take a
        # while to act on SIGINT on a busy host, and events it counts after the trace stopped
        # would look like events the trace lost.
        if self.counter is not None and self.counter.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.counter.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.counter.wait(timeout=COUNTER_STOP_WAIT)
            self.counter_t1 = time.monotonic()
        if self.proc is not None and self.trace_t1 is None:
            if self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.send_signal(signal.SIGINT)
            self.trace_t1 = time.monotonic()

    def stop(self, ctx: CaptureContext) -> CollectorRecord:
        rec = self.rec
        try:
            self.poll()
            self._learn_threads()
            self.request_stop()
            if self.proc is not None:
                rc = _proc.stop_process(self.proc, 30.0)
                if self.died is None and rc not in (0, -signal.SIGINT, 130, 2):
                    self.died = f"perf record exited with code {rc}" + (f": {self._stderr()}" if self._stderr() else "")
                self.proc = None
            rec.ended = time.monotonic()
            counted = None
            if self.counter is not None:
                _proc.stop_process(self.counter, 5.0)
                self.counter = None
                if self.counter_out is not None and self.counter_out.exists():
                    counted = parse_counter(self.counter_out.read_text(errors="replace"))
            t0 = time.process_time()
            if self.converter is not None:
                self._hand_over()
                conv = self.converter.finish()
                rec.stats["convert_cpu_seconds"] = round(self.converter.cpu_seconds, 2)
                self.converter = None
                self.files.close()
                trace, lost, target_issues = conv.counts, conv.lost, conv.target_issues
            else:
                trace, lost, target_issues = self._as_text(ctx)
            rec.stats["stop_cpu_seconds"] = round(time.process_time() - t0, 2)  # the whole process's, meanwhile
            ratio = 1.0
            if counted and self.counter_t1 > self.counter_t0 and self.trace_t1:
                ratio = (self.trace_t1 - self.trace_t0) / (self.counter_t1 - self.counter_t0)
            stats, why = balance(trace, counted, lost, ratio)
            stats["window_ratio"] = round(ratio, 4)
            rec.stats.update(stats)
            rec.stats["events"] = sum(trace.values())
            rec.stats["completions"] = trace.get("block_rq_complete", 0)
            rec.stats["target_issues"] = target_issues
            rec.stats["enabled"] = [f"block:{e}" for e in self.enabled]
            reasons = [r for r in (self.died, why) if r]
            rec.status = PARTIAL if reasons else OK
            rec.reason = "; ".join(reasons) or None
        except OSError as exc:
            rec.status, rec.reason = PARTIAL, disk_reason(exc)
            rec.ended = rec.ended or time.monotonic()
        except (pd.PerfDataUnsupported, be.BlockEventsError) as exc:
            rec.status, rec.reason = PARTIAL, f"the block events could not be converted: {exc}"
            rec.ended = rec.ended or time.monotonic()
        finally:
            self._teardown(ctx)
        return rec

    def _as_text(self, ctx: CaptureContext) -> tuple[dict[str, int], int, int]:
        """No numpy: the segments through perf script into block.trace.gz (text, counted as it goes)."""
        tc = TraceCounter(self.enabled, self._is_target)
        lost = 0
        with ctx.writer.open_member(TEXT_OUTPUT, compress=False) as out:
            self.rec.files = [TEXT_OUTPUT]
            gz = _proc.spawn([tool("gzip") or "gzip", "-1", "-c"], stdout=out, stdin_pipe=True)
            assert gz.stdin is not None
            try:
                for seg in self._segments():
                    p = _proc.spawn([ctx.perf, "script", "-i", str(seg), "-F", "comm,tid,cpu,time,event,trace"],
                                    stdout=subprocess.PIPE)
                    assert p.stdout is not None
                    while chunk := p.stdout.read(1 << 20):
                        tc.feed(chunk)
                        gz.stdin.write(chunk)
                    _proc.stop_process(p, 5.0)
                    with contextlib.suppress(OSError):
                        seg.unlink()
            finally:
                gz.stdin.close()
                gz.wait(60)
        tc.close()
        return tc.counts, lost, tc.target_issues

    # ---------------------------------------------------------------- internals
    def _teardown(self, ctx: CaptureContext) -> None:
        if self.proc is not None:
            _proc.stop_process(self.proc, 10.0, first=signal.SIGINT)
            self.proc = None
        if self.counter is not None:
            _proc.stop_process(self.counter, 5.0)
            self.counter = None
        if self.converter is not None:
            with contextlib.suppress(Exception):
                self._hand_over()
                self.converter.finish()
            self.converter = None
        self.files.close()
        if self.control is not None:
            self.control.close()
        for p in [self.counter_out, self.errpath, self.data, *self._segments()]:
            if p is not None:
                with contextlib.suppress(OSError):
                    p.unlink()

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
