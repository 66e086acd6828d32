"""View of the bcc backend's in-kernel wait totals (analyzers layer).

futex.summary.json (futex waits per thread), futex.folded.gz (nanoseconds waited per stack,
rooted at the thread's comm) and offcpu.summary.json (off-CPU time per thread and state). The
perf backend has no such totals: its lock evidence is the futex stacks of the off-CPU view.
A member that cannot be read keeps its error, raised again where the verdict first needs it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from profiler.bundle import Bundle, members
from profiler.inputs import folded


@dataclass
class WaitTotals:
    """The summaries the capture holds: parsed JSON, or {stack: ns} for futex.folded.gz."""

    values: dict[str, Any] = field(default_factory=dict)  # member -> parsed content
    errors: dict[str, Exception] = field(default_factory=dict)  # member -> why it could not be read

    def has(self, member: str) -> bool:
        """Whether the capture holds the member (readable or not)."""
        return member in self.values or member in self.errors

    def get(self, member: str) -> Any:
        """The parsed member; raises the error it could not be read with."""
        if member in self.errors:
            raise self.errors[member]
        return self.values[member]


def _json(bundle: Bundle, name: str) -> Any:
    return json.loads("\n".join(bundle.iter_lines(name)))


def read_wait_totals(bundle: Bundle) -> WaitTotals | None:
    """The bcc summaries the capture holds, or None when it has none of them."""
    names = [n for n in (members.FUTEX_SUMMARY, members.FUTEX_FOLDED, members.OFFCPU_SUMMARY) if bundle.has(n)]
    if not names:
        return None
    out = WaitTotals()
    for name in names:
        try:
            if name == members.FUTEX_FOLDED:
                out.values[name] = folded.parse_folded(bundle.iter_lines(name), bundle.log(name))
            else:
                out.values[name] = _json(bundle, name)
        except Exception as exc:  # noqa: BLE001 - the verdict reports it, with lower confidence
            out.errors[name] = exc
    return out
