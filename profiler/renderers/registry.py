"""Every renderer this build has, in one registry (renderers layer).

A verb asks for the renderer of its model by --format or by the output file's extension:
``REGISTRY.pick(Analysis, fmt, output, default="text")``, ``REGISTRY.pick(FlameGraph, ...)``.
A new output (pprof, speedscope, ...) is a module with a renderer object, listed here.
The report formats come first, in the order an unknown-format message lists them.
"""

from __future__ import annotations

from typing import Any

from profiler.renderers import (
    cluster,
    flamegraph_svg,
    heatmap_svg,
    pprof_out,
    report_html,
    report_json,
    report_markdown,
    report_text,
    speedscope,
)
from profiler.renderers.protocol import BinaryRenderer, Registry, Renderer

REPORTS: Registry[Renderer[Any, Any]] = Registry(report_text.RENDERER, report_json.RENDERER, report_markdown.RENDERER,
                                                 report_html.RENDERER)
# the pictures: flame graphs, latency and sub-second heatmaps as SVG
PICTURES: Registry[Renderer[Any, Any]] = Registry(flamegraph_svg.RENDERER, heatmap_svg.LATENCY, heatmap_svg.SUBSECOND)

CLUSTER: Registry[Renderer[Any, Any]] = Registry(cluster.TEXT, cluster.JSON, cluster.MARKDOWN,
                                                 cluster.HTML)  # a cluster bundle's report

# Stacks for other tools (`profiler flamegraph --format pprof|speedscope`): a StackProfile as a
# gzipped pprof profile (binary) or a speedscope JSON file.
EXPORTS: Registry[Renderer[Any, Any] | BinaryRenderer[Any, Any]] = Registry(pprof_out.WRITER, speedscope.WRITER)

REGISTRY = REPORTS + PICTURES + CLUSTER
