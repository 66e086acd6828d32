"""The CPU rule names a container's limits (analyzers/verdict/rules_cpu.container_limit): a pin by
cpuset or affinity, a CPU quota, below what the target wants; and the limit's words in the
evidence (target.cpu_list, _pinned). Real containers check the same end to end
(tests/e2e/test_containers_e2e.py)."""

from __future__ import annotations

from typing import Any

from profiler.analyzers.verdict import ranking, rules_cpu
from profiler.analyzers.verdict.model import Metrics, SystemMetrics, TargetMetrics
from profiler.analyzers.verdict.target import _available_cpu, _pinned, cpu_list

from profiler.bundle import ContainerInfo, TargetInfo

# A Go server pinned to one CPU: two busy threads, each running a tenth and queued most of the time.
PINNED: dict[str, Any] = {
    "threads": 6, "active_threads": 2, "samples": 200,
    "cpu_cores": 0.25, "cpu_available": 1.0, "cpu_available_why": "pinned to CPU 0 by cpuset", "cpu_util": 0.25,
    "demand_cores": 2.3, "demand_util": 2.3, "max_thread_demand": 0.95, "demand_thread_cpu": 0.12,
    "demand_thread": "app (tid 2): running 12%, waiting for a CPU 84%", "runq_share": 0.89,
    "active_states": {"cpu": 0.12, "runnable": 0.84, "io": 0.0, "aio": 0.0, "futex": 0.0, "idle": 0.04,
                      "sleep": 0.0, "other": 0.0},
    "cpuset_cpus": 1, "pinned_to": (0,), "pinned_by": "cpuset", "container": True,
    "container_name": "docker container tikv1",
}


def _tm(**changed: Any) -> TargetMetrics:
    return TargetMetrics.from_flat(pid=7, comm="app", **{**PINNED, **changed})


def _m(tm: TargetMetrics, neighbours: list[tuple[str, int, float]] | None = None, cpu_util: float = 1.0,
       ncpu: int = 2) -> Metrics:
    return Metrics(window=10.0, t0=0.0, targets=[tm], system=SystemMetrics(ncpu=ncpu, cpu_util=cpu_util, neighbours=neighbours or []),
                   io=None, sources={"procfs": "ok"}, missing=[], unsupported_counters=[], warnings=[])


def test_a_cpuset_pin_below_the_demand_is_the_sub_cause() -> None:
    tm = _tm()
    v = ranking.target_verdict(tm, _m(tm, neighbours=[("mypy", 9, 0.6)]))
    assert v.category == "cpu"
    assert v.primary.sub_cause.startswith("pinned to CPU 0 by cpuset (docker container tikv1): "
                                          "wants 2.30 cores of the 1 it may use, gets 0.25; other processes")
    assert "mypy (pid 9)" in v.primary.sub_cause and "--cpuset-cpus" in v.primary.recommendation


def test_one_core_wanted_of_the_one_it_may_use() -> None:
    tm = _tm(demand_cores=1.0, demand_util=1.0, cpu_cores=0.97, cpu_util=0.97, runq_share=0.03,
             max_thread_demand=1.0, demand_thread_cpu=0.97, active_threads=1,
             active_states=dict(PINNED["active_states"], cpu=0.97, runnable=0.03, idle=0.0))
    f = rules_cpu.rule_cpu(tm, _m(tm, cpu_util=0.5))
    assert f is not None and f.sub_cause == ("pinned to CPU 0 by cpuset (docker container tikv1): "
                                             "wants 1.00 core of the 1 it may use, gets 0.97")


