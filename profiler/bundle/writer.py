"""Writing a capture bundle (bundle layer): the directory, members and manifest, all atomic.

Collectors write members through :meth:`BundleWriter.open_member` (a fresh temporary name
renamed into place on close, through profiler.files, so a reader never sees half a member under its final name, though a
capture cut mid-way keeps what it wrote); the session records each collector's state with
:meth:`BundleWriter.record`, which rewrites ``manifest.json`` atomically.

A full disk must not cost the manifest (without it the members are unreadable): the writer holds
back :data:`RESERVE_BYTES` in a hidden file from the start. While the capture runs a manifest
rewrite that fails is only noted (:attr:`BundleWriter.unsaved`; the last one written stays in
place and the in-memory manifest keeps everything); the final :meth:`BundleWriter.finish` gives the
reserve up when it must, so the last manifest is written even on a full disk.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, cast

from profiler.bundle.manifest import CollectorRecord, Manifest, check_member_name
from profiler.bundle.members import MANIFEST
from profiler.bundle.overwrite import BUNDLE, prepare_output_dir
from profiler.errors import OutputError
from profiler.files import open_output, write_output

RESERVE = ".space-reserve"  # hidden, never a member; removed by finish()
RESERVE_BYTES = 64 * 1024  # a manifest is 4-15 KB; its rewrite needs the old and the new side by side


def atomic_write_bytes(path: Path, data: bytes, root: Path | None = None) -> None:
    """Write ``data`` to ``path`` through a fresh temporary name and a rename (profiler.files:
    created exclusively, never through a symbolic link at any level below ``root``, the output
    directory (default: the file's own); only a regular file is ever written)."""
    write_output(path, data, force=True, fsync=True, special=False, root=root if root is not None else path.parent)


class _Tee:
    """A member's file that also hands each write to a listener (which must not raise)."""

    def __init__(self, fh: IO[bytes], hear: Callable[[bytes], None]) -> None:
        self._fh, self._hear = fh, hear

    def write(self, data: bytes) -> int:
        n = self._fh.write(data)
        try:
            self._hear(bytes(data))
        except Exception:  # noqa: BLE001 - a listener never costs the bundle a byte
            pass
        return n

    def __getattr__(self, name: str) -> object:
        return getattr(self._fh, name)


class BundleWriter:
    """Creates a bundle directory and keeps its manifest current as collectors finish."""

    def __init__(self, root: str | os.PathLike[str], manifest: Manifest, *, force: bool = False) -> None:
        self.root = Path(root)
        self.manifest = manifest
        self._lock = threading.RLock()  # collectors finish side by side (session._stop_all)
        # member -> hears every byte written to it, uncompressed, as it is written (the live view)
        self.tees: dict[str, Callable[[bytes], None]] = {}
        self.unsaved: str | None = None  # why the last manifest rewrite failed (a full disk), if it did
        self.ran_short: str | None = None  # the first such failure: the capture is partial
        prepare_output_dir(self.root, force, BUNDLE)  # --force: only an earlier capture's own files go
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a missing parent, a read-only file system, no permission: exit 9
            raise OutputError(f"cannot create {self.root}: {exc.strerror or exc}") from None
        if not manifest.created:
            manifest.created = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(manifest.clock.wall_start or time.time()))
        atomic_write_bytes(self.root / MANIFEST, self.manifest.to_json().encode(), self.root)  # cannot even start: raise
        self._hold_reserve()

    def path(self, name: str) -> Path:
        check_member_name(name)
        return self.root / name

    def save(self) -> bool:
        """Rewrite the manifest atomically (called whenever a collector changes state).

        Never raises: a rewrite that fails (the disk is full) leaves the previous manifest in
        place, sets :attr:`unsaved` and returns False; :meth:`finish` writes the last one."""
        with self._lock:
            try:
                atomic_write_bytes(self.root / MANIFEST, self.manifest.to_json().encode(), self.root)
            except OutputError as exc:
                self.unsaved = str(exc)
                self.ran_short = self.ran_short or self.unsaved
                return False
            self.unsaved = None
            return True

    def _hold_reserve(self) -> None:
        try:
            fd = os.open(self.root / RESERVE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError:
            return  # a leftover of a killed capture, or no room at all: the final save takes its chances
        try:
            os.write(fd, bytes(RESERVE_BYTES))  # written, not sparse: the blocks are really taken
        except OSError:
            self._give_up_reserve()
        finally:
            os.close(fd)

    def _sweep_helpers(self) -> None:
        """Remove the collectors' hidden working files (``.NAME.tmp``, ``.NAME.stderr``, perf.data
        being written) that a fault left behind: hidden files no collector record names."""
        named = {f for rec in self.manifest.collectors for f in rec.files}
        with contextlib.suppress(OSError):
            for child in self.root.iterdir():
                if child.name.startswith(".") and child.name not in named and child.name != RESERVE \
                        and child.is_file() and not child.is_symlink():
                    with contextlib.suppress(OSError):
                        child.unlink()

    def _give_up_reserve(self) -> bool:
        try:
            os.unlink(self.root / RESERVE)
        except OSError:
            return False
        return True

    def record(self, rec: CollectorRecord) -> None:
        """Add or replace a collector's record and persist the manifest."""
        with self._lock:
            for i, old in enumerate(self.manifest.collectors):
                if old.name == rec.name:
                    self.manifest.collectors[i] = rec
                    break
            else:
                self.manifest.collectors.append(rec)
            for name in rec.files:
                check_member_name(name)
            self.save()

    @contextlib.contextmanager
    def open_member(self, name: str, *, compress: bool | None = None) -> Iterator[IO[bytes]]:
        """Open a member for writing under a temporary name; renamed into place on close.

        On an exception the partial file is still renamed into place (a partial capture keeps
        what it has), and the exception propagates.
        """
        final = self.path(name)
        gz = name.endswith(".gz") if compress is None else compress
        with open_output(final, force=True, fsync=True, keep_partial=True, root=self.root) as raw:
            fh = cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6)) if gz else raw
            tee = self.tees.get(name)
            try:
                yield cast(IO[bytes], _Tee(fh, tee)) if tee is not None else fh
            finally:
                if fh is not raw:
                    fh.close()

    def finish(self, status: str, reason: str | None = None) -> None:
        """Write the final manifest, giving up the held-back space when the disk is full;
        raises OutputError only when even that does not make room."""
        with self._lock:
            self.manifest.status = status
            self.manifest.reason = reason
            self.manifest.ended = time.monotonic()
            self._sweep_helpers()  # first: what they held is room for the manifest
            if not self.save() and self._give_up_reserve():
                self.save()
            self._give_up_reserve()
            if self.unsaved is not None:
                raise OutputError(self.unsaved)
