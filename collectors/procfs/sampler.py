"""The procfs sampler (collectors layer): per-thread states and times, process, system and cgroup stats.

Runs in-process on its own thread, needs no perf and no privileges beyond reading /proc
(root for other users' /proc/PID/io, syscall and wchan). Every tick (``proc_hz``, default
20 Hz) it reads, for each thread of each target, ``/proc/PID/task/TID/{stat,schedstat}``,
and for threads that are not running also ``syscall`` and ``wchan``; every ``slow`` tick
(about 4 Hz) it reads each thread's ``status`` (context switches), the process totals, the
system (CPU, memory, PSI, disks) and the targets' cgroups; about once a second it reads every
other process's CPU time and records the top consumers (``top``: who takes the CPU when a
target waits for one). Records stream into
``proc.jsonl.gz`` (format: docs/bundle.md), so memory stays flat however long the capture.

Cost is kept low by holding the per-thread files open and re-reading them with ``pread``
at offset 0 (procfs regenerates the text on each read), so a tick is a few syscalls per
thread rather than open/read/close of five files. What each file holds, and the host-wide and
cgroup readers, are collectors/procfs/files.py.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import threading
import time
from typing import IO, Any

from profiler.collectors.base import CaptureContext, CollectorBase, Probe
from profiler.collectors.host import read_text
from profiler.collectors.procfs.files import (
    READ_SIZE,
    block_devices,
    cgroup_dirs,
    int_or_none,
    kv_file_colon,
    parse_stat,
    parse_status_ctxt,
    parse_syscall,
    raw_read,
    read_cgroup,
    read_cpu_times,
    read_system,
    syscall_table,
    whole_disks,
)

from profiler.bundle import FAILED, OK, PARTIAL, SKIPPED, CollectorRecord, members

FILE = members.PROC
SLOW_HZ = 4.0  # process / system / cgroup / per-thread status records per second
TOP_HZ = 1.0  # host-wide top CPU consumers (the neighbours that may starve a target) per second
TOP_N = 8

# --------------------------------------------------------------------------- the sampler


class _Thread:
    """Open file handles on one thread's procfs files, re-read with pread at offset 0."""

    __slots__ = ("tid", "base", "fds")

    NAMES = ("stat", "schedstat", "syscall", "wchan", "status")

    def __init__(self, base: str, tid: int) -> None:
        self.tid = tid
        self.base = base
        self.fds: dict[str, int] = {"stat": os.open(f"{base}/stat", os.O_RDONLY)}

    def read(self, name: str, size: int = READ_SIZE) -> str | None:
        """The file's current text; None if it cannot be read (thread gone, no permission)."""
        fd = self.fds.get(name)
        if fd is None:
            try:
                fd = os.open(f"{self.base}/{name}", os.O_RDONLY)
            except OSError as exc:
                if exc.errno == errno.EMFILE:  # out of descriptors: read without keeping one
                    return raw_read(f"{self.base}/{name}", size)
                self.fds[name] = -1
                return None
            self.fds[name] = fd
        if fd < 0:
            return None
        try:
            return os.pread(fd, size, 0).decode("ascii", "replace")
        except OSError:
            return None

    def close(self) -> None:
        for fd in self.fds.values():
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.fds.clear()


def raise_fd_limit() -> None:
    """Let the sampler hold a few files per thread open (TiKV runs a few hundred threads)."""
    with contextlib.suppress(ImportError, ValueError, OSError):
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or hard > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536) if hard != resource.RLIM_INFINITY else 65536, hard))


