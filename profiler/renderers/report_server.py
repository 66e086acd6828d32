"""The reports' server-status section (renderers layer): what each target's status port said.

Built from the analysis's ``server_status`` summary (analyzers/server/report.py), the same
data the JSON report carries: per target, goroutines by what they wait for (start, middle,
end), the largest wait sites, the window's mutex and block contention, the server's own CPU
profile's top functions, and the Grafana metrics with what they mean; for the capture, the
requests that failed, by kind. Names come from the server: the HTML template autoescapes
them, the text and markdown forms pass them through :func:`clean`.
"""

from __future__ import annotations

import re
from typing import Any

from profiler.analyzers.analysis import Analysis

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
KIND_ORDER = ("lock", "run", "syscall", "io", "chan", "select", "wait", "sleep", "runtime", "other")


def clean(text: object, limit: int = 160) -> str:
    s = _CONTROL.sub("?", str(text))
    return s if len(s) <= limit else s[: limit - 1] + "…"


def value(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "s":
        return f"{v * 1000:.2f} ms" if v < 1 else f"{v:.2f} s"
    if unit == "ratio":
        return f"{100 * v:.1f}%"
    if unit == "bytes":
        return f"{v / 1048576:.0f} MiB"
    if abs(v) >= 100:
        return f"{v:,.0f} {unit}"
    return f"{v:.3g} {unit}"


def _summary(a: Analysis) -> dict[str, Any] | None:
    from profiler.analyzers.server import report as server_report

    return server_report.summary(a.server, a.timeline.t0)


def html_context(a: Analysis, flame: bool, flame_why: str | None) -> dict[str, Any] | None:
    s = _summary(a)
    if s is None:
        return None
    targets = []
    for t in s["targets"]:
        kinds = [k for k in KIND_ORDER if any(g["by_kind"].get(k) for g in t["goroutines"])]
        targets.append({
            "t": t,
            "kinds": kinds,
            "metrics": [{"title": m["title"], "value": value(m["value"], m["unit"]),
                         "groups": ", ".join(f"{k}: {value(v, m['unit'])}" for k, v in list(m["groups"].items())[:6]
                                             if k != "all"),
                         "panel": m["panel"], "meaning": m["meaning"], "reading": m["reading"],
                         "range_panel": f"server_{str(m['key']).replace('.', '_')}_{t['pid']}"}
                        for m in t["metrics"]],
        })
    failures = [f"{n} {k}" for k, n in s["failures"].items()]
    reason = s.get("reason") or ""
    warnings = [w for w in a.warnings if w.startswith(("server-status", "/metrics of pid", "server-"))
                and not (reason and reason in w)]  # the collector's reason is said once, in capture health
    return {"s": s, "targets": targets, "failures": failures, "flame": flame, "flame_why": flame_why,
            "warnings": list(dict.fromkeys(warnings))}


def text_lines(a: Analysis) -> list[str]:
    """One or two lines per target for the terminal summary."""
    s = _summary(a)
    if s is None or not s["targets"]:
        return []
    out = []
    for t in s["targets"]:
        bits = []
        if t["goroutines"]:
            mid = t["goroutines"][len(t["goroutines"]) // 2]
            top = t["wait_sites"][0] if t["wait_sites"] else None
            bits.append(f"{mid['total']} goroutines" + (
                f", {top['goroutines']} in {clean(top['state'])} <- {clean(top['caller'] or top['op'])}" if top else ""))
        keys = [m for m in t["metrics"] if m["server"] != "go" and m["value"] is not None][:3]
        bits += [f"{clean(m['title'])} {value(m['value'], m['unit'])}" for m in keys]
        where = t["metrics_url"] or t["pprof_url"] or "no status port"
        out.append(f"  server-status: pid {t['pid']}" + (f" ({t['server']})" if t["server"] else "")
                   + f" at {clean(where)}: " + ("; ".join(bits) or "nothing read"))
    return out


def markdown_lines(a: Analysis) -> list[str]:
    s = _summary(a)
    if s is None or not s["targets"]:
        return []
    out = ["## Server status", ""]

    def md(text: object) -> str:
        return clean(text).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;").replace("`", "'")

    for t in s["targets"]:
        out.append(f"### pid {t['pid']}" + (f" ({t['server']})" if t["server"] else "")
                   + f": {md(t['metrics_url'] or t['pprof_url'] or 'no status port')}")
        out.append("")
        if t["wait_sites"]:
            out += ["| goroutines | state | waits in | called from |", "|---:|---|---|---|"]
            for w in t["wait_sites"][:10]:
                out.append(f"| {w['goroutines']} | {md(w['state'])} | {md(w['op'])} | {md(w['caller'])} |")
            out.append("")
        if t["metrics"]:
            out += ["| metric | value | Grafana |", "|---|---:|---|"]
            for m in t["metrics"][:20]:
                out.append(f"| {md(m['title'])} | {value(m['value'], m['unit'])} | {md(m['panel'])} |")
            out.append("")
    if s["failures"]:
        out.append("Failed requests: " + ", ".join(f"{n} {k}" for k, n in s["failures"].items()))
        out.append("")
    return out
