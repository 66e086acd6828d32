"""Comparing the nodes of a cluster capture (analyzers layer): verdict per node, the limiting tier, peers out of balance.

Input: one :class:`NodeInput` per node of the cluster bundle (what the cluster manifest says
about it) with that node's own :class:`Analysis` when its bundle could be read. Output: a
:class:`ClusterAnalysis`, which the cluster renderers draw and whose ``to_dict()`` is the
JSON report (schema ``profiler.cluster-report``, docs/cluster.md).

Rules, each small and named:

- ``node_verdict``: a node's verdict is its own bundle's overall verdict (the most severe of
  its targets); a node without a bundle has none, and says why.
- ``limiting_tier``: the role (tidb, tikv, pd, ...) whose most saturated node scores highest
  among the saturated nodes (score >= PRIMARY); none when no node is saturated.
- ``peer_imbalance``: per role with two or more nodes, per metric (CPU cores used by the
  targets, read and write bytes/s): the busiest and the idlest node, flagged when the idlest
  does at most half of the busiest (two peers) or strays from the median by 30 % (three or
  more), above a floor that keeps idle clusters quiet. Seeds 001 and 002: "the load falls on
  the leader", "one TiKV is lower than its peers".
- a flame graph per role: every node's on-CPU stacks under one root per node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from profiler.analyzers.analysis import Analysis
from profiler.analyzers.stacks import flame as flamemod
from profiler.analyzers.verdict.findings import PRIMARY, Verdict

from profiler import __version__

SCHEMA = "profiler.cluster-report"
VERSION = 1

# metric -> (floor under which peers are not compared, unit, scale for the note)
PEER_METRICS: dict[str, tuple[float, str, float]] = {
    "cpu_cores": (0.05, "cores", 1.0),
    "write_bps": (float(1 << 20), "MiB/s", 1 / 1048576),
    "read_bps": (float(1 << 20), "MiB/s", 1 / 1048576),
}
TWO_PEER_RATIO = 0.5  # two peers: the idler one does at most half the other's
MEDIAN_LOW, MEDIAN_HIGH = 0.7, 1.4  # three or more: this far from the median


@dataclass
class NodeInput:
    """What the cluster manifest says about one node (built by the use case)."""

    name: str
    host: str
    role: str
    status: str
    reason: str | None = None
    targets: list[str] = field(default_factory=list)  # what was asked
    report: str | None = None  # relative link to the node's own report, if written
    clock_offset: float | None = None
    clock_uncertainty: float | None = None
    start_skew: float | None = None
    analysis: Analysis | None = None
    knobs: list[dict[str, Any]] = field(default_factory=list)  # its topology's knobs beside the pools they size
    server: list[dict[str, Any]] = field(default_factory=list)  # its servers' key metrics over the window


@dataclass
class NodeResult:
    name: str
    host: str
    role: str
    status: str
    reason: str | None
    targets: list[dict[str, Any]]  # pid, comm, kind of every target found
    verdict: Verdict | None
    metrics: dict[str, float | None]
    report: str | None
    clock_offset: float | None
    clock_uncertainty: float | None
    start_skew: float | None
    knobs: list[dict[str, Any]] = field(default_factory=list)
    server: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "host": self.host, "role": self.role, "status": self.status, "reason": self.reason,
            "targets": self.targets, "verdict": self.verdict.to_dict() if self.verdict else None,
            "metrics": {k: _round(v) for k, v in sorted(self.metrics.items())}, "report": self.report,
            "clock": {"offset": _round(self.clock_offset, 6), "uncertainty": _round(self.clock_uncertainty, 6)},
            "start_skew": _round(self.start_skew, 6), "knobs": self.knobs, "server": self.server,
        }


@dataclass
class PeerImbalance:
    role: str
    metric: str
    values: dict[str, float]  # node name -> value
    busiest: str
    idlest: str
    ratio: float  # idlest / busiest (two peers) or outlier / median
    outlier: str  # the node that strays (the idlest for two peers)
    note: str


@dataclass
class RoleResult:
    role: str
    nodes: list[str]
    captured: list[str]  # nodes with a verdict
    saturated: list[str]  # nodes whose verdict is a bottleneck
    score: float  # the highest bottleneck score among its nodes (0 when none)
    category: str  # that node's category, or not_saturated
    cpu_cores: float | None  # the role's targets together


@dataclass
class ClusterVerdict:
    category: str
    headline: str
    limiting_tier: str | None
    limiting_node: str | None
    score: float
    reasons: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"category": self.category, "headline": self.headline, "limiting_tier": self.limiting_tier,
                "limiting_node": self.limiting_node, "score": round(self.score, 3), "reasons": list(self.reasons)}


@dataclass
class ClusterAnalysis:
    bundle: str
    capture: dict[str, Any]  # the parts of the cluster manifest a report shows
    nodes: list[NodeResult]
    roles: list[RoleResult]
    verdict: ClusterVerdict
    imbalances: list[PeerImbalance]
    flames: dict[str, flamemod.FlameGraph]  # role -> on-CPU flame graph, one root per node
    warnings: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "version": VERSION, "tool_version": __version__, "bundle": self.bundle,
            "capture": self.capture,
            "verdict": self.verdict.to_dict(),
            "nodes": [n.to_dict() for n in self.nodes],
            "roles": [{"role": r.role, "nodes": r.nodes, "captured": r.captured, "saturated": r.saturated,
                       "score": round(r.score, 3), "category": r.category, "cpu_cores": _round(r.cpu_cores)}
                      for r in self.roles],
            "imbalances": [{"role": i.role, "metric": i.metric, "values": {k: _round(v) for k, v in sorted(i.values.items())},
                            "busiest": i.busiest, "idlest": i.idlest, "outlier": i.outlier, "ratio": _round(i.ratio),
                            "note": i.note} for i in self.imbalances],
            "flame_graphs": sorted(self.flames),
            "warnings": list(self.warnings),
        }


def _round(v: float | None, digits: int = 4) -> float | None:
    if v is None:
        return None
    return round(float(v), digits)


# --------------------------------------------------------------------------- rules


def node_verdict(node: NodeInput) -> Verdict | None:
    """The node's own overall verdict, or None when it has no readable bundle."""
    return node.analysis.verdict.overall if node.analysis is not None else None


