"""Real TiDB scenarios (test layer): tidb-server on its embedded unistore, and PD + TiKV + TiDB on one host.

The users' own servers (v8.5.3), built outside the repository and found through ``TIDB_SERVER``,
``PD_SERVER``, ``TIKV_SERVER``, ``GO_YCSB`` and ``GO_TPC``; a scenario whose binary is not set is
skipped with the reason. Each label is confirmed without the profiler, from what the servers say
about themselves and what the kernel counts: TiDB's and TiKV's own /metrics (request-seconds
per second in a phase: the delta of a histogram's ``_sum`` over the window, read with the tests'
own minimal parser), goroutine dumps fetched here (``?debug=2``, text-matched), GODEBUG=gctrace,
cgroup counters and /proc.

The real-cluster scenarios (PD + TiKV + TiDB) are in catalog_tidb_cluster.py.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable
from pathlib import Path

from tests.scenarios.catalog import cpu_quota_checks
from tests.scenarios.model import Check, Ctx, Scenario, Started
from tests.scenarios.sampler import Observation
from tests.scenarios.tidb import TiDB, missing

THREADS = 64  # sysbench and go-ycsb clients on the hot rows (issue 29: 64 clients on 2 rows)
HOT_ROWS = 2

# TiDB's own histograms (sums over label sets, in request-seconds), read at the window's start and end
ROW_LOCK_WAITS = ("lockwaiter.(*Waiter).Wait", "tikv.(*latches).acquireOne")  # unistore's, in TiDB's dump
LOCK_KEYS = 'tidb_tikvclient_txn_cmd_duration_seconds_sum{scope="general",type="lock_keys"}'
STATEMENT = "tidb_server_handle_query_duration_seconds_sum"
TOKEN = "tidb_server_get_token_duration_seconds_sum"  # microseconds


def _sums(text: str, names: tuple[str, ...]) -> dict[str, float]:
    """Sums of the named series (a name with ``{labels}`` matches those labels exactly, in any order)."""
    out = dict.fromkeys(names, 0.0)
    wanted = {}
    for n in names:
        base, _, labels = n.partition("{")
        wanted[n] = (base, frozenset(labels.rstrip("}").split(",")) if labels else frozenset())
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        series, _, value = line.rpartition(" ")
        base, _, labels = series.partition("{")
        have = frozenset(labels.rstrip("}").split(",")) if labels else frozenset()
        for n, (b, lab) in wanted.items():
            if b == base and lab <= have:
                try:
                    out[n] += float(value)
                except ValueError:
                    pass
    return out


def _metrics(db: TiDB, *names: str) -> dict[str, float]:
    from tests.scenarios.tidb import http_get

    return _sums(http_get(f"{db.url}/metrics", 20), names)


def _skip(*names: str) -> Callable[[], str | None]:
    return lambda: missing(*names)


def _tidb_probe(db: TiDB, *more: str) -> Callable[[], dict[str, float]]:
    """TiDB's own counters (the runner takes end minus start)."""
    return lambda: _metrics(db, LOCK_KEYS, STATEMENT, TOKEN, *more)


def _goroutines(url_of: Callable[..., int], *frames: str) -> Callable[[], dict[str, float]]:
    """Goroutines whose stacks hold ``frames`` in the server's own dump, sampled through the window
    (the runner averages them: ``mean:goroutines_waiting``)."""
    return lambda: {"goroutines_waiting": float(url_of(*frames))}


# --------------------------------------------------------------------------------------
# pessimistic hot rows on unistore


