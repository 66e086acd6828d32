"""Analyze a cluster bundle and write its reports (usecases layer): `profiler analyze DIR` on a cluster.

Each node's bundle is analyzed like any bundle and gets its own ``report.html`` in its
directory; then the nodes are compared (analyzers/verdict/cluster.py) and the cluster report
is written to ``DIR/report.html``. Files are written through a fresh temporary name and a
rename, never through a link someone left in the bundle.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from profiler.analyzers.analysis import Analysis
from profiler.analyzers.verdict.cluster import ClusterAnalysis, NodeInput, compare
from profiler.bundle.cluster import ClusterManifest, load_cluster, node_path
from profiler.bundle.members import REPORT as REPORT_NAME
from profiler.errors import OutputError, ProfilerError
from profiler.files import write_output
from profiler.knowledge import knobs as knobmod
from profiler.renderers.protocol import ReportOptions
from profiler.renderers.registry import REGISTRY
from profiler.usecases.report import analysis_of
from profiler.usecases.report import render as render_node


def _summary(m: ClusterManifest) -> dict[str, object]:
    return {"status": m.status, "reason": m.reason, "created": m.created, "engine": m.engine,
            "controller": m.controller, "topology": m.topology, "duration": m.window.duration,
            "planned_start": m.window.planned_start, "stop_reason": m.window.stop_reason,
            "load": ({"argv": m.load.argv, "exit_code": m.load.exit_code} if m.load else None)}


def write_safely(path: Path, text: str, root: Path) -> None:
    """A report inside the cluster bundle ``root``: through profiler.files (a fresh temporary file
    and a rename; a planted link, device or pipe is replaced, never followed or written into, and
    no link at any level between ``root`` and the file is followed)."""
    write_output(path, text, force=True, root=root)


def cluster_analysis(root: str | Path, *, node_reports: bool = True) -> ClusterAnalysis:
    """Every node analyzed (and, with ``node_reports``, its own report.html written), then compared."""
    base = Path(root)
    m = load_cluster(base)
    nodes: list[NodeInput] = []
    warnings: list[str] = []
    for rec in m.nodes:
        analysis = None
        report = None
        path = node_path(base, rec)
        if path is not None and path.is_dir():
            try:
                analysis = analysis_of(path, within=base)
            except ProfilerError as exc:
                warnings.append(f"{rec.name}: its bundle cannot be analyzed: {exc}")
            if analysis is not None and node_reports:
                try:
                    write_safely(path / REPORT_NAME, render_node(analysis, "html"), base)
                    report = f"{rec.dir}/{REPORT_NAME}"
                except OutputError as exc:
                    warnings.append(f"{rec.name}: its report could not be written: {exc}")
        nodes.append(NodeInput(name=rec.name, host=rec.host, role=rec.role, status=rec.status, reason=rec.reason,
                               targets=list(rec.targets), report=report, clock_offset=rec.clock.offset,
                               clock_uncertainty=rec.clock.uncertainty, start_skew=rec.start_skew,
                               analysis=analysis, knobs=node_knobs(rec.role, analysis),
                               server=node_server(analysis)))
    return compare(nodes, bundle=str(base), capture=_summary(m), warnings=warnings)


def node_knobs(role: str, a: Analysis | None) -> list[dict[str, Any]]:
    """The node's knobs from its topology (server_configs, the instance's config: the agent keeps
    them in the node's manifest), each beside the pools it sizes as this capture measured them;
    the pool knobs first."""
    if a is None:
        return []
    cluster = (a.manifest.get("options") or {}).get("cluster")
    cfg = cluster.get("config") if isinstance(cluster, dict) else None
    if not isinstance(cfg, dict):
        return []
    measured: dict[str, dict[str, Any]] = {}
    for t in a.metrics.targets:
        for pm in t.time.pools:
            measured.setdefault(pm.pool, {"pool": pm.pool, "threads": pm.threads, "cpu_cores": round(pm.cpu_cores, 3),
                                          "util": round(pm.util, 3), "demand": round(pm.demand, 3)})
    rows = []
    for knob, value in cfg.items():
        sizes = knobmod.pools_of(knob) if role == "tikv" else ()
        pools = [measured[name] for name in sizes if name in measured]
        rows.append({"knob": str(knob), "value": value, "sizes": list(sizes), "pools": pools,
                     "note": knobmod.TIDB_KNOBS.get(knob) if role == "tidb" else None})
    rows.sort(key=lambda r: (not (r["sizes"] or r["note"]), r["knob"]))
    return rows[:200]


def node_server(a: Analysis | None) -> list[dict[str, Any]]:
    """The key metrics each target's status port gave over the window (analyzers/server)."""
    if a is None or a.server is None:
        return []
    rows: list[dict[str, Any]] = []
    for ts in sorted(a.server.targets.values(), key=lambda t: t.pid):
        for kv in ts.keys:
            v = kv.total
            if v is None or not math.isfinite(v):
                continue
            rows.append({"pid": ts.pid, "server": ts.server, "key": kv.info.key, "title": kv.info.title,
                         "unit": kv.info.unit, "value": round(float(v), 6)})
    return rows


def render(ca: ClusterAnalysis, fmt: str, report_path: str | None = None) -> str:
    return str(REGISTRY.pick(ClusterAnalysis, fmt).render(ca, ReportOptions(report_path=report_path)))


def report(root: str | Path, fmt: str) -> str:
    """`profiler report DIR` on a cluster bundle: the cluster report in one format."""
    return render(cluster_analysis(root, node_reports=fmt == "html"), fmt)


def default_report(root: str | Path, html_path: str | Path | None = None, *, write_html: bool = True,
                   force: bool = False) -> str:
    """`profiler analyze DIR`: node reports, DIR/report.html (or ``html_path``: the overwrite rule,
    ``force``), the text summary back."""
    ca = cluster_analysis(root, node_reports=write_html)
    shown = None
    if write_html:
        if html_path is not None:
            write_output(html_path, render(ca, "html"), force=force)
            shown = str(html_path)
        else:
            write_safely(Path(root) / REPORT_NAME, render(ca, "html"), Path(root))
            shown = str(Path(root) / REPORT_NAME)
    return render(ca, "text", shown)
