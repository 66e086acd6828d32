"""Where a request's time goes, by the servers' own latency histograms (core layer, pure data).

A server that times its requests says where their time goes: TiDB times each statement and,
inside it, each KV command (``lock_keys``: acquiring pessimistic locks), each RPC to TiKV,
backoffs, the wait for an execution token; TiKV times each gRPC request and, inside it, the
wait for the scheduler's latches, for a pessimistic lock held by another transaction, for the
raftstore and apply threads; etcd (and PD, which embeds it) times each WAL fsync and backend
commit, and its gRPC requests (PD always, etcd with ``--metrics=extensive``). The engineers of the field reports read these in Grafana.

A histogram's ``_sum`` grows by the seconds its observations took, so its rate over a window is
request-seconds per second: how many requests were in that phase at any moment, on average
(Little's law). Divided by the same figure for the whole request (``TOTAL``), it is the share
of the requests' time spent in the phase, which the verdict weighs against the resource view.
For a phase one thing does at a time (the WAL's fsync, ``serial``), the same rate is how busy
that thing was.

Each :class:`Phase` names one histogram, the kind of wait it times, the Grafana panel users
know it from, and, for a wait served elsewhere, the tier that serves it. Sources: the metric
definitions in the servers' code (tidb pkg/metrics, client-go metrics/metrics.go, tikv
``*/metrics.rs``, etcd's disk metrics), PingCAP's latency-breakdown.md and the dashboards.
docs/verdict.md#request-time renders this table.
"""

from __future__ import annotations

from dataclasses import dataclass

TOTAL, LOCK, QUEUE, IO, RPC, POOL, BACKOFF = "total", "lock", "queue", "io", "rpc", "pool", "backoff"
KINDS = (TOTAL, LOCK, QUEUE, IO, RPC, POOL, BACKOFF)


@dataclass(frozen=True)
class Phase:
    key: str
    server: str  # tidb | tikv | pd | etcd
    metric: str  # the histogram's family name (without _bucket/_sum/_count)
    kind: str  # one of KINDS
    title: str  # as the report says it
    panel: str  # the Grafana dashboard and panel
    meaning: str
    where: tuple[tuple[str, str | tuple[str, ...]], ...] = ()  # label filters
    by: tuple[str, ...] = ()  # labels it is broken down by in the report
    scale: float = 1.0  # the histogram's unit -> seconds
    serial: bool = False  # one at a time: the rate of its sum is how busy it is
    tier: str | None = None  # the tier that serves this wait, when not the server itself
    aliases: tuple[str, ...] = ()


_LOCK_BACKOFFS = ("txnLock", "txnLockFast")

