"""Small file reads and writes for collectors (collectors layer): sizes, sysctl and tracefs values.

Reads say None (or 0) where the file is gone, so a collector can go on without it.
"""

from __future__ import annotations

from pathlib import Path


def file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def read_file(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return None


def write_file(path: str, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)
