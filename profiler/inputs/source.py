"""What an input is: one sniff of its head, the format it matched, and a way to read it (inputs layer).

Every reader module declares a :class:`Format` (its name, how messages call it, and ``sniff``,
a test of the first 64 KiB, decompressed when gzip); :func:`detect` opens a path, a named pipe
or stdin once, tries the formats a verb accepts in the order given, and returns a
:class:`Source` that hands the bytes on without losing the ones sniffing read.
"""

from __future__ import annotations

import atexit
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from profiler.bundle import Bundle, looks_like_bundle
from profiler.errors import BundleError, InputError
from profiler.inputs.streams import (
    GZIP_MAGIC,
    HEAD_SIZE,
    gunzip_head,
    is_binary,
    prefixed,
    read_head,
)
from profiler.tolerant import LINE_LIMIT, ReadLog, open_tolerant


def _never(head: bytes) -> bool:
    return False


@dataclass(frozen=True)
class Format:
    """One input format: how detection knows it, and what it can and cannot give a reader (the
    verbs' reader tables, a row per format, say how each question is read from it)."""

    name: str  # "perf-script", "folded", ...
    what: str  # how an error message names it: "perf script text"
    sniff: Callable[[bytes], bool] = _never  # on the decompressed head
    binary: bool = False  # may match a head holding NUL bytes (text formats never do)
    plain_only: bool = False  # read from a plain file only: a gzipped one is decompressed to a temporary file first (perf.data)
    needs_file: bool = False  # must be a regular file (perf script -i seeks in it)
    directory: bool = False  # a directory (a capture bundle), never a stream
    untimed: str = ""  # why --from/--to cannot cut it ("folded stacks have none"); "" when its samples have times
    labels: bool = False  # its samples carry labels a flame graph can be rooted at (--group-by)


BUNDLE = Format("bundle", "a capture bundle", directory=True)


@dataclass
class Source:
    """An input whose format is known. Regular files and bundles can be read any number of
    times; stdin and pipes once (``open`` hands over the stream read so far)."""

    name: str  # the path as given, or "stdin"
    format: Format
    path: Path | None  # a regular file or a bundle directory; None for stdin and pipes
    head: bytes = b""  # the first HEAD_SIZE bytes (or the whole first line), decompressed
    compressed: bool = False
    _stream: IO[bytes] | None = field(default=None, repr=False)
    unpacked: Path | None = None  # a gzipped perf.data, decompressed here (removed at close or exit)
    log: ReadLog = field(default_factory=lambda: ReadLog("input"))  # what reading it tolerated

    def __post_init__(self) -> None:
        self.log.name = self.name

    @property
    def file(self) -> Path:
        """A regular file holding the input's bytes, for tools that seek in it (perf script -i)."""
        if self.unpacked is not None:
            return self.unpacked
        if self.path is None:
            raise InputError(f"{self.name} is not a regular file")
        return self.path

    @property
    def rereadable(self) -> bool:
        return self.path is not None and self._stream is None

    def open(self) -> IO[bytes]:
        """The input's bytes from the start, decompressed and read tolerantly (profiler.tolerant):
        damage ends the stream early and is written down in ``log``."""
        if self._stream is not None:
            raw, self._stream = self._stream, None
        elif self.path is None:
            raise InputError(f"{self.name} can be read only once")
        else:
            try:
                raw = open(self.path, "rb")  # noqa: SIM115 - handed over inside the tolerant stream
            except OSError as exc:
                raise InputError(f"cannot read {self.path}: {exc.strerror or exc}") from None
        self.log.reset()  # the same object: whoever took it before the open counts into it
        return open_tolerant(raw, self.log, text=not self.format.binary)

    def damage(self) -> str:
        """' (what reading tolerated)' for an error message, or ''."""
        summary = self.log.summary()
        return f" ({summary.split(': ', 1)[1]})" if summary else ""

    def bundle(self) -> Bundle:
        if self.path is None or not self.format.directory:
            raise InputError(f"{self.name} is not a capture bundle")
        return Bundle.open(self.path)

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        if self.unpacked is not None:
            shutil.rmtree(self.unpacked.parent, ignore_errors=True)
            self.unpacked = None


def _gunzip_to_file(name: str, raw: IO[bytes], log: ReadLog) -> Path:
    """Decompress a gzipped input into a private temporary file (perf script needs a file), read
    tolerantly: a cut or corrupt stream gives what inflates before the damage, a bomb stops at
    the ratio limit (profiler.tolerant), noted in ``log``."""
    d = Path(tempfile.mkdtemp(prefix="profiler-unpacked-"))
    atexit.register(shutil.rmtree, d, True)
    out = d / "perf.data"  # never a name from the input
    try:
        with open_tolerant(raw, log, text=False) as src, open(out, "xb") as fh:
            shutil.copyfileobj(src, fh, 1 << 20)
    except OSError as exc:
        shutil.rmtree(d, ignore_errors=True)
        raise InputError(f"{name}: cannot decompress: {exc.strerror or exc}") from None
    finally:
        raw.close()
    return out


