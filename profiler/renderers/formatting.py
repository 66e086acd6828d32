"""How values read in every report (renderers layer): numbers, shares, sizes and verdict titles in one place."""

from __future__ import annotations

from typing import Any

CATEGORY_TITLES = {
    "cpu": "CPU-bound",
    "io_wait": "IO wait",
    "memory": "Memory pressure",
    "lock_contention": "Lock contention",
    "not_saturated": "Not saturated",
}

SHARE_UNITS = ("of ", "busy")


def value(v: Any, unit: str = "") -> str:
    """A metric value as people read it: shares as %, bytes in MiB, rates with a unit."""
    if v is None:
        return "n/a"
    if isinstance(v, bool) or not isinstance(v, int | float):
        return str(v)
    if unit.startswith(SHARE_UNITS) or unit == "share":
        return f"{100 * v:.0f}%"
    if unit == "%" or unit == "% of time":
        return f"{v:.1f}%"
    if unit == "ms":
        return f"{v:.2f} ms" if v < 10 else f"{v:.0f} ms"
    if unit == "bytes":
        return mib(v)
    if abs(v) >= 100:
        text = f"{v:,.0f}"
    elif abs(v) >= 10:
        text = f"{v:.1f}"
    else:
        text = f"{v:.2f}"
    return f"{text} {unit}".strip()


def threshold(v: Any, unit: str = "") -> str:
    return "" if v is None else value(v, unit)


def mib(v: float | None) -> str:
    if v is None:
        return "n/a"
    if v >= 1 << 30:
        return f"{v / (1 << 30):.1f} GiB"
    return f"{v / (1 << 20):.0f} MiB"


def pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.0f}%"


def cores(used: float | None, avail: float | None) -> str:
    if used is None:
        return "n/a"
    return f"{used:.2f}/{avail:g} cores" if avail else f"{used:.2f} cores"