class Sampler:
    """The sampling loop, separate from the collector so it can be driven by tests and scripts."""

    def __init__(self, pids: list[int], out: IO[bytes], hz: float = 20.0, slow_hz: float = SLOW_HZ) -> None:
        self.pids = list(pids)
        self.out = out
        self.hz = max(0.5, float(hz))
        self.slow_every = max(1, round(self.hz / max(0.1, slow_hz)))
        self.threads: dict[int, dict[int, _Thread]] = {p: {} for p in self.pids}
        self.alive = {p: True for p in self.pids}
        self.cg_dirs = {p: cgroup_dirs(p) for p in self.pids}
        self.disks = whole_disks()
        self.stop_event = threading.Event()
        self.top_every = max(1, round(self.hz / max(0.1, TOP_HZ)))
        self._top_prev: dict[int, tuple[int, str]] = {}
        self._top_t: float | None = None
        raise_fd_limit()
        self.ticks = 0
        self.records = 0
        self.thread_records = 0
        self.late_ticks = 0
        self.errors: list[str] = []
        self.cpu_seconds = 0.0
        self.wall_seconds = 0.0
        self.max_threads = 0
        self._buf: list[str] = []
        self.bytes_written = 0  # uncompressed

    # -- output
    def emit(self, rec: dict[str, Any]) -> None:
        self._buf.append(_dumps(rec))
        self.records += 1

    def flush(self) -> None:
        if self._buf:
            self._buf.append("")
            data = "\n".join(self._buf).encode()
            self.out.write(data)
            self.bytes_written += len(data)
            self._buf.clear()

    def write_host(self) -> None:
        table, source = syscall_table()
        self.emit({
            "kind": "host", "t": round(time.monotonic(), 6), "clk_tck": os.sysconf("SC_CLK_TCK"),
            "page_size": os.sysconf("SC_PAGE_SIZE"), "hz": self.hz, "slow_hz": self.hz / self.slow_every,
            "ncpu": os.cpu_count() or 0, "task_delayacct": int_or_none(read_text("/proc/sys/kernel/task_delayacct")),
            "syscall_table": source, "syscall_names": {str(k): v for k, v in sorted(table.items())},
            "pids": self.pids, "block_devices": block_devices(),
        })
        self.flush()

    # -- one tick
    def _refresh_threads(self, pid: int) -> None:
        try:
            tids = {int(t) for t in os.listdir(f"/proc/{pid}/task")}
        except OSError:
            tids = set()
        have = self.threads[pid]
        for tid in list(have):
            if tid not in tids:
                have.pop(tid).close()
        for tid in tids - set(have):
            base = f"/proc/{pid}/task/{tid}"
            try:
                th = _Thread(base, tid)
            except OSError:
                continue  # it died between listdir and open
            have[tid] = th

    def _pid_gone(self, pid: int) -> bool:
        try:
            text = read_text(f"/proc/{pid}/stat")
        except OSError:
            return True
        if text is None:
            return True
        fields = parse_stat(text)
        return fields is None or fields[0] in ("Z", "X")

    def tick(self) -> None:
        t = round(time.monotonic(), 6)
        slow = self.ticks % self.slow_every == 0
        self.ticks += 1
        total_threads = 0
        for pid in self.pids:
            if not self.alive[pid]:
                continue
            self._refresh_threads(pid)
            sum_v = sum_iv = 0
            seen = 0
            for tid, th in list(self.threads[pid].items()):
                rec = self._thread_record(pid, th, t, slow)
                if rec is None:
                    self.threads[pid].pop(tid).close()
                    continue
                if "vcsw" in rec:
                    sum_v += rec["vcsw"]
                    sum_iv += rec["ivcsw"]
                self.emit(rec)
                seen += 1
            self.thread_records += seen
            if not seen and self._pid_gone(pid):  # gone, or a zombie not yet reaped
                self.alive[pid] = False
                self.emit({"kind": "event", "t": t, "what": "target-exited", "pid": pid})
                continue
            total_threads += len(self.threads[pid])
            if slow:
                prec = self._process_record(pid, t)
                if prec is not None:
                    prec["vcsw"], prec["ivcsw"] = sum_v, sum_iv
                    self.emit(prec)
                cg = read_cgroup(self.cg_dirs[pid])
                if cg:
                    cg.update({"kind": "cgroup", "t": t, "pid": pid})
                    self.emit(cg)
        self.max_threads = max(self.max_threads, total_threads)
        if slow:
            srec = read_system(self.disks)
            srec["t"] = t
            self.emit(srec)
        if (self.ticks - 1) % self.top_every == 0:
            trec = self._top_record(t)
            if trec is not None:
                self.emit(trec)
        self.flush()

    def _top_record(self, t: float) -> dict[str, Any] | None:
        """The processes (targets excluded) that used the most CPU since the last call."""
        cur = read_cpu_times(exclude=set(self.pids))
        prev, t_prev = self._top_prev, self._top_t
        self._top_prev, self._top_t = cur, t
        if t_prev is None:
            return None
        used = [(ticks - prev[pid][0], pid, comm) for pid, (ticks, comm) in cur.items()
                if pid in prev and ticks > prev[pid][0]]
        used.sort(key=lambda x: (-x[0], x[1]))
        return {"kind": "top", "t": t, "dt": round(t - t_prev, 6),
                "procs": [[pid, comm, d] for d, pid, comm in used[:TOP_N]]}

    def _thread_record(self, pid: int, th: _Thread, t: float, slow: bool) -> dict[str, Any] | None:
        text = th.read("stat")
        if text is None:
            return None  # ESRCH: the thread exited
        f = parse_stat(text)
        if not f or len(f) < 13:
            return None
        state = f[0]
        if state in ("Z", "X"):
            return None
        # comm may change (threads rename themselves after start); take it from stat.
        comm = text[text.find("(") + 1:text.rfind(")")]
        rec: dict[str, Any] = {
            "kind": "thread", "t": t, "pid": pid, "tid": th.tid, "comm": comm, "state": state,
            "utime": int(f[11]), "stime": int(f[12]),
        }
        if len(f) > 39:
            rec["blkio_ticks"] = int(f[39])
        sched = th.read("schedstat", 256)
        if sched:
            with contextlib.suppress(ValueError, IndexError):
                rec["run_delay_ns"] = int(sched.split()[1])
        if state == "R":
            rec["syscall"] = None
        else:
            sc = th.read("syscall", 256)
            rec["syscall"] = parse_syscall(sc) if sc is not None else None
            wchan = th.read("wchan", 256)
            if wchan and wchan != "0":
                rec["wchan"] = wchan.strip()
        if slow:
            body = th.read("status")
            if body:
                cs = parse_status_ctxt(body)
                if cs:
                    rec["vcsw"], rec["ivcsw"] = cs
        return rec

    def _process_record(self, pid: int, t: float) -> dict[str, Any] | None:
        text = read_text(f"/proc/{pid}/stat")
        if text is None:
            return None
        f = parse_stat(text)
        if not f or len(f) < 22:
            return None
        page = os.sysconf("SC_PAGE_SIZE")
        rec: dict[str, Any] = {
            "kind": "process", "t": t, "pid": pid, "minflt": int(f[7]), "majflt": int(f[9]),
            "utime": int(f[11]), "stime": int(f[12]), "num_threads": int(f[17]),
            "vms": int(f[20]), "rss": int(f[21]) * page,
        }
        if len(f) > 39:
            rec["blkio_ticks"] = int(f[39])
        io = kv_file_colon(f"/proc/{pid}/io")
        for key in ("read_bytes", "write_bytes", "rchar", "wchar", "syscr", "syscw", "cancelled_write_bytes"):
            if key in io:
                rec[key] = io[key]
        st = read_text(f"/proc/{pid}/status") or ""
        for line in st.splitlines():
            if line.startswith("VmSwap:"):
                with contextlib.suppress(ValueError, IndexError):
                    rec["swap"] = int(line.split()[1]) * 1024
        return rec

    # -- the loop
    def run(self) -> None:
        period = 1.0 / self.hz
        c0, w0 = time.thread_time(), time.monotonic()
        nxt = time.monotonic()
        try:
            while not self.stop_event.is_set():
                try:
                    self.tick()
                except OSError as exc:  # e.g. ENOSPC on the bundle
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                    if exc.errno in (errno.ENOSPC, errno.EIO, errno.EDQUOT):
                        break
                if not any(self.alive.values()):
                    break
                nxt += period
                delay = nxt - time.monotonic()
                if delay < 0:
                    self.late_ticks += 1
                    nxt = time.monotonic()
                    delay = 0
                self.stop_event.wait(delay)
        finally:
            self.cpu_seconds = time.thread_time() - c0
            self.wall_seconds = time.monotonic() - w0
            for ths in self.threads.values():
                for th in ths.values():
                    th.close()
                ths.clear()

    def stats(self) -> dict[str, Any]:
        wall = max(self.wall_seconds, 1e-9)
        return {
            "ticks": self.ticks, "records": self.records, "thread_records": self.thread_records,
            "late_ticks": self.late_ticks, "max_threads": self.max_threads, "hz": self.hz,
            "cpu_seconds": round(self.cpu_seconds, 3),
            "overhead_pct_core": round(100.0 * self.cpu_seconds / wall, 2),
            "targets_exited": [p for p, a in self.alive.items() if not a],
        }


