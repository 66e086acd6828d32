"""What the reports show of the server-status view (analyzers layer): panels, a flame graph, a summary.

- :func:`add_panels`: the timeline's panels (analyzers.series.timeline's model): goroutines by
  what they wait for (from the goroutine snapshots) and the metrics knowledge marks for the
  timeline (query and gRPC durations, QPS, thread CPU by pool, hit ratios, GC CPU...), each
  value spread over the buckets of the interval it stands for, on the capture clock;
- :func:`goroutine_flame`: the goroutine view: a flame graph of the goroutines' stacks rooted
  at what they wait for (``sync.Mutex.Lock``, ``chan receive``, ``IO wait``...), from the
  snapshot in the middle of the window (all targets' snapshots merged, each rooted at its pid
  when there are several);
- :func:`summary`: the JSON report's ``server_status`` (docs/report-json.md).
"""

from __future__ import annotations

import math
from typing import Any

from profiler.analyzers.series.timeline import Panel, Timeline
from profiler.analyzers.server.goroutines import KINDS, GoroutineSnapshot
from profiler.analyzers.server.view import ServerStatusView, TargetStatus, printable
from profiler.analyzers.stacks.flame import FlameGraph, build_tree

from profiler.knowledge.servers import SERVER_NAMES

KIND_TITLES = {"lock": "queued on a lock", "io": "IO wait (network)", "syscall": "in a syscall", "chan": "channel",
               "select": "select", "wait": "WaitGroup/Cond", "sleep": "sleep", "runtime": "runtime (idle)",
               "run": "running or runnable", "other": "other wait", "queue": "queued for a slot (tokens, semaphore)",
               "rpc": "waiting for another tier (RPC)", "commit": "waiting for raft commit", "backoff": "backoff before a retry"}
UNITS = {"s": "ms", "bytes": "MiB"}  # how the timeline shows a unit
_SCALE = {"s": 1000.0, "bytes": 1 / 1048576}


def _edges(tl: Timeline) -> list[float] | None:
    if tl.t0 is None or not tl.t:
        return None
    return [tl.t0 + t for t in tl.t] + [tl.t0 + tl.t[-1] + tl.step]


def _spread(edges: list[float], spans: list[tuple[float, float]], values: list[float | None]) -> list[float | None]:
    """One value per bucket: the value of the interval that covers the bucket's middle (the last
    one when none does but a value falls inside the bucket)."""
    out: list[float | None] = [None] * (len(edges) - 1)
    for (a, b), v in zip(spans, values, strict=False):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        for i in range(len(out)):
            mid = (edges[i] + edges[i + 1]) / 2
            inside = a <= mid < b if b > a else edges[i] <= a < edges[i + 1]
            if inside:
                out[i] = round(float(v), 6)
    return out


def _label(ts: TargetStatus, many: bool) -> str:
    name = SERVER_NAMES.get(ts.server or "", "")
    return f"{name} pid {ts.pid}".strip() if many else ""


def add_panels(tl: Timeline, view: ServerStatusView | None) -> None:
    """Add the server panels to the timeline (nothing when there is no view or no timeline)."""
    edges = _edges(tl)
    if view is None or edges is None:
        return
    many = len([t for t in view.targets.values() if t.scrapes or t.goroutines]) > 1
    for ts in sorted(view.targets.values(), key=lambda t: t.pid):
        prefix = _label(ts, many)
        if len(ts.goroutines) >= 1:
            snaps = ts.goroutines
            times = [s.t for s in snaps]
            spans = list(zip(times, times[1:] + [times[-1] + max(1e-6, (times[-1] - times[0]) or 1.0)], strict=True))
            p = Panel(f"Goroutines by what they wait for{' · ' + prefix if prefix else ''}", "goroutines", stacked=True)
            for kind in KINDS:
                vals: list[float | None] = [float(s.by_kind.get(kind, 0)) for s in snaps]
                if any(vals):
                    p.series[KIND_TITLES[kind]] = _spread(edges, spans, vals)
            if p.series:
                tl.panels[f"server_goroutines_{ts.pid}"] = p
        for kv in ts.keys:
            if not kv.info.timeline or not kv.series or not kv.spans:
                continue
            unit = UNITS.get(kv.info.unit, kv.info.unit)
            scale = _SCALE.get(kv.info.unit, 1.0)
            p = Panel(f"{kv.info.title}{' · ' + prefix if prefix else ''} ({SERVER_NAMES.get(kv.info.server, '')} /metrics)",
                      unit)
            for group, vals in kv.series.items():
                scaled = [None if v is None else v * scale for v in vals]
                p.series[printable(group, 60)] = _spread(edges, kv.spans, scaled)
            if any(v is not None for vs in p.series.values() for v in vs):
                tl.panels[f"server_{kv.info.key.replace('.', '_')}_{ts.pid}"] = p