def tidb_hot_rows(ctx: Ctx) -> Started:
    db = TiDB(ctx.procs, ctx.tmp / "tidb")
    pid = db.start()
    ctx.procs.run("sysbench-prepare", db.sysbench("oltp_write_only", "--tables=1", "--table-size=1000", "prepare"),
                  timeout=300)
    # explicit transactions (BEGIN; UPDATE one of 2 rows; COMMIT): pessimistic, TiDB's default mode
    ctx.procs.spawn("sysbench", db.sysbench(
        "oltp_write_only", "--tables=1", f"--table-size={HOT_ROWS}", "--index_updates=0", "--non_index_updates=1",
        "--delete_inserts=0", f"--threads={THREADS}", f"--time={ctx.load_seconds}", "run"))
    return Started(pid, probe=_tidb_probe(db), gauge=_goroutines(db.goroutines_with, *ROW_LOCK_WAITS),
                   workers=THREADS)


def hot_rows_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    lock = obs.extra.get(LOCK_KEYS, 0.0)
    stmt = obs.extra.get(STATEMENT, 0.0)
    return [
        Check("sessions waiting on pessimistic locks (lock_keys request-s/s)", lock / secs, ">=", st.workers / 4,
              "TiDB's /metrics: tidb_tikvclient_txn_cmd_duration_seconds_sum{type=lock_keys} delta / window"),
        Check("lock_keys share of the statements' time", lock / max(stmt, 1e-6), ">=", 0.5,
              "TiDB's /metrics: lock_keys _sum delta / tidb_server_handle_query_duration_seconds_sum delta"),
        Check("goroutines waiting on row locks or key latches (mean over the window)",
              obs.extra.get("mean:goroutines_waiting", 0.0), ">=", st.workers / 4,
              "tidb-server's own goroutine dump (?debug=2), text-matched: lockwaiter.(*Waiter).Wait (a lock another "
              "transaction holds) or tikv.(*latches).acquireOne (a command on the same keys)"),
        Check("tidb-server CPU cores (not CPU-bound)", obs.cpu_cores, "<=", 1.0, "/proc/PID/stat"),
    ]


def tidb_ycsb_hot_keys(ctx: Ctx) -> Started:
    # go-ycsb's UPDATEs are autocommit statements: pessimistic only with pessimistic-auto-commit
    db = TiDB(ctx.procs, ctx.tmp / "tidb", config="[pessimistic-txn]\npessimistic-auto-commit = true\n")
    pid = db.start()
    db.sql("CREATE DATABASE IF NOT EXISTS test")
    common = ("recordcount=20", "requestdistribution=zipfian", "debug.pprof=127.0.0.1:0")
    ctx.procs.run("go-ycsb-load", db.go_ycsb("load", *common, "threadcount=4"), timeout=300)
    # go-ycsb v1.0.3 has a maxexecutiontime property but never reads it: timeout(1) bounds the run
    ctx.procs.spawn("go-ycsb", ["timeout", str(ctx.load_seconds), *db.go_ycsb(
        "run", *common, "workload=core", "readproportion=0.2", "updateproportion=0.8", "operationcount=100000000",
        f"threadcount={THREADS}")])
    return Started(pid, probe=_tidb_probe(db), gauge=_goroutines(db.goroutines_with, *ROW_LOCK_WAITS),
                   workers=THREADS)


# --------------------------------------------------------------------------------------
# optimistic transactions that conflict and retry (unistore)


def tidb_optimistic_conflicts(ctx: Ctx) -> Started:
    db = TiDB(ctx.procs, ctx.tmp / "tidb")
    pid = db.start()
    db.sql("SET GLOBAL tidb_txn_mode = 'optimistic'")
    db.sql("SET GLOBAL tidb_disable_txn_auto_retry = OFF")
    db.sql("SET GLOBAL tidb_retry_limit = 20")
    ctx.procs.run("sysbench-prepare", db.sysbench("oltp_update_non_index", "--tables=1", "--table-size=1000",
                                                  "prepare"), timeout=300)
    ctx.procs.spawn("sysbench", db.sysbench(
        "oltp_update_non_index", "--tables=1", f"--table-size={HOT_ROWS}", f"--threads={THREADS}",
        f"--time={ctx.load_seconds}", "--mysql-ignore-errors=all", "run"))
    return Started(pid, probe=_tidb_probe(db, "tidb_session_retry_num_sum", "tidb_session_retry_num_count"),
                   gauge=_goroutines(db.goroutines_with, "tikv.(*latches).acquireOne"), workers=THREADS)


