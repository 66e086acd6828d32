"""perf.data, read through `perf script` run as a child process (inputs layer).

Sniffed by its magic, ``PERFILE2``, in a plain (not gzip) regular file: perf script seeks in
it, so a pipe is refused. :func:`read_perf_script` runs ``perf script -i FILE`` and hands its
stdout to a consumer while perf is still printing (two processes, two cores):

- fields first: the caller names the fields it reads (``-F comm,pid,...``), which spares perf
  formatting the rest; when perf refuses them (an event type lacks one) without printing
  anything, it runs again with perf's default fields;
- a 1 MiB pipe (Linux ``F_SETPIPE_SZ``) instead of 64 KiB, so perf and the reader wake each
  other 16 times less often;
- errors: no perf is a CapabilityError (exit 5); perf failing is an InputError naming perf's
  last stderr line. stderr goes to a temporary file, so a chatty perf never blocks on it.

Identical stacks can be merged first (``merge``): perf script then symbolizes each distinct
stack once, with the merged samples' total as its period (profiler.formats.perfdata).

Block events are read from perf.data directly, without perf script: see ``perfdata_blocks.py``.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import struct
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

import numpy as np

from profiler.errors import CapabilityError, InputError
from profiler.formats import perfdata as pdata
from profiler.formats import perfdata_reduce as pr

# how to merge identical stacks; what merging counted (samples read, written)
from profiler.formats.perfdata_reduce import Merge, Merged
from profiler.inputs.source import Format

__all__ = ["FORMAT", "MAGIC", "Direct", "Merge", "Merged", "PerfScriptRefused", "perf_script_argv", "read_perf_script"]

MAGIC = b"PERFILE2"
PIPE_SIZE = 1 << 20
_BPF_RECORD_FAILED = re.compile(r"failed to process type: (17|18)\b")
_F_SETPIPE_SZ = 1031

T = TypeVar("T")


def sniff(head: bytes) -> bool:
    return head[:8] == MAGIC


FORMAT = Format("perf.data", "perf.data", sniff, binary=True, plain_only=True, needs_file=True)


class PerfScriptRefused(Exception):
    """perf script exited with an error before printing anything."""


def perf_script_argv(perf_data: str | Path, fields: str | None = None) -> list[str]:
    perf = shutil.which("perf")
    if perf is None:
        raise CapabilityError("perf is not installed: cannot read perf.data (install linux-perf, or pass perf script text)")
    argv = [perf, "script", "-i", str(perf_data)]
    if fields:
        argv += ["-F", fields]
    return argv


def read_perf_script(perf_data: str | Path, consume: Callable[[IO[bytes]], T], fields: str | None = None,
                     merge: Merge | None = None, merged: list[Merged] | None = None, name: str | None = None,
                     direct: Direct | None = None, samples: Callable[[Iterator[Item]], T] | None = None) -> T:
    """``consume(the text of perf script -i perf_data)``; with ``fields``, perf's default fields
    when it refuses those. Raises InputError when perf fails (naming ``name``, the input as the
    user gave it, when perf_data is a decompressed copy).

    With ``fields``, the text is made without perf where it can be (profiler.formats.perfscript_text:
    the same bytes perf script prints), perf script naming only the samples that cannot be
    named so; ``direct`` hears how it went. ``merge``: one sample per distinct stack, its
    period the total (perf script's cost, and ours, grows with the samples printed; a profile
    repeats its stacks thousands of times); ``merged`` then receives the counts. A file that
    cannot be merged is read as it is. ``samples``: given, it takes the direct path's samples
    already cut (:data:`Item`: a header line and its frame lines, or a block of perf's text)
    instead of their text, so a folder never re-reads what was just made."""
    if fields and os.environ.get("PROFILER_SYMBOLIZER") != "perf":
        made = _direct(perf_data, fields, merge, direct if direct is not None else Direct())
        if made is not None:
            from profiler.formats import perfscript_text as pt

            prepared, res, how = made
            if samples is not None:
                out = samples(pt.items(prepared, how, res))
            else:
                chunks = pt._render(prepared, how, res)
                out = consume(io.BufferedReader(_Chunks(next(chunks, b""), chunks), PIPE_SIZE))  # type: ignore[type-var]
            if merge is not None and merged is not None:
                merged.append(Merged(res.samples, res.written))
            return out
    try:
        return _read_perf_script(perf_data, consume, fields, merge, merged)
    except InputError as exc:
        if name is None:
            raise
        text, prefix = str(exc), f"perf script failed on {perf_data}: "
        raise InputError(f"perf script failed on {name}: {text.removeprefix(prefix)}") from None


def _read_perf_script(perf_data: str | Path, consume: Callable[[IO[bytes]], T], fields: str | None,
                      merge: Merge | None, merged: list[Merged] | None) -> T:
    if merge is not None:
        with tempfile.TemporaryDirectory(prefix="profiler-merge-") as tmp:
            copy = Path(tmp) / "merged.perf.data"
            try:
                m = pr.merge_samples(perf_data, copy, by_tid=merge.by_tid, count_samples=merge.count_samples)
            except (pdata.PerfDataUnsupported, OSError):
                pass
            except (ValueError, IndexError, KeyError, OverflowError, struct.error, MemoryError):
                pass  # a damaged file the direct reader trips on: perf script reads it as far as it can
            else:
                if merged is not None:
                    merged.append(m)
                return read_perf_script(copy, consume, fields, name=str(perf_data))
    if fields:
        try:
            return _run(perf_script_argv(perf_data, fields), perf_data, consume)
        except PerfScriptRefused:
            pass
    try:
        return _run(perf_script_argv(perf_data), perf_data, consume)
    except PerfScriptRefused as exc:
        raise InputError(str(exc)) from None


# A sample of the direct path: (its header line, a key naming its frame lines, the lines' indices,
# the table of distinct lines), or a block of perf script's own text (whole samples).
Item = tuple[str, int, Callable[[], list[int]], list[str]] | bytes


@dataclass
class Direct:
    """How the text was made: without perf (``samples`` printed so, ``by_perf`` left to perf
    script, with the reasons), or by perf script alone (``why``)."""

    used: bool = False
    samples: int = 0
    by_perf: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    why: str | None = None


class _Chunks(io.RawIOBase):
    """A readable stream over an iterator of byte chunks."""

    def __init__(self, first: bytes, rest: Iterator[bytes]) -> None:
        self._buf = first
        self._rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray) -> int:  # type: ignore[override]
        while not self._buf:
            nxt = next(self._rest, None)
            if nxt is None:
                return 0
            self._buf = nxt
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


def _keep_these(tid: np.ndarray, t: np.ndarray) -> pr.Keep:
    """A Keep taking exactly the samples of these (thread, time) pairs."""
    from profiler.formats.perfdata import U64
    from profiler.formats.perfdata_reduce import _mix

    def h(tid_: np.ndarray, t_: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            out: np.ndarray = _mix(t_.astype(U64) ^ (tid_.astype(np.int64).astype(U64) * U64(0x9E3779B97F4A7C15)))
            return out

    wanted = np.unique(h(tid, t))
    return lambda pid, tid_, t_: np.isin(h(tid_, t_), wanted)


def _direct(perf_data: str | Path, fields: str, merge: Merge | None, direct: Direct) -> tuple[Any, Any, Any] | None:
    """Everything the direct path prints, read and named (prepared, result, how to merge), or
    None when the file cannot be read so: perf script then makes the text. Only reading is
    guarded: an error of the consumer is the consumer's."""
    from profiler.formats import perfscript_text as pt

    tmp = tempfile.TemporaryDirectory(prefix="profiler-perf-")
    started: list[bool] = []

    def fallback(pid: np.ndarray, tid: np.ndarray, t: np.ndarray) -> Iterator[bytes]:
        """perf script's text for the samples the direct path cannot name, made in a thread
        while ours are folded (perf on the other core): the iterator waits for it."""
        box: list[Any] = []
        started.append(True)

        def work() -> None:
            try:
                box.append(run_perf(pid, tid, t))
            except BaseException as exc:  # noqa: BLE001 - handed to the reader of the text
                box.append(exc)
            finally:
                tmp.cleanup()

        th = threading.Thread(target=work, name="perf-script-fallback")
        th.start()

        def text() -> Iterator[bytes]:
            th.join()
            if isinstance(box[0], BaseException):
                raise box[0]
            yield from box[0]

        return text()

    def run_perf(pid: np.ndarray, tid: np.ndarray, t: np.ndarray) -> list[bytes]:
        # the few samples kept as they are (a quarter of merging's cost): folded by period, the
        # same stacks as their merged copy; counts need the merge
        copy = Path(tmp.name) / "rest.perf.data"
        keep = _keep_these(tid, t)
        for drop in ((), (pdata.RECORD_KSYMBOL, pdata.RECORD_BPF_EVENT)):
            if merge is not None and merge.count_samples:
                # each merged sample's period is its count: perf's text must be merged too
                pr.merge_samples(perf_data, copy, by_tid=merge.by_tid, count_samples=True, keep=keep,
                                 drop_types=drop)
            else:
                pr.filter_samples(perf_data, copy, keep, drop_types=drop)
            try:
                chunks = _run(perf_script_argv(copy, fields), copy, lambda out: list(iter(lambda: out.read(PIPE_SIZE), b"")))
            except (InputError, PerfScriptRefused) as exc:
                if not drop and _BPF_RECORD_FAILED.search(str(exc)):
                    continue  # perf 6.1 stops at a BPF program's symbol record: again without them
                raise
            break
        return chunks

    res = pt.Result()
    try:
        prepared = pt.prepare(str(perf_data), fields, fallback=fallback, result=res)
    except pdata.PerfDataUnsupported as exc:
        direct.why = str(exc)
        return None
    except (OSError, ValueError, IndexError, KeyError, OverflowError, struct.error, MemoryError) as exc:
        direct.why = f"{type(exc).__name__}: {exc}"  # a damaged file: perf script reads it as far as it can
        return None
    finally:
        if not started:
            tmp.cleanup()  # else the fallback's thread removes it when perf is done
    direct.used, direct.samples, direct.by_perf, direct.reasons = True, res.samples, res.by_perf, res.reasons
    return prepared, res, merge


def _widen_pipe(fd: int) -> None:
    try:
        import fcntl

        fcntl.fcntl(fd, _F_SETPIPE_SZ, PIPE_SIZE)
    except (OSError, ImportError):
        pass


class _Counted(io.RawIOBase):
    """A pipe that counts the bytes read from it (did perf print anything?)."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.count = 0

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.raw.fileno()

    def readinto(self, b: bytearray) -> int:  # type: ignore[override]
        n: int = self.raw.readinto(b)  # type: ignore[attr-defined]
        self.count += n or 0
        return n


def _run(argv: list[str], perf_data: str | Path, consume: Callable[[IO[bytes]], T]) -> T:
    with tempfile.TemporaryFile() as err_fh:
        try:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err_fh, stdin=subprocess.DEVNULL)
        except OSError as exc:
            raise CapabilityError(f"cannot run perf script: {exc}") from None
        assert proc.stdout is not None
        _widen_pipe(proc.stdout.fileno())
        counted = _Counted(proc.stdout)
        try:
            result = consume(io.BufferedReader(counted, PIPE_SIZE))  # type: ignore[type-var]
        finally:
            proc.stdout.close()  # a consumer that stopped early: perf ends on SIGPIPE
            rc = proc.wait()
        if rc != 0:
            err_fh.seek(0)
            last = [ln for ln in err_fh.read().decode("utf-8", "replace").splitlines() if ln.strip()]
            msg = f"perf script failed on {perf_data}: {last[-1] if last else f'exit code {rc}'}"
            if counted.count == 0:
                raise PerfScriptRefused(msg)
            raise InputError(msg)
    return result
