"""Block IO requests, system-wide, in binary from a private tracefs instance (collectors layer) -> block.events.bin.

Why not ``perf record -a -e block:block_rq_issue,block:block_rq_complete``: on this 2-core VM it
keeps every event while the CPUs are busy (74K IOPS: all of them), but with idle CPUs it drops
completions (they run in interrupt context, mostly of the idle task) without a lost-event
record: 18K of 49K, and 3K of 62K with ``--switch-output``, measured again with perf 6.1 on
kernel 6.18. A tracefs instance buffer keeps them all, and its per-CPU ``overrun`` /
``dropped events`` counters say when it did not.

The collector creates ``instances/profiler-<pid>-<n>`` (never touching the global buffer other
tools use), sets ``trace_clock=mono`` (the bundle's clock), enables block_rq_issue,
block_rq_complete (and block_rq_requeue, block_rq_merge where the kernel has them), and a
thread reads each CPU's ``trace_pipe_raw`` (the ring buffer's own binary pages, nothing
formatted) every 0.2 s, decodes the pages with numpy (profiler/formats/blockevents.py) and
writes the events, in time order, as the columnar member ``block.events.bin`` (~5-15 bytes
an event). The text trace this replaces (``cat trace_pipe | gzip``) cost 38% of one CPU at
97K IOPS and was parsed again after the capture at ~520K events per CPU-second.

Independently, ``perf stat -a`` counts the same two events; at stop the member's counts are
checked against it (``stats.balance``), and lost events make the collector ``partial`` with the
reason. The instance is removed at stop, on errors and at exit. Where numpy is missing (a
cluster node's bare python3) the instance's text ``trace_pipe`` goes through ``cat | gzip``
into ``block.trace.gz`` instead, as in bundles before v4.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import itertools
import os
import shutil
import signal
import subprocess
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from profiler.collectors import process as _proc
from profiler.collectors.base import CaptureContext, CollectorBase, Probe, disk_reason
from profiler.collectors.files import file_size
from profiler.collectors.tracefs.counting import (
    EVENTS,
    TraceCounter,
    balance,
    counter_argv,
    parse_counter,
)
from profiler.collectors.tracefs.instance import (
    TracefsInstance,
    buffer_kb_per_cpu,
    instance_name,
    remove_stale_instances,
    tool,
)

from profiler.bundle import OK, PARTIAL, CollectorRecord, members
from profiler.formats import blockevents as be
from profiler.formats import tracefs_pages as tp

OUTPUT = members.BLOCK_EVENTS
_SEQ = itertools.count(1)  # this process's instances, numbered
TEXT_OUTPUT = members.BLOCK_TRACE  # without numpy: ftrace text, as bundles before v4 held
READ_EVERY = 0.2  # s between two reads of every CPU's pages (a page fills in ~0.3 ms at 97K IOPS)
DECODE_EVERY = 1.0  # s between two decodings of the pages read (numpy's per-call cost wants big batches)
OPTIONAL_EVENTS = ["block_rq_requeue", "block_rq_merge"]
COUNTER_STOP_WAIT = 2.0  # s: how long the stop waits for the counter before stopping the trace
class RawReader:
    """The thread that reads every CPU's ``trace_pipe_raw`` (non-blocking, whole pages) and
    hands the pages to a :class:`tracefs_pages.PageStream`; events older than the round before
    the last are final and written."""

    def __init__(self, inst: TracefsInstance, stream: tp.PageStream) -> None:
        self.stream = stream
        self.fds: list[int] = []
        for cpu in sorted(os.listdir(os.path.join(inst.path, "per_cpu")), key=lambda c: int(c[3:]) if c[3:].isdigit() else -1):
            try:
                self.fds.append(os.open(os.path.join(inst.path, "per_cpu", cpu, "trace_pipe_raw"), os.O_RDONLY | os.O_NONBLOCK))
            except OSError as exc:
                if exc.errno not in (errno.ENODEV, errno.ENXIO, errno.ENOENT):  # an offline CPU has no buffer to read
                    raise
        self.held: list[list[bytes]] = [[] for _ in self.fds]  # pages read, not decoded yet
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.cpu_seconds = 0.0
        self.thread = threading.Thread(target=self._run, name="block-io-reader", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def cpu_seconds_so_far(self) -> float:
        """The reader thread's CPU time while it runs."""
        with contextlib.suppress(OSError, AttributeError, TypeError):
            return time.clock_gettime(time.pthread_getcpuclockid(self.thread.ident))  # type: ignore[arg-type]
        return self.cpu_seconds

    def _round(self) -> int:
        """Read every CPU's pages once (kept until :meth:`_feed`). Returns the pages read."""
        n = 0
        for cpu, fd in enumerate(self.fds):
            chunks = self.held[cpu]
            while True:
                try:
                    page = os.read(fd, tp.PAGE)
                except BlockingIOError:
                    break
                except OSError as exc:
                    if exc.errno in (errno.EAGAIN, errno.EINTR, errno.ENODEV, errno.ENXIO):  # nothing (yet), or a CPU gone offline
                        break
                    raise
                if not page:
                    break
                chunks.append(page.ljust(tp.PAGE, b"\0"))
                n += 1
        return n

    def _feed(self) -> None:
        for cpu, chunks in enumerate(self.held):
            if chunks:
                self.stream.feed(cpu, b"".join(chunks))
                chunks.clear()

    def _run(self) -> None:
        t0 = time.thread_time()
        horizons = [0, 0]  # the start times of the last two decodings' rounds (ns, CLOCK_MONOTONIC)
        last = time.monotonic()
        try:
            while not self.done.is_set():
                start = time.monotonic_ns()
                self._round()
                if time.monotonic() - last >= DECODE_EVERY:
                    last = time.monotonic()
                    self._feed()
                    horizons = [horizons[1], start]
                    self.stream.flush(horizons[0])  # every CPU was read since then
                self.done.wait(READ_EVERY)
        except BaseException as exc:  # noqa: BLE001 - said by finish()
            self.error = exc
        self.cpu_seconds = time.thread_time() - t0

    def finish(self, drained: Callable[[], bool], timeout: float = 10.0) -> be.Converted:
        """After tracing stopped: read the rest (until the buffers are empty), write everything."""
        self.done.set()
        self.thread.join(timeout)
        try:
            if self.error is not None:
                raise self.error
            t0 = time.thread_time()
            deadline = time.monotonic() + timeout
            while self._round() or (not drained() and time.monotonic() < deadline):
                if not drained():
                    time.sleep(0.02)
            self._feed()
            self.stream.flush(None)
            self.cpu_seconds += time.thread_time() - t0
            return self.stream.result()
        finally:
            self.close()

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds = []


