"""JSON report of an Analysis (renderers layer): schema ``profiler.report`` v1, see docs/report-json.md."""

from __future__ import annotations

import json

from profiler.analyzers.analysis import Analysis
from profiler.renderers.protocol import ReportOptions


class JsonReport:
    """The analysis as machine-readable JSON: sorted keys, no NaN, one trailing newline."""

    model = Analysis
    formats = ("json",)
    extensions = (".json",)

    def render(self, model: Analysis, options: ReportOptions | None = None) -> str:
        return json.dumps(model.to_dict(), indent=2, sort_keys=True, allow_nan=False) + "\n"


RENDERER = JsonReport()
