"""Reports of a cluster capture (renderers layer): a ClusterAnalysis in text, json, md and html.

One page for the whole cluster: the cluster verdict and the tier that limits it, a table of
every node (host, role, status, verdict, CPU, a link to the node's own report), peers out of
balance, the clock offsets and start skew of the window, and a flame graph per role drawn by
the flame graph renderer. Node and frame names come from the cluster: escaped everywhere.
"""

from __future__ import annotations

import json
import re
from typing import Any

from markupsafe import Markup, escape

from profiler.analyzers.verdict.cluster import ClusterAnalysis
from profiler.renderers import flamegraph_svg, formatting, jinja_env
from profiler.renderers.protocol import ReportOptions
from profiler.untrusted import markdown, sanitize

TEMPLATE = "cluster.html.j2"
CATEGORY_COLOURS = {
    "cpu": "#b8434e", "io_wait": "#d9822b", "memory": "#7b5ea7", "lock_contention": "#c75fa0", "not_saturated": "#3a9a5b",
}


def _title(category: str | None) -> str:
    return formatting.CATEGORY_TITLES.get(category or "", "no verdict")


def _cores(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.2f} ms"


def _metric(row: dict[str, Any]) -> str:
    """One server metric of a node: ``Queries per second by statement type 1,234 queries/s``."""
    v, unit = row.get("value"), str(row.get("unit") or "")
    if not isinstance(v, int | float):
        return f"{row.get('title')} -"
    if unit == "s":
        return f"{row.get('title')} {v * 1000:.2f} ms"
    if unit == "ratio":
        return f"{row.get('title')} {100 * v:.0f}%"
    if unit == "bytes":
        return f"{row.get('title')} {v / 2**20:,.1f} MiB"
    return f"{row.get('title')} {v:,.0f} {unit}".rstrip() if abs(v) >= 100 else f"{row.get('title')} {v:.3g} {unit}".rstrip()


def _knob(row: dict[str, Any]) -> str:
    """``server.grpc-concurrency = 2: grpc-server 2 threads, 0.95 cores, 48% of its size``."""
    text = f"{row.get('knob')} = {json.dumps(row.get('value'))}"
    pools = [f"{p['pool']} {p['threads']} thread{'s' if p['threads'] != 1 else ''}, {p['cpu_cores']:.2f} cores, "
             f"{100 * p['util']:.0f}% of its size" for p in row.get("pools") or []]
    if pools:
        return f"{text}: {'; '.join(pools)}"
    if row.get("sizes"):
        return f"{text}: sizes {', '.join(row['sizes'])} (no such threads in this capture)"
    return text + (f": {row['note']}" if row.get("note") else "")


class ClusterText:
    """The terminal summary: cluster verdict, one line per node, imbalances."""

    model = ClusterAnalysis
    formats = ("text", "txt", "terminal")
    extensions = (".txt",)

    def render(self, model: ClusterAnalysis, options: ReportOptions | None = None) -> str:
        v = model.verdict
        lines = [f"cluster verdict: {_title(v.category).upper()}" + (f" (limiting tier: {v.limiting_tier})" if v.limiting_tier else ""),
                 f"  {v.headline}"]
        lines += [f"  - {r}" for r in v.reasons]
        rows = [("node", "role", "status", "verdict", "cpu", "targets")]
        for n in model.nodes:
            targets = ", ".join(f"{t.get('comm')} ({t.get('pid')})" if "pid" in t else str(t.get("query"))
                                for t in n.targets) or "-"
            rows.append((n.name, n.role, n.status, _title(n.verdict.category) if n.verdict else "-",
                         _cores(n.metrics.get("cpu_cores")), targets))
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        lines.append("")
        for r in rows:
            lines.append("  " + "  ".join(r[i].ljust(widths[i]) for i in range(5)) + "  " + r[5])
        for n in model.nodes:
            if n.reason and n.status != "ok":
                lines.append(f"  {n.name}: {n.reason}")
        for n in model.nodes:
            if n.server:
                lines.append(sanitize(f"  {n.name} server: " + "; ".join(_metric(r) for r in n.server[:6]), newlines=False))
            for k in n.knobs:
                if k.get("sizes") or k.get("note"):
                    lines.append(sanitize(f"  {n.name} knob: {_knob(k)}", newlines=False))
        if model.imbalances:
            lines.append("")
            lines += [f"imbalance: {i.note}" for i in model.imbalances]
        for w in model.warnings:
            lines.append(f"warning: {w}")
        if options is not None and options.report_path:
            lines += ["", f"report: {options.report_path} (each node's own report: nodes/<node>/report.html)"]
        # names, roles, hosts and reasons come from another machine's cluster.json: no escape
        # sequence or line break of theirs reaches the terminal (as report_text does)
        return "\n".join(sanitize(line.rstrip(), newlines=False) for line in lines) + "\n"


