"""The bcc backend's shared parts (collectors layer): can this host run it, and the collector that runs a helper.

The bcc collectors (blockio, syscalls, offcpu, futex) each run one program of
collectors/bcc/bpf/ in a helper process of their own (collectors/bcc/helper.py): it loads the
prebuilt object, or compiles the program with bcc when no object fits this kernel
(collectors/bcc/objects.py), attaches to tracepoints only (no kprobes: many production
kernels, this host's included, have none), lets the kernel aggregate, and sends the finished
time slots every ``--interval``. The collector here writes them into the bundle as they come
(docs/bundle.md), so the analyzers do not care which backend ran. A helper that dies (a fault
in libbcc or clang, a signal) ends its own collector, with the reason, never the capture.

``bcc_status()`` is the one answer to "can the bcc backend run here": `profiler doctor` shows
it and ``--backend auto`` follows it. It needs root, tracefs, a kernel that loads BPF
tracepoint programs, and either the prebuilt objects fitting this kernel's tracepoints, or
Debian's python3-bpfcc and kernel headers to compile them (scripts/bcc-headers.sh).
"""

from __future__ import annotations

import contextlib
import functools
import glob
import importlib.util
import json
import os
import platform
import re
import signal
import socket
import threading
import time
from typing import Any

from profiler.collectors import host
from profiler.collectors.base import CaptureContext, CollectorBase, Probe
from profiler.collectors.bcc import bpfsys, objects, zygote
from profiler.collectors.bcc.symbols import KERNEL_SUFFIX, clean

from profiler.bundle import FAILED, OK, PARTIAL, RUNNING, CollectorRecord
from profiler.errors import CapabilityError

__all__ = ["KERNEL_SUFFIX", "BccCollector", "bcc_status", "clean", "comm_text", "syscall_name", "syscall_names"]

HEADERS_SCRIPT = "scripts/bcc-headers.sh"
# r0 = 1; exit: the smallest tracepoint program, loaded to ask whether the kernel takes BPF from us
_TRIVIAL = bytes.fromhex("b700000001000000" "9500000000000000")

# A collector whose programs the kernel skipped for more than this share of its events is partial.
MISSED_SHARE_PARTIAL = 0.01
START_WAIT = 2.0  # check_started waits this long for the helper to attach (a compile goes on after)
STOP_WAIT = 60.0  # the helper's last drain and its exit


# --------------------------------------------------------------------------- host check


def headers_dir(release: str | None = None) -> str:
    return f"/lib/modules/{release or platform.release()}/build"


def _headers_fix(release: str) -> str:
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    found = sorted(glob.glob(f"/usr/src/linux-headers-*-{arch}"))
    if not found:
        return (f"apt-get install linux-headers-{arch}, then run {HEADERS_SCRIPT} from the profiler "
                f"source (links them as /lib/modules/{release}/build)")
    build = found[-1]
    common = build[: -len(arch)] + "common"
    return (f"run {HEADERS_SCRIPT} from the profiler source, or: mkdir -p /lib/modules/{release} && "
            f"ln -s {build} /lib/modules/{release}/build && ln -s {common} /lib/modules/{release}/source")


def headers_present(release: str | None = None) -> bool:
    d = headers_dir(release)
    return os.path.isdir(os.path.join(d, "include")) or os.path.isfile("/sys/kernel/kheaders.tar.xz")


def bcc_version() -> str:
    try:
        from importlib.metadata import version

        return version("bcc")
    except Exception:
        pass
    try:
        from bcc import version as v

        return str(v.__version__)
    except Exception:
        return "?"


