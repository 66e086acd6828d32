"""Byte streams every reader shares (inputs layer): gzip by magic, a head read without losing it,
text decoded in large chunks, bytes cut at line ends.

Nothing here seeks, so stdin, named pipes and `perf script` pipes read the same way as files.
"""

from __future__ import annotations

import codecs
import gzip
import io
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from profiler.errors import InputError

GZIP_MAGIC = b"\x1f\x8b"
HEAD_SIZE = 64 << 10  # what sniffing looks at (decompressed)


class Prefixed(io.RawIOBase):
    """A read-only stream that gives back ``head`` before the rest of ``stream``."""

    def __init__(self, head: bytes, stream: IO[bytes]) -> None:
        self.head = head
        self.stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray) -> int:  # type: ignore[override]
        if self.head:
            n = min(len(b), len(self.head))
            b[:n] = self.head[:n]
            self.head = self.head[n:]
            return n
        data = self.stream.read(len(b))
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self.stream.close()
        super().close()


def prefixed(head: bytes, stream: IO[bytes], buffer: int = 1 << 20) -> IO[bytes]:
    """``stream`` with ``head`` (bytes already read from it) put back in front."""
    out: IO[bytes] = io.BufferedReader(Prefixed(head, stream), buffer)  # type: ignore[type-var]
    return out


def open_binary(stream: IO[bytes]) -> IO[bytes]:
    """The same stream, decompressed when it starts with the gzip magic."""
    head = stream.read(2)
    rest = prefixed(head, stream)
    if head == GZIP_MAGIC:
        return gzip.GzipFile(fileobj=rest, mode="rb")  # type: ignore[return-value]
    return rest


def open_path(path: str | Path) -> IO[bytes]:
    """Open a plain or gzip file (by magic, not by name) for reading bytes; a FIFO works too."""
    p = Path(path)
    try:
        fh = open(p, "rb")  # noqa: SIM115 - handed to the caller
    except OSError as exc:
        raise InputError(f"cannot read {p}: {exc.strerror or exc}") from None
    return open_binary(fh)


def read_head(stream: IO[bytes], size: int = HEAD_SIZE) -> bytes:
    """Up to ``size`` bytes from the start of a stream, waiting on a pipe until they come or it ends."""
    parts: list[bytes] = []
    left = size
    while left > 0:
        data = stream.read(left)
        if not data:
            break
        parts.append(data)
        left -= len(data)
    return b"".join(parts)


def gunzip_head(data: bytes, size: int = HEAD_SIZE) -> bytes:
    """The first ``size`` decompressed bytes of the start of a gzip stream (what can be had)."""
    try:
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data, size)
    except zlib.error:
        return b""


def iter_decoded(stream: IO[bytes], chunk_size: int = 1 << 22, warnings: list[str] | None = None) -> Iterator[str]:
    """Decode a binary stream (gzip or plain) in large chunks; invalid UTF-8 becomes U+FFFD as in
    inferno and stackcollapse-perf.pl. A truncated gzip member is read up to the cut and noted in
    ``warnings``."""
    dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
    try:
        src = open_binary(stream)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        if warnings is not None:
            warnings.append(f"compressed input is truncated or corrupt ({exc}); read up to the cut")
        return
    while True:
        try:
            data = src.read(chunk_size)
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            if warnings is not None:
                warnings.append(f"compressed input is truncated or corrupt ({exc}); read up to the cut")
            data = b""
        if not data:
            tail = dec.decode(b"", final=True)
            if tail:
                yield tail
            return
        yield dec.decode(data)


def iter_chunks(fh: IO[bytes], size: int = 2 << 20, warnings: list[str] | None = None) -> Iterator[bytes]:
    """Chunks of whole lines (each ending in a newline); a truncated gzip ends early, noted in ``warnings``."""
    rest = b""
    while True:
        try:
            data = fh.read(size)
        except (EOFError, OSError) as exc:
            if warnings is not None:
                warnings.append(f"input is truncated or corrupted ({exc}); using what was read")
            data = b""
        if not data:
            break
        data = rest + data
        cut = data.rfind(b"\n")
        if cut < 0:
            rest = data
            continue
        rest = data[cut + 1 :]
        yield data[: cut + 1]
    if rest.strip():
        yield rest + b"\n"


def is_binary(head: bytes) -> bool:
    """NUL bytes near the start: not text."""
    return b"\x00" in head[:4096]
