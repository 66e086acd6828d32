"""The renderer registry: picking by --format and by extension, pictures by model, one Jinja environment."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
from profiler.analyzers.analysis import Analysis
from profiler.analyzers.io.heatmap import Heatmap, LatencyHeatmap
from profiler.analyzers.io.hist_heatmap import HistHeatmap
from profiler.analyzers.stacks.flame import FlameGraph, Node
from profiler.analyzers.stacks.subsecond import SubsecondHeatmap

from profiler.errors import UsageError
from profiler.renderers import (
    flamegraph_svg,
    heatmap_svg,
    jinja_env,
    report_html,
    report_markdown,
    report_text,
)
from profiler.renderers.registry import REGISTRY
from tests.conftest import ROOT


@pytest.mark.parametrize(("fmt", "output", "want"), [
    ("md", None, report_markdown.RENDERER),
    ("markdown", None, report_markdown.RENDERER),
    (None, "r.HTML", report_html.RENDERER),
    (None, "r.htm", report_html.RENDERER),
    (None, "r.markdown", report_markdown.RENDERER),
    (None, "r.terminal", report_text.RENDERER),  # a file named after a format name
    (None, "noext", report_text.RENDERER),  # no extension: the default
    (None, None, report_text.RENDERER),
    ("html", "r.md", report_html.RENDERER),  # --format wins over the extension
])
def test_pick_a_report(fmt: str | None, output: str | None, want: object) -> None:
    assert REGISTRY.pick(Analysis, fmt, output, default="text") is want


@pytest.mark.parametrize(("fmt", "output", "named"), [("pdf", None, "pdf"), (None, "r.svg", "svg"), ("MD", None, "MD")])
def test_unknown_report_format_names_the_choices(fmt: str | None, output: str | None, named: str) -> None:
    with pytest.raises(UsageError, match=rf"unknown format '{named}': choose one of text, json, md, html$"):
        REGISTRY.pick(Analysis, fmt, output, default="text")


def test_pictures_are_found_by_their_model() -> None:
    panel = Heatmap(t0=0.0, step=1.0, row_edges=np.array([1e-4, 1e-3]), log=True, counts=np.ones((1, 1), np.int64),
                    p50=np.array([5e-4]), p99=np.array([9e-4]))
    assert REGISTRY.find(FlameGraph(root=Node("all")), "svg") is flamegraph_svg.RENDERER
    assert REGISTRY.find(LatencyHeatmap(panels=[panel]), "svg") is heatmap_svg.LATENCY
    assert REGISTRY.find(HistHeatmap(panels=[panel], subtitle=""), "svg") is heatmap_svg.LATENCY  # bcc: same picture
    assert REGISTRY.find(SubsecondHeatmap(t0=0.0, rows=50, counts=np.zeros((1, 50), np.int64)), "svg") is heatmap_svg.SUBSECOND
    assert REGISTRY.find(object(), "svg") is None
    assert REGISTRY.pick(FlameGraph, None, "x.SVG") is flamegraph_svg.RENDERER
    with pytest.raises(UsageError, match="unknown format 'html': choose one of svg$"):
        REGISTRY.pick(FlameGraph, "html")


def test_bcc_columns_are_drawn_wider_than_chosen_steps() -> None:
    counts = np.zeros((10, 1), np.int64)
    counts[:, 0] = 3
    panel = Heatmap(t0=0.0, step=1.0, row_edges=np.array([1e-4, 1e-3]), log=True, counts=counts,
                    p50=np.full(10, 5e-4), p99=np.full(10, 9e-4))
    perf = heatmap_svg.LATENCY.render(LatencyHeatmap(panels=[panel]))
    bcc = heatmap_svg.LATENCY.render(HistHeatmap(panels=[panel], subtitle="bcc"))
    assert 'width="14.00"' in perf and 'width="60.00"' in bcc


def test_one_autoescaping_environment_for_every_template() -> None:
    env = jinja_env.environment()
    assert env is jinja_env.environment() and env.autoescape is True
    assert jinja_env.render("report.css") == jinja_env.asset("report.css")
    out = flamegraph_svg.RENDERER.render(FlameGraph(root=Node("all"), title="<script>x</script>"))
    assert "<script>x</script>" not in out and "&lt;script&gt;x&lt;/script&gt;" in out


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_report_verbs_import_neither_each_other_nor_importlib() -> None:
    analyze_cli = _imports(ROOT / "profiler/cli/analyze.py")
    report_cli = _imports(ROOT / "profiler/cli/report.py")
    assert not any(n.startswith("profiler.cli.report") for n in analyze_cli)
    assert not any(n.startswith("profiler.cli.analyze") for n in report_cli)
    for path in sorted((ROOT / "profiler/renderers").glob("*.py")):
        names = _imports(path)
        text = path.read_text()
        assert "import_module" not in text and "find_spec" not in text, path.name  # renderers are listed, never looked up
        assert not any(n.startswith(("profiler.cli", "profiler.usecases")) for n in names), path.name
        # models in, documents out: no bundle reader, no analysis run (member names as constants are fine)
        assert not names & {"profiler.bundle.Bundle", "profiler.bundle.reader", "profiler.analyzers.analysis.analyze"}, path.name