def optimistic_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    return [
        Check("statement retries/s (TiDB's retry count)", obs.extra.get("tidb_session_retry_num_sum", 0.0) / secs,
              ">=", 10.0, "TiDB's /metrics: tidb_session_retry_num_sum delta / window (retries of conflicting txns)"),
        Check("goroutines waiting on unistore's latches (mean over the window)",
              obs.extra.get("mean:goroutines_waiting", 0.0), ">=", st.workers / 4,
              "tidb-server's own goroutine dump (?debug=2): tikv.(*latches).acquireOne (prewrite on the hot keys)"),
        Check("tidb-server CPU cores (not CPU-bound)", obs.cpu_cores, "<=", 1.2, "/proc/PID/stat"),
    ]


# --------------------------------------------------------------------------------------
# sessions queueing for execution tokens (token-limit)


def tidb_token_limit(ctx: Ctx) -> Started:
    db = TiDB(ctx.procs, ctx.tmp / "tidb", config="token-limit = 2\n")
    pid = db.start()
    ctx.procs.run("sysbench-prepare", db.sysbench("oltp_read_only", "--tables=1", "--table-size=10000", "prepare"),
                  timeout=300)
    # each statement holds a token for a while: a range scan over 5000 rows
    ctx.procs.spawn("sysbench", db.sysbench(
        "oltp_read_only", "--tables=1", "--table-size=10000", "--point_selects=0", "--simple_ranges=0",
        "--sum_ranges=1", "--order_ranges=0", "--distinct_ranges=0", "--range_size=5000", "--skip_trx=on",
        f"--threads={THREADS}", f"--time={ctx.load_seconds}", "run"))
    return Started(pid, probe=_tidb_probe(db),
                   gauge=_goroutines(db.goroutines_with, "util.(*TokenLimiter).Get", "server.(*Server).getToken"),
                   workers=THREADS)


def token_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    token = obs.extra.get(TOKEN, 0.0) * 1e-6
    stmt = obs.extra.get(STATEMENT, 0.0)
    return [
        Check("sessions waiting for a token (get-token request-s/s)", token / secs, ">=", st.workers / 4,
              "TiDB's /metrics: tidb_server_get_token_duration_seconds_sum (microseconds) delta / window"),
        Check("token wait share of the statements' time", token / max(stmt, 1e-6), ">=", 0.5,
              "TiDB's /metrics: the statement duration's timer starts before the token wait (pkg/server/conn.go)"),
        Check("goroutines in TokenLimiter.Get/getToken (mean over the window)", obs.extra.get("mean:goroutines_waiting", 0.0),
              ">=", st.workers / 4, "tidb-server's own goroutine dump (?debug=2)"),
    ]


# --------------------------------------------------------------------------------------
# CPU under a cgroup quota, driven by go-tpc (unistore)


def tidb_tpcc_cpu_quota(ctx: Ctx) -> Started:
    g = ctx.group()
    db = TiDB(ctx.procs, ctx.tmp / "tidb")
    pid = db.start(join=g.join_self)
    ctx.procs.run("go-tpc-prepare", db.go_tpc("tpcc", "prepare", "-D", "tpcc", "--warehouses", "1", "-T", "4"),
                  timeout=900)
    g.cpu_limit(0.4)
    g.write("cpu", "cpu.shares", 8192)
    client = ctx.group("client", ("cpu",))
    client.write("cpu", "cpu.shares", 8192)
    ctx.procs.spawn("go-tpc", db.go_tpc("tpcc", "run", "-D", "tpcc", "--warehouses", "1", "-T", "8", "--time",
                                        f"{ctx.load_seconds}s"), join=client.join_self)
    return Started(pid, probe=_tidb_probe(db, "tidb_server_query_total"), workers=8)


