"""Naming the bcc collectors' stack addresses (collectors layer): kernel from kallsyms, user from the binaries' tables.

Kernel addresses are named here from /proc/kallsyms (text symbols, sorted, bisected). User
addresses are named from each process's mappings and the symbol tables of its binaries, read
the way the perf path reads them (``profiler/formats/symfiles.py``: debug files, ``.symtab``,
``.dynsym``, the PLT, inside the target's mount namespace), once per file per run: the same
names as a perf capture's, and a 240 MB TiDB binary read in 0.7 CPU s where bcc's symbolizer
took 3.7. What lies outside any readable binary (a JIT's anonymous code, named by its perf map;
a file gone) goes to bcc's symbolizer, which is C++ inside libbcc: a fault there would take the
process with it, so it runs in a process of its own, ``python -m profiler.collectors.bcc.symbols``
(started on first need, one per capture, shared by the collectors; JSON lines on stdin and
stdout: ``{"pid": P, "addrs": [...]}`` in, ``{"names": [...]}`` out). If that process dies it is
started again once. If it dies again, or bcc's Python module cannot be imported by this
interpreter (a pyenv or other Python that does not see Debian's ``python3-bpfcc``; the prebuilt
BPF objects load without it), those frames keep their mapping's name and ``fallback`` says why.
A frame whose binary has no table, or no symbol at its address, is named by its binary
(``[libc.so.6]``).
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
from typing import Any

from profiler.collectors import host
from profiler.collectors import process as _proc

KERNEL_SUFFIX = "_[k]"
ASK_TIMEOUT = 60.0  # seconds for one batch of addresses (a large binary's tables are read once)


def clean(frame: str) -> str:
    """Folded stacks use ';' between frames and a space before the value: keep frames safe."""
    return frame.replace(";", ":").replace("\n", " ").strip() or "[unknown]"


_KALLSYMS_TEXT = re.compile(r"^([0-9a-fA-F]+) [tTwW] (\S+)", re.M)  # text and weak symbols


class Kallsyms:
    def __init__(self) -> None:
        self.addrs: list[int] = []
        self.names: list[str] = []
        self._loaded = False

    def _load(self) -> None:
        # /proc/kallsyms has 100-200K lines: one regular expression over the whole text (a
        # parse per line with its own error handling took 0.3-0.4 s of CPU mid-capture)
        self._loaded = True
        text = host.read_text("/proc/kallsyms") or ""
        pairs = sorted((int(a, 16), n) for a, n in _KALLSYMS_TEXT.findall(text))
        self.addrs = [a for a, _ in pairs]
        self.names = [n for _, n in pairs]

    def name(self, addr: int) -> str:
        if not self._loaded:
            self._load()
        i = bisect.bisect_right(self.addrs, addr) - 1
        if i < 0 or not self.addrs or self.addrs[i] == 0:
            return "[unknown]"
        return self.names[i]


def bcc_importable() -> bool:
    """Whether ``from bcc import BPF`` can work in a child of this interpreter (found, not imported:
    importing libbcc here costs what the separate process is for)."""
    import importlib.util

    try:
        return importlib.util.find_spec("bcc") is not None
    except (ImportError, ValueError):
        return False


def _maps(pid: int) -> list[tuple[int, int, int, str]]:
    """(start, end, file offset, name) of each named mapping in /proc/PID/maps (a file's path, or
    a pseudo-mapping's name such as ``[stack]``); read once per batch of addresses."""
    out: list[tuple[int, int, int, str]] = []
    for line in (host.read_text(f"/proc/{pid}/maps") or "").splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6:
            continue
        lo, _, hi = parts[0].partition("-")
        with contextlib.suppress(ValueError):
            out.append((int(lo, 16), int(hi, 16), int(parts[2], 16), parts[5].strip()))
    return out


def _binary(name: str) -> str:
    return f"[{os.path.basename(name)}]"


def elf_names(pid: int, addrs: list[int]) -> list[str]:
    """User addresses named from their binaries' symbol tables (the perf path's reader, inside the
    process's mount namespace); ``[binary]`` where a binary has no table or no symbol there."""
    return elf_lookup(pid, addrs)[0]


def elf_lookup(pid: int, addrs: list[int]) -> tuple[list[str], list[bool]]:
    """:func:`elf_names`, and for each address whether that is final: its binary's symbol table
    was read (named or not, bcc reads the same tables). The others lie outside any readable
    binary: a JIT's anonymous code (its perf map is bcc's), a file gone or unreadable."""
    import numpy as np

    from profiler.formats import symfiles
    from profiler.formats.elf import ElfError

    names = ["[unknown]"] * len(addrs)
    settled = [False] * len(addrs)
    by_file: dict[str, list[tuple[int, int]]] = {}
    maps = _maps(pid)
    for k, a in enumerate(addrs):
        for lo, hi, pgoff, name in maps:
            if lo <= a < hi:
                names[k] = _binary(name)
                if name.startswith("/"):
                    by_file.setdefault(name.removesuffix(" (deleted)"), []).append((k, a - lo + pgoff))
                break
    root = f"/proc/{pid}/root"
    for path, items in by_file.items():
        try:
            found = symfiles.find(path, None, root)
            table = symfiles.table(found) if found is not None else None
        except (ElfError, OSError, ValueError):
            table = None
        if table is None:
            continue
        idx = table.lookup(np.array([off for _, off in items], np.uint64))
        for (k, _off), i in zip(items, idx.tolist(), strict=True):
            settled[k] = True
            if i >= 0:
                names[k] = table.name(int(i))
    return names, settled


class Symbols:
    """Names for (pid, address) pairs, cached; thread-safe (the collectors' readers share one)."""

    def __init__(self) -> None:
        self.kallsyms = Kallsyms()
        self._kernel: dict[int, str] = {}
        self._user: dict[tuple[int, int], str] = {}
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.fallback: str | None = None  # why user frames are named by binary only
        self.cpu_seconds = 0.0

    def kernel(self, addr: int) -> str:
        name = self._kernel.get(addr)
        if name is None:
            name = self._kernel[addr] = clean(self.kallsyms.name(addr)) + KERNEL_SUFFIX
        return name

    def user(self, pid: int, addrs: list[int]) -> list[str]:
        """Names from the binaries' own symbol tables, read here once per file (a 240 MB TiDB
        binary in 0.7 CPU s, where bcc's symbolizer took 3.7, with the perf path's names); bcc's
        symbolizer only for what lies outside them (a JIT's perf map)."""
        with self._lock:
            todo = sorted({a for a in addrs if (pid, a) not in self._user})
            if todo:
                names, settled = elf_lookup(pid, todo)
                rest = [i for i, done in enumerate(settled) if not done]
                if rest:
                    for i, n in zip(rest, self._ask(pid, [todo[i] for i in rest]), strict=True):
                        names[i] = n
                for a, n in zip(todo, names, strict=True):
                    self._user[(pid, a)] = clean(n)
            return [self._user[(pid, a)] for a in addrs]

    def _ask(self, pid: int, addrs: list[int]) -> list[str]:
        while self.fallback is None:
            proc = self._proc
            if proc is None or proc.poll() is not None:
                if proc is not None:
                    self._reap(proc)
                if self.starts >= 2:
                    self.fallback = f"the symbolizer process died twice ({self._why(proc)}): user frames named by binary"
                    break
                proc = self._start()
                if proc is None:
                    break
            try:
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write((json.dumps({"pid": pid, "addrs": addrs}) + "\n").encode())
                proc.stdin.flush()
                ready = _readline(proc, ASK_TIMEOUT)
                names = json.loads(ready)["names"] if ready else None
                if isinstance(names, list) and len(names) == len(addrs):
                    return [str(n) for n in names]
            except (OSError, ValueError, KeyError):
                pass
            with contextlib.suppress(OSError):
                proc.kill()
        return elf_names(pid, addrs)

    def _start(self) -> subprocess.Popen[bytes] | None:
        if not self.starts and not bcc_importable():
            self.fallback = ("bcc's Python module is not importable by this interpreter "
                             f"({sys.executable}): frames outside the binaries (JIT code) named by their mapping")
            return None
        self.starts += 1
        try:
            self._proc = _proc.spawn([sys.executable, "-m", "profiler.collectors.bcc.symbols"],
                                     stdin_pipe=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        except OSError as exc:
            self.fallback = f"the symbolizer could not start ({exc.strerror or exc}): user frames named by binary"
            return None
        return self._proc

    @staticmethod
    def _why(proc: subprocess.Popen[bytes] | None) -> str:
        rc = proc.returncode if proc is not None else None
        if rc is not None and rc < 0:
            with contextlib.suppress(ValueError):
                return f"killed by {signal.Signals(-rc).name}"
        return f"exit code {rc}"

    def _reap(self, proc: subprocess.Popen[bytes]) -> None:
        _rc, cpu = reap_within(proc, 5.0)
        self.cpu_seconds += cpu or 0.0

    def close(self) -> None:
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(OSError):
                if proc.stdin is not None:
                    proc.stdin.close()
            self._reap(proc)


def reap_within(proc: subprocess.Popen[bytes], timeout: float) -> tuple[int | None, float | None]:
    """Wait for a child (SIGKILL after ``timeout``) and reap it: (exit code, CPU seconds it used,
    from the kernel's accounting of the reaped child; None if it was reaped elsewhere)."""
    import time

    cpu = None
    deadline = time.monotonic() + timeout
    while proc.returncode is None:
        try:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere (a poll after it died)
            proc.poll()
            break
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            cpu = ru.ru_utime + ru.ru_stime
            break
        if time.monotonic() > deadline:
            proc.kill()
            deadline = time.monotonic() + 5.0
        time.sleep(0.02)
    _proc.forget(proc)
    return proc.returncode, cpu


def _readline(proc: subprocess.Popen[bytes], timeout: float) -> bytes | None:
    import select

    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    buf = b""
    while not buf.endswith(b"\n"):
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            return None
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return None
        buf += chunk
    return buf


_SHARED: Symbols | None = None
_USERS = 0
_SHARED_LOCK = threading.Lock()


def acquire() -> Symbols:
    """The capture's symbolizer (one per process while any collector holds it)."""
    global _SHARED, _USERS
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = Symbols()
        _USERS += 1
        return _SHARED


def release(sym: Symbols) -> float | None:
    """Give the symbolizer back; the last user closes it and gets its process's CPU seconds."""
    global _SHARED, _USERS
    with _SHARED_LOCK:
        _USERS -= 1
        if _USERS > 0 or _SHARED is not sym:
            return None
        _SHARED = None
    sym.close()
    return round(sym.cpu_seconds, 3)


def serve() -> int:  # pragma: no cover - runs in the symbolizer process
    """The symbolizer process: bcc's symbol cache per pid, one answer line per request line."""
    try:
        from bcc import BPF
    except Exception:
        return 3
    for line in sys.stdin:
        req: dict[str, Any] = json.loads(line)
        pid = int(req["pid"])
        names = []
        cache = BPF._sym_cache(pid)
        for addr in req["addrs"]:
            try:
                sym, _off, module = cache.resolve(int(addr), True)
            except Exception:
                sym, module = None, None
            if sym:
                names.append(sym.decode("utf-8", "replace"))
            elif module:
                names.append(f"[{os.path.basename(module.decode('utf-8', 'replace'))}]")
            else:
                names.append("[unknown]")
        sys.stdout.write(json.dumps({"names": names}) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(serve())