def _middle(snaps: list[GoroutineSnapshot]) -> GoroutineSnapshot | None:
    if not snaps:
        return None
    return snaps[len(snaps) // 2]


def _picked(view: ServerStatusView | None) -> list[tuple[TargetStatus, GoroutineSnapshot]]:
    if view is None:
        return []
    picked = [(ts, _middle(ts.goroutines)) for ts in sorted(view.targets.values(), key=lambda t: t.pid)]
    return [(ts, s) for ts, s in picked if s is not None and s.total]


def goroutine_folded(view: ServerStatusView | None) -> dict[str, int]:
    """Folded goroutine stacks of each target's middle snapshot, rooted at the wait
    (``IO wait;main.main;...``), under ``pid N`` when several targets have goroutines."""
    picked = _picked(view)
    counts: dict[str, int] = {}
    for ts, snap in picked:
        for line, n in snap.folded.items():
            key = f"pid {ts.pid};{line}" if len(picked) > 1 else line
            counts[key] = counts.get(key, 0) + n
    return counts


def goroutine_flame(view: ServerStatusView | None) -> FlameGraph | None:
    """Goroutines' stacks rooted at what they wait for, from each target's middle snapshot."""
    picked = _picked(view)
    if view is None or not picked:
        return None
    counts = goroutine_folded(view)
    total = sum(counts.values())
    notes = [f"{s.total} goroutines of pid {ts.pid} at {s.t - (view_t0(view) or s.t):.1f}s ({s.source})"
             for ts, s in picked if s is not None]
    return FlameGraph(root=build_tree(counts), title="Goroutines by what they wait for",
                      subtitle=f"{total} goroutines, the middle snapshot of the window; root: the wait", unit="goroutines",
                      notes=notes)


def view_t0(view: ServerStatusView) -> float | None:
    ts = [s.t for t in view.targets.values() for s in t.scrapes] + [g.t for t in view.targets.values() for g in t.goroutines]
    return min(ts) if ts else None


def _num(v: float | None) -> float | None:
    return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else round(float(v), 6)


def summary(view: ServerStatusView | None, t0: float | None) -> dict[str, Any] | None:
    """The JSON report's ``server_status``: None when the capture had no server-status collector."""
    if view is None:
        return None
    out: dict[str, Any] = {"status": view.status, "reason": view.reason, "requests": view.requests,
                           "failures": dict(sorted(view.failures.items())), "targets": []}
    base = t0 or 0.0
    for ts in sorted(view.targets.values(), key=lambda t: t.pid):
        item: dict[str, Any] = {
            "pid": ts.pid, "server": ts.server, "metrics_url": ts.metrics_url, "pprof_url": ts.pprof_url,
            "source": ts.source, "scrapes": len(ts.scrapes), "bad_metric_lines": ts.bad_lines,
            "goroutines": [{"t": round(g.t - base, 3), "total": g.total, "source": g.source,
                            "by_state": dict(sorted(g.by_state.items())), "by_kind": dict(sorted(g.by_kind.items()))}
                           for g in ts.goroutines],
            "wait_sites": [],
            "metrics": [],
            "mutex": None, "block": None, "cpu": None,
        }
        mid = _middle(ts.goroutines)
        if mid is not None:
            item["wait_sites"] = [{"state": g.state, "kind": g.kind, "op": g.op, "caller": g.caller, "goroutines": g.count}
                                  for g in mid.groups[:15]]
        for name in ("mutex", "block"):
            cp = getattr(ts, name)
            if cp is not None:
                item[name] = {"enabled": cp.enabled, "seconds": _num(cp.seconds), "contentions": _num(cp.contentions),
                              "delay_s": _num(cp.delay_s), "delay_per_s": _num(cp.delay_per_s),
                              "top": [{"site": c.site, "leaf": c.leaf, "contentions": _num(c.contentions),
                                       "delay_s": _num(c.delay_s)} for c in cp.top[:8]]}
        if ts.cpu is not None:
            item["cpu"] = {"seconds": _num(ts.cpu.seconds), "cpu_s": _num(ts.cpu.cpu_s),
                           "top": [{"function": f, "share": _num(s)} for f, s in ts.cpu.flat]}
        for kv in ts.keys:
            item["metrics"].append({
                "key": kv.info.key, "server": kv.info.server, "metric": kv.metric, "title": kv.info.title,
                "unit": kv.info.unit, "value": _num(kv.total), "groups": {k: _num(v) for k, v in kv.window.items()},
                "panel": kv.info.panel, "meaning": kv.info.meaning, "reading": kv.info.reading})
        out["targets"].append(item)
    return out
