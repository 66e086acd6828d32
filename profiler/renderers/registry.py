"""Every renderer this build has, in one registry (renderers layer).

A verb asks for the renderer of its model by --format or by the output file's extension:
``REGISTRY.pick(Analysis, fmt, output, default="text")``, ``REGISTRY.pick(FlameGraph, ...)``.
A new output (pprof, speedscope, ...) is a module with a renderer object, listed here.
The report formats come first, in the order an unknown-format message lists them.
"""

from __future__ import annotations

from profiler.renderers import cluster, report_html, report_json, report_markdown, report_text
from profiler.renderers.protocol import Registry

REPORTS = Registry(report_text.RENDERER, report_json.RENDERER, report_markdown.RENDERER, report_html.RENDERER)
PICTURES = report_html.PICTURES  # the SVGs the HTML report embeds: flame graphs, latency and sub-second heatmaps

CLUSTER = Registry(cluster.TEXT, cluster.JSON, cluster.MARKDOWN, cluster.HTML)  # a cluster bundle's report

REGISTRY = REPORTS + PICTURES + CLUSTER
