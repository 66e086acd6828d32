"""Host CPU contention (issue 29): a server starved of CPU by other processes on a full host is CPU-bound.

Real captures (samples/, README says what ran and how each label was confirmed without the
profiler) of tidb-server v8.5.3 on unistore beside two stress-ng workers at 8x its CPU weight: under
32 point-select clients it is CPU-bound and the verdict names who takes the CPU; with 5 point
selects/s its threads queue on wake-up as long, but it has no work waiting and stays not saturated.
A second program, pd-server v8.5.3 under etcdctl's gRPC puts beside the same hog, is CPU-bound by its
own gRPC request time.
The figures' rules are checked on hand-made figures: the server's request time decides how much
the contention counts, and a cause of the target's own with strong evidence is named first.
"""

from __future__ import annotations

from pathlib import Path

from profiler.analyzers.analysis import analyze
from profiler.analyzers.server.requests import PhaseTime, RequestTime
from profiler.analyzers.verdict import ranking
from profiler.analyzers.verdict.findings import PRIMARY
from profiler.analyzers.verdict.model import Metrics, SystemMetrics, TargetMetrics
from profiler.analyzers.verdict.rules_cpu import HOST_CONTENTION, cpu_scores
from profiler.analyzers.verdict.server import ServerEvidence

from profiler.bundle import Bundle
from profiler.knowledge import requests as kr

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


def test_tidb_starved_by_a_cpu_hog_is_cpu_bound_naming_the_hog() -> None:
    a = analyze(Bundle.open(SAMPLES / "tidb-unistore-point-selects-starved"))
    (v,) = a.verdict.per_target
    (t,) = a.metrics.targets
    assert v.category == "cpu" and v.primary.rule == HOST_CONTENTION and v.score >= PRIMARY
    assert "host CPU contention" in v.primary.sub_cause and "stress-ng" in v.primary.sub_cause
    # the OS view alone says nothing: its parked threads keep "wants a CPU nearly all the time" low
    s = cpu_scores(t, a.metrics)
    assert s is not None and max(s.demand, s.starved, s.host) < PRIMARY <= s.contended
    row = next(e for e in v.primary.evidence if e.metric == "requests_executing_per_core")
    assert row.crossed and row.panel == "TiDB > Query Summary > Duration"


def test_pd_starved_by_a_cpu_hog_is_cpu_bound_by_its_grpc_request_time() -> None:
    # a second program: PD v8.5.3, its data on tmpfs, etcdctl's gRPC puts from 200 clients
    a = analyze(Bundle.open(SAMPLES / "pd-puts-starved"))
    (v,) = a.verdict.per_target
    (t,) = a.metrics.targets
    rt = t.server.requests
    assert rt is not None and rt.total is not None and rt.total.key == "etcd.grpc"
    assert v.category == "cpu" and v.primary.rule == HOST_CONTENTION
    assert "stress-ng" in v.primary.sub_cause
    row = next(e for e in v.primary.evidence if e.metric == "requests_executing_per_core")
    assert row.crossed and row.panel == "PD > gRPC > gRPC 99% Completed commands duration"


def test_tidb_light_beside_the_same_hog_is_not_saturated() -> None:
    a = analyze(Bundle.open(SAMPLES / "tidb-unistore-light-beside-hog"))
    (v,) = a.verdict.per_target
    (t,) = a.metrics.targets
    assert (t.time.runq_share or 0) > 0.5  # it queues for a CPU on wake-up as the starved one does
    assert v.category == "not_saturated"
    s = cpu_scores(t, a.metrics)
    assert s is not None and s.contended == 0.0


def _phase(key: str, waiting: float, total: float | None = None) -> PhaseTime:
    p = kr.BY_KEY[key]
    return PhaseTime(key=key, kind=p.kind, title=p.title, panel=p.panel, metric=p.metric, waiting=waiting,
                     per_s=100.0, mean=None, p99=None, serial=p.serial, tier=p.tier,
                     share=None if total is None or p.serial else waiting / total)


