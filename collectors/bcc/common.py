"""The bcc backend's shared parts (collectors layer): can this host run it, loading programs, symbols, the base collector.

The bcc collectors (bcc_blockio, bcc_syscalls, bcc_offcpu, bcc_futex) compile a C program
from collectors/bcc/bpf/ with bcc, attach it to tracepoints only (no kprobes: many production
kernels, this host's included, have none), let the kernel aggregate, and read the maps.
Everything they write follows docs/bundle.md so the analyzers do not care which backend ran.

``bcc_status()`` is the one answer to "can the bcc backend run here": `profiler doctor` shows
it and ``--backend auto`` follows it. It needs root, Debian's python3-bpfcc importable (the
tool's venv is made with --system-site-packages from /usr/bin/python3), kernel headers under
/lib/modules/$(uname -r)/build (scripts/bcc-headers.sh links Debian's linux-headers there
when the running kernel has none), and a trivial tracepoint program that compiles, loads
and attaches.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
import importlib.resources
import os
import platform
import re
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

from profiler.collectors import host
from profiler.collectors.base import CaptureContext, CollectorBase, Probe

from profiler.bundle import FAILED, OK, PARTIAL, RUNNING, CollectorRecord
from profiler.errors import CapabilityError

HEADERS_SCRIPT = "scripts/bcc-headers.sh"
TRIVIAL_PROGRAM = """
BPF_ARRAY(hits, u64, 1);
int pf_probe(struct tracepoint__raw_syscalls__sys_enter *args)
{
    u32 zero = 0;
    u64 *v = hits.lookup(&zero);
    if (v)
        __sync_fetch_and_add(v, 1);
    return 1;  /* 0 would hide the event from perf users of the tracepoint */
}
"""

# Up to this many targets are tested with a compare chain compiled into the program instead
# of a hash lookup on every event (see is_target() in collectors/bcc/bpf/*.c).
MAX_INLINE_TARGETS = 16

# A collector whose programs the kernel skipped for more than this share of its events is partial.
MISSED_SHARE_PARTIAL = 0.01

# libbcc is not for two threads at once: compiling (clang inside it), and freeing a program's
# module (LLVM objects, tables) while the session stops collectors side by side (a pytest run
# crashed once in the free).
_LIBBCC_LOCK = threading.Lock()


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


@contextlib.contextmanager
def captured_stderr() -> Iterator[list[str]]:
    """Send fd 2 to a temp file for the block (clang prints its diagnostics there); yield its text."""
    out: list[str] = []
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        saved = os.dup(2)
        try:
            os.dup2(tmp.fileno(), 2)
            yield out
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            out.append(tmp.read().decode("utf-8", "replace"))


def _first_error(text: str) -> str:
    for line in text.splitlines():
        if "error" in line.lower():
            return line.strip()[:200]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:200] if lines else ""


def _check() -> tuple[bool, str, str | None]:
    release = platform.release()
    if os.geteuid() != 0:
        return False, "bcc needs root (CAP_BPF and CAP_PERFMON) to load programs", "run profiler as root (sudo)"
    try:
        import bcc  # noqa: F401
    except ImportError:
        return (False, "python bcc module not importable from this Python",
                "apt-get install python3-bpfcc (Debian/Ubuntu), and make the tool's venv with "
                "/usr/bin/python3 -m venv --system-site-packages")
    except Exception as exc:  # libbcc missing or broken: the module raises at import
        return False, f"python bcc module fails to load: {exc}", "apt-get install --reinstall libbpfcc python3-bpfcc"
    if host.ensure_tracefs()[0] is None:  # as root, mounted first when it is not (as perf and attach do)
        return False, "tracefs is not mounted: bcc cannot find tracepoints", host.MOUNT_TRACEFS
    if not headers_present(release):
        return (False, f"no kernel headers at {headers_dir(release)} (running kernel {release})",
                _headers_fix(release))
    from bcc import BPF

    err = ""
    try:
        with _LIBBCC_LOCK, captured_stderr() as text:
            b = BPF(text=TRIVIAL_PROGRAM.encode())
            try:
                b.attach_tracepoint(tp=b"raw_syscalls:sys_enter", fn_name=b"pf_probe")
                b.detach_tracepoint(tp=b"raw_syscalls:sys_enter")
            finally:
                b.cleanup()
    except Exception as exc:
        err = _first_error("".join(text)) or str(exc)
        return (False, f"a trivial tracepoint program does not compile or load: {err}",
                f"check the headers at {headers_dir(release)} ({HEADERS_SCRIPT} status) and that bpf() is allowed")
    return True, f"bcc {bcc_version()} compiles and attaches tracepoint programs (headers: {os.path.realpath(headers_dir(release))})", None


@functools.lru_cache(maxsize=1)
def _cached_status() -> tuple[bool, str, str | None]:
    return _check()


def bcc_status(refresh: bool = False) -> tuple[bool, str, str | None]:
    """(ok, reason, fix): whether the bcc backend can run on this host, and how to fix it if not.

    The result is cached for the process (the check compiles a small program, ~0.3 s).
    """
    if refresh:
        _cached_status.cache_clear()
    return _cached_status()


def bcc_version() -> str:
    try:
        from bcc import version

        return str(version.__version__)
    except Exception:
        return "?"


# --------------------------------------------------------------------------- programs


def program_source(name: str) -> str:
    """The text of collectors/bcc/bpf/NAME (shipped as package data), with ``#include "common.h"``
    replaced by the shared helpers' text (bcc compiles one string, so the include is done here)."""
    bpf = importlib.resources.files("profiler.collectors.bcc") / "bpf"
    text = (bpf / name).read_text(encoding="utf-8")
    return text.replace('#include "common.h"\n', (bpf / "common.h").read_text(encoding="utf-8"))


