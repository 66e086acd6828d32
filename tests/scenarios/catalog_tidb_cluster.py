"""Real TiDB scenarios on a real cluster (test layer): PD + TiKV + TiDB on one host, on loopback.

The servers are the users' own (v8.5.3), found through ``TIDB_SERVER``, ``PD_SERVER`` and
``TIKV_SERVER`` (tests/scenarios/tidb.py); a scenario whose binary is not set is skipped with
the reason. Each attaches to all three servers (``--pid`` for tidb-server, tikv-server,
pd-server): the capture's verdict is the most severe target's, and a TiDB whose sessions wait on
TiKV's locks points at TiKV (docs/verdict.md#request-time). Labels are confirmed as in
catalog_tidb.py: the servers' own /metrics and goroutine dumps, cgroup counters, /proc.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from tests.scenarios.catalog import cg
from tests.scenarios.catalog_tidb import (
    HOT_ROWS,
    LOCK_KEYS,
    STATEMENT,
    THREADS,
    _goroutines,
    _metrics,
    _skip,
    _sums,
)
from tests.scenarios.model import Check, Ctx, Scenario, Started
from tests.scenarios.sampler import Observation, process_counters
from tests.scenarios.tidb import PD, Cluster, http_get


def _cluster_probe(c: Cluster, tikv: tuple[str, ...] = (), client: int | None = None) -> Callable[[], dict[str, float]]:
    """TiDB's and TiKV's metrics and each server's CPU seconds (and the load client's, given its pid)."""
    def probe() -> dict[str, float]:
        out = _metrics(c.tidb, LOCK_KEYS, STATEMENT, "tidb_server_query_total")
        from tests.scenarios.tidb import http_get

        out.update({f"tikv:{k}": v for k, v in _sums(http_get(f"{c.tikv.url}/metrics", 20), tikv).items()})
        pids = [("tidb", c.tidb.pid), ("tikv", c.tikv.pid), ("pd", c.pd.pid)]
        for name, pid in pids + ([("client", client)] if client is not None else []):
            pc = process_counters(pid)
            out[f"cpu_s:{name}"] = pc["cpu_s"] if pc else 0.0
        return out

    return probe


TIKV_LOCK_WAIT = "tikv_lock_manager_waiter_lifetime_duration_sum"
TIKV_GRPC = "tikv_grpc_msg_duration_seconds_sum"
TIKV_LATCH = "tikv_scheduler_latch_wait_duration_seconds_sum"


def cluster_hot_rows(ctx: Ctx) -> Started:
    c = Cluster(ctx.procs, ctx.tmp)
    c.start()
    ctx.procs.run("sysbench-prepare", c.tidb.sysbench("oltp_write_only", "--tables=1", "--table-size=1000",
                                                      "prepare"), timeout=600)
    ctx.procs.spawn("sysbench", c.tidb.sysbench(
        "oltp_write_only", "--tables=1", f"--table-size={HOT_ROWS}", "--index_updates=0", "--non_index_updates=1",
        "--delete_inserts=0", f"--threads={THREADS}", f"--time={ctx.load_seconds}", "run"))
    probe = _cluster_probe(c, (TIKV_LOCK_WAIT, TIKV_GRPC, TIKV_LATCH))
    return Started(c.tidb.pid, probe=probe, gauge=_goroutines(c.tidb.goroutines_with, "client.sendBatchRequest"),
                   workers=THREADS, more_pids=[c.tikv.pid, c.pd.pid])


def cluster_ycsb_hot_keys(ctx: Ctx) -> Started:
    c = Cluster(ctx.procs, ctx.tmp, tidb_config="[pessimistic-txn]\npessimistic-auto-commit = true\n")
    c.start()
    c.tidb.sql("CREATE DATABASE IF NOT EXISTS test")
    common = ("recordcount=20", "requestdistribution=zipfian", "debug.pprof=127.0.0.1:0")
    ctx.procs.run("go-ycsb-load", c.tidb.go_ycsb("load", *common, "threadcount=4"), timeout=300)
    ctx.procs.spawn("go-ycsb", ["timeout", str(ctx.load_seconds), *c.tidb.go_ycsb(
        "run", *common, "workload=core", "readproportion=0.2", "updateproportion=0.8", "operationcount=100000000",
        f"threadcount={THREADS}")])
    probe = _cluster_probe(c, (TIKV_LOCK_WAIT, TIKV_GRPC, TIKV_LATCH))
    return Started(c.tidb.pid, probe=probe, gauge=_goroutines(c.tidb.goroutines_with, "client.sendBatchRequest"),
                   workers=THREADS, more_pids=[c.tikv.pid, c.pd.pid])


def cluster_hot_rows_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    waiting = obs.extra.get(f"tikv:{TIKV_LOCK_WAIT}", 0.0) / secs
    grpc = obs.extra.get(f"tikv:{TIKV_GRPC}", 0.0)
    return [
        Check("requests waiting in TiKV's lock manager (waiter lifetime request-s/s)", waiting, ">=", st.workers / 4,
              "TiKV's /metrics: tikv_lock_manager_waiter_lifetime_duration_sum delta / window"),
        Check("lock manager share of TiKV's gRPC time", obs.extra.get(f"tikv:{TIKV_LOCK_WAIT}", 0.0) / max(grpc, 1e-6),
              ">=", 0.5, "TiKV's /metrics: waiter lifetime _sum / tikv_grpc_msg_duration_seconds_sum"),
        Check("sessions waiting on pessimistic locks (TiDB lock_keys request-s/s)", obs.extra.get(LOCK_KEYS, 0.0) / secs,
              ">=", st.workers / 4, "TiDB's /metrics"),
        Check("TiDB goroutines waiting for TiKV (client-go sendBatchRequest, mean over the window)",
              obs.extra.get("mean:goroutines_waiting", 0.0), ">=", st.workers / 4, "tidb-server's own goroutine dump"),
        Check("tidb + tikv + pd CPU cores (not CPU-bound)", obs.cpu_cores, "<=", 1.4, "/proc/PID/stat, all three"),
    ]


def cluster_point_selects(ctx: Ctx) -> Started:
    c = Cluster(ctx.procs, ctx.tmp)
    c.start()
    ctx.procs.run("sysbench-prepare", c.tidb.sysbench("oltp_point_select", "--tables=1", "--table-size=10000",
                                                      "prepare"), timeout=600)
    load = ctx.procs.spawn("sysbench", c.tidb.sysbench("oltp_point_select", "--tables=1", "--table-size=10000",
                                                       "--threads=32", f"--time={ctx.load_seconds}", "run"))
    probe = _cluster_probe(c, (TIKV_LATCH, TIKV_LOCK_WAIT, TIKV_GRPC), client=load.pid)
    return Started(c.tidb.pid, probe=probe, workers=32, more_pids=[c.tikv.pid, c.pd.pid])


def point_select_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    # the cause is "the tiers and the client fill the host's CPUs": the workload (the three servers
    # and sysbench) takes most of them, not some other process
    work = sum(obs.extra.get(f"cpu_s:{n}", 0.0) for n in ("tidb", "tikv", "pd", "client")) / secs
    return [
        Check("host CPU busy (all CPUs)", obs.host_busy, ">=", 0.9, "/proc/stat"),
        Check("tidb + tikv + pd + sysbench CPU cores / host CPUs", work / (os.cpu_count() or 1), ">=", 0.5,
              "/proc/PID/stat"),
        Check("tidb-server run-queue share", obs.runq_share, ">=", 0.2,
              "schedstat: of the CPU its threads asked for, waited for (all three servers' threads)"),
        Check("TiKV's lock manager waits (request-s/s)", obs.extra.get(f"tikv:{TIKV_LOCK_WAIT}", 0.0) / secs, "<=", 0.1,
              "TiKV's /metrics: no lock waits in a read-only load"),
        Check("statements/s (the load runs)", obs.extra.get("tidb_server_query_total", 0.0) / secs, ">=", 500.0,
              "TiDB's /metrics: tidb_server_query_total delta"),
    ]


TIKV_APPEND = "tikv_raftstore_append_log_duration_seconds_sum"
TIKV_APPLY = "tikv_raftstore_apply_log_duration_seconds_sum"


def tikv_disk_throttle(ctx: Ctx) -> Started:
    g = ctx.group("tikv", ("blkio",))
    c = Cluster(ctx.procs, ctx.tmp)
    c.start(join={"tikv": g.join_self})
    ctx.procs.run("sysbench-prepare", c.tidb.sysbench("oltp_insert", "--tables=1", "--table-size=100", "prepare"),
                  timeout=600)
    g.blkio_limit(write_iops=40)
    ctx.procs.spawn("sysbench", c.tidb.sysbench("oltp_insert", "--tables=1", "--table-size=100", "--threads=16",
                                                f"--time={ctx.load_seconds}", "--mysql-ignore-errors=all", "run"))
    probe = _cluster_probe(c, (TIKV_APPEND, TIKV_APPLY, TIKV_GRPC))
    return Started(c.tikv.pid, probe=probe, workers=16, more_pids=[c.tidb.pid, c.pd.pid])


def tikv_disk_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    writes = cg(obs, "tikv", "blkio.ios.write") / secs
    return [
        Check("throttled write IOPS / limit", writes / 40, ">=", 0.5, "blkio.throttle.io_serviced of TiKV's cgroup"),
        Check("Raft log append in progress (TiKV append-log request-s/s)",
              obs.extra.get(f"tikv:{TIKV_APPEND}", 0.0) / secs, ">=", 0.5, "TiKV's /metrics"),
        Check("tidb + tikv + pd CPU cores", obs.cpu_cores, "<=", 1.0, "/proc/PID/stat"),
    ]


def cluster_idle(ctx: Ctx) -> Started:
    c = Cluster(ctx.procs, ctx.tmp)
    c.start()
    ctx.procs.run("sysbench-prepare", c.tidb.sysbench("oltp_point_select", "--tables=1", "--table-size=1000",
                                                      "prepare"), timeout=600)
    ctx.procs.spawn("sysbench", c.tidb.sysbench("oltp_point_select", "--tables=1", "--table-size=1000",
                                                "--threads=2", "--rate=5", f"--time={ctx.load_seconds}", "run"))
    return Started(c.tidb.pid, probe=_cluster_probe(c), workers=1, more_pids=[c.tikv.pid, c.pd.pid])


def cluster_idle_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    return [
        Check("tidb + tikv + pd CPU cores", obs.cpu_cores, "<=", 0.5, "/proc/PID/stat, all three"),
        Check("statements/s (the light load runs)", obs.extra.get("tidb_server_query_total", 0.0) / secs, ">=", 3.0,
              "TiDB's /metrics"),
        Check("threads in D state (mean)", obs.io_blocked, "<=", 0.3),
    ]



# --------------------------------------------------------------------------------------
# PD alone: its embedded etcd's WAL on a throttled disk (request_io_wait on a second program: etcd's
# scenario runs Debian's etcd 3.4, this one PD v8.5.3's own etcd)

WAL_SUM, WAL_COUNT = "etcd_disk_wal_fsync_duration_seconds_sum", "etcd_disk_wal_fsync_duration_seconds_count"


def pd_wal_fsync_throttle(ctx: Ctx) -> Started:
    g = ctx.group()
    pd = PD(ctx.procs, ctx.tmp / "pd")
    pid = pd.start(join=g.join_self)
    g.blkio_limit(write_iops=40)
    # PD serves the etcd v3 API on its client URL: etcdctl's own write benchmark drives its WAL
    ctx.procs.spawn("etcd-load", ["timeout", str(ctx.load_seconds), "etcdctl", f"--endpoints={pd.endpoint}", "check",
                                  "perf", "--load=s"])

    def probe() -> dict[str, float]:
        return _sums(http_get(f"{pd.url}/metrics", 20), (WAL_SUM, WAL_COUNT))

    return Started(pid, probe=probe, workers=1)


def pd_wal_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    n = obs.extra.get(WAL_COUNT, 0.0)
    busy = obs.extra.get(WAL_SUM, 0.0) / secs
    return [
        Check("WAL fsyncs/s", n / secs, ">=", 5.0, f"pd-server's /metrics: {WAL_COUNT}"),
        Check("WAL fsync in progress (share of the window)", busy, ">=", 0.5, f"pd-server's /metrics: {WAL_SUM} delta"),
        Check("throttled write IOPS / limit", cg(obs, "main", "blkio.ios.write") / secs / 40, ">=", 0.5,
              "blkio.throttle.io_serviced, limit 40"),
        Check("pd-server CPU cores", obs.cpu_cores, "<=", 0.6, "/proc/PID/stat"),
    ]


CLUSTER_SCENARIOS: list[Scenario] = [
    Scenario("pd-wal-fsync-throttle", "io_wait", ("pd-server", "etcdctl"),
             "pd-server v8.5.3 alone, its data dir's writes throttled to 40 IOPS (blkio), etcdctl check perf "
             "writing through its etcd API: every write waits for the WAL fsync", pd_wal_fsync_throttle, pd_wal_checks,
             "the WAL fsync on the throttled disk", ("wal", "fsync", "disk", "throttl", "blkio"), warmup=3,
             skip=_skip("pd-server")),
    Scenario("tidb-cluster-hot-rows", "lock_contention", ("tidb-server", "tikv-server", "pd-server", "sysbench"),
             f"PD + TiKV + TiDB, {THREADS} sysbench clients in pessimistic transactions updating {HOT_ROWS} rows: the "
             "lock waits are TiKV's, TiDB's sessions wait in gRPC", cluster_hot_rows, cluster_hot_rows_checks,
             "requests wait in TiKV's lock manager; TiDB's lock_keys points at TiKV",
             ("lock", "tikv"), warmup=5, skip=_skip("tidb-server", "pd-server", "tikv-server")),
    Scenario("tidb-cluster-ycsb-hot-keys", "lock_contention", ("tidb-server", "tikv-server", "pd-server", "go-ycsb"),
             f"PD + TiKV + TiDB (pessimistic autocommit), go-ycsb {THREADS} threads, 80% updates, zipfian over 20 "
             "records", cluster_ycsb_hot_keys, cluster_hot_rows_checks,
             "requests wait in TiKV's lock manager; TiDB's lock_keys points at TiKV", ("lock", "tikv"), warmup=5,
             skip=_skip("tidb-server", "pd-server", "tikv-server", "go-ycsb")),
    Scenario("tidb-cluster-point-selects-host-cpu", "cpu", ("tidb-server", "tikv-server", "pd-server", "sysbench"),
             "PD + TiKV + TiDB under sysbench oltp_point_select, 32 threads: the tiers and the client fill the "
             "host's CPUs", cluster_point_selects, point_select_checks, "the host's CPUs are saturated by the tiers",
             ("host's cpus are saturated", "saturated"), warmup=5,
             skip=_skip("tidb-server", "pd-server", "tikv-server")),
    Scenario("tikv-disk-write-throttle", "io_wait", ("tidb-server", "tikv-server", "pd-server", "sysbench"),
             "PD + TiKV + TiDB, sysbench inserts (16 threads), TiKV's blkio write_iops 40: Raft log writes wait",
             tikv_disk_throttle, tikv_disk_checks, "TiKV's writes wait on the throttled disk",
             ("raft", "disk", "throttl", "blkio", "fsync", "write"), warmup=5,
             skip=_skip("tidb-server", "pd-server", "tikv-server")),
    Scenario("tidb-cluster-idle", "not_saturated", ("tidb-server", "tikv-server", "pd-server", "sysbench"),
             "PD + TiKV + TiDB with their background work, 5 point selects/s", cluster_idle, cluster_idle_checks,
             None, (), warmup=5, skip=_skip("tidb-server", "pd-server", "tikv-server")),
]
