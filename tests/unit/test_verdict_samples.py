"""Verdict rules on recorded bundles (samples/): each rule fires on its own workload and not on the others.

The bundles are real captures of real programs with a known cause (tests/recorder.py made them;
each sample's README.md says what ran). Goldens pin each verdict's category, sub-cause and
rounded scores; regenerate with PROFILER_UPDATE_GOLDEN=1 after a deliberate rule change.
"""

from __future__ import annotations

import json
import os

import pytest
from profiler.analyzers.verdict import findings, ranking, rules, rules_cpu
from profiler.analyzers.verdict.metrics import compute
from profiler.analyzers.views import read_views

from profiler.bundle import Bundle
from tests.conftest import SAMPLES, TESTS

GOLDEN = TESTS / "golden" / "verdict"

# sample -> (category, words the primary sub-cause must contain)
EXPECTED = {
    "cpu-bound-stress-ng": ("cpu", ()),
    "cpu-quota-throttled": ("cpu", ("quota",)),
    "io-fsync-fio": ("io_wait", ("fsync", "blkio throttle")),
    "lock-contention-sysbench-threads": ("lock_contention", ("futex",)),
    "memory-thrash-cgroup": ("memory", ("cgroup memory limit", "major faults")),
    "idle-not-saturated": ("not_saturated", ()),
    "imbalance-three-peers": ("not_saturated", ()),
    "tikv-shaped-raftstore-hot": ("cpu", ("pool raftstore", "raftstore.store-pool-size")),
}

RULE_OF = {"cpu": rules_cpu.rule_cpu, "io_wait": rules.rule_io_wait, "memory": rules.rule_memory,
           "lock_contention": rules.rule_lock}


def _metrics(name: str):
    path = SAMPLES / name
    if not (path / "manifest.json").is_file():
        pytest.skip(f"sample {name} not recorded")
    return compute(read_views(Bundle.open(path)))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_verdict_category_and_sub_cause(name: str) -> None:
    m = _metrics(name)
    cv = ranking.judge(m)
    category, words = EXPECTED[name]
    assert cv.overall.category == category, cv.overall.headline
    for w in words:
        assert w in cv.overall.primary.sub_cause, cv.overall.primary.sub_cause
    assert 0.0 <= cv.overall.score <= 1.0
    assert cv.overall.confidence_label in ("high", "medium", "low")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_rule_fires_only_on_its_workload(name: str) -> None:
    """The rule of the expected category scores >= PRIMARY and beats every other rule.

    On a shared host a second rule may pass PRIMARY too (a thrashing process also queues for a
    CPU): it must then lose to the right one, and shows as contributing.
    """
    m = _metrics(name)
    category, _ = EXPECTED[name]
    for tm in m.targets:
        scores = {cat: (f.score if (f := rule(tm, m)) else 0.0) for cat, rule in RULE_OF.items()}
        if category == "not_saturated":
            assert max(scores.values()) < findings.PRIMARY, (tm.label, scores)
            continue
        assert scores[category] >= findings.PRIMARY, (tm.label, scores)
        assert all(v < scores[category] or c == category for c, v in scores.items()), (tm.label, scores)


def test_imbalance_flags_the_quiet_peer() -> None:
    m = _metrics("imbalance-three-peers")
    cv = ranking.judge(m)
    assert len(m.targets) == 3
    cpu = [i for i in cv.imbalances if i.metric == "cpu_cores"]
    assert len(cpu) == 1, [i.note for i in cv.imbalances]
    quiet = min(m.targets, key=lambda t: t.process.cpu_cores or 0)
    assert cpu[0].outlier == quiet.label and cpu[0].ratio < 0.7


def test_peers_without_an_outlier_are_not_flagged() -> None:
    m = _metrics("cpu-bound-stress-ng")
    assert len(m.targets) == 2
    assert [i for i in ranking.judge(m).imbalances if i.metric == "cpu_cores"] == []


def _golden_view(name: str) -> dict[str, object]:
    cv = ranking.judge(_metrics(name))
    return {
        "category": cv.overall.category,
        "sub_cause": cv.overall.primary.sub_cause.split(";")[0],
        "targets": [{"category": v.category, "findings": {f.category: round(f.score, 1) for f in v.findings}}
                    for v in cv.per_target],
    }


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_golden(name: str) -> None:
    got = _golden_view(name)
    path = GOLDEN / f"{name}.json"
    if os.environ.get("PROFILER_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
    if not path.exists():
        pytest.skip(f"no golden for {name}: run with PROFILER_UPDATE_GOLDEN=1")
    assert got == json.loads(path.read_text())


def test_ramp_is_monotonic_and_anchored() -> None:
    th = findings.THRESHOLDS["cpu.util"]
    assert findings.ramp(None, "cpu.util") == 0.0
    assert findings.ramp(th.value * 0.4, "cpu.util") == 0.0
    assert findings.ramp(th.value, "cpu.util") == pytest.approx(0.5)
    assert findings.ramp(th.full, "cpu.util") == 1.0
    xs = [i / 50 for i in range(60)]
    ys = [findings.ramp(x, "cpu.util") for x in xs]
    assert ys == sorted(ys)


def test_every_threshold_names_its_source() -> None:
    for key, th in findings.THRESHOLDS.items():
        assert th.source and th.meaning and th.unit, key
        # a ramp needs two points; a p99 against a vendor's alert is shown, never scored
        assert th.full != th.value or key.startswith("req.p99."), key