PHASES: tuple[Phase, ...] = (
    # ------------------------------------------------------------------ TiDB
    Phase("tidb.statement", "tidb", "tidb_server_handle_query_duration_seconds", TOTAL, "Statement duration",
          "TiDB > Query Summary > Duration", "a statement from its arrival to its answer", by=("sql_type",)),
    Phase("tidb.lock_keys", "tidb", "tidb_tikvclient_txn_cmd_duration_seconds", LOCK,
          "Pessimistic lock acquisition (KV Cmd lock_keys)", "TiDB > KV Duration > KV Cmd Duration 99 (lock_keys)",
          "acquiring the pessimistic locks of the rows a statement writes; waits for the transactions that hold "
          "them (in TiDB's embedded unistore, or in TiKV's lock manager)", where=(("type", "lock_keys"),)),
    Phase("tidb.backoff_lock", "tidb", "tidb_tikvclient_backoff_seconds", LOCK, "Backoff on locks (txnLock)",
          "TiDB > KV Errors > KV Backoff Duration (txnLock)",
          "sleeping before retrying a read or write that met another transaction's lock",
          where=(("type", _LOCK_BACKOFFS),), by=("type",)),
    Phase("tidb.token_wait", "tidb", "tidb_server_get_token_duration_seconds", QUEUE, "Get token duration",
          "TiDB > Server > Get Token Duration",
          "waiting for one of token-limit execution slots before the statement runs", scale=1e-6),
    Phase("tidb.kv_request", "tidb", "tidb_tikvclient_request_seconds", RPC, "KV request duration",
          "TiDB > KV Duration > KV Request Duration 99 by type",
          "RPCs to the storage (Get, Prewrite, Commit, PessimisticLock, Cop...), round trip", by=("type",),
          tier="tikv"),
    Phase("tidb.tso_wait", "tidb", "pd_client_cmd_handle_cmds_duration_seconds", RPC, "PD TSO wait",
          "TiDB > PD Client > PD TSO Wait Duration", "waiting for a timestamp from PD",
          where=(("type", "wait"),), tier="pd"),
    # ------------------------------------------------------------------ TiKV
    Phase("tikv.grpc", "tikv", "tikv_grpc_msg_duration_seconds", TOTAL, "gRPC message duration",
          "TiKV-Details > gRPC > 99% gRPC message duration", "a request from its arrival to its answer",
          by=("type",)),
    Phase("tikv.lock_wait", "tikv", "tikv_lock_manager_waiter_lifetime_duration", LOCK,
          "Pessimistic lock wait (waiter lifetime)", "TiKV-Details > Pessimistic Locking > Waiter lifetime duration",
          "a pessimistic lock request waiting in the lock manager for the transaction that holds the key"),
    Phase("tikv.latch_wait", "tikv", "tikv_scheduler_latch_wait_duration_seconds", LOCK, "Scheduler latch wait",
          "TiKV-Details > Scheduler > Scheduler latch wait duration",
          "a write command waiting for the latches of its keys (commands on the same keys queue)", by=("type",)),
    Phase("tikv.propose_wait", "tikv", "tikv_raftstore_request_wait_time_duration_secs", POOL,
          "Propose wait (raftstore)", "TiKV-Details > Raft propose > Propose wait duration",
          "a write waiting for a raftstore thread to propose it"),
    Phase("tikv.apply_wait", "tikv", "tikv_raftstore_apply_wait_time_duration_secs", POOL, "Apply wait",
          "TiKV-Details > Raft propose > Apply wait duration", "committed entries waiting for an apply thread"),
    Phase("tikv.read_pool_wait", "tikv", "tikv_yatp_pool_schedule_wait_duration", POOL,
          "Read pool schedule wait", "TiKV-Details > Unified Read Pool > Schedule wait duration",
          "a read task waiting for a read pool thread", by=("name",)),
    Phase("tikv.store_write_wait", "tikv", "tikv_raftstore_store_write_task_wait_duration_secs", POOL,
          "Store write task wait", "TiKV-Details > Raft IO > Store write task wait duration",
          "a batch of Raft log writes waiting for the store writer thread"),
    Phase("tikv.append_log", "tikv", "tikv_raftstore_append_log_duration_seconds", IO, "Raft append log",
          "TiKV-Details > Raft IO > Append log duration",
          "the store writer writing Raft log entries to the raft engine (fsync included); one writer by default "
          "(raftstore.store-io-pool-size = 1)", serial=True),
    Phase("tikv.apply_log", "tikv", "tikv_raftstore_apply_log_duration_seconds", IO, "Apply log",
          "TiKV-Details > Raft IO > Apply log duration", "writing committed entries to the KV engine"),
    # ------------------------------------------------------------------ etcd (PD embeds it)
    Phase("etcd.wal_fsync", "etcd", "etcd_disk_wal_fsync_duration_seconds", IO, "WAL fsync",
          "etcd > Disk > WAL fsync duration", "fsync of the write-ahead log: every write waits for it", serial=True),
    Phase("etcd.grpc", "etcd", "grpc_server_handling_seconds", TOTAL, "gRPC handling duration (unary)",
          "PD > gRPC > gRPC 99% Completed commands duration",
          "a unary gRPC request (a put, a range, PD's GetRegion...) from its arrival to its answer; PD enables "
          "this histogram, etcd with --metrics=extensive; streams are left out (their time is the stream's life)",
          where=(("grpc_type", "unary"),), by=("grpc_method",)),
    Phase("etcd.backend_commit", "etcd", "etcd_disk_backend_commit_duration_seconds", IO, "Backend commit",
          "etcd > Disk > Backend commit duration", "committing the bbolt database (fsync included)", serial=True),
)

BY_KEY = {p.key: p for p in PHASES}


def for_server(server: str | None) -> list[Phase]:
    """The phases a server's /metrics may hold (PD embeds etcd: its WAL and backend too)."""
    if server is None:
        return []
    return [p for p in PHASES if p.server == server or (server == "pd" and p.server == "etcd")]
