"""A lock held for seconds (test layer; issue 29's second open point): MariaDB's table lock.

One session loops ``LOCK TABLES sbtest1 WRITE; DO SLEEP(8); UNLOCK TABLES; DO SLEEP(0.1)`` on a
MyISAM table while 32 sysbench point-select readers queue behind it (bench/table_lock.py's case,
--hold 8 --gap 0.1). The readers block for seconds at a time and wake rarely, unlike a contended
mutex whose waiters block and wake hundreds of times a second. Confirmed without the profiler:
MariaDB's own SHOW PROCESSLIST (sessions in "Waiting for table level lock", sampled through the
window) and /proc (the server's threads asleep in futex, not in D state, little CPU).
"""

from __future__ import annotations

from tests.scenarios.model import Check, Ctx, Scenario, Started
from tests.scenarios.sampler import Observation
from tests.scenarios.servers import MariaDB

HOLD, GAP = 8, 0.1
WRITER = f"LOCK TABLES sbtest1 WRITE; DO SLEEP({HOLD}); UNLOCK TABLES; DO SLEEP({GAP});"


def mariadb_long_table_lock(ctx: Ctx) -> Started:
    db = MariaDB(ctx.procs, ctx.tmp)
    pid = db.start()
    args = ["--tables=1", "--table-size=10000", "--mysql-storage-engine=MyISAM"]
    ctx.procs.run("sysbench-prepare", db.sysbench("oltp_point_select", *args, "prepare"), timeout=120)
    ctx.procs.spawn("table-lock-writer", ["timeout", str(ctx.load_seconds), "sh", "-c",
                                          f"while :; do echo '{WRITER}'; done | mariadb --socket={db.socket} "
                                          "-uroot sbtest"])
    ctx.procs.spawn("sysbench", db.sysbench("oltp_point_select", *args, "--threads=32",
                                            f"--time={ctx.load_seconds}", "run"))

    def waiting() -> dict[str, float]:
        rows = db.sql("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE LIKE 'Waiting for table%'")
        return {"sessions_waiting": float(rows[0][0]) if rows else 0.0}

    return Started(pid, gauge=waiting, workers=32)


def long_lock_checks(obs: Observation, st: Started) -> list[Check]:
    return [
        Check("sessions waiting for the table lock (mean, SHOW PROCESSLIST)", obs.extra.get("mean:sessions_waiting", 0.0),
              ">=", 16.0, "information_schema.PROCESSLIST STATE 'Waiting for table level lock', sampled ~2/s"),
        Check("mariadbd threads asleep in futex (mean)", obs.futex_waiting, ">=", 16.0, "/proc/TID wchan"),
        Check("mariadbd CPU cores (the lock, not the CPU)", obs.cpu_cores, "<=", 0.5, "/proc/PID/stat"),
        Check("mariadbd threads in D state (mean)", obs.io_blocked, "<=", 1.0),
    ]


SCENARIOS: list[Scenario] = [
    Scenario("mariadb-long-table-lock", "lock_contention", ("mariadbd", "sysbench"),
             f"MyISAM: one session holds LOCK TABLES ... WRITE {HOLD} s at a time ({GAP} s apart), 32 sysbench "
             "point-select readers queue behind it, blocking for seconds", mariadb_long_table_lock, long_lock_checks,
             "sessions wait on the table lock", ("lock", "futex"), warmup=5),
]
