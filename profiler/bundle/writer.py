"""Writing a capture bundle (bundle layer): the directory, members and manifest, all atomic.

Collectors write members through :meth:`BundleWriter.open_member` (a fresh temporary name
renamed into place on close, through profiler.files, so a reader never sees half a member under its final name, though a
capture cut mid-way keeps what it wrote); the session records each collector's state with
:meth:`BundleWriter.record`, which rewrites ``manifest.json`` atomically.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, cast

from profiler.bundle.manifest import CollectorRecord, Manifest, check_member_name
from profiler.bundle.members import MANIFEST
from profiler.errors import OutputExists
from profiler.files import open_output, write_output


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a fresh temporary name and a rename (profiler.files:
    created exclusively, never through a symbolic link; only a regular file is ever written)."""
    write_output(path, data, force=True, fsync=True, special=False)


class BundleWriter:
    """Creates a bundle directory and keeps its manifest current as collectors finish."""

    def __init__(self, root: str | os.PathLike[str], manifest: Manifest, *, force: bool = False) -> None:
        self.root = Path(root)
        self.manifest = manifest
        self._lock = threading.RLock()  # collectors finish side by side (session._stop_all)
        if self.root.exists():
            if not self.root.is_dir():
                raise OutputExists(f"{self.root} exists and is not a directory")
            if any(self.root.iterdir()) and not force:
                raise OutputExists(f"{self.root} exists and is not empty: pass --force to overwrite it")
            if force:
                for child in self.root.iterdir():
                    if child.is_file() or child.is_symlink():
                        child.unlink()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputExists(f"cannot create {self.root}: {exc.strerror or exc}") from None
        if not manifest.created:
            manifest.created = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(manifest.clock.wall_start or time.time()))
        self.save()

    def path(self, name: str) -> Path:
        check_member_name(name)
        return self.root / name

    def save(self) -> None:
        """Rewrite the manifest atomically (called whenever a collector changes state)."""
        with self._lock:
            atomic_write_bytes(self.root / MANIFEST, self.manifest.to_json().encode())

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
        with open_output(final, force=True, fsync=True, keep_partial=True, special=False) as raw:
            fh = cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6)) if gz else raw
            try:
                yield fh
            finally:
                if fh is not raw:
                    fh.close()

    def finish(self, status: str, reason: str | None = None) -> None:
        self.manifest.status = status
        self.manifest.reason = reason
        self.manifest.ended = time.monotonic()
        self.save()