def node_metrics(a: Analysis | None) -> dict[str, float | None]:
    """The node's targets together: CPU cores used, bytes read and written per second."""
    out: dict[str, float | None] = {k: None for k in PEER_METRICS}
    if a is None:
        return out
    for key in PEER_METRICS:
        vals = [getattr(t.process, key) for t in a.metrics.targets if getattr(t.process, key, None) is not None]
        out[key] = float(sum(vals)) if vals else None
    utils = [t.process.cpu_util for t in a.metrics.targets if t.process.cpu_util is not None]
    out["cpu_util"] = max(utils) if utils else None
    return out


def limiting_tier(roles: list[RoleResult]) -> RoleResult | None:
    """The role whose most saturated node scores highest; None when no node is saturated."""
    candidates = [r for r in roles if r.saturated and r.score >= PRIMARY]
    if not candidates:
        return None
    return max(candidates, key=lambda r: (r.score, len(r.saturated), r.role))


def peer_imbalance(role: str, nodes: list[NodeResult]) -> list[PeerImbalance]:
    """Peers of one role that do much less (or much more) than the others."""
    out: list[PeerImbalance] = []
    for metric, (floor, unit, scale) in PEER_METRICS.items():
        vals = {n.name: float(v) for n in nodes if (v := n.metrics.get(metric)) is not None}
        if len(vals) < 2:
            continue
        busiest = max(vals, key=lambda k: (vals[k], k))
        idlest = min(vals, key=lambda k: (vals[k], k))
        if vals[busiest] < floor:
            continue
        if len(vals) == 2:
            ratio = vals[idlest] / vals[busiest] if vals[busiest] > 0 else 0.0
            if ratio > TWO_PEER_RATIO:
                continue
            outlier = idlest
        else:
            xs = sorted(vals.values())
            n = len(xs)
            med = xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2
            if med <= 0:
                outlier, ratio = busiest, 99.0
            else:
                lo, hi = vals[idlest] / med, vals[busiest] / med
                if lo > MEDIAN_LOW and hi < MEDIAN_HIGH:
                    continue
                outlier, ratio = (idlest, lo) if (1 / max(lo, 1e-9)) >= hi else (busiest, hi)
        what = "CPU" if metric == "cpu_cores" else metric.replace("_bps", "s")
        note = (f"{role}: the load falls on {busiest} ({vals[busiest] * scale:.2f} {unit}); "
                f"{idlest} does {vals[idlest] * scale:.2f} {unit} ({what})")
        out.append(PeerImbalance(role=role, metric=metric, values=vals, busiest=busiest, idlest=idlest,
                                 ratio=min(ratio, 99.0), outlier=outlier, note=note))
    return out