class ClusterJson:
    """Schema ``profiler.cluster-report`` v1: ``verdict``, ``nodes[]`` (host, role, targets, verdict), roles, imbalances."""

    model = ClusterAnalysis
    formats = ("json",)
    extensions = (".json",)

    def render(self, model: ClusterAnalysis, options: ReportOptions | None = None) -> str:
        return json.dumps(model.to_dict(), indent=2, sort_keys=True, allow_nan=False) + "\n"


class ClusterMarkdown:
    model = ClusterAnalysis
    formats = ("md", "markdown")
    extensions = (".md", ".markdown")

    def render(self, model: ClusterAnalysis, options: ReportOptions | None = None) -> str:
        v = model.verdict

        def cell(s: Any) -> str:  # names and roles come from another machine's cluster.json: text, never markup
            return markdown(s)

        out = [f"# Cluster report: {_title(v.category)}", "", f"**{cell(v.headline)}**", ""]
        out += [f"- {cell(r)}" for r in v.reasons]
        out += ["", "| node | role | status | verdict | CPU (cores) | report |", "| --- | --- | --- | --- | ---: | --- |"]
        for n in model.nodes:
            link = f"[report]({n.report})" if n.report else "-"
            out.append(f"| {cell(n.name)} | {cell(n.role)} | {cell(n.status)} | "
                       f"{cell(_title(n.verdict.category) if n.verdict else '-')} | {_cores(n.metrics.get('cpu_cores'))} | {link} |")
        if any(n.server for n in model.nodes):
            out += ["", "## Server metrics per node", "", "| node | server (pid) | metric | value |", "| --- | --- | --- | ---: |"]
            for n in model.nodes:
                for r in n.server:
                    out.append(f"| {cell(n.name)} | {cell(r.get('server'))} ({r.get('pid')}) | {cell(r.get('title'))} | "
                               f"{cell(_metric(r)[len(str(r.get('title'))) + 1:])} |")
        if any(n.knobs for n in model.nodes):
            out += ["", "## Configured knobs beside the pools they size", "", "| node | knob | value | pools (as captured) |",
                    "| --- | --- | --- | --- |"]
            for n in model.nodes:
                for k in n.knobs:
                    out.append(f"| {cell(n.name)} | {cell(k['knob'])} | {cell(json.dumps(k['value']))} | "
                               f"{cell(_knob(k).split(': ', 1)[1] if ': ' in _knob(k) else '-')} |")
        if model.imbalances:
            out += ["", "## Imbalance between peers", ""] + [f"- {cell(i.note)}" for i in model.imbalances]
        if model.warnings:
            out += ["", "## Warnings", ""] + [f"- {cell(w)}" for w in model.warnings]
        return "\n".join(out) + "\n"


def _flame_frame(svg: str) -> Markup:
    m = re.search(r'<svg[^>]*\sheight="(\d+)', svg)
    height = int(m.group(1)) + 8 if m else 600
    doc = "<style>html,body{margin:0}svg{display:block;width:100%;height:auto}</style>" + svg
    return Markup(f'<iframe class="artifact" sandbox="allow-scripts" style="height:{min(height, 1400)}px" '
                  f'srcdoc="{escape(doc)}"></iframe>')


class ClusterHtml:
    """One self-contained page; each node's own report is one click away (nodes/<node>/report.html)."""

    model = ClusterAnalysis
    formats = ("html", "htm")
    extensions = (".html", ".htm")

    def render(self, model: ClusterAnalysis, options: ReportOptions | None = None) -> str:
        flames = []
        for role, fg in sorted(model.flames.items()):
            try:
                flames.append({"role": role, "svg": _flame_frame(flamegraph_svg.RENDERER.render(fg)), "why": None})
            except Exception as exc:  # noqa: BLE001 - one broken picture must not sink the report
                flames.append({"role": role, "svg": None, "why": f"could not be drawn: {type(exc).__name__}: {exc}"})
        v = model.verdict
        return jinja_env.render(
            TEMPLATE, c=model, v=v, title=_title(v.category), colour=CATEGORY_COLOURS.get(v.category, "#6b7a8f"),
            colours=CATEGORY_COLOURS, titles=formatting.CATEGORY_TITLES, flames=flames, cores=_cores, ms=_ms,
            metric=_metric, knob=_knob,
            css=Markup(jinja_env.asset("report.css")), data=model.to_dict())


TEXT = ClusterText()
JSON = ClusterJson()
MARKDOWN = ClusterMarkdown()
HTML = ClusterHtml()