def _whole_first_line(raw: bytes, compressed: bool, more_of: IO[bytes] | None) -> tuple[bytes, bytes]:
    """Read on from ``more_of`` (the rest of the input after ``raw``) until the decompressed head
    holds one whole line, or LINE_LIMIT bytes; returns (raw, head)."""
    parts = [raw]
    size = len(raw)
    while more_of is not None:
        try:
            more = more_of.read(1 << 20)
        except OSError:
            break
        if not more:
            break
        parts.append(more)
        size += len(more)
        if not compressed and (b"\n" in more or size >= LINE_LIMIT):
            break
        if compressed and (size >= LINE_LIMIT or b"\n" in gunzip_head(b"".join(parts), LINE_LIMIT)):
            break
    raw = b"".join(parts)
    return raw, gunzip_head(raw, LINE_LIMIT) if compressed else raw[:LINE_LIMIT]


def _alternatives(accept: Sequence[Format]) -> str:
    names = [f.what for f in accept]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def detect(input: str, accept: Sequence[Format], *, stdin: IO[bytes] | None = None) -> Source:
    """Open ``input`` (a path, or ``-`` for stdin) and tell which of ``accept`` it is, trying them
    in order; a one-line InputError (BundleError for a directory that is no bundle) otherwise."""
    pipe: IO[bytes] | None = None  # stdin, a named pipe or a device: read once
    path: Path | None = None
    if input == "-":
        name = "stdin"
        pipe = stdin if stdin is not None else sys.stdin.buffer
        try:
            raw = read_head(pipe)
        except OSError as exc:
            raise InputError(f"cannot read stdin: {exc.strerror or exc}") from None
    else:
        name = input
        p = Path(input)
        try:
            is_dir = p.is_dir()
            exists = is_dir or p.exists()
        except OSError as exc:
            raise InputError(f"cannot read {input}: {exc.strerror or exc}") from None
        if is_dir:
            bundle = next((f for f in accept if f.directory), None)
            try:
                is_bundle = looks_like_bundle(p)
            except OSError as exc:
                raise BundleError(f"cannot read {input}: {exc.strerror or exc}") from None
            if not is_bundle:
                # the same answer from every verb: a directory is meant as a bundle (exit 4)
                if (p / "cluster.json").is_file():
                    raise BundleError(f"{input} is a cluster bundle: give one of its nodes ({input}/nodes/NAME), "
                                      "or use analyze or report on the whole")
                raise BundleError(f"{input} is a directory but not a capture bundle (no manifest.json)")
            if bundle is None:
                raise InputError(f"{input} is a capture bundle, not {_alternatives(accept)}")
            return Source(name, bundle, p)
        if not exists:
            raise InputError(f"no such file: {input}")
        try:
            fh = open(p, "rb")  # noqa: SIM115 - kept open for a pipe
            raw = read_head(fh)
        except OSError as exc:
            raise InputError(f"cannot read {input}: {exc.strerror or exc}") from None
        if p.is_file():
            path = p
        else:  # a named pipe or a device: what was read is put back in front
            pipe = fh
    compressed = raw[:2] == GZIP_MAGIC
    head = gunzip_head(raw) if compressed else raw[:HEAD_SIZE]
    if b"\n" not in head and (len(head) >= HEAD_SIZE or len(raw) >= HEAD_SIZE) and not is_binary(head):
        # The first line is longer than the head (a folded stack of 20,000 frames): read on to
        # its end, so that sniffing sees one whole line.
        raw, head = _whole_first_line(raw, compressed, pipe if pipe is not None else fh)
    if path is not None:
        fh.close()
    stream = prefixed(raw, pipe) if pipe is not None else None
    binary = is_binary(head)
    for fmt in accept:
        if fmt.directory or (binary and not fmt.binary):
            continue
        if fmt.sniff(head):
            if fmt.plain_only and compressed:  # perf.data.gz: perf script reads a file
                log = ReadLog(name)
                try:
                    src = stream if stream is not None else open(path, "rb")  # type: ignore[arg-type]  # noqa: SIM115
                except OSError as exc:
                    raise InputError(f"cannot read {name}: {exc.strerror or exc}") from None
                unpacked = _gunzip_to_file(name, src, log)
                return Source(name, fmt, path, head, False, None, log=log, unpacked=unpacked)
            if fmt.needs_file and path is None:
                if stream is not None and input != "-":
                    stream.close()
                raise InputError(f"{name}: {fmt.what} must be read from a file, not a pipe (perf script -i seeks in it)")
            return Source(name, fmt, path, head, compressed, stream)
    if stream is not None and input != "-":
        stream.close()
    if binary:
        raise InputError(f"{name} is binary, not {_alternatives(accept)}")
    raise InputError(f"{name} is not {_alternatives(accept)}")
