"""Writing an output file safely (core layer: imports only profiler.errors); every writer goes through here.

The rules (docs/cli.md#outputs):

- ``-`` (or no path) is standard output; ``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N`` and
  ``/proc/self/fd/N`` write into that already open descriptor (so ``-o /dev/stdout > x`` and
  ``>> x`` behave as the shell said).
- An existing device or named pipe (``/dev/null``, ``/dev/full``, a terminal, a fifo) is written
  into, never replaced, never refused: the overwrite rule is about regular files. (Files inside
  a bundle, ``special=False``, are regular files or nothing: a device there is replaced.)
- A regular file is written under a fresh temporary name in the same directory, created
  exclusively (``O_CREAT | O_EXCL | O_NOFOLLOW``, a random name: nothing planted there is ever
  opened) and renamed over the final name once complete. A reader never sees half a file, and a
  failure leaves the old file as it was.
- An existing regular file is replaced only with ``force``; a new file is linked into place
  without replacing anything (a file that appeared meanwhile is not clobbered).
- A symbolic link at the final name is never followed. Without ``force`` it is refused like an
  existing file; with ``force`` the link itself is replaced by the new file (whatever it pointed
  to is left untouched). So a bundle holding ``report.html -> /etc/passwd`` gets a new
  report.html, and /etc/passwd stays as it was.
- A file inside an output directory (a bundle's member, manifest or report, a cluster bundle's
  node report: ``root=`` that directory) is reached from ``root`` one directory at a time, each
  opened with ``O_NOFOLLOW``: a symbolic link at any level between the root and the file (a
  bundle whose ``nodes`` links to someone else's captures) is refused with one OutputError
  line, never written through; only a regular file is ever written there.
  :func:`contained` says the same for reading: the real location of every level must stay
  inside the root.
- A file that grows while it is read (a load's log followed live) is :func:`create_growing`: inside
  an output directory this run made, whatever is at its name is removed (never followed) and the
  file is created exclusively.
- Every operating-system error (a missing directory, a directory, a read-only file system, a
  full disk, no permission) is one :class:`~profiler.errors.OutputError` line (exit code 9).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import secrets
import stat
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any, cast

from profiler.errors import OutputError, OutputExists

__all__ = ["STDOUT", "contained", "create_growing", "is_stdout", "open_output", "write_output", "output_kind"]

STDOUT = "-"
# names that mean an already open descriptor, not a file to create
_FD_NAME = re.compile(r"^/(?:dev/fd|proc/self/fd)/(\d+)$")
_STD_NAMES = {"/dev/stdout": 1, "/dev/stderr": 2, "/dev/stdin": 0}
_OPEN_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_DIR_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC  # O_PATH: no read permission needed


def _relative_parts(root: str | os.PathLike[str], path: str | os.PathLike[str]) -> list[str] | None:
    """``path``'s components below ``root`` (lexically, both made absolute), or None when it is not below it."""
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(root))
    if rel == ".":
        return []
    parts = rel.split(os.sep)
    return None if parts[0] == ".." else parts


