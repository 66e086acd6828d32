"""The time window of `--from/--to` over timestamped records (inputs layer).

The CLI parses the two options once into a :class:`TimeWindow`; whoever learns the time the
offsets count from (a bundle's capture start, else the first record read) calls
:meth:`TimeWindow.rebased`, the one place where an offset becomes a perf timestamp.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TimeWindow:
    """[start, end) in seconds: perf timestamps, or offsets from an origin when ``relative``."""

    start: float | None = None
    end: float | None = None
    relative: bool = False

    @property
    def bounded(self) -> bool:
        return self.start is not None or self.end is not None

    def rebased(self, origin: float) -> TimeWindow:
        """Offsets from ``origin`` -> absolute times (an absolute window comes back unchanged)."""
        if not self.relative:
            return self
        return TimeWindow(
            start=origin + self.start if self.start is not None else None,
            end=origin + self.end if self.end is not None else None,
        )

    def contains(self, t: float) -> bool:
        """``start`` inclusive, ``end`` exclusive (for an absolute window)."""
        return (self.start is None or t >= self.start) and (self.end is None or t < self.end)


WHOLE = TimeWindow()