_dumps = json.JSONEncoder(separators=(",", ":")).encode


# --------------------------------------------------------------------------- the collector


class ProcfsCollector(CollectorBase):
    """Collector protocol wrapper: starts the Sampler on a thread, writes ``proc.jsonl.gz``."""

    name = "procfs"
    backend = "procfs"

    def __init__(self) -> None:
        self._sampler: Sampler | None = None
        self._thread: threading.Thread | None = None
        self._stack: contextlib.ExitStack | None = None
        self._started: float | None = None

    def probe(self, ctx: CaptureContext) -> Probe:
        if not os.path.isdir("/proc/self/task"):
            return Probe(False, "/proc is not mounted", "mount -t proc proc /proc")
        for pid in ctx.pids:
            if not os.access(f"/proc/{pid}/task", os.R_OK):
                return Probe(False, f"cannot read /proc/{pid}/task", "run as root or as the target's user")
        return Probe(True)

    def argv(self, ctx: CaptureContext) -> list[str]:
        return []

    def poll(self) -> str | None:
        """None while sampling; "ended" once the sampler stopped by itself (every target exited)."""
        if self._thread is not None and not self._thread.is_alive():
            return "ended"
        return None

    def request_stop(self) -> None:
        if self._sampler is not None:
            self._sampler.stop_event.set()

    def size(self) -> int:
        return self._sampler.bytes_written if self._sampler is not None else 0

    def start(self, ctx: CaptureContext) -> None:
        self._stack = contextlib.ExitStack()
        out = self._stack.enter_context(ctx.writer.open_member(FILE))
        self._sampler = Sampler(ctx.pids, out, hz=ctx.options.proc_hz)
        self._sampler.write_host()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._sampler.run, name="profiler-procfs", daemon=True)
        self._thread.start()

    def stop(self, ctx: CaptureContext) -> CollectorRecord:
        rec = CollectorRecord(name=self.name, backend=self.backend, argv=[], started=self._started)
        s = self._sampler
        if s is None or self._thread is None or self._stack is None:
            rec.status, rec.reason = SKIPPED, "never started"
            return rec
        s.stop_event.set()
        self._thread.join(timeout=10)
        try:
            self._stack.close()
        except OSError as exc:
            s.errors.append(f"closing {FILE}: {exc}")
        rec.ended = time.monotonic()
        rec.files = [FILE]
        rec.stats = s.stats()
        if s.thread_records == 0:
            rec.status, rec.reason = FAILED, (s.errors[0] if s.errors else "no thread could be read")
        elif s.errors:
            rec.status, rec.reason = PARTIAL, s.errors[0]
        elif not any(s.alive.values()):
            rec.status, rec.reason = PARTIAL, "every target exited during the capture"
        else:
            rec.status = OK
        return rec
