"""How values read in every report (renderers layer): numbers, shares, sizes and verdict titles in one place."""

from __future__ import annotations

import re
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


_SEED_ASIDE = re.compile(r"\(seeds? \d{3}(?:, \d{3})*: ")
_SEED = re.compile(r"\bseeds? \d{3}(?:, \d{3})*")
# a device number: not inside a longer number, a time (12:30:01) or a version (1.2:3), but at the
# end of a sentence ("reads on 254:0.") it is one
_DEVNO = re.compile(r"(?<![\d:])(?<!\d\.)(\d{1,4}):(\d{1,6})(?![\d:]|\.\d)")


def plain(text: Any, devices: dict[str, str] | None = None) -> str:
    """Words for readers: no internal references ("seed 001" is one of the field reports the
    thresholds come from), and a disk named once (254:0 -> vda) when the capture recorded names."""
    s = "" if text is None else str(text)
    s = _SEED.sub("TiDB load-test reports", _SEED_ASIDE.sub("(", s))
    if devices:
        s = _DEVNO.sub(lambda m: devices.get(m.group(0), m.group(0)), s)
    return s


def limits(blkio: dict[str, Any] | None, devices: dict[str, str] | None = None) -> str:
    """cgroup blkio throttles as words: ``write_iops vda=200, read_bps vda=10 MiB/s``."""
    if not blkio:
        return "none"
    parts = []
    for kind, per_dev in sorted(blkio.items()):
        for dev, v in sorted((per_dev or {}).items()):
            name = (devices or {}).get(dev, dev)
            amount = f"{v / 1048576:.0f} MiB/s" if kind.endswith("bps") and isinstance(v, int | float) else str(v)
            parts.append(f"{kind} {name}={amount}")
    return ", ".join(parts)


# the figures each collector's capture is summed up by, in the capture health table
_CAPTURED = (("samples", "samples"), ("switches", "context switches"), ("events", "events"),
             ("completions", "IO completions"), ("intervals", "intervals"), ("rows", "rows"), ("calls", "calls"),
             ("ticks", "ticks"), ("ios", "IOs"), ("waits", "waits"), ("stacks", "stacks"))
_PROBLEMS = ("lost", "dropped", "missed_events", "ring_buffer_lost", "lost_user_stacks", "lost_kernel_stacks",
             "stack_collisions", "timeouts", "late_ticks")


def stat_value(v: Any) -> str:
    """One collector statistic, readable: numbers grouped, lists joined, argv as a command line."""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, list):
        if all(isinstance(x, str) for x in v):
            return " ".join(v)
        return ", ".join(stat_value(x) for x in v[:12]) + (" ..." if len(v) > 12 else "")
    if isinstance(v, dict):
        return ", ".join(f"{k} {stat_value(x)}" for k, x in sorted(v.items()))
    return str(v)


def health_row(collector: str, backend: str, status: str, reason: str | None, files: list[str],
               stats: dict[str, Any]) -> dict[str, Any]:
    """One collector of the capture health table: what it captured in a line, problems first."""
    got = [f"{stats[k]:,} {label}" for k, label in _CAPTURED if isinstance(stats.get(k), int) and not isinstance(stats.get(k), bool)]
    bad = [f"{stats[k]:,} {k.replace('_', ' ')}" for k in _PROBLEMS if isinstance(stats.get(k), int) and stats[k]]
    captured = ", ".join(got[:3]) or (", ".join(files) if files else "nothing")
    if bad:
        captured += "; " + ", ".join(bad)
    details = [(k.replace("_", " "), stat_value(v)) for k, v in sorted(stats.items())]
    if files:
        details.insert(0, ("files", ", ".join(files)))
    return {"collector": collector, "backend": backend, "status": status, "reason": reason, "captured": captured,
            "details": details}