def tpcc_quota_checks(obs: Observation, st: Started) -> list[Check]:
    return [*cpu_quota_checks(0.4)(obs, st),
            Check("statements/s (the load runs)", obs.extra.get("tidb_server_query_total", 0.0) / max(obs.seconds, 1e-6),
                  ">=", 20.0, "TiDB's /metrics: tidb_server_query_total delta")]


# --------------------------------------------------------------------------------------
# the Go collector under a low GOMEMLIMIT (unistore)

GC_LIMIT = 200 << 20


def tidb_gc_memlimit(ctx: Ctx) -> Started:
    db = TiDB(ctx.procs, ctx.tmp / "tidb", env=dict(os.environ, GOMEMLIMIT=str(GC_LIMIT), GODEBUG="gctrace=1"))
    pid = db.start()
    # TiDB sets the Go memory limit from tidb_server_memory_limit; 0 leaves GOMEMLIMIT's
    db.sql("SET GLOBAL tidb_server_memory_limit = 0")
    ctx.procs.run("sysbench-prepare", db.sysbench("oltp_read_only", "--tables=1", "--table-size=20000", "prepare"),
                  timeout=300)
    ctx.procs.spawn("sysbench", db.sysbench(
        "oltp_read_only", "--tables=1", "--table-size=20000", "--range_size=1000", "--skip_trx=on", "--threads=8",
        f"--time={ctx.load_seconds}", "run"))
    log = ctx.procs.logdir / "tidb-server.log"
    calls = [0]

    def probe() -> dict[str, float]:
        cycles, gc_s, gc_clock = gctrace_work(log)
        m = _metrics(db, "go_memstats_heap_inuse_bytes", "tidb_server_query_total")
        # the heap is a level: reported at the window's end only (the runner subtracts the start's 0)
        heap = m.pop("go_memstats_heap_inuse_bytes") if calls[0] else 0.0
        calls[0] += 1
        return {"gc_cycles": float(cycles), "gc_cpu_seconds": gc_s, "gc_clock_seconds": gc_clock, "heap_inuse": heap, **m}

    return Started(pid, probe=probe, workers=8)


_GCTRACE_CPU = re.compile(r"^gc \d+ @[\d.]+s \d+%: ([\d.+]+) ms clock, "
                          r"([\d.]+)\+([\d.]+)/([\d.]+)/([\d.]+)\+([\d.]+) ms cpu")


def gctrace_work(log: Path) -> tuple[int, float, float]:
    """GC cycles, the CPU seconds the collector took from the program, and the seconds a cycle was
    in progress (wall clock), in a GODEBUG=gctrace=1 log. CPU: stop-the-world, mark assists and
    dedicated background marking; idle-time marking (the runtime marks on Ps that have nothing
    else to run) is left out, as it takes nothing from the work."""
    cycles, ms, clock = 0, 0.0, 0.0
    with contextlib.suppress(OSError), log.open(errors="replace") as f:
        for line in f:
            m = _GCTRACE_CPU.match(line)
            if m:
                stw1, assist, background, _idle, stw2 = (float(x) for x in m.groups()[1:])
                cycles += 1
                ms += stw1 + assist + background + stw2
                clock += sum(float(x) for x in m.group(1).split("+"))
    return cycles, ms / 1000, clock / 1000


