"""Members read while the capture is still finishing (bundle layer).

When a capture ends, the collectors stop side by side and the slowest (symbolizing stacks,
decoding a large perf.data) can take a second or more. A member whose collector has already
stopped is final then: its reading can start at once, on the other CPU, instead of after the
last collector. :class:`EarlyReads` runs such a read in a thread and hands its result to the
analysis, which takes it instead of reading the member again, but only if the file is still
the one that was read (same inode, size and modification time); otherwise, or if the early
read failed, the analysis reads the member as it always does.

Earlier still, a *tap* hears a member while its collector writes it: the block-io writer
hands each block it writes to ``taps[member]`` (the views install a pairing there), so at the
end of the capture the IOs are already paired and nothing is read back; such a result is
computed from what the tap heard (:meth:`EarlyReads.start_computed`) and is taken, like any
early read, only if the member is still the file it was when its collector stopped.

attach and run start early reads (profiler/cli/_capture.py); post-mortem analysis never has
any. What is read early, and how, is the views' business (analyzers/views); this module only
opens the member the way :class:`~profiler.bundle.reader.Bundle` does (contained in the bundle,
read tolerantly) and keeps the result with the member's ReadLog.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from profiler.bundle.manifest import check_member_name
from profiler.tolerant import ReadLog, open_tolerant


def _identity(path: Path) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


@dataclass
class _Read:
    thread: threading.Thread = field(default_factory=threading.Thread)
    identity: tuple[int, int, int, int] | None = None
    value: Any = None
    log: ReadLog | None = None
    error: Exception | None = None
    cpu_seconds: float = 0.0


@dataclass
class EarlyReads:
    """Reads of finished members, started while the rest of the capture finishes."""

    root: Path
    taps: dict[str, Callable[[Any], None]] = field(default_factory=dict)  # member -> hears what its writer writes
    _reads: dict[tuple[str, str], _Read] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def tap_for(self, member: str) -> Callable[[Any], None] | None:
        """What the collector writing ``member`` should hand each piece it writes to (the views
        install these before the capture: the block events' pairing), or None."""
        return self.taps.get(member)

    def start(self, member: str, kind: str, work: Callable[[IO[bytes]], Any], *, text: bool = False) -> bool:
        """Read ``member`` with ``work(stream)`` in a thread; ``kind`` names what the result is
        (the same member can be read for different views). False when the member is not a
        regular file of the bundle (nothing is started then)."""

        def read(r: _Read, path: Path) -> None:
            r.identity = _identity(path)
            log = ReadLog(member)
            with open_tolerant(open(path, "rb"), log, text=text) as fh:  # noqa: SIM115 - closed by the with
                r.value = work(fh)
            if _identity(path) == r.identity:  # else written to while it was read: not the final member
                r.log = log

        return self._launch(member, kind, read)

    def start_computed(self, member: str, kind: str, work: Callable[[], Any]) -> bool:
        """Like :meth:`start`, for a result made from what a tap heard while the member was
        written, not from reading it: the member must be final now (its collector stopped); its
        identity is taken now and checked when the result is taken."""
        identity = _identity(self.root / member)

        def compute(r: _Read, path: Path) -> None:
            r.identity = identity
            r.value = work()
            log = ReadLog(member)  # the tap heard the whole member as it was written: as if read whole
            log.bytes_in = log.bytes_out = identity[2] if identity is not None else 0
            r.log = log

        return self._launch(member, kind, compute)

    def _launch(self, member: str, kind: str, body: Callable[[_Read, Path], None]) -> bool:
        check_member_name(member)
        path = self.root / member
        if os.path.islink(path) or not os.path.isfile(path):
            return False
        with self._lock:
            if (member, kind) in self._reads:
                return True
            r = _Read()
            r.thread = threading.Thread(target=self._run, args=(r, path, body), name=f"profiler-early-{member}",
                                        daemon=True)
            self._reads[(member, kind)] = r
        r.thread.start()
        return True

    @staticmethod
    def _run(r: _Read, path: Path, body: Callable[[_Read, Path], None]) -> None:
        t0 = time.thread_time()
        try:
            body(r, path)
        except Exception as exc:  # noqa: BLE001 - the analysis reads the member itself and meets it there
            r.value, r.log, r.error = None, None, exc
        finally:
            if r.log is None:
                r.value = None
            r.cpu_seconds = time.thread_time() - t0

    def take(self, member: str, kind: str) -> tuple[Any, ReadLog] | None:
        """The result of an early read of ``member`` (waiting for it if it is still running) and
        what reading it tolerated, if it succeeded and the member is still the file it read;
        else None. A result is handed out once."""
        with self._lock:
            r = self._reads.pop((member, kind), None)
        if r is None:
            return None
        r.thread.join()
        if r.log is None or r.identity is None or _identity(self.root / member) != r.identity:
            return None
        return r.value, r.log

    def wait(self) -> None:
        """Wait for every read still running (the results stay to be taken)."""
        with self._lock:
            threads = [r.thread for r in self._reads.values()]
        for t in threads:
            t.join()

