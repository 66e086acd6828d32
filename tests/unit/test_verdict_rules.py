"""The verdict's rules on their own: CPU starvation, completion waits, mixed evidence.

The figures are built directly (the metrics model is plain data) to pin what each rule does
with them; the recorded bundles of samples/ check the same rules end to end
(tests/unit/test_verdict_samples.py, tests/scenarios/test_scenarios.py).
"""

from __future__ import annotations

import itertools
from typing import Any

from profiler.analyzers.verdict import findings, ranking, rules, rules_cpu
from profiler.analyzers.verdict.model import DiskMetrics, Metrics, SystemMetrics, TargetMetrics


def _metrics(tm: TargetMetrics, cpu_util: float = 1.0, neighbours: list[tuple[str, int, float]] | None = None,
             disk_util: float = 0.05) -> Metrics:
    sysm = SystemMetrics(ncpu=2, cpu_util=cpu_util, neighbours=neighbours or [],
                         disks=[DiskMetrics("vda", disk_util, 50.0, 40.0, 10.0, 1e5, 1e5, 0.1, 0.1)])
    return Metrics(window=10.0, t0=0.0, targets=[tm], system=sysm, io=None, sources={"procfs": "ok"}, missing=[],
                   unsupported_counters=[], warnings=[])


STARVED_REDIS: dict[str, Any] = {
    # one event-loop thread that runs 18% and waits on the run queue 78% of the time
    "threads": 4, "active_threads": 1, "samples": 200,
    "cpu_cores": 0.18, "cpu_available": 2.0, "cpu_available_why": "2 CPUs on the host", "cpu_util": 0.09,
    "demand_cores": 0.97, "demand_util": 0.485, "max_thread_demand": 0.96, "demand_thread_cpu": 0.18,
    "demand_thread": "redis-server (tid 1): running 18%, waiting for a CPU 78%", "runq_share": 0.81,
    "active_states": {"cpu": 0.18, "runnable": 0.78, "io": 0.0, "aio": 0.0, "futex": 0.0, "idle": 0.04,
                      "sleep": 0.0, "other": 0.0},
}


def _starved_redis(**changed: Any) -> TargetMetrics:
    return TargetMetrics.from_flat(pid=1, comm="redis-server", **{**STARVED_REDIS, **changed})


def test_a_starved_thread_is_cpu_bound_and_the_neighbours_are_named() -> None:
    m = _metrics(_starved_redis(), neighbours=[("stress-ng-cpu", 7, 0.9), ("stress-ng-cpu", 8, 0.7)])
    v = ranking.target_verdict(m.targets[0], m)
    assert v.category == "cpu" and v.score >= findings.PRIMARY
    assert v.primary.sub_cause.startswith("CPU starvation: wants 0.96 core, gets 0.18: other processes")
    assert "stress-ng-cpu (pid 7) 0.90 core" in v.primary.sub_cause


def test_a_quota_is_the_sub_cause_before_the_neighbours() -> None:
    tm = _starved_redis(cpu_throttled_share=0.95, cpu_throttled_time_share=0.8,
                        cpu_available_why="cgroup CPU quota 0.10 cores")
    m = _metrics(tm)
    f = rules_cpu.rule_cpu(tm, m)
    assert f is not None and f.sub_cause.startswith("cgroup CPU quota: throttled in 95% of periods")


def test_a_light_target_that_queues_on_a_busy_host_is_not_cpu_bound() -> None:
    # wants a tenth of a core, gets 0.04, queues for the rest: its threads want a CPU 15% of their time
    tm = _starved_redis(cpu_cores=0.04, cpu_util=0.02, demand_cores=0.15, demand_util=0.075, max_thread_demand=0.15,
                        demand_thread_cpu=0.04, runq_share=0.73,
                        active_states=dict(STARVED_REDIS["active_states"], cpu=0.04, runnable=0.11, idle=0.85))
    m = _metrics(tm)
    assert ranking.target_verdict(tm, m).category == "not_saturated"


def test_completion_waits_count_as_io_only_at_a_device_or_throttle_limit() -> None:
    fio: dict[str, Any] = {
        "threads": 2, "active_threads": 1, "samples": 200, "cpu_cores": 0.02, "cpu_available": 2.0, "cpu_util": 0.01,
        "active_states": {"cpu": 0.02, "runnable": 0.0, "io": 0.0, "aio": 0.95, "futex": 0.0, "idle": 0.03,
                          "sleep": 0.0, "other": 0.0}}
    tm = TargetMetrics.from_flat(pid=2, comm="fio", **fio)
    quiet = rules.rule_io_wait(tm, _metrics(tm, disk_util=0.05))
    assert quiet is not None and quiet.score < findings.PRIMARY
    tm = TargetMetrics.from_flat(pid=2, comm="fio", **fio, blkio_limits={"read_iops": {"254:0": 100}}, blkio_iops_use=1.0)
    throttled = rules.rule_io_wait(tm, _metrics(tm, disk_util=0.05))
    assert throttled is not None and throttled.score >= findings.PRIMARY
    assert "at 100% of its limit" in throttled.sub_cause and "wait for IO completions 95%" in throttled.sub_cause


