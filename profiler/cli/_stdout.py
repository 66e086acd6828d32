"""Standard output as every verb writes it (cli layer): a write that fails is one line, exit 9.

Verbs print their result with print(), typer.echo, rich or profiler/files.py; each of them
reaches ``sys.stdout``. While ``main()`` runs it is a :class:`GuardedStdout`: an operating-system
error writing it (a full disk, ``> /dev/full``, EIO) is an :class:`~profiler.errors.OutputError`
("cannot write standard output: no space left on the device", exit 9) instead of exit 70, and a
descriptor 1 closed by the shell (``>&-``, where Python leaves ``sys.stdout`` None) is the same
error once something is written (a verb that writes only files does not mind). A broken pipe
stays a BrokenPipeError: the CLI ends quietly on it (``| head``).
"""

from __future__ import annotations

import errno
from typing import IO, Any, cast

from profiler.errors import OutputError

WHERE = "standard output"


def _error(exc: OSError) -> OutputError:
    why = "no space left on the device" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
    return OutputError(f"cannot write {WHERE}: {why}")


class _Guard:
    """The calls that write, guarded; everything else passed to the stream."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def _closed(self) -> OutputError:
        return OutputError(f"cannot write {WHERE}: it is closed (the shell's >&-)")

    def write(self, data: Any) -> int:
        if self._stream is None:
            raise self._closed()
        try:
            return int(self._stream.write(data))
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise _error(exc) from None

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if self._stream is None:
            return
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise _error(exc) from None

    def isatty(self) -> bool:
        return self._stream is not None and bool(self._stream.isatty())

    def __getattr__(self, name: str) -> Any:
        if self._stream is None:
            if name in ("encoding", "errors"):
                return "utf-8" if name == "encoding" else "strict"
            if name == "closed":
                return False
            raise AttributeError(name)
        return getattr(self._stream, name)


class GuardedStdout(_Guard):
    """``sys.stdout`` while the CLI runs; its ``buffer`` (bytes) is guarded the same way."""

    @property
    def buffer(self) -> _Guard:
        if self._stream is None:
            return _Guard(None)
        return _Guard(self._stream.buffer)  # AttributeError when the stream has none, as the stream's own


def guard(stream: IO[str] | None) -> IO[str]:
    """``stream`` (``sys.stdout``) guarded; a stream already guarded is returned as it is."""
    if isinstance(stream, GuardedStdout):
        return cast(IO[str], stream)
    return cast(IO[str], GuardedStdout(stream))


def flush() -> OutputError | None:
    """Flush what is still buffered for standard output (before the exit code is decided)."""
    import sys

    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except BrokenPipeError:
        return None
    except OutputError as exc:
        return exc
    except OSError as exc:
        return _error(exc)
    return None