def _check() -> tuple[bool, str, str | None]:
    release = platform.release()
    if os.geteuid() != 0:
        return False, "bcc needs root (CAP_BPF and CAP_PERFMON) to load programs", "run profiler as root (sudo)"
    if not bpfsys.supported():
        return False, f"no bpf() syscall number known for {platform.machine()}", None
    tracefs = host.ensure_tracefs()[0]  # as root, mounted first when it is not (as perf and attach do)
    if tracefs is None:
        return False, "tracefs is not mounted: bcc cannot find tracepoints", host.MOUNT_TRACEFS
    try:
        os.close(bpfsys.prog_load(bpfsys.PROG_TRACEPOINT, _TRIVIAL, "pf_check"))
    except OSError as exc:
        return (False, f"the kernel does not load BPF tracepoint programs: {exc.strerror or exc}",
                "check that bpf() is allowed (kernel.unprivileged_bpf_disabled does not apply to root; seccomp, lockdown)")
    shipped = objects.shipped()
    unusable = []
    for source in sorted(objects.PROGRAMS):
        name = objects.preferred(source)
        obj = shipped.get(name)
        if obj is None:
            unusable.append(f"no prebuilt {name}")
            continue
        try:
            objects.check(obj, tracefs)
        except objects.ObjectUnusable as exc:
            unusable.append(str(exc))
    if not unusable:
        built = next(iter(shipped.values())).built
        return True, (f"prebuilt BPF objects fit this kernel's tracepoints (built with bcc {built.get('bcc', '?')} "
                      f"on {built.get('kernel', '?')})"), None
    why = unusable[0]
    if importlib.util.find_spec("bcc") is None:
        return (False, f"{why}, and the python bcc module is not importable to compile them",
                "apt-get install python3-bpfcc (Debian/Ubuntu), and make the tool's venv with "
                "/usr/bin/python3 -m venv --system-site-packages")
    if not headers_present(release):
        return (False, f"{why}, and there are no kernel headers at {headers_dir(release)} to compile them "
                       f"(running kernel {release})", _headers_fix(release))
    return True, (f"bcc {bcc_version()} compiles the programs at each capture ({why}; headers: "
                  f"{os.path.realpath(headers_dir(release))})"), None


@functools.lru_cache(maxsize=1)
def _cached_status() -> tuple[bool, str, str | None]:
    return _check()


def bcc_status(refresh: bool = False) -> tuple[bool, str, str | None]:
    """(ok, reason, fix): whether the bcc backend can run on this host, and how to fix it if not.

    Cached for the process. No program is compiled and nothing of libbcc is loaded to answer.
    """
    if refresh:
        _cached_status.cache_clear()
    return _cached_status()


# --------------------------------------------------------------------------- syscall names

_NR_RE = re.compile(r"^#define\s+__NR_(\w+)\s+(\d+)\s*$", re.M)


@functools.lru_cache(maxsize=1)
def syscall_names() -> dict[int, str]:
    """Syscall number -> name, from the kernel's own table as its UAPI headers state it.

    Looked up in the running kernel's header tree first, then the system's asm/unistd_64.h
    (linux-libc-dev), then bcc's table. Numbers none of them know become ``syscall_<nr>``
    (see :func:`syscall_name`).
    """
    machine = platform.machine()
    arch = {"x86_64": "x86", "aarch64": "arm64"}.get(machine, machine)
    triplet = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}.get(machine, machine)
    build = headers_dir()
    candidates = [
        f"{build}/arch/{arch}/include/generated/uapi/asm/unistd_64.h",
        f"/usr/include/{triplet}/asm/unistd_64.h",
        "/usr/include/asm/unistd_64.h",
        f"/usr/include/{triplet}/asm/unistd.h",
        "/usr/include/asm-generic/unistd.h",
    ]
    names: dict[int, str] = {}
    for path in candidates:
        text = host.read_text(path)
        if not text:
            continue
        for name, nr in _NR_RE.findall(text):
            names.setdefault(int(nr), name)
        if names:
            break
    if not names:
        try:
            from bcc.syscall import syscalls

            names = {int(k): v.decode() for k, v in syscalls.items()}
        except Exception:
            names = {}
    return names


def syscall_name(nr: int) -> str:
    return syscall_names().get(nr, f"syscall_{nr}")


def comm_text(raw: bytes | str) -> str:
    text = raw.split(b"\0", 1)[0].decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    return clean(text)