def _capture(total: float, *waits: tuple[str, float], bww_states: dict[str, float] | None = None,
             others: float = 1.6, gc: float | None = None) -> Metrics:
    phases = [_phase(k, w, total) for k, w in waits]
    rt = RequestTime("tidb", _phase("tidb.statement", total), phases, [p.key for p in phases])
    states = bww_states or {"cpu": 0.04, "runnable": 0.32, "idle": 0.6, "sleep": 0.04}
    t = TargetMetrics.from_flat(1, "tidb-server", kind="tidb", runtime="go",
                                server=ServerEvidence(pid=1, server="tidb", go=True, requests=rt, gc_cpu_share=gc),
                                cpu_cores=0.4, cpu_util=0.2, cpu_available=2.0, cpu_available_why="host",
                                runq_share=0.89, demand_cores=3.5, demand_util=1.75, threads=16, active_threads=11,
                                active_states=states, states=states, samples=100)
    sysm = SystemMetrics(ncpu=2, cpu_util=1.0, neighbours=[("stress-ng-cpu", 9, others / 2)])
    return Metrics(window=10.0, t0=0.0, targets=[t], system=sysm, io=None, sources={"procfs": "ok"}, missing=[],
                   unsupported_counters=[], warnings=[])


def test_requests_in_their_own_work_decide_not_the_threads_run_queue() -> None:
    busy = _capture(11.0)
    (t,) = busy.targets
    s = cpu_scores(t, busy)
    assert s is not None and s.contended >= 0.99
    light = _capture(0.6)  # 0.3 statements per core: its cores idle between requests
    s = cpu_scores(light.targets[0], light)
    assert s is not None and s.contended == 0.0


def test_lock_waits_in_the_request_time_are_the_locks_not_the_cpus() -> None:
    m = _capture(63.0, ("tidb.lock_keys", 62.0))
    s = cpu_scores(m.targets[0], m)
    assert s is not None and s.contended < 0.05


def test_a_server_that_blocks_on_io_when_it_works_is_not_contended() -> None:
    m = _capture(11.0, bww_states={"cpu": 0.01, "runnable": 0.09, "io": 0.3, "idle": 0.6})
    s = cpu_scores(m.targets[0], m)
    assert s is not None and s.contended == 0.0


def test_without_other_processes_on_the_host_it_is_not_their_contention() -> None:
    m = _capture(11.0, others=0.0)
    m.system = SystemMetrics(ncpu=2, cpu_util=0.21)
    s = cpu_scores(m.targets[0], m)
    assert s is not None and s.contended == 0.0


def test_contention_yields_to_the_targets_own_strong_cause() -> None:
    m = _capture(6.0, gc=0.45)  # the Go GC takes 45% of its CPU: memory pressure in Go terms
    (t,) = m.targets
    m.targets[0] = TargetMetrics(**{**t.__dict__, "server": ServerEvidence(
        pid=1, server="tidb", go=True, requests=t.server.requests, gc_cpu_share=0.45, heap_inuse=190e6,
        memory_limit=200e6)})
    v = ranking.target_verdict(m.targets[0], m)
    assert v.category == "memory"
    assert v.runner_up is not None and v.runner_up.category == "cpu"
    alone = _capture(6.0)
    assert ranking.target_verdict(alone.targets[0], alone).category == "cpu"


def test_lock_waits_the_contention_makes_do_not_go_before_it() -> None:
    # The same server and hog beside the busy neighbour: run-queue share 0.93, 2.7 goroutines queued
    # on its resource-control mutex, whose holder queues for a CPU as they do (label: the hog at 1.04
    # cores by cpuacct, 17.8 statements in flight by TiDB's histogram, no lock_keys waits)
    a = analyze(Bundle.open(SAMPLES / "tidb-unistore-point-selects-starved-neighbour"))
    (v,) = a.verdict.per_target
    assert v.category == "cpu" and v.primary.rule == HOST_CONTENTION, v.headline
    assert v.runner_up is not None and v.runner_up.category == "lock_contention"
    assert "onRequestWaitImpl" in v.runner_up.sub_cause
    row = next(e for e in v.primary.evidence if e.metric == "lock_waiters_without_run_delay")
    assert row.crossed is False and row.value is not None and row.value < 0.5
    lock = next(f for f in v.findings if f.rule == "go_lock_contention")
    assert lock.score >= PRIMARY  # strong on its own: only the ranking tells effect from cause


