"""What an input is: one sniff of its head, the format it matched, and a way to read it (inputs layer).

Every reader module declares a :class:`Format` (its name, how messages call it, and ``sniff``,
a test of the first 64 KiB, decompressed when gzip); :func:`detect` opens a path, a named pipe
or stdin once, tries the formats a verb accepts in the order given, and returns a
:class:`Source` that hands the bytes on without losing the ones sniffing read.
"""

from __future__ import annotations

import atexit
import gzip
import shutil
import sys
import tempfile
import zlib
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
    open_binary,
    prefixed,
    read_head,
)


def _never(head: bytes) -> bool:
    return False


@dataclass(frozen=True)
class Format:
    """One input format, as detection sees it."""

    name: str  # "perf-script", "folded", ...
    what: str  # how an error message names it: "perf script text"
    sniff: Callable[[bytes], bool] = _never  # on the decompressed head
    binary: bool = False  # may match a head holding NUL bytes (text formats never do)
    plain_only: bool = False  # read from a plain file only: a gzipped one is decompressed to a temporary file first (perf.data)
    needs_file: bool = False  # must be a regular file (perf script -i seeks in it)
    directory: bool = False  # a directory (a capture bundle), never a stream


BUNDLE = Format("bundle", "a capture bundle", directory=True)


@dataclass
class Source:
    """An input whose format is known. Regular files and bundles can be read any number of
    times; stdin and pipes once (``open`` hands over the stream read so far)."""

    name: str  # the path as given, or "stdin"
    format: Format
    path: Path | None  # a regular file or a bundle directory; None for stdin and pipes
    head: bytes = b""  # the first HEAD_SIZE bytes, decompressed
    compressed: bool = False
    _stream: IO[bytes] | None = field(default=None, repr=False)
    unpacked: Path | None = None  # a gzipped perf.data, decompressed here (removed at close or exit)

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
        """The input's bytes from the start, decompressed."""
        return open_binary(self.open_raw())

    def open_raw(self) -> IO[bytes]:
        """The input's bytes from the start as they are stored (gzip stays gzip), for readers
        that decompress themselves and note a truncated file instead of failing on it."""
        if self._stream is not None:
            stream, self._stream = self._stream, None
            return stream
        if self.path is None:
            raise InputError(f"{self.name} can be read only once")
        try:
            return open(self.path, "rb")
        except OSError as exc:
            raise InputError(f"cannot read {self.path}: {exc.strerror or exc}") from None

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


def _gunzip_to_file(name: str, raw: IO[bytes]) -> Path:
    """Decompress a gzipped input into a private temporary file (perf script needs a file)."""
    d = Path(tempfile.mkdtemp(prefix="profiler-unpacked-"))
    atexit.register(shutil.rmtree, d, True)
    out = d / (Path(name).name.removesuffix(".gz") or "input")
    try:
        with gzip.GzipFile(fileobj=raw) as gz, open(out, "wb") as fh:
            shutil.copyfileobj(gz, fh, 1 << 20)
    except (OSError, EOFError, zlib.error) as exc:
        shutil.rmtree(d, ignore_errors=True)
        raise InputError(f"{name}: cannot decompress: {exc}") from None
    finally:
        raw.close()
    return out


def _alternatives(accept: Sequence[Format]) -> str:
    names = [f.what for f in accept]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def detect(input: str, accept: Sequence[Format], *, stdin: IO[bytes] | None = None) -> Source:
    """Open ``input`` (a path, or ``-`` for stdin) and tell which of ``accept`` it is, trying them
    in order; a one-line InputError (BundleError for a directory that is no bundle) otherwise."""
    stream: IO[bytes] | None = None
    path: Path | None = None
    if input == "-":
        name = "stdin"
        raw_in = stdin if stdin is not None else sys.stdin.buffer
        raw = read_head(raw_in)
        stream = prefixed(raw, raw_in)
    else:
        name = input
        p = Path(input)
        if p.is_dir():
            bundle = next((f for f in accept if f.directory), None)
            if bundle is None:
                raise InputError(f"{input} is a directory, not {_alternatives(accept)}")
            if not looks_like_bundle(p):
                raise BundleError(f"{input} is a directory but not a capture bundle (no manifest.json)")
            return Source(name, bundle, p)
        if not p.exists():
            raise InputError(f"no such file: {input}")
        try:
            fh = open(p, "rb")  # noqa: SIM115 - kept open for a pipe
        except OSError as exc:
            raise InputError(f"cannot read {input}: {exc.strerror or exc}") from None
        raw = read_head(fh)
        if p.is_file():
            fh.close()
            path = p
        else:  # a named pipe or a device: what was read is put back in front
            stream = prefixed(raw, fh)
    compressed = raw[:2] == GZIP_MAGIC
    head = gunzip_head(raw) if compressed else raw[:HEAD_SIZE]
    binary = is_binary(head)
    for fmt in accept:
        if fmt.directory or (binary and not fmt.binary):
            continue
        if fmt.sniff(head):
            if fmt.plain_only and compressed:  # perf.data.gz: perf script reads a file
                src = stream if stream is not None else open(path, "rb")  # type: ignore[arg-type]
                unpacked = _gunzip_to_file(name, src)
                return Source(name, fmt, path, head, False, None, unpacked)
            if fmt.needs_file and path is None:
                if stream is not None:
                    stream.close()
                raise InputError(f"{name}: {fmt.what} must be read from a file, not a pipe (perf script -i seeks in it)")
            return Source(name, fmt, path, head, compressed, stream)
    if stream is not None and input != "-":
        stream.close()
    if binary:
        raise InputError(f"{name} is binary, not {_alternatives(accept)}")
    raise InputError(f"{name} is not {_alternatives(accept)}")