class BlockIOCollector(CollectorBase):
    name = "block-io"
    backend = "tracefs"
    rec: CollectorRecord

    def __init__(self, buffer_kb: int | None = None, check_balance: bool = True) -> None:
        self.buffer_kb = buffer_kb
        self.check_balance = check_balance
        self.rec = CollectorRecord(name=self.name, backend=self.backend)
        self.instance: TracefsInstance | None = None
        self.reader: subprocess.Popen[bytes] | None = None
        self.raw: RawReader | None = None
        self.member: Any = None  # the open member (binary path)
        self.member_cm: Any = None
        self.gzip: subprocess.Popen[bytes] | None = None
        self.out_tmp: Path | None = None
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
    def probe(self, ctx: CaptureContext) -> Probe:
        from profiler.collectors import host

        for ev in EVENTS:
            ok, why, fix = host.tracepoint_status(f"block:{ev}")
            if not ok:
                return Probe(False, why, fix)
        root = host.tracefs_path()
        if root is None or not os.access(os.path.join(root, "instances"), os.W_OK):
            return Probe(False, "permission denied: creating a tracefs instance needs root", "run profiler as root (sudo)")
        if not be.HAVE_NUMPY:
            for name in ("cat", "gzip"):
                if tool(name) is None:
                    return Probe(False, f"{name} not found", "apt-get install coreutils gzip")
        return Probe(True)

    def argv(self, ctx: CaptureContext) -> list[str]:
        """The text path's reader (no numpy); the binary path reads in-process (no argv)."""
        if self.instance is None or be.HAVE_NUMPY:
            return []
        return [tool("cat") or "cat", os.path.join(self.instance.path, "trace_pipe")]

    def start(self, ctx: CaptureContext) -> None:
        from profiler.collectors import host

        root = host.tracefs_path()
        assert root is not None
        remove_stale_instances(root)
        self._pids = set(ctx.pids)
        self._learn_threads()
        inst = TracefsInstance(root, instance_name(next(_SEQ)))
        self.instance = inst
        kb = self.buffer_kb or buffer_kb_per_cpu(os.cpu_count() or 1)
        self.rec.stats.update({"instance": inst.path, "buffer_kb_per_cpu": kb})
        try:
            inst.create()
            inst.write("tracing_on", "0")
            inst.write("trace_clock", "mono")
            inst.write("buffer_size_kb", str(kb))
            for ev in EVENTS + OPTIONAL_EVENTS:
                if inst.has(f"events/block/{ev}/enable"):
                    self.enabled.append(ev)
                elif ev in EVENTS:
                    raise RuntimeError(f"tracepoint block:{ev} is missing in the instance")
            if be.HAVE_NUMPY:
                # The reader: a thread reading whole binary pages, decoded with numpy.
                self.member_cm = ctx.writer.open_member(OUTPUT, compress=False)
                self.member = self.member_cm.__enter__()
                fmts = tp.RawFormats.from_tracefs(os.path.join(inst.path, "events", "block"))
                tap = ctx.early.tap_for(OUTPUT) if ctx.early is not None else None
                self.raw = RawReader(inst, tp.PageStream(self.member, fmts, self._is_target, tap))
                self.raw.start()
                self.rec.stats["reader"] = "trace_pipe_raw, in-process"
            else:
                # The reader: cat drains trace_pipe, gzip -1 compresses, neither holds the GIL.
                self.out_tmp = ctx.writer.path(f".{TEXT_OUTPUT}.tmp")
                with open(self.out_tmp, "wb") as out:
                    self.gzip = _proc.spawn([tool("gzip") or "gzip", "-1", "-c"], stdout=out,
                                            stdin_pipe=True)
                self.rec.argv = self.argv(ctx)
                assert self.gzip.stdin is not None
                self.reader = _proc.spawn(self.rec.argv, stdout=self.gzip.stdin)
                self.gzip.stdin.close()
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
            self._teardown(ctx)
            raise
        self.rec.started = self.trace_t0
        self.rec.files = [OUTPUT if be.HAVE_NUMPY else TEXT_OUTPUT]

    def _learn_threads(self) -> None:
        """Remember the targets' thread ids while they live (IO is attributed after the capture)."""
        self._tid_seen = time.monotonic()
        for pid in self._pids:
            with contextlib.suppress(OSError, ValueError):
                for tid in os.listdir(f"/proc/{pid}/task"):
                    self._tgid[int(tid)] = pid

    def poll(self) -> str | None:
        if time.monotonic() - self._tid_seen >= 1.0:
            self._learn_threads()
        for proc, what in ((self.reader, "the trace_pipe reader"), (self.gzip, "gzip")):
            if proc is not None and proc.poll() is not None and self.trace_t1 is None and self.died is None:
                self.died = f"{what} exited with code {proc.returncode} during the capture"
        if self.raw is not None and self.raw.error is not None and self.died is None:
            self.died = f"the trace_pipe_raw reader failed: {type(self.raw.error).__name__}: {self.raw.error}"
        return self.died

    def size(self) -> int:
        if self.raw is not None:
            return self.member.tell() if self.member is not None and not self.member.closed else 0
        return file_size(self.out_tmp) if self.out_tmp else 0

    def request_stop(self) -> None:
        """Stop the trace and its counter at the same moment (before the other collectors finish)."""
        if self.trace_t1 is None and self.raw is not None:
            self.rec.stats["reader_cpu_seconds_in_capture"] = round(self.raw.cpu_seconds_so_far(), 2)
        if self.trace_t1 is None:
            used = [_proc.cpu_seconds(p.pid) for p in (self.reader, self.gzip) if p is not None]
            if used and all(u is not None for u in used):
                self.rec.stats["reader_cpu_seconds"] = round(sum(u for u in used if u is not None), 2)
        # The counter stops first and the trace only once it has gone: perf stat may take a
        # while to act on SIGINT on a busy host, and events it counts after the trace stopped
        # would look like events the trace lost.
        if self.counter is not None and self.counter.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.counter.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.counter.wait(timeout=COUNTER_STOP_WAIT)
            self.counter_t1 = time.monotonic()
        if self.instance is not None and self.trace_t1 is None:
            with contextlib.suppress(OSError):
                self.instance.write("tracing_on", "0")
            self.trace_t1 = time.monotonic()

    def stop(self, ctx: CaptureContext) -> CollectorRecord:
        rec = self.rec
        try:
            self.poll()
            self._learn_threads()
            self.request_stop()
            if self.raw is None:
                self._drain()
            rec.ended = time.monotonic()
            ring_lost = self.instance.lost() if self.instance is not None else 0
            counted = None
            if self.counter is not None:
                _proc.stop_process(self.counter, 5.0)
                self.counter = None
                if self.counter_out is not None and self.counter_out.exists():
                    counted = parse_counter(self.counter_out.read_text(errors="replace"))
            if self.raw is not None:
                inst = self.instance
                assert inst is not None
                t0 = time.thread_time()
                conv = self.raw.finish(lambda: inst.entries() == 0)
                rec.stats["stop_cpu_seconds"] = round(time.thread_time() - t0, 2)
                rec.stats["reader_cpu_seconds"] = round(self.raw.cpu_seconds, 2)
                rec.stats["pages"] = self.raw.stream.pages
                self.raw = None
                self._close_member()
                trace = {ev: conv.counts.get(ev, 0) for ev in self.enabled}
                target_issues = conv.target_issues
            else:
                trace, target_issues = self._finish_text(ctx)
            ratio = 1.0
            if counted and self.counter_t1 > self.counter_t0 and self.trace_t1:
                # the share of the counter's window the trace covered: the counter starts before
                # the trace (what it counts before the trace starts is no loss), and stops first
                covered = min(self.counter_t1, self.trace_t1) - max(self.counter_t0, self.trace_t0)
                ratio = max(0.0, covered) / (self.counter_t1 - self.counter_t0)
            stats, why = balance(trace, counted, ring_lost, ratio)
            stats["window_ratio"] = round(ratio, 4)
            rec.stats.update(stats)
            rec.stats["events"] = sum(trace.values())
            rec.stats["completions"] = trace.get("block_rq_complete", 0)
            rec.stats["target_issues"] = target_issues
            rec.stats["enabled"] = [f"block:{e}" for e in self.enabled]
            reasons = [r for r in (self.died, why) if r]
            if self.died:
                rec.stats["died"] = True  # the reader or gzip ended: a fault, not a loss (session's exit code)
            rec.status = PARTIAL if reasons else OK
            rec.reason = "; ".join(reasons) or None
        except OSError as exc:
            rec.status, rec.reason = PARTIAL, disk_reason(exc)
            rec.ended = rec.ended or time.monotonic()
        finally:
            self._teardown(ctx)
        return rec

    def _finish_text(self, ctx: CaptureContext) -> tuple[dict[str, int], int]:
        """The text path's end: the trace renamed into place and counted."""
        self._stop_pipeline()
        assert self.out_tmp is not None
        self.out_tmp.replace(ctx.writer.path(TEXT_OUTPUT))
        tc = TraceCounter(self.enabled, self._is_target)
        with contextlib.suppress(OSError, EOFError, zlib.error):
            with gzip.open(ctx.writer.path(TEXT_OUTPUT), "rb") as fh:
                while chunk := fh.read(1 << 20):
                    tc.feed(chunk)
        tc.close()
        return dict(tc.counts), tc.target_issues

    def _close_member(self) -> None:
        if self.member_cm is not None:
            cm, self.member_cm, self.member = self.member_cm, None, None
            cm.__exit__(None, None, None)

    # ---------------------------------------------------------------- internals
    def _drain(self, timeout: float = 10.0) -> None:
        """After tracing_on=0, wait until the reader has emptied the ring buffer."""
        if self.instance is None or self.reader is None:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.reader.poll() is None:
            if self.instance.entries() == 0:
                time.sleep(0.05)  # the last read may still be on its way to gzip
                return
            time.sleep(0.05)

    def _stop_pipeline(self) -> None:
        if self.reader is not None:
            _proc.stop_process(self.reader, 2.0, first=signal.SIGTERM)
            self.reader = None
        if self.gzip is not None:
            # gzip ends by itself at EOF (cat is gone); then it has flushed its trailer.
            try:
                self.gzip.wait(30.0)
            except subprocess.TimeoutExpired:
                pass
            _proc.stop_process(self.gzip, 2.0, first=signal.SIGTERM)
            self.gzip = None

    def _teardown(self, ctx: CaptureContext) -> None:
        if self.instance is not None and self.trace_t1 is None:
            with contextlib.suppress(OSError):
                self.instance.write("tracing_on", "0")
        self._stop_pipeline()
        if self.raw is not None:
            self.raw.done.set()
            self.raw.thread.join(5.0)
            self.raw.close()
            self.raw = None
        with contextlib.suppress(OSError):
            self._close_member()
        if self.counter is not None:
            _proc.stop_process(self.counter, 5.0)
            self.counter = None
        if self.counter_out is not None:
            with contextlib.suppress(OSError):
                self.counter_out.unlink()
        if self.out_tmp is not None and self.out_tmp.exists():
            # an error before the rename: keep what was traced under its real name
            with contextlib.suppress(OSError):
                self.out_tmp.replace(ctx.writer.path(TEXT_OUTPUT))
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
