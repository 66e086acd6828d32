"""The IO latency heatmap of either backend, as the HTML report asks for it (renderer layer).

A perf capture's model (analyzers.iostats.IoAnalysis) goes to heatmap_svg.render_svg; a bcc
capture's (analyzers.histheatmap.HistHeatmap, panels built from in-kernel histograms) to the
same panel renderer, heatmap_svg.render, so both pictures read alike.
"""

from __future__ import annotations

from typing import Any

from profiler.analyzers.io.hist_heatmap import HistHeatmap
from profiler.renderers import heatmap_svg


def render_svg(model: Any) -> str:
    if isinstance(model, HistHeatmap):
        return heatmap_svg.render(model.panels, title="Block IO latency heatmap", subtitle=model.subtitle,
                                  totals=model.totals, max_cell_width=60.0)
    return heatmap_svg.render_svg(model)