def _finding(category: str, score: float) -> findings.Finding:
    return findings.Finding(category, category, score, category, f"{category} sub-cause")


def test_runner_up_is_named_only_when_the_evidence_is_mixed() -> None:
    best = _finding("io_wait", 0.9)
    assert ranking.runner_up(best, [best, _finding("cpu", 0.4), _finding("not_saturated", 0.1)]) is None  # far below
    close = ranking.runner_up(best, [best, _finding("cpu", 0.75)])
    assert close is not None and close.category == "cpu" and "on-CPU and off-CPU flame graphs" in close.tell_apart
    strong = ranking.runner_up(best, [best, _finding("memory", 0.55)])  # strong on its own, though 0.35 below
    assert strong is not None and strong.category == "memory"
    calm = _finding("not_saturated", 0.6)
    weak = ranking.runner_up(calm, [calm, _finding("lock_contention", 0.4)])
    assert weak is not None and weak.category == "lock_contention"


def test_every_pair_of_causes_says_what_tells_them_apart() -> None:
    pairs = {frozenset(p) for p in itertools.combinations(findings.CATEGORIES, 2)}
    assert set(ranking.TELL_APART) == pairs
    assert all(len(text) > 40 for text in ranking.TELL_APART.values())


def test_mixed_evidence_lowers_confidence_and_says_why() -> None:
    tm = _starved_redis()
    m = _metrics(tm, neighbours=[("stress-ng-cpu", 7, 0.9)])
    best = findings.Finding("cpu", "cpu", 0.9, "cpu", "cpu")
    ru = findings.RunnerUp("io_wait", 0.85, "fsync 90%", "compare")
    c_mixed, why = ranking._confidence(tm, m, best, ru)
    c_alone, _ = ranking._confidence(tm, m, best, None)
    assert c_mixed == c_alone * 0.7
    assert any(w.startswith("mixed evidence: io_wait scores 0.85 against 0.90 (fsync 90%); to tell them apart: compare")
               for w in why)


def _go(demand_util: float | None, cpu_cores: float, gc_share: float, heap: float, limit: float | None,
        cpu_util: float | None = -1.0) -> TargetMetrics:
    from profiler.analyzers.verdict.server import ServerEvidence

    return TargetMetrics.from_flat(
        pid=3, comm="goworkload", runtime="go", threads=6, active_threads=2, cpu_cores=cpu_cores, cpu_available=2.0,
        cpu_util=cpu_cores / 2.0 if cpu_util == -1.0 else cpu_util, demand_util=demand_util,
        states={"idle": 0.9, "cpu": 0.05}, samples=90,
        server=ServerEvidence(pid=3, go=True, gc_cpu_share=gc_share, gc_cpu_source="runtime metrics",
                              heap_inuse=heap, heap_goal=4 * 2**20, memory_limit=limit))


def test_the_gc_share_of_a_near_idle_go_process_is_not_memory_pressure() -> None:
    # go-idle-channels (run B, quiet): 0.005 cores, wants 6% of its 2 cores, GC "71% of its CPU", heap 1 MiB
    idle = _go(0.06, 0.005, 0.715, 2**20, None)
    v = ranking.target_verdict(idle, _metrics(idle))
    assert v.category == "not_saturated"
    assert all(f.score < findings.PRIMARY for f in v.findings if f.category == "memory")
    # go-gc-memlimit (runs A and B): wants all of its cores, GC a third of its CPU, heap at 96% of GOMEMLIMIT
    busy = _go(1.1, 0.86, 0.34, 77 * 2**20, 80 * 2**20)
    v = ranking.target_verdict(busy, _metrics(busy))
    assert v.category == "memory" and "Go terms" in (v.primary.sub_cause or "")
    # how busy it is unknown: the share counts in full, as before
    unknown = _go(None, 0.005, 0.715, 2**20, None, cpu_util=None)
    assert ranking.target_verdict(unknown, _metrics(unknown)).category == "memory"


def test_the_go_rules_calm_bounds_are_the_not_saturated_rules() -> None:
    from profiler.analyzers.verdict import rules_server

    th = findings.THRESHOLDS["idle.cpu"]
    assert (rules_server.CALM_AT, rules_server.CALM_FULL) == (th.value, th.full)
    assert [round(rules_server.calm_weight(x), 6) for x in (0.1, 0.2, 0.35, 0.5, 1.2)] == [0.0, 0.0, 0.5, 1.0, 1.0]