def _with_go_locks(waiting: float) -> tuple[Metrics, TargetMetrics]:
    m = _capture(6.0)
    (t,) = m.targets
    t = TargetMetrics(**{**t.__dict__, "server": ServerEvidence(
        pid=1, server="tidb", go=True, requests=t.server.requests, lock_wait=waiting,
        lock_wait_source="mutex profile (delay)")})
    m.targets[0] = t
    return m, t


def test_a_lock_queue_that_outlasts_the_run_queue_delay_goes_first() -> None:
    # run-queue share 0.89: 60 goroutines queued would still be 6.6 without the delay (conflicts,
    # not starvation); 3 would be 0.3 (the holder's CPU waits made the queue)
    m, t = _with_go_locks(60.0)
    v = ranking.target_verdict(t, m)
    assert v.category == "lock_contention" and v.runner_up is not None and v.runner_up.category == "cpu"
    m, t = _with_go_locks(3.0)
    v = ranking.target_verdict(t, m)
    assert v.category == "cpu" and v.primary.rule == HOST_CONTENTION
    assert v.runner_up is not None and v.runner_up.category == "lock_contention"
    left = ranking.waiters_without_run_delay(next(f for f in v.findings if f.rule == "go_lock_contention"), 0.89)
    assert left is not None and abs(left[0] - 0.33) < 0.01 and left[1] == "go.lock_wait"


def _with_tikv(m: Metrics, in_flight: float) -> Metrics:
    """The capture also holds TiKV, with ``in_flight`` gRPC requests on average by its own histogram."""
    rt = RequestTime("tikv", _phase("tikv.grpc", in_flight), [], [])
    kv = TargetMetrics.from_flat(2, "tikv-server", kind="tikv", runtime="rust",
                                 server=ServerEvidence(pid=2, server="tikv", go=False, requests=rt),
                                 cpu_cores=0.25, cpu_util=0.12, cpu_available=2.0, cpu_available_why="host",
                                 runq_share=0.8, threads=40, active_threads=6, samples=100)
    return Metrics(**{**m.__dict__, "targets": [*m.targets, kv]})


def test_rpc_time_the_serving_tier_does_not_account_for_is_not_a_wait_on_it() -> None:
    # TiDB with 25 of its 26 statements in KV requests, on a full host: TiKV beside it in the
    # capture has 0.8 requests in flight (the real cluster under point selects, run G: 97% of the
    # RPC time was transit, both sides queued for a CPU); with 24 in flight TiKV does the waiting
    alone = _capture(26.0, ("tidb.kv_request", 25.0))
    s = cpu_scores(alone.targets[0], alone)
    assert s is not None and s.contended < 0.1  # without TiKV's figure, an RPC wait is TiKV's
    transit = _with_tikv(alone, 0.8)
    s = cpu_scores(transit.targets[0], transit)
    assert s is not None and s.contended >= PRIMARY
    row = next(e for e in s.evidence if e.metric == "rpc_time_in_transit")
    assert row.value is not None and abs(row.value - (1 - 0.8 / 25.0)) < 1e-6
    v = ranking.target_verdict(transit.targets[0], transit)
    assert v.category == "cpu" and v.primary.rule == HOST_CONTENTION
    assert "not tikv's own work" in v.primary.sub_cause and "the capture's targets take" in v.primary.sub_cause
    served = _with_tikv(alone, 24.0)
    s = cpu_scores(served.targets[0], served)
    assert s is not None and s.contended < 0.1
    assert not any(e.metric == "rpc_time_in_transit" for e in s.evidence)