def gc_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    gc = obs.extra.get("gc_cpu_seconds", 0.0) / max(obs.cpu_cores * secs, 1e-6)
    return [
        Check("GC CPU (idle-time marking left out) / tidb-server CPU", gc, ">=", 0.25,
              "tidb-server's own GODEBUG=gctrace=1 (stop-the-world + assist + background ms per cycle, summed over "
              "the window) / /proc CPU"),
        Check("heap in use / GOMEMLIMIT at the window's end", obs.extra.get("heap_inuse", 0.0) / GC_LIMIT, ">=", 0.8,
              "TiDB's /metrics: go_memstats_heap_inuse_bytes"),
        Check("share of the window a GC cycle was in progress", obs.extra.get("gc_clock_seconds", 0.0) / secs, ">=",
              0.5, "gctrace: each cycle's wall-clock phases (sweep termination + mark + mark termination), summed"),
        Check("target major faults/s", obs.majflt_per_s, "<=", 10.0, "not paging: the pressure is the Go heap's"),
    ]


# --------------------------------------------------------------------------------------
# the host's CPUs filled by TiDB and its client together (unistore)


def tidb_point_selects_host_cpu(ctx: Ctx) -> Started:
    db = TiDB(ctx.procs, ctx.tmp / "tidb")
    pid = db.start()
    ctx.procs.run("sysbench-prepare", db.sysbench("oltp_point_select", "--tables=1", "--table-size=10000", "prepare"),
                  timeout=300)
    ctx.procs.spawn("sysbench", db.sysbench("oltp_point_select", "--tables=1", "--table-size=10000", "--threads=32",
                                            f"--time={ctx.load_seconds}", "run"))
    return Started(pid, probe=_tidb_probe(db, "tidb_server_query_total"), workers=32)


def host_cpu_checks(obs: Observation, st: Started) -> list[Check]:
    # Who fills the host is not part of the label (issue 29: on the shared host other work took
    # 1.6 of the 2 CPUs and TiDB 0.2-0.4): TiDB wants more CPU than it gets, by its own run delay
    # against its run time and its statements in flight (at least one per CPU)
    secs = max(obs.seconds, 1e-6)
    return [
        Check("host CPU busy (all CPUs)", obs.host_busy, ">=", 0.9, "/proc/stat"),
        Check("tidb-server run-queue share: run delay >= run time", obs.runq_share, ">=", 0.5,
              "schedstat: of the CPU its threads asked for, the share they waited for"),
        Check("statements in tidb-server on average (>= one per CPU)", obs.extra.get(STATEMENT, 0.0) / secs, ">=",
              float(os.cpu_count() or 1), "TiDB's /metrics: rate of the statement duration's _sum (Little's law)"),
        Check("sessions waiting on locks (lock_keys request-s/s)", obs.extra.get(LOCK_KEYS, 0.0) / secs, "<=", 0.1,
              "TiDB's /metrics: a read-only load takes no pessimistic locks"),
        Check("statements/s (the load runs)", obs.extra.get("tidb_server_query_total", 0.0) / secs, ">=", 500.0,
              "TiDB's /metrics: tidb_server_query_total delta"),
    ]


# --------------------------------------------------------------------------------------
# idle with its background work (unistore)


def tidb_idle(ctx: Ctx) -> Started:
    db = TiDB(ctx.procs, ctx.tmp / "tidb")
    pid = db.start()
    ctx.procs.run("sysbench-prepare", db.sysbench("oltp_point_select", "--tables=1", "--table-size=1000", "prepare"),
                  timeout=300)
    ctx.procs.spawn("sysbench", db.sysbench("oltp_point_select", "--tables=1", "--table-size=1000", "--threads=2",
                                            "--rate=5", f"--time={ctx.load_seconds}", "run"))
    return Started(pid, probe=_tidb_probe(db, "tidb_server_query_total"), workers=1)


def tidb_idle_checks(obs: Observation, st: Started) -> list[Check]:
    secs = max(obs.seconds, 1e-6)
    return [
        Check("tidb-server CPU cores", obs.cpu_cores, "<=", 0.3, "/proc/PID/stat"),
        Check("statements/s (the light load runs)", obs.extra.get("tidb_server_query_total", 0.0) / secs, ">=", 3.0,
              "TiDB's /metrics: tidb_server_query_total delta"),
        Check("target threads in D state (mean)", obs.io_blocked, "<=", 0.2),
    ]