def role_flame(role: str, nodes: list[NodeInput]) -> flamemod.FlameGraph | None:
    """One on-CPU flame graph for a role: each node's stacks under a root frame named after the node."""
    counts: dict[str, int] = {}
    for n in nodes:
        fg = n.analysis.artifacts.get("cpu_flame") if n.analysis is not None else None
        if not isinstance(fg, flamemod.FoldedStacks):
            continue
        for stack, c in fg.counts.items():
            key = f"{n.name};{stack}" if stack else n.name
            counts[key] = counts.get(key, 0) + c
    if not counts:
        return None
    root = flamemod.build_tree(counts, root_name=role, min_fraction=0.0005)
    return flamemod.FlameGraph(root=root, title=f"On-CPU: {role}", unit="samples",
                               subtitle=f"cpu-clock samples of every {role} node, one root per node")


# --------------------------------------------------------------------------- the comparison


def compare(nodes: list[NodeInput], *, bundle: str = "", capture: dict[str, Any] | None = None,
            warnings: list[str] | None = None) -> ClusterAnalysis:
    """Every node side by side: verdicts, the limiting tier, imbalances, a flame graph per role."""
    results: list[NodeResult] = []
    for n in nodes:
        a = n.analysis
        targets = ([{"pid": t.pid, "comm": t.comm, "kind": t.kind, "label": t.label} for t in a.metrics.targets]
                   if a is not None else [{"query": q} for q in n.targets])
        results.append(NodeResult(
            name=n.name, host=n.host, role=n.role, status=n.status, reason=n.reason, targets=targets,
            verdict=node_verdict(n), metrics=node_metrics(a), report=n.report,
            clock_offset=n.clock_offset, clock_uncertainty=n.clock_uncertainty, start_skew=n.start_skew,
            knobs=n.knobs, server=n.server))
    roles: list[RoleResult] = []
    imbalances: list[PeerImbalance] = []
    flames: dict[str, flamemod.FlameGraph] = {}
    for role in sorted({n.role for n in results}):
        mine = [r for r in results if r.role == role]
        judged = [r for r in mine if r.verdict is not None]
        sat = [r for r in judged if r.verdict is not None and r.verdict.category != "not_saturated"]
        top = max(sat, key=lambda r: r.verdict.score if r.verdict else 0.0, default=None)
        cores = [r.metrics["cpu_cores"] for r in judged if r.metrics.get("cpu_cores") is not None]
        roles.append(RoleResult(
            role=role, nodes=[r.name for r in mine], captured=[r.name for r in judged],
            saturated=[r.name for r in sat],
            score=top.verdict.score if top is not None and top.verdict is not None else 0.0,
            category=top.verdict.category if top is not None and top.verdict is not None else "not_saturated",
            cpu_cores=float(sum(c for c in cores if c is not None)) if cores else None))
        imbalances.extend(peer_imbalance(role, judged))
        fg = role_flame(role, [n for n in nodes if n.role == role])
        if fg is not None:
            flames[role] = fg
    verdict = _cluster_verdict(results, roles, imbalances)
    warns = list(warnings or [])
    for r in results:
        if r.verdict is None:
            warns.append(f"{r.name}: no verdict ({r.status}" + (f": {r.reason}" if r.reason else "") + ")")
    return ClusterAnalysis(bundle=bundle, capture=capture or {}, nodes=results, roles=roles, verdict=verdict,
                           imbalances=imbalances, flames=flames, warnings=warns)


