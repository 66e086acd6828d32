"""The verdict's ranking (analyzers layer): every rule's findings -> one verdict per target and one for the capture.

The best finding is the primary cause if it reaches ``PRIMARY`` (ties go to the more specific
cause, ``TIE_ORDER``), else the target is not saturated; findings reaching ``CONTRIBUTING`` are
listed with it; a second cause with strong evidence is the runner-up, with what tells the two
apart; the confidence says which evidence was missing. Across targets: the most severe target's
verdict is the capture's, and peers doing much less or more than the others are imbalances.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from profiler.analyzers.verdict import registry
from profiler.analyzers.verdict.findings import (
    CONTRIBUTING,
    PRIMARY,
    TIE_ORDER,
    Finding,
    RunnerUp,
    Verdict,
    evidence,
    ramp,
)
from profiler.analyzers.verdict.metrics import Metrics, TargetMetrics
from profiler.analyzers.verdict.rules import rule_not_saturated
from profiler.analyzers.verdict.rules_cpu import HOST_CONTENTION


def _confidence(tm: TargetMetrics | None, m: Metrics, primary: Finding,
                runner_up: RunnerUp | None) -> tuple[float, list[str]]:
    c = 1.0
    why: list[str] = []
    if m.sources.get("procfs") != "ok":
        c *= 0.4
        why.append(f"procfs sampler {m.sources.get('procfs')}: thread states unknown")
    if tm is not None:
        if tm.time.samples < 20:
            c *= 0.6
            why.append(f"only {tm.time.samples} samples per thread")
        elif tm.time.samples < 50:
            c *= 0.85
            why.append(f"{tm.time.samples} samples per thread (short capture)")
        if tm.exited:
            c *= 0.85
            why.append("the target exited during the capture")
    if primary.category == "lock_contention" and primary.rule != "go_lock_contention" and m.sources.get("offcpu") != "ok":
        c *= 0.85
        why.append("no off-CPU stacks: the contended lock is not named")
    if primary.category == "io_wait":
        if m.sources.get("block-io") != "ok":
            c *= 0.9
            why.append("no block IO trace: device latency from /proc/diskstats only" if m.io is None else
                       f"block IO {m.sources.get('block-io', 'missing').split(':')[0]}: some IOs are missing from the latencies")
        if m.delayacct is False:
            c *= 0.95
            why.append("task_delayacct was off: no block-IO delay accounting")
    if primary.category == "cpu" and m.sources.get("cpu-stacks") != "ok":
        c *= 0.95
        why.append("no on-CPU stacks: where the CPU goes is not shown")
    if m.sources.get("perf-stat") != "ok":
        c *= 0.95
        why.append(f"perf stat {m.sources.get('perf-stat')}")
    if m.unsupported_counters:
        why.append("hardware counters not supported here: " + ", ".join(m.unsupported_counters[:4]))
    if runner_up is not None:
        gap = primary.score - runner_up.score
        c *= 0.7 if gap < 0.1 else 0.85
        why.append(f"mixed evidence: {runner_up.category} scores {runner_up.score:.2f} against {primary.score:.2f} "
                   f"({runner_up.sub_cause.split(';')[0]}); to tell them apart: {runner_up.tell_apart}")
    return c, why


def _label(c: float) -> str:
    return "high" if c >= 0.75 else "medium" if c >= 0.5 else "low"


# How many wait, for each lock rule: its evidence row (by name or suffix) and the threshold it is scored on.
_WAITERS: dict[str, tuple[str, str]] = {
    "go_lock_contention": ("goroutines_waiting_on_locks", "go.lock_wait"),
    "request_lock_wait": (".waiting", "req.lock_waiting"),
    "request_queue_wait": (".waiting", "req.queue_waiting"),
    "lock_contention": ("threads_blocked_in_lock_waits", "lock.waiting"),
}


def waiters_without_run_delay(f: Finding, runq: float | None) -> tuple[float, str] | None:
    """A lock finding's waiters as they would be if its threads ran whenever they asked: the mean
    number waiting x (1 - run-queue share), with the threshold it is scored on. A lock held over
    CPU work is held longer by whatever delays its holder: at a run-queue share of 0.93 each
    critical section takes 14 times its CPU time, and the queue behind it grows with it (Little's
    law: waiters = arrivals x wait). Scaling the waiters linearly is the conservative estimate (a
    queue shrinks faster than its holders' time). None when the finding counts no waiters."""
    spec = _WAITERS.get(f.rule)
    if spec is None or runq is None:
        return None
    name, key = spec
    counts = [e.value for e in f.evidence if e.value is not None and (e.metric == name or (name.startswith(".")
                                                                                       and e.metric.endswith(name)))]
    if not counts:
        return None
    return max(counts) * (1.0 - min(1.0, max(0.0, runq))), key


def _own_first(f: Finding, found: list[Finding], runq: float | None = None) -> bool:
    """Whether a finding yields to the target's own cause: contention for the host's CPUs by other
    processes (``cpu_host_contention``) slows whatever the target does, so a cause of its own with
    strong evidence (its requests wait on a lock, its garbage collector takes a quarter of its CPU)
    is named first and the contention is its runner-up; but only a cause that does not come from
    the contention itself. Lock waits do: a lock's holder queues for a CPU as its waiters do, so a
    lock finding stands first only if its waiters, counted as if its threads ran whenever they
    asked (:func:`waiters_without_run_delay`), still reach its threshold. TiDB starved by two CPU
    burners (run-queue share 0.93) had 2.7 goroutines queued on its resource-control mutex: 0.19
    without the delay, so the contention is named; TiDB's optimistic conflicts on the same host
    (0.87) had 98: 13 without it, so the conflicts are."""
    if f.rule != HOST_CONTENTION:
        return False
    for o in found:
        if o.score < PRIMARY or o.category in ("cpu", "not_saturated"):
            continue
        left = waiters_without_run_delay(o, runq) if o.category == "lock_contention" else None
        if left is None or ramp(left[0], left[1]) >= PRIMARY:
            return True
    return False


def _lock_row(best: Finding, found: list[Finding], runq: float | None) -> None:
    """When the contention is named before a lock finding of PRIMARY strength, the evidence says why."""
    if best.rule != HOST_CONTENTION:
        return
    for o in found:
        left = waiters_without_run_delay(o, runq) if o.category == "lock_contention" and o.score >= PRIMARY else None
        if left is not None:
            best.evidence.append(evidence(
                "lock_waiters_without_run_delay", left[0], left[1],
                f"{o.rule}: waiters as if its threads ran whenever they asked (x (1 - run-queue share "
                f"{runq or 0:.2f})): the lock waits come from the contention", unit="waiting"))
            return


def target_verdict(tm: TargetMetrics, m: Metrics) -> Verdict:
    found = registry.findings(tm, m)
    found.append(rule_not_saturated(tm, m, found))
    every = list(found)  # list.sort empties the list while it sorts
    runq = tm.time.runq_share
    found.sort(key=lambda f: (_own_first(f, every, runq), -round(f.score, 3), TIE_ORDER.index(f.category)))
    best = found[0]
    _lock_row(best, every, runq)
    if best.category != "not_saturated" and best.score < PRIMARY:
        best = next(f for f in found if f.category == "not_saturated")
    contributing = [f for f in found if f is not best and f.score >= CONTRIBUTING and f.category != "not_saturated"]
    runner = runner_up(best, found)
    conf, why = _confidence(tm, m, best, runner)
    return Verdict(category=best.category, score=best.score, headline=_headline(tm, best), primary=best,
                   contributing=contributing, findings=found, confidence=conf, confidence_label=_label(conf),
                   confidence_reasons=why, target=tm.label, runner_up=runner)


MIXED_GAP = 0.2  # a second cause within this of the first, or itself above PRIMARY, makes the evidence mixed

# What tells two causes apart, for the verdict to say when both have evidence.
TELL_APART: dict[frozenset[str], str] = {
    frozenset(("cpu", "io_wait")): (
        "threads that run or queue for a CPU are CPU-bound, threads blocked in D state or IO syscalls wait on "
        "storage: compare the on-CPU and off-CPU flame graphs, and see which of run-queue delay and IO latency "
        "grows with the load"),
    frozenset(("cpu", "memory")): (
        "major faults and page-cache refaults against a full memory limit point at memory, run-queue delay "
        "without faults at the CPU: raise the memory limit (or give CPU) and see which one goes away"),
    frozenset(("cpu", "lock_contention")): (
        "threads asleep in futex while using little CPU point at a lock; a lock holder short of CPU makes both: "
        "if the futex waits shrink once the host is quiet (or with more CPU), the CPU is the cause"),
    frozenset(("io_wait", "memory")): (
        "IO caused by major faults under a full memory limit is paging (memory); IO from read/write/fsync calls "
        "on a limit that is not full is storage: check major faults/s against the IO rate"),
    frozenset(("io_wait", "lock_contention")): (
        "threads queued on a lock whose holder waits on IO (a commit fsync under a mutex) show both: the "
        "off-CPU stacks of the lock waiters and of the IO waiters tell whether the lock or the device is first"),
    frozenset(("memory", "lock_contention")): (
        "faulting threads that hold a lock make others wait: major faults first, then the futex stacks"),
    frozenset(("cpu", "not_saturated")): (
        "a CPU-bound target would use all the CPU it may have or queue for it nearly all the time; re-run with a "
        "heavier load: if its CPU or run-queue delay grows, the CPU is the limit"),
    frozenset(("io_wait", "not_saturated")): (
        "the work path would block on IO most of the time, or a device or throttle would sit at its limit; "
        "re-run with a heavier load and watch the IO latency heatmap"),
    frozenset(("memory", "not_saturated")): (
        "memory pressure would show major faults growing with the load against a full limit"),
    frozenset(("lock_contention", "not_saturated")): (
        "contention would show busy threads waking and blocking in futex hundreds of times a second; re-run "
        "with more client concurrency and see whether the futex share grows"),
}


def runner_up(best: Finding, found: list[Finding]) -> RunnerUp | None:
    """The second explanation when the evidence is mixed: another cause that also has strong evidence
    (PRIMARY or more), or comes within MIXED_GAP of the first; for a calm target, a cause that
    reaches CONTRIBUTING. None when the first stands alone."""
    others = [f for f in found if f is not best and f.category != best.category and f.category != "not_saturated"]
    if not others:
        return None
    r = max(others, key=lambda f: (f.score, -TIE_ORDER.index(f.category)))
    if r.score < CONTRIBUTING:
        return None
    if best.category != "not_saturated" and r.score < PRIMARY and best.score - r.score >= MIXED_GAP:
        return None
    text = TELL_APART.get(frozenset((best.category, r.category)), "compare their evidence in the findings")
    return RunnerUp(category=r.category, score=round(r.score, 3), sub_cause=r.sub_cause, tell_apart=text)


def _headline(tm: TargetMetrics, f: Finding) -> str:
    who = tm.label
    if f.category == "not_saturated":
        return f"{who} is not the bottleneck: {f.sub_cause}"
    lead = {"cpu": "is CPU-bound", "io_wait": "is not CPU-bound: IO wait dominates" if (tm.process.cpu_util or 0) < 0.8 else "waits on IO",
            "memory": "is short of memory", "lock_contention": "is slowed by lock contention"}[f.category]
    return f"{who} {lead}: {f.sub_cause}"


@dataclass
class Imbalance:
    group: str  # e.g. "tikv-server"
    metric: str
    values: dict[str, float]  # target label -> value
    outlier: str
    ratio: float  # outlier / median of its peers
    note: str


def compare_targets(m: Metrics) -> list[Imbalance]:
    """Targets of one kind (or one program) that do much less or much more than their peers."""
    groups: dict[str, list[TargetMetrics]] = {}
    for t in m.targets:
        groups.setdefault(t.kind or t.comm, []).append(t)
    out: list[Imbalance] = []
    for name, ts in sorted(groups.items()):
        if len(ts) < 2:
            continue
        for metric, floor in (("cpu_cores", 0.05), ("write_bps", float(1 << 20)), ("read_bps", float(1 << 20))):
            vals: dict[str, float] = {t.label: float(getattr(t.process, metric)) for t in ts
                                      if getattr(t.process, metric) is not None}
            if len(vals) < 2:
                continue
            xs = sorted(vals.values())
            n = len(xs)
            med = xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2
            for label, v in vals.items():
                if n == 2:
                    # two peers: no majority to compare with; flag the lower one if it does half or less
                    other = next(x for k, x in vals.items() if k != label)
                    if v >= other or max(v, other) < floor or (other > 0 and v / other > 0.5):
                        continue
                    ref = other
                else:
                    ref = med
                    if max(v, ref) < floor:
                        continue
                ratio = v / ref if ref > 0 else float("inf")
                if ratio <= 0.7 or ratio >= 1.4:
                    word = "less" if ratio < 1 else "more"
                    unit = "cores" if metric == "cpu_cores" else "MiB/s"
                    scale = 1.0 if metric == "cpu_cores" else 1 / 1048576
                    out.append(Imbalance(group=name, metric=metric, values=vals, outlier=label,
                                         ratio=ratio if ratio != float("inf") else 99.0,
                                         note=f"{label} does much {word} than its peers: {metric} {v * scale:.2f} {unit} "
                                              f"vs {'a median of ' if n > 2 else ''}{ref * scale:.2f}"))
    return out


@dataclass
class CaptureVerdict:
    overall: Verdict
    per_target: list[Verdict]
    imbalances: list[Imbalance]

    def to_dict(self) -> dict[str, Any]:
        d = self.overall.to_dict()
        d["imbalances"] = [asdict(i) for i in self.imbalances]
        return d


def served_by_peer(v: Verdict, per: list[Verdict], m: Metrics) -> Verdict | None:
    """When a target's cause lies in another tier (a TiDB whose sessions wait on locks held in TiKV:
    ``Finding.tier``) and the capture holds a target of that tier with the same category, that
    target's verdict is the capture's: the symptom points at it."""
    tier = v.primary.tier
    if not tier:
        return None
    kinds = {t.label: t.kind for t in m.targets}
    there = [o for o in per if o is not v and kinds.get(o.target or "") == tier and o.category == v.category]
    if not there:
        return None
    best = max(there, key=lambda o: (o.score, o.confidence))
    headline = f"{best.headline} (what {v.target} waits on: {v.primary.sub_cause.split(';')[0]})"
    return Verdict(**{**best.__dict__, "headline": headline})


def judge(m: Metrics) -> CaptureVerdict:
    """Per-target verdicts, the capture's verdict (the most severe target), and the imbalances."""
    per = [target_verdict(t, m) for t in m.targets]
    imb = compare_targets(m)
    if not per:
        nf = Finding("not_saturated", "no_targets", 0.0, "no evidence", "the bundle names no target", [], "", None)
        conf, why = 0.1, ["no target in the bundle"]
        return CaptureVerdict(Verdict("not_saturated", 0.0, "no target was captured", nf, [], [nf], conf, _label(conf), why), [], imb)
    bottlenecked = [v for v in per if v.category != "not_saturated"]
    if bottlenecked:
        top = max(bottlenecked, key=lambda v: (v.score, v.confidence))
        top = served_by_peer(top, per, m) or top
        overall = Verdict(**{**top.__dict__})
        others = [v for v in per if v is not top]
        if others and len(m.targets) > 1:
            same = [v for v in others if v.category == top.category]
            calm = [v for v in others if v.category == "not_saturated"]
            extra = []
            if same:
                extra.append(f"{len(same)} more target(s) show the same")
            if calm:
                extra.append(", ".join(v.target or "?" for v in calm[:3]) + " not saturated")
            if extra:
                overall.headline = f"{top.headline} ({'; '.join(extra)})"
        overall.contributing = list(top.contributing) + [v.primary for v in others
                                                         if v.category != "not_saturated" and v.category != top.category]
    else:
        # Everyone is calm: the capture's verdict is not_saturated, scored by the least calm target.
        least = min(per, key=lambda v: v.score)
        overall = Verdict(**{**least.__dict__})
        if len(per) > 1:
            overall.headline = (f"none of the {len(per)} targets is saturated: the bottleneck is elsewhere "
                                f"(the client's concurrency, another tier, the network)")
            cpu_imb = [i for i in imb if i.metric == "cpu_cores"]
            if cpu_imb:
                overall.headline += f"; {cpu_imb[0].note}"
    return CaptureVerdict(overall=overall, per_target=per, imbalances=imb)