def signal_text(rc: int | None) -> str:
    if rc is not None and rc < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-rc).name}"
    return f"exited with code {rc}"


# --------------------------------------------------------------------------- base collector


class BccCollector(CollectorBase):
    """Run one program in a helper process; turn what it sends into bundle members.

    Subclasses set ``name`` and ``program`` and implement ``settings`` (map sizes and the like
    for the helper), ``open_outputs`` (members written as the slots come), ``on_data`` (one
    message of finished slots; ``msg["final"]`` on the last) and ``finish`` (write the
    remaining members, fill ``rec.stats``). ``on_data`` runs on the reader thread, under
    ``self.lock``; ``finish`` after the helper has ended.

    The programs are the helper's file descriptors: the kernel detaches and frees them when it
    exits, however it exits, and the helper dies with the profiler (parent-death signal).
    """

    name = "bcc"
    backend = "bcc"
    program = ""
    needs_targets = True
    prefer = "prebuilt"  # or "compile": bcc compiles the program even where the prebuilt object fits

    def __init__(self) -> None:
        self.rec: CollectorRecord | None = None
        self.zyg: zygote.Zygote | None = None
        self.sock: socket.socket | None = None
        self.eof = threading.Event()  # the helper's socket closed
        self.ctx: CaptureContext | None = None
        self.t0_ns = 0
        self.end_ns = 0
        self.slot_ns = 1_000_000_000
        self.pids: list[int] = []
        self.backend_reason: str | None = None  # set by backend.with_backend for the manifest
        self.lock = threading.Lock()
        self.attached = threading.Event()
        self.how: str | None = None  # prebuilt | compiled
        self.load_seconds: float | None = None
        self.error: str | None = None  # what the helper said before it gave up
        self.data_error: str | None = None  # a message we could not write
        self.ended = False  # the helper sent its last message
        self.misses: int | None = None
        self.messages = 0
        self.last_data_ns = 0
        self.counters: dict[str, int] = {}
        self.helper_cpu: float | None = None
        self._reader: threading.Thread | None = None
        self._stack = contextlib.ExitStack()
        self._stopping = False

    # -- protocol

    def probe(self, ctx: CaptureContext) -> Probe:
        ok, reason, fix = bcc_status()
        if not ok:
            return Probe(False, reason, fix)
        for tp, _fn in objects.PROGRAMS[self.program].tracepoints:
            tp_ok, why, fix = host.tracepoint_status(tp)
            if not tp_ok:
                return Probe(False, why, fix)
        if self.needs_targets and not ctx.pids:
            return Probe(False, "no target processes")
        return Probe(True)

    def argv(self, ctx: CaptureContext) -> list[str]:
        return []

    def settings(self, ctx: CaptureContext) -> dict[str, Any]:
        return {}

    def interval_ns(self, ctx: CaptureContext) -> int:
        return max(int(ctx.options.interval * 1e9), 10_000_000)

    def start(self, ctx: CaptureContext) -> None:
        self.ctx = ctx
        self.rec = CollectorRecord(name=self.name, backend=self.backend, argv=[], status=RUNNING)
        self.pids = list(ctx.pids)
        self.slot_ns = self.interval_ns(ctx)
        tracefs = host.tracefs_path()
        if tracefs is None:
            raise CapabilityError(f"{self.name}: tracefs is not mounted")
        settings = {"program": self.program, "tracefs": tracefs, "slot_ns": self.slot_ns, "prefer": self.prefer,
                    "targets": self.pids if self.needs_targets else [], **self.settings(ctx)}
        try:
            self.zyg = zygote.acquire()
            self.sock = self.zyg.fork(self.name, settings)
        except OSError as exc:
            if self.zyg is not None:
                zygote.release(self.zyg)
                self.zyg = None
            raise CapabilityError(f"{self.name}: could not start the bcc helper: {exc.strerror or exc}") from None
        self.open_outputs(ctx)
        self._reader = threading.Thread(target=self._read, name=f"bcc-{self.name}", daemon=True)
        self._reader.start()
        ctx.writer.record(self.rec)

    @property
    def helper_pid(self) -> int | None:
        """The pid of this collector's helper process (None until the helper reported it)."""
        return self.zyg.child(self.name).pid if self.zyg is not None else None

    def check_started(self, ctx: CaptureContext) -> None:
        """Wait a moment for the helper to attach; a helper still compiling goes on in the background."""
        self.wait_attached(START_WAIT)

    def wait_attached(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the programs to be attached; raise with the helper's reason if it gave up."""
        deadline = time.monotonic() + timeout
        while not self.attached.is_set() and time.monotonic() < deadline:
            if self.error is not None or (self.eof.is_set() and not self.attached.is_set()):
                if self._reader is not None:
                    self._reader.join(1.0)
                raise CapabilityError(f"{self.name}: {self._failure()}")
            self.attached.wait(0.05)
        return self.attached.is_set()

    def poll(self) -> str | None:
        if self._stopping or self.sock is None or not self.eof.is_set():
            return None
        return f"died: {self._failure()}"

    def request_stop(self) -> None:
        """End the window now (the session calls this on every collector first, so all windows end together)."""
        if self._stopping:
            return
        self._stopping = True
        self.end_ns = time.monotonic_ns()
        if self.sock is not None:
            with contextlib.suppress(OSError, ValueError):
                self.sock.sendall((json.dumps({"cmd": "stop", "end_ns": self.end_ns}) + "\n").encode())

    def stop(self, ctx: CaptureContext) -> CollectorRecord:
        rec = self.rec or CollectorRecord(name=self.name, backend=self.backend)
        if rec.status != RUNNING and rec.ended is not None:
            return rec  # already stopped
        if self.sock is None:
            rec.status, rec.reason = FAILED, rec.reason or "never started"
            ctx.writer.record(rec)
            return rec
        self.request_stop()
        if self._reader is not None:
            self._reader.join(STOP_WAIT)
        rc = self._reap()
        try:
            rec.ended = self.end_ns / 1e9
            if rec.started is None and self.attached.is_set():
                rec.started = self.t0_ns / 1e9
            with self.lock:
                self.finish(ctx, rec)
            self._note(rec, rc)
        except Exception as exc:  # noqa: BLE001 - kept what was written, said why
            rec.status = FAILED if not rec.files else PARTIAL
            rec.reason = f"{self.name}: {type(exc).__name__}: {exc}"
        finally:
            self._stack.close()
            self.cleanup()
            self._let_go(rec)
        ctx.writer.record(rec)
        return rec

    # -- for subclasses

    def open_outputs(self, ctx: CaptureContext) -> None:
        """Open streaming members (kept open until stop) with self.open_member."""

    def on_data(self, ctx: CaptureContext, msg: dict[str, Any]) -> None:
        """One message of finished slots from the helper."""

    def finish(self, ctx: CaptureContext, rec: CollectorRecord) -> None:
        """Write the remaining members and stats once the helper has ended."""

    def cleanup(self) -> None:
        """Give back what the collector holds (the shared symbolizer) once it has stopped."""

    def open_member(self, ctx: CaptureContext, name: str) -> Any:
        return self._stack.enter_context(ctx.writer.open_member(name))

    def slot_bounds(self, slot: int) -> tuple[float, float]:
        start = self.t0_ns + slot * self.slot_ns
        end = start + self.slot_ns
        if self.end_ns and end > self.end_ns:
            end = max(start, self.end_ns)
        return start / 1e9, end / 1e9

    # -- internals

    def _read(self) -> None:
        assert self.sock is not None and self.ctx is not None
        with self.sock.makefile("rb") as lines:
            for line in lines:
                self._message(line)
        self.eof.set()

    def _message(self, line: bytes) -> None:
        assert self.ctx is not None
        try:
            msg = json.loads(line)
        except ValueError:
            return
        kind = msg.get("kind")
        if kind == "attached":
            self.t0_ns, self.how = int(msg["t0"]), str(msg.get("how"))
            self.load_seconds = msg.get("load_seconds")
            if self.rec is not None:
                self.rec.started = int(msg.get("attached") or msg["t0"]) / 1e9
                self.rec.stats["loaded"] = str(msg.get("why") or self.how)
            self.attached.set()
        elif kind == "data":
            self.messages += 1
            self.last_data_ns = time.monotonic_ns()
            self.counters = dict(msg.get("counters") or self.counters)
            try:
                with self.lock:
                    self.on_data(self.ctx, msg)
            except Exception as exc:  # noqa: BLE001 - keep reading; stop() says it
                self.data_error = self.data_error or f"writing what the kernel aggregated failed: {type(exc).__name__}: {exc}"
        elif kind == "end":
            self.misses = msg.get("misses")
            self.ended = True
        elif kind == "error":
            self.error = str(msg.get("message"))

    def _reap(self) -> int | None:
        """The helper's exit status and CPU time, as the helper process reported them after
        reaping it (stats.helper_cpu_seconds); None when it did not say in time."""
        if self.zyg is None:
            return None
        child = self.zyg.wait_exit(self.name, STOP_WAIT)
        if child.cpu is not None:
            self._cpu(child.cpu)
        return child.status

    def _let_go(self, rec: CollectorRecord) -> None:
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()
        if self.zyg is not None:
            cpu = zygote.release(self.zyg)
            if cpu:  # the last collector to let go says what the helper process itself cost
                rec.stats["helper_parent_cpu_seconds"] = round(cpu, 3)
            self.zyg = None

    def _cpu(self, seconds: float) -> None:
        self.helper_cpu = round(seconds, 3)

    def _failure(self) -> str:
        if self.error:
            return self.error
        child = self.zyg.wait_exit(self.name, 2.0) if self.zyg is not None else None
        if child is None or child.status is None:
            return "the bcc helper ended without a word (its exit was not reported)"
        return f"the bcc helper (pid {child.pid}) {signal_text(child.status)}"

    def _note(self, rec: CollectorRecord, rc: int | None) -> None:
        rec.stats["backend_reason"] = self.backend_reason or rec.stats.get("backend_reason")
        if self.how:
            rec.stats["program"] = self.how
        if self.load_seconds is not None:
            rec.stats["load_seconds"] = self.load_seconds
        if self.helper_cpu is not None:
            rec.stats["helper_cpu_seconds"] = self.helper_cpu
        if not rec.stats.get("backend_reason"):
            rec.stats.pop("backend_reason", None)
        if not self.ended:
            # the helper died (or was killed) before its last message: what it sent is kept
            rec.stats["died"] = True
            if self.t0_ns and self.last_data_ns:  # what the slots it sent cover (the timeline's gaps)
                rec.stats["windows"] = [[round(self.t0_ns / 1e9, 6), round(self.last_data_ns / 1e9, 6)]]
            secs = (self.end_ns - self.t0_ns) / 1e9 if self.t0_ns else 0.0
            rec.status = PARTIAL if self.messages else FAILED
            rec.reason = (f"{self._failure()} during the capture" + (f" (attached {secs:.1f}s before the stop)"
                          if self.t0_ns else "") + f"; kept the {self.messages} intervals it had sent")
            return
        if self.misses is not None:
            events = int(rec.stats.get("events") or 0)
            rec.stats["missed_events"] = self.misses
            rec.stats["lost"] = int(rec.stats.get("lost") or 0) + self.misses
            if self.misses > MISSED_SHARE_PARTIAL * max(events, 1) and rec.status in (RUNNING, OK):
                rec.status = PARTIAL
                rec.reason = (f"the kernel skipped our program {self.misses} times ({self.misses / max(events, 1):.1%} "
                              f"of {events} events): another BPF program was running on that CPU")
        if rec.status == RUNNING:
            rec.status = OK
        problem = self.error or self.data_error
        if problem and rec.status == OK:
            rec.status, rec.reason = PARTIAL, problem
        if rc not in (0, None) and rec.status == OK:
            rec.status, rec.reason = PARTIAL, f"the bcc helper {signal_text(rc)} after its last message"