def compile_program(name: str, defines: dict[str, int | str]) -> Any:
    """Compile collectors/bcc/bpf/NAME with -D defines; a failure raises CapabilityError with clang's first error."""
    from bcc import BPF

    cflags = [f"-D{k}={v}" for k, v in sorted(defines.items())]
    text: list[str] = []
    try:
        with _LIBBCC_LOCK, captured_stderr() as text:
            return BPF(text=program_source(name).encode(), cflags=cflags)
    except Exception as exc:
        err = _first_error("".join(text)) or str(exc)
        raise CapabilityError(f"bcc could not compile {name}: {err}") from None


def set_targets(bpf: Any, pids: list[int]) -> None:
    table = bpf[b"targets"]
    for pid in pids:
        table[table.Key(pid)] = table.Leaf(1)


def read_counters(bpf: Any, names: list[str]) -> dict[str, int]:
    """The program's `counters` (a per-CPU array), summed over CPUs, by name."""
    table = bpf[b"counters"]
    out = {}
    for i, name in enumerate(names):
        if name:
            key = table.Key(i)
            out[name] = int(table.sum(key).value) if hasattr(table, "sum") else int(table[key].value)
    return out


# --------------------------------------------------------------------------- missed events

_BPF_SYSCALL = {"x86_64": 321, "aarch64": 280}
_BPF_OBJ_GET_INFO_BY_FD = 15
_RECURSION_MISSES_OFFSET = 208  # struct bpf_prog_info.recursion_misses (Linux 5.12+)


class _InfoAttr(ctypes.Structure):
    _fields_ = [("bpf_fd", ctypes.c_uint32), ("info_len", ctypes.c_uint32), ("info", ctypes.c_uint64)]


def recursion_misses(prog_fd: int) -> int | None:
    """How many times the kernel skipped this program because another BPF program was running
    on that CPU (tracepoint programs do not nest: a block completion interrupt arriving while a
    syscall program runs is not seen). None where the kernel does not say."""
    nr = _BPF_SYSCALL.get(platform.machine())
    if nr is None:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(256)
    attr = _InfoAttr(prog_fd, len(buf), ctypes.addressof(buf))
    if libc.syscall(nr, _BPF_OBJ_GET_INFO_BY_FD, ctypes.byref(attr), ctypes.sizeof(attr)) != 0:
        return None
    if attr.info_len < _RECURSION_MISSES_OFFSET + 8:
        return None
    return int.from_bytes(buf.raw[_RECURSION_MISSES_OFFSET:_RECURSION_MISSES_OFFSET + 8], "little")


def program_misses(bpf: Any, fn_names: list[str]) -> int | None:
    total = 0
    for fn in fn_names:
        func = bpf.funcs.get(fn.encode())
        n = recursion_misses(func.fd) if func is not None else None
        if n is None:
            return None
        total += n
    return total


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


# --------------------------------------------------------------------------- stacks

KERNEL_SUFFIX = "_[k]"


