"""Servers beyond the first six programs (test layer): PostgreSQL, etcd, memcached, nginx; CPU
starvation by neighbours; servers idle but polling; two causes at once.

Same rules as tests/scenarios/catalog.py: real programs from Debian, causes made with cgroup v1,
every label confirmed from /proc, cgroup counters and the server's own counters (pg_stat_*,
etcd's /metrics, memcached's and redis's stats), never from the profiler.

The "idle but polling" scenarios carry the traps of issue 14 on purpose, and their checks prove
the trap is there: an io_uring completion reaper sitting in io_uring_enter (MariaDB InnoDB), bio
threads parked on condition variables (Redis), Go runtime threads parked in futex (etcd),
maintenance threads parked and workers in epoll (memcached).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.scenarios.catalog import (
    cg,
    cpu_quota_checks,
    hot_row_checks,
    idle_checks,
    mariadb_hot_row,
)
from tests.scenarios.model import Check, Confirm, Ctx, Scenario, Started
from tests.scenarios.procs import children, wait_for
from tests.scenarios.sampler import Observation
from tests.scenarios.servers import Etcd, MariaDB, Memcached, Nginx, Postgres, Redis

SYS_IO_URING_ENTER = "426"  # x86_64
SYS_FUTEX = "202"
SYS_FDATASYNC = "75"
STARVE = ("starv", "other processes")


def redis_info(r: Redis, section: str = "stats") -> dict[str, float]:
    out = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(r.port), "INFO", section],
                         capture_output=True, text=True, timeout=10).stdout
    vals: dict[str, float] = {}
    for line in out.splitlines():
        k, _, v = line.strip().partition(":")
        try:
            vals[k] = float(v)
        except ValueError:
            pass
    return vals


def starver(ctx: Ctx, workers: int = 2, shares: int = 8192) -> None:
    """Neighbours that want the CPU: stress-ng workers in their own cgroup with a high CPU weight."""
    g = ctx.group("starver", ("cpu", "cpuacct"))
    g.write("cpu", "cpu.shares", shares)
    ctx.procs.spawn("starver", ["stress-ng", "--cpu", str(workers), "--cpu-method", "matrixprod",
                                "--timeout", f"{ctx.load_seconds}s"], join=g.join_self)


def starved_checks(min_r: float, max_cores: float, min_runq: float = 0.3,
                   per_second: tuple[tuple[str, str, float, str], ...] = ()) -> Confirm:
    """CPU starvation: the work threads want a CPU (state R: running or runnable) nearly all the
    time, wait for it a good part of that, get less than they want, and the starver took it.
    ``per_second``: probe counters (key, op, threshold per second, note) proving the load runs."""

    def confirm(obs: Observation, st: Started) -> list[Check]:
        secs = max(obs.seconds, 1e-6)
        out = [
            Check("work threads running or runnable (mean, state R)", obs.states.get("R", 0.0), ">=", min_r,
                  "/proc/TID/stat: R is running or waiting on a run queue"),
            Check("run-queue share of the target's CPU demand", obs.runq_share, ">=", min_runq,
                  "schedstat run delay / (run + delay): it waits for a CPU it wants"),
            Check("target CPU cores (it does not get what it wants)", obs.cpu_cores, "<=", max_cores),
            Check("starver cgroup CPU cores (the neighbours take it)",
                  cg(obs, "starver", "cpuacct.usage_ns") / 1e9 / secs, ">=", 0.5, "cpuacct.usage"),
            Check("target threads in D state (mean)", obs.io_blocked, "<=", 0.3),
        ]
        for key, op, threshold, note in per_second:
            out.append(Check(f"{key}/s", obs.extra.get(key, 0.0) / secs, op, threshold, note))
        return out

    return confirm


# --------------------------------------------------------------------------------------
# cpu: starvation by neighbours (single- and multi-threaded), quotas on more servers


def redis_starved(ctx: Ctx) -> Started:
    g = ctx.group("main", ("cpu",))
    r = Redis(ctx.procs, ctx.tmp)
    pid = r.start(join=g.join_self)
    client = ctx.group("client", ("cpu",))
    client.write("cpu", "cpu.shares", 8192)
    ctx.procs.spawn("redis-benchmark", ["timeout", str(ctx.load_seconds),
                                        *r.benchmark("-c", "16", "-P", "16", "-n", "1000000000", "-r", "100000",
                                                     "-t", "set,get", "-q")], join=client.join_self)
    starver(ctx)

    def probe() -> dict[str, float]:
        return {"commands": redis_info(r).get("total_commands_processed", 0.0)}

    return Started(pid, probe=probe, workers=1)


def sysbench_cpu_starved(ctx: Ctx) -> Started:
    g = ctx.group("main", ("cpu",))
    p = ctx.procs.spawn("sysbench", ["sysbench", "cpu", "--threads=2", "--cpu-max-prime=20000",
                                     f"--time={ctx.load_seconds}", "run"], join=g.join_self)
    starver(ctx)
    return Started(p.pid, workers=2)


def memcached_cpu_quota(ctx: Ctx) -> Started:
    g = ctx.group()
    mc = Memcached(ctx.procs, threads=4)
    pid = mc.start(join=g.join_self)
    g.cpu_limit(0.15)
    g.write("cpu", "cpu.shares", 8192)
    client = ctx.group("client", ("cpu",))
    client.write("cpu", "cpu.shares", 8192)
    ctx.procs.spawn("memcslap", mc.slap(8, ctx.load_seconds), join=client.join_self)
    return Started(pid, workers=4)


def nginx_cpu_quota(ctx: Ctx) -> Started:
    g = ctx.group()
    ng = Nginx(ctx.procs, ctx.tmp, workers=1)
    master = ng.start(join=g.join_self)
    g.cpu_limit(0.1)
    g.write("cpu", "cpu.shares", 8192)
    worker = wait_for(lambda: next(iter(children(master)), 0), 20, "an nginx worker")
    client = ctx.group("client", ("cpu",))
    client.write("cpu", "cpu.shares", 8192)
    ctx.procs.spawn("wrk", ["timeout", str(ctx.load_seconds + 5), *ng.wrk(2, 32, ctx.load_seconds)],
                    join=client.join_self)
    return Started(worker, workers=1)


def _pg_backends(pg: Postgres, n: int) -> list[int]:
    """The pgbench clients' backends, once the same ``n`` are there twice in a row (pgbench opens and
    closes a first connection of its own before its clients connect)."""
    seen: list[list[int]] = []

    def stable() -> list[int]:
        b = pg.backends()
        seen.append(b)
        return b if len(b) == n and len(seen) >= 2 and seen[-2] == b else []

    return wait_for(stable, 60, f"{n} pgbench backends", 0.5)


def postgres_select_cpu_quota(ctx: Ctx) -> Started:
    g = ctx.group()
    pg = Postgres(ctx.procs, ctx.tmp)
    pg.start(join=g.join_self)
    ctx.procs.run("pgbench-init", pg.pgbench("-i", "-s", "2", "-q", "postgres"), timeout=180)
    g.cpu_limit(0.3)
    g.write("cpu", "cpu.shares", 8192)
    client = ctx.group("client", ("cpu",))
    client.write("cpu", "cpu.shares", 8192)
    ctx.procs.spawn("pgbench", pg.pgbench("-S", "-c", "4", "-j", "2", "-T", str(ctx.load_seconds), "postgres"),
                    join=client.join_self)
    b = _pg_backends(pg, 4)
    return Started(b[0], more_pids=b[1:], workers=4)


# --------------------------------------------------------------------------------------
# io_wait: the commit path waits on fsync


def postgres_commit_fsync_throttle(ctx: Ctx) -> Started:
    g = ctx.group()
    pg = Postgres(ctx.procs, ctx.tmp, wal_sync_method="fdatasync", synchronous_commit="on",
                  track_wal_io_timing="on")
    pg.start(join=g.join_self)
    ctx.procs.run("pgbench-init", pg.pgbench("-i", "-s", "1", "-q", "postgres"), timeout=180)
    g.blkio_limit(write_iops=40)
    ctx.procs.spawn("pgbench", pg.pgbench("-c", "1", "-j", "1", "-T", str(ctx.load_seconds), "postgres"))
    b = _pg_backends(pg, 1)

    def probe() -> dict[str, float]:
        return {"wal_syncs": pg.stat("SELECT wal_sync FROM pg_stat_wal"),
                "wal_sync_ms": pg.stat("SELECT wal_sync_time FROM pg_stat_wal"),
                "commits": pg.stat("SELECT sum(xact_commit) FROM pg_stat_database")}

    return Started(b[0], probe=probe, workers=1)


def postgres_fsync_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    syncs = obs.extra.get("wal_syncs", 0.0)
    writes = cg(obs, "main", "blkio.ios.write") / secs
    return [
        Check("backend in D state (mean)", obs.io_blocked, ">=", 0.4, "/proc/PID/stat: the committing backend waits"),
        Check("WAL syncs/s", syncs / secs, ">=", 5.0, "pg_stat_wal.wal_sync delta"),
        Check("mean WAL sync ms", obs.extra.get("wal_sync_ms", 0.0) / max(syncs, 1.0), ">=", 5.0,
              "pg_stat_wal.wal_sync_time / wal_sync (track_wal_io_timing)"),
        Check("throttled write IOPS / limit", writes / 40, ">=", 0.5, "blkio.throttle.io_serviced, limit 40"),
        Check("target CPU cores", obs.cpu_cores, "<=", 0.5),
    ]


def etcd_fsync_throttle(ctx: Ctx) -> Started:
    g = ctx.group()
    e = Etcd(ctx.procs, ctx.tmp)
    pid = e.start(join=g.join_self)
    g.blkio_limit(write_iops=40)
    ctx.procs.spawn("etcd-load", ["timeout", str(ctx.load_seconds), *e.ctl("check", "perf", "--load=s")])

    def probe() -> dict[str, float]:
        return e.metrics("etcd_disk_wal_fsync_duration_seconds_sum", "etcd_disk_wal_fsync_duration_seconds_count",
                         "etcd_mvcc_put_total")

    return Started(pid, probe=probe, workers=1)


def etcd_fsync_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    n = obs.extra.get("etcd_disk_wal_fsync_duration_seconds_count", 0.0)
    mean = obs.extra.get("etcd_disk_wal_fsync_duration_seconds_sum", 0.0) / max(n, 1.0)
    return [
        Check("WAL fsyncs/s", n / secs, ">=", 5.0, "etcd /metrics etcd_disk_wal_fsync_duration_seconds_count"),
        Check("mean WAL fsync ms", mean * 1000, ">=", 10.0, "etcd /metrics: _sum / _count"),
        Check("throttled write IOPS / limit", cg(obs, "main", "blkio.ios.write") / secs / 40, ">=", 0.5,
              "blkio.throttle.io_serviced, limit 40"),
        Check("etcd CPU cores", obs.cpu_cores, "<=", 0.6),
    ]


# --------------------------------------------------------------------------------------
# lock_contention across processes


def postgres_hot_row(ctx: Ctx) -> Started:
    pg = Postgres(ctx.procs, ctx.tmp, synchronous_commit="off", log_lock_waits="on", deadlock_timeout="10ms",
                  log_min_messages="log", logging_collector="off")
    pg.start()
    ctx.procs.run("pgbench-init", pg.pgbench("-i", "-s", "1", "-q", "postgres"), timeout=180)
    script = ctx.tmp / "hot.sql"
    # A hot row held across a short think time in the transaction (5 ms): the other 7 clients queue
    # on its row lock.
    script.write_text("BEGIN;\nUPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = 1;\n"
                      "SELECT pg_sleep(0.005);\nCOMMIT;\n")
    script.chmod(0o644)
    ctx.procs.spawn("pgbench", pg.pgbench("-n", "-f", str(script), "-c", "8", "-j", "2",
                                          "-T", str(ctx.load_seconds), "postgres"))
    b = _pg_backends(pg, 8)
    log = Path(ctx.tmp) / "postgres.log"

    def probe() -> dict[str, float]:
        text = log.read_text(errors="replace") if log.exists() else ""
        return {"lock_waits_logged": float(text.count("still waiting for")),
                "commits": pg.stat("SELECT sum(xact_commit) FROM pg_stat_database")}

    def gauge() -> dict[str, float]:
        return {"lock_waiters": pg.stat("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")}

    return Started(b[0], more_pids=b[1:], probe=probe, gauge=gauge, workers=8)


def postgres_hot_row_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    return [
        Check("backends waiting on a lock (mean)", obs.extra.get("mean:lock_waiters", 0.0), ">=", 3.0,
              "pg_stat_activity wait_event_type = 'Lock', sampled twice a second"),
        Check("lock waits over deadlock_timeout logged/s", obs.extra.get("lock_waits_logged", 0.0) / secs, ">=", 1.0,
              "server log 'still waiting for ShareLock' (log_lock_waits, deadlock_timeout 10 ms)"),
        Check("backends in D state (mean)", obs.io_blocked, "<=", 1.0),
    ]


# --------------------------------------------------------------------------------------
# not_saturated: servers idle but polling, parking, reaping


def mariadb_io_uring_idle(ctx: Ctx) -> Started:
    db = MariaDB(ctx.procs, ctx.tmp, **{"innodb-use-native-aio": 1, "innodb-linux-aio": "io_uring",
                                        "innodb-flush-log-at-trx-commit": 1})
    pid = db.start()
    ctx.procs.run("sysbench-prepare", db.sysbench("oltp_write_only", "--tables=1", "--table-size=10000", "prepare"),
                  timeout=120)
    ctx.procs.spawn("sysbench", db.sysbench("oltp_write_only", "--tables=1", "--table-size=10000", "--threads=2",
                                            "--rate=5", f"--time={ctx.load_seconds}", "run"))

    def probe() -> dict[str, float]:
        return {"questions": db.status("Questions").get("Questions", 0.0)}

    return Started(pid, probe=probe, workers=2)


def mariadb_io_uring_idle_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    reaping = obs.by_comm.get("mariadbd", {}).get(f"syscall:{SYS_IO_URING_ENTER}", 0.0)
    return [
        *idle_checks(0.25)(obs, st),
        Check("statements/s (the 5 tx/s asked for are served)", obs.extra.get("questions", 0.0) / secs, ">=", 20.0,
              "SHOW GLOBAL STATUS Questions delta: 5 tx/s x 6-8 statements, less Poisson noise (--rate)"),
        Check("disk busy share", obs.disk_util, "<=", 0.5, "/proc/diskstats io_ticks of vda"),
        Check("threads waiting in io_uring_enter (mean): the reaper trap is there", reaping, ">=", 0.5,
              "/proc/TID/syscall 426 (io_uring_enter)"),
    ]


def redis_aof_idle(ctx: Ctx) -> Started:
    r = Redis(ctx.procs, ctx.tmp)
    r.extra = ["--appendonly", "yes", "--appendfsync", "everysec"]
    pid = r.start()
    g = ctx.group("client", ("cpu",))
    g.cpu_limit(0.03)
    g.write("cpu", "cpu.shares", 8192)
    ctx.procs.spawn("redis-benchmark", ["timeout", str(ctx.load_seconds),
                                        *r.benchmark("-c", "2", "-n", "1000000000", "-t", "set", "-q")],
                    join=g.join_self)

    def probe() -> dict[str, float]:
        return {"commands": redis_info(r).get("total_commands_processed", 0.0)}

    return Started(pid, probe=probe, workers=1)


def redis_aof_idle_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    bio = sum(d.get("threads", 0.0) for name, d in obs.by_comm.items() if name.startswith("bio_"))
    return [
        *idle_checks(0.15)(obs, st),
        Check("redis commands/s (the load runs)", obs.extra.get("commands", 0.0) / secs, ">=", 100.0,
              "INFO stats total_commands_processed"),
        Check("bio threads (mean): the parked-helper trap is there", bio, ">=", 2.0, "/proc/TID/comm bio_*"),
    ]


def etcd_idle(ctx: Ctx) -> Started:
    e = Etcd(ctx.procs, ctx.tmp)
    pid = e.start()
    loop = " ".join(e.ctl("put", "scn-key", "v"))
    ctx.procs.spawn("etcd-load", ["timeout", str(ctx.load_seconds), "sh", "-c",
                                  f"while :; do {loop} > /dev/null; sleep 0.2; done"])

    def probe() -> dict[str, float]:
        return e.metrics("etcd_mvcc_put_total")

    return Started(pid, probe=probe, workers=1)


def etcd_idle_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    return [
        *idle_checks(0.2)(obs, st),
        Check("puts/s (the load is served)", obs.extra.get("etcd_mvcc_put_total", 0.0) / secs, ">=", 2.0,
              "etcd /metrics etcd_mvcc_put_total"),
        Check("threads parked in futex (mean): the Go parking trap is there", obs.futex_waiting, ">=", 3.0,
              "/proc/TID wchan/syscall futex"),
    ]


def memcached_idle(ctx: Ctx) -> Started:
    mc = Memcached(ctx.procs, threads=4)
    pid = mc.start()
    g = ctx.group("client", ("cpu",))
    g.cpu_limit(0.02)
    g.write("cpu", "cpu.shares", 8192)
    ctx.procs.spawn("memcslap", mc.slap(1, ctx.load_seconds), join=g.join_self)

    def probe() -> dict[str, float]:
        s = mc.stats() or {}
        return {"cmds": s.get("cmd_get", 0.0) + s.get("cmd_set", 0.0)}

    return Started(pid, probe=probe, workers=4)


def memcached_idle_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    return [
        *idle_checks(0.15)(obs, st),
        Check("memcached gets+sets/s (the load runs)", obs.extra.get("cmds", 0.0) / secs, ">=", 100.0,
              "memcached stats cmd_get + cmd_set"),
        Check("threads parked in futex (mean): the maintainer trap is there", obs.futex_waiting, ">=", 2.0,
              "/proc/TID wchan/syscall futex"),
    ]


def postgres_rate_limited(ctx: Ctx) -> Started:
    pg = Postgres(ctx.procs, ctx.tmp)
    pg.start()
    ctx.procs.run("pgbench-init", pg.pgbench("-i", "-s", "1", "-q", "postgres"), timeout=180)
    ctx.procs.spawn("pgbench", pg.pgbench("-S", "-R", "50", "-c", "2", "-j", "1", "-T", str(ctx.load_seconds),
                                          "postgres"))
    b = _pg_backends(pg, 2)

    def probe() -> dict[str, float]:
        return {"commits": pg.stat("SELECT sum(xact_commit) FROM pg_stat_database")}

    return Started(b[0], more_pids=b[1:], probe=probe, workers=2)


def postgres_rate_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    return [
        *idle_checks(0.2)(obs, st),
        Check("transactions/s (the 50/s asked for are served)", obs.extra.get("commits", 0.0) / secs, ">=", 35.0,
              "pg_stat_database xact_commit delta (pgbench -R 50: Poisson arrivals from a client that shares "
              "the loaded host)"),
    ]


# --------------------------------------------------------------------------------------
# two causes at once


def mariadb_hot_row_cpu_quota(ctx: Ctx) -> Started:
    g = ctx.group()
    started = mariadb_hot_row(ctx, join=g.join_self)
    g.cpu_limit(0.3)
    g.write("cpu", "cpu.shares", 8192)
    return started


def hot_row_quota_checks(obs: Observation, st: Started) -> list[Check]:
    return [*hot_row_checks(obs, st), *cpu_quota_checks(0.3)(obs, st)]


def redis_aof_always_throttle_quota(ctx: Ctx) -> Started:
    g = ctx.group()
    r = Redis(ctx.procs, ctx.tmp)
    r.extra = ["--appendonly", "yes", "--appendfsync", "always"]
    pid = r.start(join=g.join_self)
    g.blkio_limit(write_iops=100)
    g.cpu_limit(0.07)
    g.write("cpu", "cpu.shares", 8192)
    client = ctx.group("client", ("cpu",))
    client.write("cpu", "cpu.shares", 8192)
    ctx.procs.spawn("redis-benchmark", ["timeout", str(ctx.load_seconds),
                                        *r.benchmark("-c", "32", "-P", "64", "-n", "1000000000", "-r", "100000",
                                                     "-t", "set", "-q")], join=client.join_self)
    return Started(pid, workers=1)


def aof_throttle_quota_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    periods = cg(obs, "main", "cpu.nr_periods")
    del st
    return [
        Check("redis main thread in D state (mean): fsync on every write", obs.io_blocked, ">=", 0.1,
              "/proc/TID/stat"),
        Check("redis main thread in fdatasync (mean)",
              obs.by_comm.get("redis-server", {}).get(f"syscall:{SYS_FDATASYNC}", 0.0), ">=", 0.1,
              "/proc/TID/syscall 75"),
        Check("disk writes/s", cg(obs, "main", "blkio.ios.write") / secs, ">=", 20.0, "blkio.throttle.io_serviced"),
        Check("cgroup periods throttled (share)", cg(obs, "main", "cpu.nr_throttled") / max(1.0, periods), ">=", 0.2,
              "cpu.stat nr_throttled / nr_periods, quota 0.07"),
    ]


# --------------------------------------------------------------------------------------

SERVER_SCENARIOS: list[Scenario] = [
    # cpu
    Scenario("redis-starved-by-neighbours", "cpu", ("redis-server", "redis-benchmark", "stress-ng"),
             "redis-server (one event-loop thread) under pipelined redis-benchmark; two stress-ng workers with "
             "8x its CPU weight take most of the host's CPUs",
             redis_starved, starved_checks(0.8, 0.9, per_second=(
                 ("commands", ">=", 1000.0, "INFO stats total_commands_processed: the load runs"),)), "CPU starvation by other processes", STARVE, warmup=3),
    Scenario("sysbench-cpu-starved-by-neighbours", "cpu", ("sysbench", "stress-ng"),
             "sysbench cpu, 2 threads; two stress-ng workers with 8x its CPU weight take most of the host's CPUs",
             sysbench_cpu_starved, starved_checks(1.6, 1.4), "CPU starvation by other processes", STARVE, warmup=2),
    Scenario("memcached-cpu-quota", "cpu", ("memcached", "memcslap"),
             "memcached -t 4 under memcslap get (8 threads), cfs quota 0.15 core",
             memcached_cpu_quota, cpu_quota_checks(0.15), "cgroup CPU quota (throttled)",
             ("quota", "throttl", "cfs", "cgroup"), warmup=3),
    Scenario("nginx-worker-cpu-quota", "cpu", ("nginx", "wrk"),
             "nginx, one worker process, under wrk (2 threads, 32 connections), cfs quota 0.1 core",
             nginx_cpu_quota, cpu_quota_checks(0.1), "cgroup CPU quota (throttled)",
             ("quota", "throttl", "cfs", "cgroup"), warmup=3),
    Scenario("postgres-select-cpu-quota", "cpu", ("postgres", "pgbench"),
             "PostgreSQL 15, pgbench -S with 4 clients (4 backends attached), cfs quota 0.3 core",
             postgres_select_cpu_quota, cpu_quota_checks(0.3), "cgroup CPU quota (throttled)",
             ("quota", "throttl", "cfs", "cgroup"), warmup=4),
    # io_wait
    Scenario("postgres-commit-fsync-throttle", "io_wait", ("postgres", "pgbench"),
             "PostgreSQL 15, pgbench TPC-B with 1 client, synchronous_commit on (fdatasync per commit), blkio "
             "write_iops 40",
             postgres_commit_fsync_throttle, postgres_fsync_checks, "commit fsync on a throttled device",
             ("fdatasync", "fsync", "blkio", "throttl", "254:0"), warmup=4),
    Scenario("etcd-wal-fsync-throttle", "io_wait", ("etcd",),
             "etcd (Go) under etcdctl check perf (50 clients of puts), blkio write_iops 40: WAL fsyncs wait",
             etcd_fsync_throttle, etcd_fsync_checks, "WAL fdatasync on a throttled device",
             ("fdatasync", "fsync", "blkio", "throttl", "254:0"), warmup=4),
    # lock_contention
    Scenario("postgres-hot-row", "lock_contention", ("postgres", "pgbench"),
             "PostgreSQL 15, 8 pgbench clients updating the same row, held 5 ms per transaction (8 backends "
             "attached; a row lock wait "
             "sleeps in epoll_wait under ProcSleep, only the user stack tells it from idle)",
             postgres_hot_row, postgres_hot_row_checks, "row lock waits between backends",
             ("futex", "lock", "mutex", "sem"), warmup=4),
    # not_saturated, idle but polling
    Scenario("mariadb-io_uring-idle", "not_saturated", ("mariadbd", "sysbench"),
             "mariadbd with InnoDB on io_uring (a completion reaper in io_uring_enter), oltp_write_only at 5 tx/s",
             mariadb_io_uring_idle, mariadb_io_uring_idle_checks, None, (), warmup=4),
    Scenario("redis-aof-idle", "not_saturated", ("redis-server", "redis-benchmark"),
             "redis-server with AOF (everysec: bio threads parked on condition variables), a client held to 0.03 core",
             redis_aof_idle, redis_aof_idle_checks, None, (), warmup=3),
    Scenario("etcd-idle", "not_saturated", ("etcd",),
             "etcd (Go: runtime threads parked in futex, the netpoller in epoll) under 5 puts/s",
             etcd_idle, etcd_idle_checks, None, (), warmup=4),
    Scenario("memcached-idle", "not_saturated", ("memcached", "memcslap"),
             "memcached -t 4 (workers in epoll, maintainers parked), one memcslap client held to 0.02 core",
             memcached_idle, memcached_idle_checks, None, (), warmup=3),
    Scenario("postgres-rate-limited", "not_saturated", ("postgres", "pgbench"),
             "PostgreSQL 15, pgbench -S at 50 tx/s (-R 50), 2 backends attached",
             postgres_rate_limited, postgres_rate_checks, None, (), warmup=4),
    # two causes at once
    Scenario("mariadb-hot-row-cpu-quota", "lock_contention", ("mariadbd", "sysbench"),
             "mariadbd, 32 clients updating row id=1, and a cfs quota of 0.3 core: row locks and the quota both bind",
             mariadb_hot_row_cpu_quota, hot_row_quota_checks, "row lock waits, or the CPU quota",
             ("futex", "lock", "quota", "throttl"), warmup=3, also=("cpu",)),
    Scenario("redis-aof-always-throttle-quota", "io_wait", ("redis-server", "redis-benchmark"),
             "redis-server with appendfsync always (an fdatasync per write batch) under blkio write_iops 100, "
             "and a cfs quota of 0.07 core",
             redis_aof_always_throttle_quota, aof_throttle_quota_checks, "fsync on a throttled device, or the quota",
             ("fdatasync", "fsync", "blkio", "throttl", "quota"), warmup=3, also=("cpu",)),
]
