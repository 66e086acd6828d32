"""Servers starved of CPU by other processes on their host, and light servers beside the same hog
(test layer; issue 29's host contention).

A real server under load at the default CPU weight, its load client at 8x that weight and two
stress-ng workers at 8x too (``cpu.shares`` 8192, their own cgroups), all on the host's CPUs: the
hog takes most of them and the server's threads wait for a CPU longer than they run. The light
twins run the same server and hog with a trickle of requests: their threads queue for a CPU on
wake-up too, but the server has no work waiting. Each label is confirmed without the profiler:
the target's own ``/proc/PID/task/*/schedstat`` (run delay against run time, the runner's
sampler), the hog's cgroup ``cpuacct.usage``, ``/proc/stat``, and the server's own account of its
work in flight read by the tests' minimal parser (TiDB's and PD's request histograms: the rate of
their ``_sum``; MariaDB's threads in state R), statements or puts per second, no lock waits.

tidb-server and pd-server v8.5.3 time their requests (the verdict reads their request time:
docs/verdict.md#host-contention): PD's data lives on tmpfs, so a WAL fsync costs nothing and
etcdctl's gRPC puts are held by the CPU, not the disk (PD's own WAL histogram confirms it); its
directory is removed with the scenario. MariaDB is read from the OS alone (its session threads want
a CPU nearly all the time). The binaries come from ``TIDB_SERVER``/``PD_SERVER``; without them the
scenarios are skipped with the reason.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from tests.scenarios.catalog import cg
from tests.scenarios.catalog_servers import starver
from tests.scenarios.catalog_tidb import LOCK_KEYS, STATEMENT, _sums
from tests.scenarios.model import Check, Ctx, Scenario, Started
from tests.scenarios.sampler import Observation
from tests.scenarios.servers import MariaDB
from tests.scenarios.tidb import PD, TiDB, http_get, missing
from tests.workloads.goservers import GoWorkload

GRPC_UNARY = 'grpc_server_handling_seconds_sum{grpc_type="unary"}'  # PD: requests in flight (its own histogram)
PUTS = "etcd_mvcc_put_total"
WAL = "etcd_disk_wal_fsync_duration_seconds_sum"
QUERIES = "tidb_server_query_total"
CONTENTION = ("host cpu contention", "other processes")
HISTOGRAM = "the server's own request histogram: rate of its _sum (Little's law)"
PROC_R = "/proc/TID/stat: mean threads in state R"


def _client_group(ctx: Ctx) -> Callable[[], None]:
    g = ctx.group("client", ("cpu",))
    g.write("cpu", "cpu.shares", 8192)  # the client keeps its requests coming: the server is what starves
    return g.join_self


def _hog_checks(obs: Observation) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    return [
        Check("host CPU busy (all CPUs)", obs.host_busy, ">=", 0.9, "/proc/stat"),
        Check("hog cgroup CPU cores (stress-ng, weight 8192)", cg(obs, "starver", "cpuacct.usage_ns") / 1e9 / secs,
              ">=", 0.5, "cpuacct.usage"),
    ]


def _starved(obs: Observation, in_flight: float, what: str, source: str = HISTOGRAM) -> list[Check]:
    return [
        *_hog_checks(obs),
        Check("target run-queue share: run delay >= run time", obs.runq_share, ">=", 0.5,
              "/proc/PID/task/*/schedstat: run delay / (run time + run delay)"),
        Check(f"{what} in the server on average (>= one per CPU)", in_flight, ">=", float(os.cpu_count() or 1),
              source),
        Check("target threads in D state (mean)", obs.io_blocked, "<=", 0.3, "/proc/TID/stat"),
    ]


def _light(obs: Observation, in_flight: float, what: str, source: str = HISTOGRAM) -> list[Check]:
    return [
        *_hog_checks(obs),
        Check("target run-queue share (it queues on wake-up too)", obs.runq_share, ">=", 0.3,
              "/proc/PID/task/*/schedstat"),
        Check(f"{what} in the server on average (fewer than its CPUs: no work waiting)", in_flight, "<",
              0.5 * (os.cpu_count() or 1), source),
        Check("target CPU cores", obs.cpu_cores, "<=", 0.3, "/proc/PID/stat"),
    ]


# -------------------------------------------------------------------------------------- TiDB


def _tidb(ctx: Ctx, *load: str) -> Started:
    g = ctx.group("main", ("cpu",))
    db = TiDB(ctx.procs, ctx.tmp / "tidb")
    pid = db.start(join=g.join_self)
    ctx.procs.run("sysbench-prepare", db.sysbench("oltp_point_select", "--tables=1", "--table-size=10000", "prepare"),
                  timeout=300)
    ctx.procs.spawn("sysbench", db.sysbench("oltp_point_select", "--tables=1", "--table-size=10000", *load,
                                            f"--time={ctx.load_seconds}", "run"), join=_client_group(ctx))
    starver(ctx)
    return Started(pid, probe=lambda: _sums(http_get(f"{db.url}/metrics", 20), (STATEMENT, LOCK_KEYS, QUERIES)),
                   workers=1)


def tidb_starved(ctx: Ctx) -> Started:
    return _tidb(ctx, "--threads=32")


def tidb_light(ctx: Ctx) -> Started:
    return _tidb(ctx, "--threads=2", "--rate=5")


def tidb_starved_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    return [*_starved(obs, obs.extra.get(STATEMENT, 0.0) / secs, "statements"),
            Check("sessions waiting on locks (lock_keys request-s/s)", obs.extra.get(LOCK_KEYS, 0.0) / secs, "<=", 0.1,
                  "TiDB's /metrics: point selects take no locks"),
            Check("statements/s (the load runs)", obs.extra.get(QUERIES, 0.0) / secs, ">=", 100.0,
                  "TiDB's /metrics: tidb_server_query_total")]


def tidb_light_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    return [*_light(obs, obs.extra.get(STATEMENT, 0.0) / secs, "statements"),
            Check("statements/s (the light load runs)", obs.extra.get(QUERIES, 0.0) / secs, ">=", 3.0,
                  "TiDB's /metrics: tidb_server_query_total")]


# -------------------------------------------------------------------------------------- PD


def pd_starved(ctx: Ctx) -> Started:
    g = ctx.group("main", ("cpu",))
    # its data on tmpfs: a WAL fsync costs nothing there, so the puts are held by the CPU, not the disk
    shm = Path("/dev/shm") / f"profiler-scn-{ctx.name}-{os.getpid()}"
    ctx.dirs.append(shm)
    pd = PD(ctx.procs, shm)
    pid = pd.start(join=g.join_self)
    # etcdctl's own write benchmark: gRPC puts from 200 clients (PD serves the etcd v3 API)
    ctx.procs.spawn("etcd-load", ["timeout", str(ctx.load_seconds), "etcdctl", f"--endpoints={pd.endpoint}", "check",
                                  "perf", "--load=m"], join=_client_group(ctx))
    starver(ctx)
    return Started(pid, probe=lambda: _sums(http_get(f"{pd.url}/metrics", 20), (GRPC_UNARY, PUTS, WAL)), workers=1)


def pd_starved_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    return [*_starved(obs, obs.extra.get(GRPC_UNARY, 0.0) / secs, "unary gRPC requests"),
            Check("WAL fsync in progress (share of the window: the disk does not hold it)",
                  obs.extra.get(WAL, 0.0) / secs, "<=", 0.2, "pd-server's /metrics: etcd_disk_wal_fsync_duration_seconds"),
            Check("puts/s (the load runs)", obs.extra.get(PUTS, 0.0) / secs, ">=", 50.0,
                  "pd-server's /metrics: etcd_mvcc_put_total")]


def pd_light(ctx: Ctx) -> Started:
    g = ctx.group("main", ("cpu",))
    pd = PD(ctx.procs, ctx.tmp / "pd")
    pid = pd.start(join=g.join_self)
    # PD serves the etcd v3 API on its client URL: our Go client's puts go through its gRPC server
    GoWorkload("etcdload", "-endpoint", pd.url, "-workers", "2", "-rate", "10").start(ctx.procs.spawn,
                                                                                   join=_client_group(ctx))
    starver(ctx)
    return Started(pid, probe=lambda: _sums(http_get(f"{pd.url}/metrics", 20), (GRPC_UNARY, PUTS)), workers=1)


def pd_light_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    return [*_light(obs, obs.extra.get(GRPC_UNARY, 0.0) / secs, "unary gRPC requests"),
            Check("puts/s (the light load runs)", obs.extra.get(PUTS, 0.0) / secs, ">=", 5.0,
                  "pd-server's /metrics: etcd_mvcc_put_total")]


# -------------------------------------------------------------------------------------- MariaDB
# (no request histogram: the OS view's own starvation rule; its sessions are threads, busy while a
# statement runs, so they want the CPU nearly all the time under a closed-loop client)


def _mariadb(ctx: Ctx, *load: str) -> Started:
    g = ctx.group("main", ("cpu",))
    db = MariaDB(ctx.procs, ctx.tmp)
    pid = db.start(join=g.join_self)
    ctx.procs.run("sysbench-prepare", db.sysbench("oltp_point_select", "--tables=1", "--table-size=10000", "prepare"),
                  timeout=120)
    ctx.procs.spawn("sysbench", db.sysbench("oltp_point_select", "--tables=1", "--table-size=10000", *load,
                                            f"--time={ctx.load_seconds}", "run"), join=_client_group(ctx))
    starver(ctx)
    return Started(pid, probe=lambda: {"questions": db.status("Questions").get("Questions", 0.0)}, workers=16)


def mariadb_starved(ctx: Ctx) -> Started:
    return _mariadb(ctx, "--threads=16")


def mariadb_light(ctx: Ctx) -> Started:
    return _mariadb(ctx, "--threads=2", "--rate=5")


def mariadb_starved_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    return [*_starved(obs, obs.states.get("R", 0.0), "threads running or runnable (state R)", PROC_R),
            Check("statements/s (the load runs)", obs.extra.get("questions", 0.0) / secs, ">=", 100.0,
                  "SHOW GLOBAL STATUS Questions")]


def mariadb_light_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    return [*_light(obs, obs.states.get("R", 0.0), "threads running or runnable (state R)", PROC_R),
            Check("statements/s (the light load runs)", obs.extra.get("questions", 0.0) / secs, ">=", 3.0,
                  "SHOW GLOBAL STATUS Questions")]


# --------------------------------------------------------------------------------------

_HOG = "two stress-ng workers at 8x its CPU weight (cpu.shares 8192) take most of the host's CPUs"

SCENARIOS: list[Scenario] = [
    Scenario("tidb-point-selects-starved", "cpu", ("tidb-server", "sysbench", "stress-ng"),
             f"tidb-server (unistore) under 32 sysbench point-select clients (weight 8192); {_HOG}",
             tidb_starved, tidb_starved_checks, "host CPU contention: other processes take the CPU",
             CONTENTION, warmup=5, skip=lambda: missing("tidb-server")),
    Scenario("tidb-light-beside-hog", "not_saturated", ("tidb-server", "sysbench", "stress-ng"),
             f"tidb-server (unistore), 5 point selects/s; {_HOG}", tidb_light, tidb_light_checks, None, (),
             warmup=5, skip=lambda: missing("tidb-server")),
    Scenario("pd-puts-starved", "cpu", ("pd-server", "etcdctl", "stress-ng"),
             f"pd-server v8.5.3, its data on tmpfs, etcdctl check perf --load=m (200 gRPC clients, weight 8192); {_HOG}",
             pd_starved, pd_starved_checks, "host CPU contention: other processes take the CPU", CONTENTION,
             warmup=3, skip=lambda: missing("pd-server")),
    Scenario("pd-light-puts-beside-hog", "not_saturated", ("pd-server", "stress-ng"),
             f"pd-server v8.5.3, 10 etcd puts/s through its gRPC API; {_HOG}", pd_light, pd_light_checks, None, (), warmup=3,
             skip=lambda: missing("pd-server")),
    Scenario("mariadb-point-selects-starved", "cpu", ("mariadbd", "sysbench", "stress-ng"),
             f"mariadbd under 16 sysbench point-select clients (weight 8192); {_HOG}", mariadb_starved,
             mariadb_starved_checks, "CPU starvation by other processes", ("starv", "other processes"), warmup=3),
    Scenario("mariadb-light-beside-hog", "not_saturated", ("mariadbd", "sysbench", "stress-ng"),
             f"mariadbd, 5 point selects/s; {_HOG}", mariadb_light, mariadb_light_checks, None, (), warmup=3),
]