# --------------------------------------------------------------------------------------

_UNI = ("tidb-server", "sysbench")
_LOCK_WORDS = ("lock_keys", "lockwaiter", "pessimistic lock", "locks")

SCENARIOS: list[Scenario] = [
    # tidb-server on its embedded unistore (the cluster's: catalog_tidb_cluster.CLUSTER_SCENARIOS)
    Scenario("tidb-pessimistic-hot-rows", "lock_contention", _UNI,
             f"tidb-server (unistore), {THREADS} sysbench clients in pessimistic transactions updating "
             f"{HOT_ROWS} rows", tidb_hot_rows, hot_rows_checks,
             "sessions wait for row locks (lock_keys; lockwaiter.(*Waiter).Wait)", _LOCK_WORDS, warmup=5,
             skip=_skip("tidb-server")),
    Scenario("tidb-ycsb-zipfian-hot-keys", "lock_contention", ("tidb-server", "go-ycsb"),
             f"tidb-server (unistore, pessimistic autocommit), go-ycsb {THREADS} threads, 80% updates, zipfian over "
             "20 records", tidb_ycsb_hot_keys, hot_rows_checks,
             "sessions wait for row locks (lock_keys; lockwaiter.(*Waiter).Wait)", _LOCK_WORDS, warmup=5,
             skip=_skip("tidb-server", "go-ycsb")),
    Scenario("tidb-optimistic-conflicts", "lock_contention", _UNI,
             f"tidb-server (unistore), optimistic transactions with retries on, {THREADS} clients updating "
             f"{HOT_ROWS} rows: conflicts, retries, prewrites queued on latches",
             tidb_optimistic_conflicts, optimistic_checks, "writes wait for latches on the hot keys",
             ("latch", "lock"), warmup=5, skip=_skip("tidb-server")),
    Scenario("tidb-token-limit", "lock_contention", _UNI,
             f"tidb-server (unistore), token-limit 2, {THREADS} clients of 5000-row range sums: sessions queue for "
             "execution tokens", tidb_token_limit, token_checks, "sessions queue for tokens (token-limit)",
             ("token",), warmup=5, skip=_skip("tidb-server")),
    Scenario("tidb-tpcc-cpu-quota", "cpu", ("tidb-server", "go-tpc"),
             "tidb-server (unistore) under go-tpc tpcc (1 warehouse, 8 threads), cfs quota 0.4 core",
             tidb_tpcc_cpu_quota, tpcc_quota_checks, "cgroup CPU quota (throttled)",
             ("quota", "throttl", "cfs", "cgroup"), warmup=5, skip=_skip("tidb-server", "go-tpc")),
    Scenario("tidb-gc-memlimit", "memory", _UNI,
             "tidb-server (unistore), GOMEMLIMIT 200 MiB (tidb_server_memory_limit 0), sysbench range reads: the "
             "collector runs constantly", tidb_gc_memlimit, gc_checks,
             "memory pressure in Go terms (GC CPU, heap at GOMEMLIMIT)", ("go terms", "garbage collector", "gomemlimit"),
             warmup=5, skip=_skip("tidb-server")),
    Scenario("tidb-point-selects-host-cpu", "cpu", _UNI,
             "tidb-server (unistore) under sysbench oltp_point_select, 32 threads: TiDB, its client and whatever "
             "else the host runs fill the host's CPUs; TiDB queues for them", tidb_point_selects_host_cpu,
             host_cpu_checks, "the host's CPUs are saturated (by the capture's targets, or by other processes)",
             ("host's cpus are saturated", "saturated", "cores busy"), warmup=5, skip=_skip("tidb-server")),
    Scenario("tidb-idle", "not_saturated", _UNI,
             "tidb-server (unistore) with its background work, 5 point selects/s", tidb_idle, tidb_idle_checks,
             None, (), warmup=5, skip=_skip("tidb-server")),
]
