"""Pulling a node's bundle back (cluster layer): a tar stream from the node, read like untrusted input.

The node is not trusted more than any bundle from elsewhere: every member must be a regular
file with a plain relative name (no absolute path, no ``..``, no link, device or fifo), at
most ``MAX_DEPTH`` deep, at most ``max_file`` bytes each, ``max_total`` in all and
``MAX_FILES`` files. Files are created fresh (``O_EXCL | O_NOFOLLOW``) under a directory this
side just made, so nothing the node sends can write outside ``DIR/nodes/<name>/``. A stream
cut short keeps what arrived whole and says so.
"""

from __future__ import annotations

import contextlib
import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

MAX_DEPTH = 4
MAX_FILES = 10_000
MAX_NAME = 255
CHUNK = 1 << 20


@dataclass
class PullResult:
    files: int = 0
    bytes: int = 0
    refused: list[str] = field(default_factory=list)  # members left out, with why
    error: str | None = None  # the stream ended early or broke


class PullError(Exception):
    pass


def _check_name(name: str) -> str | None:
    """Why this member name is refused, or None."""
    if not name or "\x00" in name or len(name) > 4096:
        return "invalid name"
    if name.startswith("/") or name.startswith("~"):
        return "absolute path"
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or any(p == ".." for p in parts):
        return "leaves the bundle"
    if len(parts) > MAX_DEPTH:
        return "too deep"
    if any(len(p) > MAX_NAME for p in parts):
        return "name too long"
    return None


def extract(stream: IO[bytes], dest: Path, *, max_total: int, max_file: int) -> PullResult:
    """Read a tar stream into ``dest`` (which must not exist yet); never raises on bad members."""
    res = PullResult()
    dest.mkdir(mode=0o755)
    base = dest.resolve()
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                why = _check_name(member.name)
                if why is None and not member.isreg():
                    why = "not a regular file"
                if why is None and member.size > max_file:
                    why = f"{member.size} bytes is over the {max_file}-byte limit per file"
                if why is None and res.bytes + member.size > max_total:
                    why = f"would pass the {max_total}-byte limit for the node"
                if why is None and res.files >= MAX_FILES:
                    why = f"more than {MAX_FILES} files"
                if why is not None:
                    res.refused.append(f"{member.name[:200]!r}: {why}")
                    continue
                parts = [p for p in member.name.split("/") if p not in ("", ".")]
                parent = base
                for p in parts[:-1]:
                    parent = parent / p
                    if parent.is_symlink():
                        raise PullError(f"{member.name!r}: a directory on the way is a link")
                    parent.mkdir(mode=0o755, exist_ok=True)
                target = parent / parts[-1]
                src = tar.extractfile(member)
                if src is None:
                    continue
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                written = 0
                with os.fdopen(fd, "wb") as out:
                    while written < member.size:
                        chunk = src.read(min(CHUNK, member.size - written))
                        if not chunk:
                            break
                        out.write(chunk)
                        written += len(chunk)
                res.files += 1
                res.bytes += written
                if written < member.size:
                    res.error = f"{member.name} was cut at {written} of {member.size} bytes"
                    break
    except (tarfile.TarError, EOFError, OSError, PullError) as exc:
        res.error = f"{type(exc).__name__}: {exc}"
    return res


def remove_tree(path: Path) -> None:
    """Remove a directory this side created (used when a pull is abandoned)."""
    if not path.exists() or path.is_symlink():
        with contextlib.suppress(OSError):
            path.unlink()
        return
    for dirpath, dirs, files in os.walk(path, topdown=False):
        for f in files:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(dirpath, f))
        for d in dirs:
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(dirpath, d))
    with contextlib.suppress(OSError):
        path.rmdir()