def _cluster_verdict(results: list[NodeResult], roles: list[RoleResult], imb: list[PeerImbalance]) -> ClusterVerdict:
    judged = [r for r in results if r.verdict is not None]
    missing = [r for r in results if r.verdict is None]
    reasons = []
    if missing:
        reasons.append(f"{len(missing)} of {len(results)} nodes have no verdict: "
                       + ", ".join(f"{r.name} ({r.status})" for r in missing))
    if not judged:
        return ClusterVerdict("not_saturated", "no node could be analyzed", None, None, 0.0,
                              reasons or ["no node bundle"])
    tier = limiting_tier(roles)
    pointed = _pointed_tier(judged, roles, tier)
    if pointed is not None:
        tier, symptom = pointed
        reasons.append(symptom)
    cpu_imb = [i for i in imb if i.metric == "cpu_cores"]
    if tier is None:
        headline = (f"no tier is saturated ({len(judged)} nodes): the limit is elsewhere "
                    f"(the client's concurrency, the network)")
        if cpu_imb:
            headline += f"; {cpu_imb[0].note}"
        least = max((r.verdict.score for r in judged if r.verdict is not None), default=0.0)
        return ClusterVerdict("not_saturated", headline, None, None, least, reasons)
    node = max((r for r in judged if r.role == tier.role and r.verdict is not None
                and r.verdict.category != "not_saturated"),
               key=lambda r: r.verdict.score if r.verdict else 0.0)
    assert node.verdict is not None
    headline = f"the {tier.role} tier limits the cluster: {node.name} {_what(node.verdict)}"
    peers = [r for r in judged if r.role == tier.role and r is not node]
    calm = [r.name for r in peers if r.verdict is not None and r.verdict.category == "not_saturated"]
    if calm:
        headline += f"; its peer{'s' if len(calm) > 1 else ''} {', '.join(calm)} not saturated"
    others = [r for r in roles if r.role != tier.role and r.captured]
    if others:
        calm_roles = [r.role for r in others if not r.saturated]
        if calm_roles:
            reasons.append(f"not saturated: the {', '.join(calm_roles)} tier{'s' if len(calm_roles) > 1 else ''}")
        busy_roles = [f"{r.role} ({r.category}, {r.score:.2f})" for r in others if r.saturated]
        if busy_roles:
            reasons.append(f"also saturated, less: {', '.join(busy_roles)}")
    reasons.extend(i.note for i in imb if i.role == tier.role)
    return ClusterVerdict(node.verdict.category, headline, tier.role, node.name, node.verdict.score, reasons)


def _pointed_tier(judged: list[NodeResult], roles: list[RoleResult],
                  tier: RoleResult | None) -> tuple[RoleResult, str] | None:
    """A limiting node whose cause lies in another tier (``Finding.tier``: a TiDB whose sessions wait on
    locks held in TiKV) gives the limit to that tier when it was captured with a verdict of the same
    category: the symptom seen at one tier points at the other, and the cluster verdict says so."""
    if tier is None:
        return None
    node = max((r for r in judged if r.role == tier.role and r.verdict is not None
                and r.verdict.category != "not_saturated"), key=lambda r: r.verdict.score if r.verdict else 0.0)
    v = node.verdict
    if v is None or not v.primary.tier or v.primary.tier == tier.role:
        return None
    there = next((r for r in roles if r.role == v.primary.tier and r.saturated and r.category == v.category), None)
    if there is None:
        return None
    symptom = (f"{node.name} ({tier.role}) points at the {there.role} tier: "
               f"{v.primary.sub_cause.split('; the locks are held')[0]}")
    return there, symptom


def _what(v: Verdict) -> str:
    words = {"cpu": "is CPU-bound", "io_wait": "waits on IO", "memory": "is short of memory",
             "lock_contention": "is slowed by lock contention", "not_saturated": "is not saturated"}
    return words.get(v.category, v.category)