class Symbolizer:
    """Turns stack ids from a BPF stack map into frame names, caching per (pid, address)."""

    def __init__(self) -> None:
        self._user: dict[tuple[int, int], str] = {}
        self._kernel: dict[int, str] = {}

    def user(self, pid: int, addr: int) -> str:
        key = (pid, addr)
        name = self._user.get(key)
        if name is None:
            from bcc import BPF

            try:
                sym, _off, module = BPF._sym_cache(pid).resolve(addr, True)
            except Exception:
                sym, module = None, None
            if sym:
                name = _clean(sym.decode("utf-8", "replace"))
            elif module:
                name = f"[{os.path.basename(module.decode('utf-8', 'replace'))}]"
            else:
                name = "[unknown]"
            self._user[key] = name
        return name

    def kernel(self, addr: int) -> str:
        name = self._kernel.get(addr)
        if name is None:
            from bcc import BPF

            sym = BPF.ksym(addr)
            text = sym.decode("utf-8", "replace") if sym else "[unknown]"
            name = _clean(text) + KERNEL_SUFFIX
            self._kernel[addr] = name
        return name


def _clean(frame: str) -> str:
    """Folded stacks use ';' between frames and a space before the value: keep frames safe."""
    return frame.replace(";", ":").replace("\n", " ").strip() or "[unknown]"


def stack_addresses(table: Any, stack_id: int) -> list[int]:
    """Addresses of one stack, innermost first ([] for a negative id or a missing entry)."""
    if stack_id < 0:
        return []
    try:
        return [a for a in table.walk(stack_id) if a]
    except KeyError:
        return []


def comm_text(raw: bytes) -> str:
    return _clean(raw.split(b"\0", 1)[0].decode("utf-8", "replace"))


# --------------------------------------------------------------------------- base collector


