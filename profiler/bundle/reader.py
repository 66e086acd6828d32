"""Reading a capture bundle (bundle layer): containment of paths and symlinks, tolerant reading.

:class:`Bundle` opens a bundle directory, validates its manifest, and hands out its members:
names (and symlinks) that would leave the directory are refused; ``.gz`` members are
decompressed transparently; a member cut off or corrupted mid-way (a capture killed while
writing) is read up to the cut, with a warning in ``Bundle.warnings`` instead of an error.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, cast

from profiler.bundle.manifest import OK, Manifest, check_member_name, parse_manifest
from profiler.bundle.members import MANIFEST
from profiler.errors import BundleError


class Bundle:
    """A capture bundle opened for reading (post-mortem or right after a capture)."""

    def __init__(self, root: Path, manifest: Manifest) -> None:
        self.root = root
        self.manifest = manifest
        self.warnings: list[str] = []

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> Bundle:
        root = Path(path)
        if not root.exists():
            raise BundleError(f"no capture bundle at {root}")
        if not root.is_dir():
            raise BundleError(f"{root} is a file, not a capture bundle directory")
        mpath = root / MANIFEST
        if not mpath.is_file():
            if not any(root.iterdir()):
                raise BundleError(f"{root} is empty: not a capture bundle")
            raise BundleError(f"{root} is not a capture bundle (no {MANIFEST})")
        try:
            text = mpath.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise BundleError(f"cannot read {mpath}: {exc}") from None
        return cls(root, parse_manifest(text, str(mpath)))

    @property
    def partial(self) -> bool:
        return self.manifest.status != OK

    def path(self, name: str) -> Path:
        """The path of a member file, refusing names (or symlinks) that leave the bundle."""
        check_member_name(name)
        p = self.root / name
        with contextlib.suppress(OSError):
            if p.exists() and not p.resolve().is_relative_to(self.root.resolve()):
                raise BundleError(f"bundle member {name!r} points outside the bundle")
        return p

    def has(self, name: str) -> bool:
        return self.path(name).is_file()

    def open_binary(self, name: str) -> IO[bytes]:
        """Open a member for reading bytes; ``.gz`` members are decompressed transparently."""
        p = self.path(name)
        try:
            if name.endswith(".gz"):
                return cast(IO[bytes], gzip.open(p, "rb"))
            return open(p, "rb")
        except OSError as exc:
            raise BundleError(f"cannot read {name} in {self.root}: {exc.strerror or exc}") from None

    def open_text(self, name: str) -> IO[str]:
        return io.TextIOWrapper(self.open_binary(name), encoding="utf-8", errors="replace", newline="")

    def iter_lines(self, name: str) -> Iterator[str]:
        """Yield the member's lines (without newline); a truncated file ends early with a warning."""
        n = 0
        try:
            with self.open_text(name) as fh:
                for line in fh:
                    n += 1
                    yield line.rstrip("\r\n")
        except (EOFError, zlib.error, gzip.BadGzipFile, OSError) as exc:
            self.warnings.append(f"{name} is truncated or corrupted after {n} lines ({exc}); using what was read")

    def read_text(self, name: str) -> str:
        return "\n".join(self.iter_lines(name))


def looks_like_bundle(path: str | os.PathLike[str]) -> bool:
    return (Path(path) / MANIFEST).is_file()
