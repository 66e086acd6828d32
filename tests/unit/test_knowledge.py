"""TiKV/TiDB knowledge: pools, knobs, runtimes."""

from __future__ import annotations

from profiler.knowledge import pool_info, pool_of, runtime_from_threads, target_kind


def test_tikv_pools_map_to_knobs() -> None:
    assert pool_info("tikv", pool_of("raftstore-0-1")).knob == "raftstore.store-pool-size"
    assert pool_info("tikv", pool_of("grpc-server-3")).knob == "server.grpc-concurrency"
    assert pool_info("tikv", pool_of("unified-read-po")).knob == "readpool.unified.max-thread-count"
    assert pool_info("tikv", pool_of("sched-worker-po")).knob == "storage.scheduler-worker-pool-size"
    assert pool_info("tikv", pool_of("rocksdb:low12")).knob == "rocksdb.max-background-jobs"
    assert pool_info("tikv", pool_of("apply-0")).knob == "raftstore.apply-pool-size"


def test_generic_names_are_not_tikv_pools_elsewhere() -> None:
    assert pool_info(None, "apply") is None  # many programs have an "apply" thread
    assert pool_info("tidb", "raftstore") is None
    assert pool_info(None, "raftstore") is not None  # distinctive enough on its own


def test_targets_and_runtimes() -> None:
    assert target_kind("tikv-server") == "tikv"
    assert target_kind("bash", "/usr/local/bin/tidb-server") == "tidb"
    assert target_kind("pd-server") == "pd"
    assert target_kind("mariadbd") is None
    assert runtime_from_threads(["tikv-server", "grpc-server-0", "raftstore-0-0"], "tikv-server") == "rust"
    assert runtime_from_threads(["java", "GC Thread#0", "VM Thread"], "java") == "jvm"
    assert runtime_from_threads(["fio", "fio", "fio", "fio"], "fio") is None
