"""A lock held for seconds is lock contention at full strength (issue 29's second open point).

A real capture (samples/mariadb-long-table-lock: MariaDB, one session holding LOCK TABLES ... WRITE
8 s at a time beside a noisy neighbour, 32 point-select readers queued behind it; SHOW PROCESSLIST
put all 32 in "Waiting for table level lock") and hand-made figures: its waiters wake seldom, and the
lock rule counts the threads they keep blocked as much as the wake-ups of a contended mutex.
"""

from __future__ import annotations

from pathlib import Path

from profiler.analyzers.analysis import analyze
from profiler.analyzers.verdict.model import Metrics, TargetMetrics
from profiler.analyzers.verdict.rules import rule_lock

from profiler.bundle import Bundle

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


def test_sessions_blocked_for_seconds_on_a_table_lock_are_lock_contention() -> None:
    a = analyze(Bundle.open(SAMPLES / "mariadb-long-table-lock"))
    (v,) = a.verdict.per_target
    assert v.category == "lock_contention" and v.score >= 0.9
    ev = {e.metric: e for e in v.primary.evidence}
    assert ev["busy_thread_switches_per_s"].value is not None and ev["busy_thread_switches_per_s"].value < 50
    blocked = ev["threads_blocked_in_lock_waits"]
    assert blocked.crossed and blocked.value is not None and blocked.value >= 8


def _lock(threads: int, futex: float, switches: float) -> float:
    states = {"futex": futex, "cpu": 0.02, "idle": 1 - futex - 0.02}
    t = TargetMetrics.from_flat(1, "mariadbd", active_states=states, states=states, active_threads=threads,
                                threads=threads, busy_vcsw_rate=switches, samples=100)
    m = Metrics(window=10.0, t0=0.0, targets=[t], system=None, io=None, sources={"procfs": "ok"}, missing=[],
                unsupported_counters=[], warnings=[])
    f = rule_lock(t, m)
    assert f is not None
    return f.score


def test_many_waiters_count_as_much_as_frequent_wakeups() -> None:
    assert _lock(32, 0.95, 30.0) >= 0.99  # a lock held for seconds: 30 threads blocked, few wake-ups
    assert _lock(16, 0.85, 5000.0) >= 0.99  # a contended mutex: constant wake-ups
    # one busy thread that waits seldom is neither (and cannot contend with itself)
    assert _lock(1, 0.95, 3.0) < 0.5