class BccCollector(CollectorBase):
    """Compile, attach, let the kernel aggregate, drain or read the maps, detach.

    Subclasses set ``name``, ``source``, ``tracepoints`` and implement ``defines``,
    ``open_outputs``, ``drain`` (called every ``--interval`` from a background thread when
    ``drains`` is set, and once more after detaching with ``final=True``) and ``finish`` (write
    the remaining files, fill ``rec.stats``).

    Probes are detached in ``stop`` and, if the tool dies before that, by the kernel when the
    process's file descriptors close: a killed profiler leaves nothing attached.
    """

    name = "bcc"
    backend = "bcc"
    source = ""
    tracepoints: tuple[tuple[str, str], ...] = ()
    needs_targets = True
    has_cfg = False  # the program has a `cfg` array whose slot 0 takes the capture start (ns)
    drains = False  # a background thread moves finished time slots to the bundle every interval

    def __init__(self) -> None:
        self.bpf: Any = None
        self.rec: CollectorRecord | None = None
        self.t0_ns = 0
        self.end_ns = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stack = contextlib.ExitStack()
        self._lock = threading.Lock()  # drain() runs from the poll thread and from stop()
        self._drain_error: str | None = None
        self.pids: list[int] = []
        self.backend_reason: str | None = None  # set by bcc_backend.with_backend for the manifest

    # -- protocol

    def probe(self, ctx: CaptureContext) -> Probe:
        ok, reason, fix = bcc_status()
        if not ok:
            return Probe(False, reason, fix)
        for tp, _fn in self.tracepoints:
            tp_ok, why, fix = host.tracepoint_status(tp)
            if not tp_ok:
                return Probe(False, why, fix)
        if self.needs_targets and not ctx.pids:
            return Probe(False, "no target processes")
        return Probe(True)

    def argv(self, ctx: CaptureContext) -> list[str]:
        return []

    def defines(self, ctx: CaptureContext) -> dict[str, int | str]:
        return {}

    def interval_ns(self, ctx: CaptureContext) -> int:
        return max(int(ctx.options.interval * 1e9), 10_000_000)

    def start(self, ctx: CaptureContext) -> None:
        self.rec = CollectorRecord(name=self.name, backend=self.backend, argv=[], status=RUNNING)
        self.pids = list(ctx.pids)
        defines = self.defines(ctx)
        if self.needs_targets and 0 < len(self.pids) <= MAX_INLINE_TARGETS:
            defines["TARGET_TEST(t)"] = "(" + "||".join(f"(t)=={int(p)}" for p in self.pids) + ")"
        self.bpf = compile_program(self.source, defines)
        try:
            if self.needs_targets:
                set_targets(self.bpf, self.pids)
            self.t0_ns = time.monotonic_ns()
            if self.has_cfg:
                cfg = self.bpf[b"cfg"]
                cfg[cfg.Key(0)] = cfg.Leaf(self.t0_ns)
            for tp, fn in self.tracepoints:
                self.bpf.attach_tracepoint(tp=tp.encode(), fn_name=fn.encode())
            self.open_outputs(ctx)
        except Exception as exc:
            self._cleanup()
            if isinstance(exc, CapabilityError):
                raise
            raise CapabilityError(f"{self.name}: could not attach the bcc program: {exc}") from None
        # slots count from t0 (set before attaching); the window is full from here on
        self.rec.started = time.monotonic_ns() / 1e9
        ctx.writer.record(self.rec)
        if self.drains:
            self._thread = threading.Thread(target=self._poll, args=(ctx,), name=f"bcc-{self.name}", daemon=True)
            self._thread.start()

    def stop(self, ctx: CaptureContext) -> CollectorRecord:
        rec = self.rec or CollectorRecord(name=self.name, backend=self.backend)
        if rec.status != RUNNING and rec.ended is not None:
            return rec  # already stopped
        if self.bpf is None:
            rec.status = FAILED
            rec.reason = rec.reason or "never started"
            ctx.writer.record(rec)
            return rec
        self.request_stop()
        if self._thread is not None:
            self._thread.join(timeout=30)
        try:
            rec.ended = self.end_ns / 1e9
            with self._lock:
                self.drain(ctx, final=True)
            self.finish(ctx, rec)
            self._note_misses(rec)
            if self.backend_reason:
                rec.stats["backend_reason"] = self.backend_reason
            if rec.status == RUNNING:
                rec.status = OK
            if self._drain_error and rec.status == OK:
                rec.status, rec.reason = PARTIAL, self._drain_error
        except Exception as exc:
            rec.status = FAILED if not rec.files else PARTIAL
            rec.reason = f"{self.name}: {exc}"
        finally:
            self._cleanup()
        ctx.writer.record(rec)
        return rec

    def request_stop(self) -> None:
        """Detach now (the session calls this on every collector first, so all windows end together)."""
        self._stop.set()
        if self.bpf is None or self.end_ns:
            return
        # the window ends before detaching: detaching waits for the kernel (an RCU grace period
        # per tracepoint, 100 ms and more on a loaded host) and events keep arriving until done
        self.end_ns = time.monotonic_ns()
        for tp, _fn in self.tracepoints:
            with contextlib.suppress(Exception):
                self.bpf.detach_tracepoint(tp=tp.encode())

    # -- for subclasses

    def open_outputs(self, ctx: CaptureContext) -> None:
        """Open streaming members (kept open until stop) with self.open_member."""

    def drain(self, ctx: CaptureContext, final: bool) -> None:
        """Move finished time slots from the kernel maps to the bundle."""

    def finish(self, ctx: CaptureContext, rec: CollectorRecord) -> None:
        """Write the members and stats once the programs are detached."""

    def open_member(self, ctx: CaptureContext, name: str) -> Any:
        return self._stack.enter_context(ctx.writer.open_member(name))

    def slot_of(self, ctx: CaptureContext, now_ns: int) -> int:
        return max(0, (now_ns - self.t0_ns) // self.interval_ns(ctx))

    def slot_bounds(self, ctx: CaptureContext, slot: int) -> tuple[float, float]:
        step = self.interval_ns(ctx)
        start = self.t0_ns + slot * step
        end = start + step
        if self.end_ns and end > self.end_ns:
            end = self.end_ns
        return start / 1e9, end / 1e9

    # -- internals

    def _note_misses(self, rec: CollectorRecord) -> None:
        """Events the kernel did not run our programs for (another BPF program on the CPU)."""
        missed = program_misses(self.bpf, [fn for _tp, fn in self.tracepoints])
        if missed is None:
            return
        rec.stats["missed_events"] = missed
        rec.stats["lost"] = int(rec.stats.get("lost") or 0) + missed
        events = rec.stats.get("events") or 0
        if missed and missed > MISSED_SHARE_PARTIAL * max(events, 1) and rec.status in (RUNNING, OK):
            rec.status = PARTIAL
            rec.reason = (f"the kernel skipped our program {missed} times ({missed / max(events, 1):.1%} of "
                          f"{events} events): another BPF program was running on that CPU")

    def _poll(self, ctx: CaptureContext) -> None:
        period = ctx.options.interval
        while not self._stop.wait(period):
            try:
                with self._lock:
                    self.drain(ctx, final=False)
            except Exception as exc:  # keep capturing; stop() reports it
                self._drain_error = f"reading the kernel maps failed: {exc}"

    def _cleanup(self) -> None:
        try:
            self._stack.close()
        finally:
            if self.bpf is not None:
                with _LIBBCC_LOCK, contextlib.suppress(Exception):
                    self.bpf.cleanup()
            self.bpf = None
