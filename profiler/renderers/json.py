"""JSON report of an Analysis (output layer): schema ``profiler.report`` v1, see docs/report-json.md."""

from __future__ import annotations

import json as _json

from profiler.analyzers.analysis import Analysis


def render(a: Analysis) -> str:
    return _json.dumps(a.to_dict(), indent=2, sort_keys=True, allow_nan=False) + "\n"