def test_an_affinity_pin_and_a_quota_are_named_as_such() -> None:
    tm = _tm(pinned_by="affinity", container_name=None, container=False)
    f = rules_cpu.rule_cpu(tm, _m(tm))
    assert f is not None and f.sub_cause.startswith("pinned to CPU 0 by affinity: wants 2.30 cores")
    tm = _tm(pinned_to=(), pinned_by=None, cpuset_cpus=None, quota_cores=0.5, cpu_available=0.5,
             cpu_available_why="cgroup CPU quota 0.50 cores", cpu_cores=0.14, container_name="podman container pd")
    f = rules_cpu.rule_cpu(tm, _m(tm))
    assert f is not None and f.sub_cause.startswith(
        "held to 0.50 cores by its cgroup CPU quota (podman container pd): wants 2.30 cores of the 0.5 it may use, gets 0.14")
    assert "--cpus" in f.recommendation


def test_a_limit_the_target_does_not_fill_is_not_named() -> None:
    # pinned to two CPUs of four, wanting one core: the neighbours, not the pin, hold it back
    tm = _tm(pinned_to=(0, 1), cpuset_cpus=2, cpu_available=2.0, demand_cores=1.0, demand_util=0.5,
             cpu_available_why="pinned to CPUs 0-1 by cpuset")
    f = rules_cpu.rule_cpu(tm, _m(tm, neighbours=[("stress-ng", 5, 1.5)], ncpu=4))
    assert f is not None and f.sub_cause.startswith("CPU starvation")


def _target(allowed: list[int], cgroup: dict[str, Any]) -> TargetInfo:
    return TargetInfo(pid=1, comm="tikv-server", cpus_allowed=allowed, cgroup=cgroup, container=True,
                      container_info=ContainerInfo(runtime="docker", id="ab" * 32, name="tikv1"))


def test_the_pin_is_read_from_the_cgroup_cpuset_and_the_affinity() -> None:
    assert cpu_list([0]) == "CPU 0" and cpu_list([0, 1, 2, 5, 7, 8]) == "CPUs 0-2,5,7-8" and cpu_list([3, 1]) == "CPUs 1,3"
    assert _pinned(_target([0], {"cpuset": "0", "cpuset_cpus": [0]}), 2) == ((0,), "cpuset")
    assert _pinned(_target([1], {"cpuset": "0-1", "cpuset_cpus": [0, 1]}), 2) == ((1,), "affinity")  # taskset inside
    assert _pinned(_target([0, 1], {"cpuset_cpus": [0, 1]}), 2) == ((), None)  # the whole host
    assert _available_cpu(_target([0], {"cpuset_cpus": [0], "cpu_quota_us": 50000, "cpu_period_us": 100000}), 2) == \
        (0.5, "cgroup CPU quota 0.50 cores")
    assert _available_cpu(_target([2, 3], {"cpuset_cpus": [2, 3]}), 8) == (2.0, "pinned to CPUs 2-3 by cpuset")


def test_a_containers_memory_limit_and_blkio_throttle_are_named_as_its_own() -> None:
    """The memory and IO rules say whose limit binds, as the CPU rule does (issue 24); a target
    outside a container keeps "cgroup"."""
    from profiler.analyzers.verdict import rules

    quiet = dict(PINNED["active_states"], cpu=0.05, runnable=0.0, io=0.9, idle=0.05)
    tm = _tm(cpu_cores=0.05, cpu_util=0.05, demand_cores=0.05, demand_util=0.05, runq_share=0.0,
             mem_limit=64 << 20, mem_usage_share=1.0, majflt_rate=3000.0, active_states=quiet,
             blkio_limits={"write_iops": {"254:0": 40}})
    mem = rules.rule_memory(tm, _m(tm, cpu_util=0.1))
    assert mem is not None and "docker container tikv1 memory limit 64 MiB: usage 100%" in mem.sub_cause
    io = rules.rule_io_wait(tm, _m(tm, cpu_util=0.1))
    assert io is not None and "docker container tikv1 blkio throttle (write_iops 254:0=40)" in io.sub_cause
    bare = _tm(container_name=None, container=False, mem_limit=64 << 20, mem_usage_share=1.0, majflt_rate=3000.0)
    mem = rules.rule_memory(bare, _m(bare))
    assert mem is not None and "cgroup memory limit 64 MiB" in mem.sub_cause
