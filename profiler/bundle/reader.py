"""Reading a capture bundle (bundle layer): containment of paths and symlinks, tolerant reading.

:class:`Bundle` opens a bundle directory, validates its manifest, and hands out its members:
names (and symlinks) that would leave the directory are refused; gzip members are
decompressed transparently (by magic); every member is read through ``profiler.tolerant``: a
member cut off or corrupted mid-way (a capture killed while writing) is read as far as it can
be, and what was tolerated is written down in the member's :class:`~profiler.tolerant.ReadLog`
(``Bundle.reads``), which the analysis turns into warnings and the report's capture health.
"""

from __future__ import annotations

import codecs
import io
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from profiler.bundle.early import EarlyReads
from profiler.bundle.manifest import (
    MAX_MANIFEST_BYTES,
    OK,
    Manifest,
    check_member_name,
    parse_manifest,
)
from profiler.bundle.members import MANIFEST
from profiler.errors import BundleError
from profiler.files import contained
from profiler.tolerant import LINE_LIMIT, ReadLog, open_tolerant, squeeze_blank_lines


class Bundle:
    """A capture bundle opened for reading (post-mortem or right after a capture)."""

    def __init__(self, root: Path, manifest: Manifest, within: Path | None = None) -> None:
        self.root = root
        self.within = within if within is not None else root  # what the bundle itself may not leave (a cluster's, for a node)
        self.manifest = manifest
        self.warnings: list[str] = []  # problems met beyond reading (a member that could not be parsed)
        self.reads: dict[str, ReadLog] = {}  # member -> what reading it tolerated (the last read)
        self.early: EarlyReads | None = None  # members read while the capture finished (attach, run)

    @classmethod
    def open(cls, path: str | os.PathLike[str], within: str | os.PathLike[str] | None = None) -> Bundle:
        """Open a bundle directory. ``within``: a directory the bundle and every member must stay
        inside, by name and by link at every level (a cluster bundle, for one of its nodes)."""
        root = Path(path)
        outer = Path(within) if within is not None else root
        if within is not None and not contained(outer, root):
            raise BundleError(f"{root} points outside {outer}")
        try:
            if not root.exists():
                raise BundleError(f"no capture bundle at {root}")
            if not root.is_dir():
                raise BundleError(f"{root} is a file, not a capture bundle directory")
        except OSError as exc:  # a parent without x permission, a name too long
            raise BundleError(f"cannot read {root}: {exc.strerror or exc}") from None
        mpath = root / MANIFEST
        try:
            if not mpath.is_file():
                if not any(root.iterdir()):
                    raise BundleError(f"{root} is empty: not a capture bundle")
                raise BundleError(f"{root} is not a capture bundle (no {MANIFEST})")
            if not contained(root, mpath):
                raise BundleError(f"{mpath} points outside the bundle")
            with open(mpath, "rb") as fh:
                data = fh.read(MAX_MANIFEST_BYTES + 1)
        except OSError as exc:
            raise BundleError(f"cannot read {mpath}: {exc.strerror or exc}") from None
        if len(data) > MAX_MANIFEST_BYTES:
            raise BundleError(f"{mpath} is larger than {MAX_MANIFEST_BYTES >> 20} MiB: not a manifest")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BundleError(f"{mpath} is not UTF-8 text (byte {exc.start})") from None
        bundle = cls(root, parse_manifest(text, str(mpath)), outer)
        bundle.check_readable()
        return bundle

    def member_names(self) -> list[str]:
        """Every member the manifest names: the collectors' files, the load's log and times."""
        m = self.manifest
        names = [f for rec in m.collectors for f in rec.files]
        if m.load is not None:
            names += [n for n in (m.load.log, m.load.times) if n]
        return list(dict.fromkeys(names))

    def check_readable(self) -> None:
        """A member the manifest names that is there but cannot be opened (no permission, an I/O
        error) makes the bundle unreadable: one BundleError line (exit 4), not an analysis built on
        what is left. A missing member, or a directory or device by its name, is damage the
        analysis reports instead."""
        for name in self.member_names():
            try:
                p = self.path(name)
                if not stat.S_ISREG(os.stat(p).st_mode):
                    continue
                os.close(os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC))
            except (FileNotFoundError, NotADirectoryError, BundleError):
                continue  # missing, or leaving the bundle: the member's reader says so, the rest is read
            except OSError as exc:
                raise BundleError(f"cannot read {name} in {self.root}: {exc.strerror or exc}") from None

    @property
    def partial(self) -> bool:
        return self.manifest.status != OK

    def path(self, name: str) -> Path:
        """The path of a member file, refusing names (or symlinks, at any level) that leave the bundle."""
        check_member_name(name)
        p = self.root / name
        if os.path.lexists(p) and not contained(self.root, p):
            raise BundleError(f"bundle member {name!r} points outside the bundle")
        return p

    def has(self, name: str) -> bool:
        """Whether the bundle holds the member as a regular file (a directory or a device by that
        name is no member)."""
        try:
            return stat.S_ISREG(os.stat(self.path(name)).st_mode)
        except OSError:
            return False

    def log(self, name: str) -> ReadLog:
        """What reading the member tolerated so far (a fresh log if it was not read; each read
        starts it afresh, the object stays the same)."""
        log = self.reads.get(name)
        if log is None:
            log = self.reads[name] = ReadLog(name)
        return log

    def open_binary(self, name: str, *, text: bool = True, line_limit: int = LINE_LIMIT) -> IO[bytes]:
        """Open a member for reading its bytes, decompressed (gzip by magic), tolerantly: damage
        ends the stream early and is written down in ``reads[name]``. ``text=False`` for binary
        members (no CRLF folding, no line limit)."""
        p = self.path(name)
        try:
            raw = open(p, "rb")  # noqa: SIM115 - handed to the caller inside the tolerant stream
        except OSError as exc:
            raise BundleError(f"cannot read {name} in {self.root}: {exc.strerror or exc}") from None
        # the same log object on every read (reset): a parser that took ``log(name)`` before the
        # (lazy) open counts its skipped lines where the reading's damage is
        log = self.log(name)
        log.reset()
        return open_tolerant(raw, log, text=text, line_limit=line_limit)

    def open_text(self, name: str) -> IO[str]:
        return io.TextIOWrapper(self.open_binary(name), encoding="utf-8", errors="replace", newline="\n")

    def iter_lines(self, name: str, *, line_limit: int = LINE_LIMIT) -> Iterator[str]:
        """Yield the member's lines (without newline), as far as they can be read (see ``reads``).
        Runs of blank lines come as two at most (no reader tells two from two hundred, and a
        member of nothing but newlines must not cost a Python step per line). A line longer than
        a chunk is gathered in pieces (joined once, not copied at every chunk)."""
        dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
        rest: list[str] = []
        with self.open_binary(name, line_limit=line_limit) as fh:
            while True:
                data = fh.read(1 << 20)
                text = dec.decode(data, final=not data)
                if "\n\n\n" in text:
                    text = squeeze_blank_lines(text)
                if "\n" not in text:
                    if text:
                        rest.append(text)
                else:
                    lines = text.split("\n")
                    if rest:
                        rest.append(lines[0])
                        lines[0] = "".join(rest)
                    last = lines.pop()
                    rest = [last] if last else []
                    yield from lines
                if not data:
                    break
        if rest:
            yield "".join(rest)

    def take_early(self, name: str, kind: str) -> Any:
        """What an early read of the member made (profiler/bundle/early.py), if there was one and
        the member is still the file it read; else None (read the member then). What that
        reading tolerated becomes the member's ReadLog."""
        if self.early is None:
            return None
        got = self.early.take(name, kind)
        if got is None:
            return None
        value, self.reads[name] = got
        return value

    def read_text(self, name: str) -> str:
        return "\n".join(self.iter_lines(name))

    def read_warnings(self) -> list[str]:
        """One line per member whose reading tolerated something (cut, bad CRC, lines skipped)."""
        return [s for log in self.reads.values() if (s := log.summary()) is not None]


def looks_like_bundle(path: str | os.PathLike[str]) -> bool:
    return (Path(path) / MANIFEST).is_file()
