"""A thread sweep as data: its steps, curve, knee and conclusion (analyzers layer).

One capture per concurrency step, the throughput/latency curve, its knee, and what the
targets were doing there.

The model ``profiler sweep`` fills step by step (profiler/usecases/sweep.py) and writes as
DIR/sweep.json; the knee rule is analyzers.load.knee. ``to_dict()`` is sweep.json
(docs/load.md#sweep).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from profiler.analyzers.load.knee import CurvePoint, Knee, find_knee

SCHEMA = "profiler.sweep"
VERSION = 1


@dataclass
class StepTarget:
    """One target at one step, from that step's verdict."""

    label: str
    comm: str
    category: str  # the target's verdict: cpu, io_wait, memory, lock_contention, not_saturated
    score: float
    cpu_cores: float | None
    cpu_available: float | None
    headline: str = ""

    @property
    def cpu_util(self) -> float | None:
        if self.cpu_cores is None or not self.cpu_available:
            return None
        return self.cpu_cores / self.cpu_available


@dataclass
class Step:
    value: str  # the placeholder's value, as given (e.g. "16")
    bundle: str  # step-<value>, relative to the sweep directory
    status: str = "ok"  # ok | failed (the load failed or printed no figures) | interrupted
    why: str | None = None
    exit_code: int | None = None
    tps: float | None = None  # the steady throughput: mean over the step's verdict window
    tps_from: str = ""
    latency_ms: float | None = None  # the tool's own percentile over the run
    latency_key: str | None = None  # "p95" or "p99"
    category: str | None = None  # the capture's verdict
    headline: str = ""
    targets: list[StepTarget] = field(default_factory=list)
    seconds: float | None = None  # how long the step's capture took

    @property
    def threads(self) -> float | None:
        try:
            return float(self.value)
        except ValueError:
            return None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["threads"] = self.threads
        d["verdict"] = {"category": self.category, "headline": self.headline} if self.category else None
        if self.latency_key:
            d[f"{self.latency_key.replace('.', '_')}_ms"] = self.latency_ms
        for t, td in zip(self.targets, d["targets"], strict=True):
            td["cpu_util"] = t.cpu_util
        return d


def _cores(t: StepTarget) -> str:
    if t.cpu_cores is None:
        return "n/a"
    return f"{t.cpu_cores:.1f} of {t.cpu_available:g} cores" if t.cpu_available else f"{t.cpu_cores:.1f} cores"


CATEGORY_WORDS = {"cpu": "CPU-bound", "io_wait": "waiting on IO", "memory": "short of memory",
                  "lock_contention": "contended on locks", "not_saturated": "not saturated"}


def describe(step: Step) -> str:
    """'there tidb-server is CPU-bound (2.0 of 2 cores) while tikv-server uses 55%'."""
    if not step.targets:
        return ""
    ts = sorted(step.targets, key=lambda t: (t.category == "not_saturated", -t.score, t.label))
    lead = ts[0]
    if lead.category == "not_saturated":
        used = ", ".join(f"{t.comm} uses {t.cpu_util:.0%}" if t.cpu_util is not None else f"{t.comm} is not saturated"
                         for t in ts)
        return f"there no target is saturated ({used}): the limit is elsewhere (the load generator, the network, a peer)"
    text = f"there {lead.comm} is {CATEGORY_WORDS.get(lead.category, lead.category)} ({_cores(lead)})"
    others = [f"{t.comm} uses {t.cpu_util:.0%}" if t.cpu_util is not None and t.category == "not_saturated"
              else f"{t.comm} is {CATEGORY_WORDS.get(t.category, t.category)} ({_cores(t)})" for t in ts[1:]]
    if others:
        text += " while " + ", ".join(others)
    return text


@dataclass
class Sweep:
    param: str  # the placeholder's name ({threads})
    command: list[str]  # the load command with its placeholder
    values: list[str]  # every value asked for, in order
    steps: list[Step] = field(default_factory=list)
    partial: bool = False  # interrupted (Ctrl-C) or cut short: the steps done are kept
    reason: str | None = None
    knee: Knee | None = None
    conclusion: str = ""

    def curve(self) -> list[CurvePoint]:
        return [CurvePoint(s.threads, s.tps, s.latency_ms) for s in self.steps
                if s.status == "ok" and s.threads is not None and s.tps is not None]

    @property
    def latency_key(self) -> str | None:
        keys = [s.latency_key for s in self.steps if s.latency_key]
        return max(set(keys), key=keys.count) if keys else None

    def conclude(self) -> None:
        """The knee and the sentence the report leads with."""
        key = self.latency_key
        self.knee = find_knee(self.curve(), param=self.param, latency_name=f"{key} latency" if key else "latency")
        text = self.knee.reason
        if self.knee.threads is not None:
            at = next((s for s in self.steps if s.threads == self.knee.threads), None)
            there = describe(at) if at is not None else ""
            if there:
                text = f"{text}; {there}"
        if self.partial:
            text += f" (sweep partial: {len([s for s in self.steps if s.status == 'ok'])} of {len(self.values)} steps)"
        self.conclusion = text

    def to_dict(self) -> dict[str, Any]:
        knee = None
        if self.knee is not None:
            knee = {"threads": self.knee.threads, "reason": self.knee.reason, "gain_after": self.knee.gain_after,
                    "gain_before": self.knee.gain_before}
        return {"schema": SCHEMA, "version": VERSION,
                "sweep": {"param": self.param, "command": self.command, "values": self.values,
                          "partial": self.partial, "reason": self.reason, "latency": self.latency_key,
                          "steps": [s.to_dict() for s in self.steps], "knee": knee, "conclusion": self.conclusion}}