def contained(root: str | os.PathLike[str], path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` and every level above it up to ``root`` really lie inside ``root``: each
    symbolic link on the way resolved, the result compared with the root's own real location (not
    with a level's, which a link would have moved too)."""
    if _relative_parts(root, path) is None:
        return False
    try:
        real_root = os.path.realpath(root, strict=True)
    except OSError:
        return False
    real = os.path.realpath(path)
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


def open_dir_within(root: str | os.PathLike[str], directory: str | os.PathLike[str], what: str) -> int:
    """A descriptor of ``directory``, reached from ``root`` one level at a time without following a
    symbolic link at any level (``root`` itself is taken as given: the user named it). ``what``
    names the file being written, for the one-line OutputError."""
    parts = _relative_parts(root, directory)
    if parts is None:
        raise OutputError(f"cannot write {what}: it is not inside {os.fspath(root)}")
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError as exc:
        raise _error(what, exc) from None
    for part in parts:
        try:
            nfd = os.open(part, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise OutputError(f"cannot write {what}: {part} in {os.fspath(root)} is a symbolic link or no "
                                  "directory (never written through)") from None
            raise _error(what, exc) from None
        os.close(fd)
        fd = nfd
    return fd


def is_stdout(path: str | os.PathLike[str] | None) -> bool:
    return path is None or os.fspath(path) == STDOUT


def _fd_of(path: str) -> int | None:
    if path in _STD_NAMES:
        return _STD_NAMES[path]
    m = _FD_NAME.match(path)
    return int(m.group(1)) if m else None


def output_kind(path: str | os.PathLike[str] | None) -> str:
    """What writing to ``path`` would do: 'stdout', 'fd', 'new', 'file' (an existing regular file),
    'link' (a symbolic link, never followed), 'special' (a device, pipe or socket, written into),
    'directory'."""
    if is_stdout(path):
        return "stdout"
    assert path is not None
    p = os.fspath(path)
    if _fd_of(p) is not None:
        return "fd"
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return "new"
    except OSError:
        return "new"  # the error is reported when the file is opened
    if stat.S_ISLNK(st.st_mode):
        return "link"
    if stat.S_ISDIR(st.st_mode):
        return "directory"
    if stat.S_ISREG(st.st_mode):
        return "file"
    return "special"


def check_writable(path: str | os.PathLike[str] | None, force: bool) -> None:
    """Refuse early (before long work) what :func:`open_output` would refuse: an existing regular
    file or symbolic link without ``force`` (OutputExists), a directory, a missing parent
    directory (OutputError)."""
    kind = output_kind(path)
    if kind in ("stdout", "fd", "special"):
        return
    assert path is not None
    p = Path(path)
    if kind == "directory":
        raise OutputError(f"cannot write {p}: it is a directory")
    if kind in ("file", "link") and not force:
        what = "is a symbolic link (never written through)" if kind == "link" else "exists"
        raise OutputExists(f"{p} {what}: pass --force to replace it")
    parent = p.parent
    if not parent.is_dir():
        raise OutputError(f"cannot write {p}: no such directory {parent}")


def _error(path: str | os.PathLike[str], exc: OSError) -> OutputError:
    why = exc.strerror or str(exc)
    if exc.errno == errno.ENOSPC:
        why = "no space left on the device"
    return OutputError(f"cannot write {os.fspath(path)}: {why}")


class _Sink(io.RawIOBase):
    """Where the bytes go: a descriptor we opened, or a Python text stream (stdout, stderr);
    every OSError but a broken pipe becomes one OutputError line."""

    def __init__(self, where: str, fd: int | None = None, stream: IO[str] | None = None) -> None:
        self.where = where
        self.fd = fd
        self.stream = stream

    def writable(self) -> bool:
        return True

    def write(self, b: bytes) -> int:  # type: ignore[override]
        data = bytes(b)
        try:
            if self.fd is not None:
                view = memoryview(data)
                while view:
                    n = os.write(self.fd, view)
                    view = view[n:]
            else:
                assert self.stream is not None
                buf = getattr(self.stream, "buffer", None)
                if buf is not None:
                    buf.write(data)
                else:
                    self.stream.write(data.decode("utf-8", "replace"))
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise _error(self.where, exc) from None
        return len(data)

    def flush(self) -> None:
        if self.stream is not None:
            try:
                self.stream.flush()
            except BrokenPipeError:
                raise
            except OSError as exc:
                raise _error(self.where, exc) from None

    def fsync(self) -> None:
        if self.fd is not None:
            try:
                os.fsync(self.fd)
            except OSError as exc:
                raise _error(self.where, exc) from None

    def close(self) -> None:
        if not self.closed:
            try:
                self.flush()
            finally:
                if self.fd is not None:
                    with contextlib.suppress(OSError):
                        os.close(self.fd)
                    self.fd = None
                super().close()


class _Target:
    """One output being written: where the bytes go, and how to make them final."""

    def __init__(self, path: str | os.PathLike[str] | None, force: bool, fsync: bool, special: bool,
                 root: str | os.PathLike[str] | None = None) -> None:
        self.where = STDOUT if path is None else os.fspath(path)
        self.force = force
        self.root = root
        self.special = special and root is None
        self.fsync = fsync
        self.dir_fd: int | None = None
        self.tmp: str | None = None
        self.name = ""

    def open(self) -> _Sink:
        p = self.where
        if self.root is not None:
            return self._open_within(self.root)
        if p == STDOUT:
            return _Sink("standard output", stream=sys.stdout)
        fd = _fd_of(p)
        if fd is not None:
            if fd in (1, 2):
                std = sys.stdout if fd == 1 else sys.stderr
                std.flush()
                return _Sink(p, stream=std)
            try:
                return _Sink(p, fd=os.dup(fd))
            except OSError as exc:
                raise _error(p, exc) from None
        kind = output_kind(p)
        if kind == "directory":
            raise OutputError(f"cannot write {p}: it is a directory")
        if kind == "special" and not self.special:
            kind = "link"  # inside a bundle only regular files are written: anything else is replaced
        if kind == "special":
            try:  # a device or a pipe: written into, never created, truncated or replaced
                return _Sink(p, fd=os.open(p, os.O_WRONLY | os.O_CLOEXEC))
            except OSError as exc:
                raise _error(p, exc) from None
        if kind in ("file", "link") and not self.force:
            what = "is a symbolic link (never written through)" if kind == "link" else "exists"
            raise OutputExists(f"{p} {what}: pass --force to replace it")
        parent, self.name = os.path.split(p)
        if not self.name:
            raise OutputError(f"cannot write {p}: it names a directory")
        try:
            self.dir_fd = os.open(parent or ".", _DIR_FLAGS)
        except FileNotFoundError:
            raise OutputError(f"cannot write {p}: no such directory {parent or '.'}") from None
        except NotADirectoryError:
            raise OutputError(f"cannot write {p}: {parent} is not a directory") from None
        except OSError as exc:
            raise _error(p, exc) from None
        return self._create_temporary(parent)

    def _open_within(self, root: str | os.PathLike[str]) -> _Sink:
        """A file inside an output directory: its directory reached from ``root`` without a link
        at any level; a link, device or pipe at its name is replaced (with ``force``), never opened."""
        p = self.where
        parent, self.name = os.path.split(p)
        if not self.name:
            raise OutputError(f"cannot write {p}: it names a directory")
        self.dir_fd = open_dir_within(root, parent or ".", p)
        try:
            st = os.lstat(self.name, dir_fd=self.dir_fd)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            self._close_dir()
            raise _error(p, exc) from None
        if st is not None and stat.S_ISDIR(st.st_mode):
            self._close_dir()
            raise OutputError(f"cannot write {p}: it is a directory")
        if st is not None and not self.force:
            self._close_dir()
            what = "exists" if stat.S_ISREG(st.st_mode) else "is a symbolic link (never written through)"
            raise OutputExists(f"{p} {what}: pass --force to replace it")
        return self._create_temporary(parent)

    def _create_temporary(self, parent: str) -> _Sink:
        p = self.where
        assert self.dir_fd is not None
        for _ in range(100):
            tmp = f".{self.name[:200]}.{secrets.token_hex(6)}.tmp"
            try:
                fd = os.open(tmp, _OPEN_FLAGS, 0o666, dir_fd=self.dir_fd)
            except FileExistsError:
                continue
            except OSError as exc:
                self._close_dir()
                raise _error(p, exc) from None
            self.tmp = tmp
            return _Sink(p, fd=fd)
        self._close_dir()
        raise OutputError(f"cannot write {p}: no free temporary name in {parent or '.'}")

    def commit(self, fh: IO[bytes], sink: _Sink) -> None:
        """Make the written bytes final (a regular file is renamed into place)."""
        try:
            fh.flush()
            if self.fsync and self.tmp is not None:
                sink.fsync()
            fh.close()
        except BaseException:
            self.abort(fh)
            raise
        if self.tmp is None:
            return
        dfd = self.dir_fd
        assert dfd is not None
        try:
            if self.force:
                os.rename(self.tmp, self.name, src_dir_fd=dfd, dst_dir_fd=dfd)
            else:
                self._link_new(dfd)
            self.tmp = None
        except OSError as exc:
            raise _error(self.where, exc) from None
        finally:
            self._discard()
            self._close_dir()

    def _link_new(self, dfd: int) -> None:
        """Put the temporary file in place without replacing anything that appeared meanwhile."""
        assert self.tmp is not None
        try:
            os.link(self.tmp, self.name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
        except FileExistsError:
            raise OutputExists(f"{self.where} appeared while it was being written: pass --force to replace it") from None
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
                raise
            # a file system without hard links (vfat...): a rename, checked just before
            try:
                os.lstat(self.name, dir_fd=dfd)
            except FileNotFoundError:
                os.rename(self.tmp, self.name, src_dir_fd=dfd, dst_dir_fd=dfd)
                self.tmp = None
                return
            raise OutputExists(f"{self.where} appeared while it was being written: pass --force to replace it") from None
        os.unlink(self.tmp, dir_fd=dfd)  # the new name is in place: the temporary one goes
        self.tmp = None

    def abort(self, fh: IO[bytes] | None) -> None:
        if fh is not None:
            with contextlib.suppress(OSError, ValueError, OutputError):  # a full disk fails the last flush
                fh.close()
        self._discard()
        self._close_dir()

    def keep(self, fh: IO[bytes]) -> None:
        """Make final whatever reached the file, even when its last bytes cannot be written (a full
        disk: the buffered rest is lost, what was flushed before is kept under the final name)."""
        with contextlib.suppress(OSError, ValueError, OutputError):
            fh.close()  # a buffered writer closes its descriptor even when the last flush fails
        try:
            if self.tmp is not None and self.dir_fd is not None:
                if self.force:
                    os.rename(self.tmp, self.name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
                else:
                    self._link_new(self.dir_fd)
                self.tmp = None
        except (OSError, OutputExists):
            pass
        finally:
            self._discard()
            self._close_dir()

    def _discard(self) -> None:
        if self.tmp is not None and self.dir_fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.tmp, dir_fd=self.dir_fd)
        self.tmp = None

    def _close_dir(self) -> None:
        if self.dir_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.dir_fd)
            self.dir_fd = None


@contextlib.contextmanager
def open_output(path: str | os.PathLike[str] | None, *, force: bool = False, fsync: bool = False,
                keep_partial: bool = False, special: bool = True,
                root: str | os.PathLike[str] | None = None) -> Iterator[IO[bytes]]:
    """A binary stream to write an output into, made final when the block ends.

    On an exception the temporary file is removed and the old file (if any) stays, unless
    ``keep_partial`` (a capture's members: what was written is kept). Write errors are one
    OutputError line (a broken pipe stays a BrokenPipeError: the CLI ends quietly on it).
    ``special=False`` (files inside a bundle): a device, pipe or socket at ``path`` is never
    written into; with ``force`` it is replaced like a symbolic link. ``root`` (the output
    directory ``path`` lies in): the same, and no symbolic link at any level between ``root``
    and ``path`` is followed (:func:`open_dir_within`).
    """
    if is_stdout(path) and root is None:
        sys.stdout.flush()
    target = _Target(path, force, fsync, special, root)
    sink = target.open()
    fh = io.BufferedWriter(cast(Any, sink), 1 << 20)
    try:
        yield fh
    except BaseException:
        if keep_partial:
            target.keep(fh)
        else:
            target.abort(fh)
        raise
    target.commit(fh, sink)


def write_output(path: str | os.PathLike[str] | None, data: str | bytes | Iterable[str], *, force: bool = False,
                 fsync: bool = False, special: bool = True, root: str | os.PathLike[str] | None = None) -> None:
    """Write text (a string, or an iterable of string chunks) or bytes to ``path`` by the rules above."""
    with open_output(path, force=force, fsync=fsync, special=special, root=root) as fh:
        if isinstance(data, bytes):
            fh.write(data)
        elif isinstance(data, str):
            fh.write(data.encode("utf-8", "surrogateescape"))
        else:
            for chunk in data:
                fh.write(chunk.encode("utf-8", "surrogateescape"))


def create_growing(path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> IO[bytes]:
    """A file written as it grows (a load's log another thread or a child writes into), inside an
    output directory this run made (``root``, default the file's own directory): a link or file
    already at the name is removed, never followed, and the file is created exclusively, its
    directory reached from ``root`` without a link; errors are one OutputError line."""
    p = os.fspath(path)
    parent, name = os.path.split(p)
    dfd = open_dir_within(root if root is not None else (parent or "."), parent or ".", p)
    try:
        try:
            if stat.S_ISDIR(os.lstat(name, dir_fd=dfd).st_mode):
                raise OutputError(f"cannot write {p}: it is a directory")
            os.unlink(name, dir_fd=dfd)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise _error(p, exc) from None
        try:
            fd = os.open(name, _OPEN_FLAGS, 0o644, dir_fd=dfd)
        except OSError as exc:
            raise _error(p, exc) from None
    finally:
        os.close(dfd)
    return os.fdopen(fd, "wb")

