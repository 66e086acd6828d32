"""What the metrics TiDB, TiKV, PD, etcd and every Go server export mean (core layer, pure data).

Engineers read these in Grafana (the TiDB, TiKV-Details, PD and Performance Overview
dashboards); the seed reports found their bottlenecks there: query and gRPC durations,
pessimistic lock waits, memtable and block cache hit rates, write stalls, one TiKV idle.
Each :class:`MetricInfo` names one Prometheus family as the server exposes it, how to show it
(a rate, a histogram quantile, a gauge's level, a hit ratio, CPU by thread pool), the labels
it is broken down by, the Grafana panel that draws it, what it measures and how to read it.

Sources: the metric definitions in the servers' code (tidb pkg/metrics, client-go's
``tidb_tikvclient_*``, tikv's ``*/metrics.rs``, PD's and etcd's), PingCAP's documentation
(grafana-tidb-dashboard.md, grafana-tikv-dashboard.md, latency-breakdown.md,
performance-tuning-methods.md) and the Go client library's runtime collectors. Names that
changed across versions are listed under each name a version uses (``aliases``).
"""

from __future__ import annotations

from dataclasses import dataclass

RATE, QUANTILE, LEVEL, HIT_RATIO, POOL_CPU, MEAN = "rate", "quantile", "level", "hit_ratio", "pool_cpu", "mean"


@dataclass(frozen=True)
class MetricInfo:
    key: str  # our id: "tidb.query_p99"
    server: str  # tidb | tikv | pd | etcd | go (any Go program using the Prometheus client)
    metric: str  # family name (a histogram's base name, without _bucket/_sum/_count)
    show: str  # RATE | QUANTILE | LEVEL | HIT_RATIO | POOL_CPU | MEAN
    title: str  # as the report says it (close to the Grafana panel's name)
    unit: str
    panel: str  # the Grafana dashboard and panel users know it from
    meaning: str
    reading: str  # what a high (or low) value points at
    by: tuple[str, ...] = ()  # labels the value is broken down by
    where: tuple[tuple[str, str], ...] = ()  # label filters
    q: float = 0.99
    ratio: tuple[str, str, str] = ("", "", "")  # HIT_RATIO: (label, hit value, miss value)
    aliases: tuple[str, ...] = ()  # the same family under the name another version uses
    timeline: bool = False  # drawn on the report's timeline
    scale: float = 1.0  # multiply the raw value (e.g. microseconds -> seconds)


def _m(*args: object, **kw: object) -> MetricInfo:
    return MetricInfo(*args, **kw)  # type: ignore[arg-type]


METRICS: tuple[MetricInfo, ...] = (
    # ------------------------------------------------------------------ TiDB (SQL layer, Go)
    _m("tidb.qps", "tidb", "tidb_server_query_total", RATE, "Queries per second by statement type", "queries/s",
       "TiDB > Query Summary > QPS / Statement OPS",
       "statements finished per second, by type (Select, Insert, Update, Begin, Commit...) and result",
       "the load the SQL layer serves; compare with the load generator's own rate", by=("type",), timeline=True),
    _m("tidb.query_p99", "tidb", "tidb_server_handle_query_duration_seconds", QUANTILE, "Query duration p99 by type",
       "s", "TiDB > Query Summary > 99 Duration",
       "time from receiving a statement to answering it, as TiDB measures it (parse, compile, execute, 2PC)",
       "high with low TiKV gRPC duration: the time is spent in TiDB (CPU, parsing, GC, goroutine waits); "
       "high with high KV request duration: TiKV or the network", by=("sql_type",), timeline=True),
    _m("tidb.token_wait_p99", "tidb", "tidb_server_get_token_duration_seconds", QUANTILE, "Get token duration p99",
       "s", "TiDB > Server > Get Token Duration",
       "wait for one of token-limit execution slots before a statement runs (recorded in microseconds)",
       "above a millisecond: sessions queue for tokens; raise token-limit or add TiDB instances", scale=1e-6),
    _m("tidb.connections", "tidb", "tidb_server_connections", LEVEL, "Client connections", "connections",
       "TiDB > Server > Connection Count", "open client connections", "how much concurrency the clients offer"),
    _m("tidb.kv_request_p99", "tidb", "tidb_tikvclient_request_seconds", QUANTILE, "KV request duration p99 by type",
       "s", "TiDB > KV Duration > KV Request Duration 99 by type",
       "one RPC from TiDB to a TiKV store (Get, BatchGet, Prewrite, Commit, PessimisticLock, Cop...), round trip",
       "high while TiKV's own gRPC duration is low: the network or TiDB's batch client queue; "
       "high in both: the store is slow", by=("type",), timeline=True),
    _m("tidb.kv_cmd_p99", "tidb", "tidb_tikvclient_txn_cmd_duration_seconds", QUANTILE, "KV command duration p99",
       "s", "TiDB > KV Duration > KV Cmd Duration 99",
       "a transaction's KV command as TiDB sees it, retries and backoff included (get, batch_get, commit, lock_keys)",
       "lock_keys high: pessimistic lock acquisition waits (hot rows)", by=("type",)),
    _m("tidb.pessimistic_lock_p99", "tidb", "tidb_tikvclient_txn_cmd_duration_seconds", QUANTILE,
       "Pessimistic lock acquisition p99", "s", "TiDB > KV Duration > KV Cmd Duration 99 (lock_keys)",
       "time to acquire pessimistic locks on the keys a statement writes (latency-breakdown.md: lock = lock_keys)",
       "high: statements wait for rows other transactions hold (hot rows); consider optimistic mode where "
       "conflicts are rare, or spread the hot keys", where=(("type", "lock_keys"),)),
    _m("tidb.txn_retry", "tidb", "tidb_session_retry_num", MEAN, "Transaction retries", "retries per txn",
       "TiDB > Transaction > Transaction Retry Num",
       "how many times a transaction was retried (optimistic conflicts, write conflicts)",
       "above zero: transactions conflict; many retries waste TiDB and TiKV CPU"),
    _m("tidb.backoff", "tidb", "tidb_tikvclient_backoff_seconds", RATE, "KV backoffs per second by type", "backoffs/s",
       "TiDB > KV Errors > KV Backoff OPS",
       "the client backed off before retrying a KV request: txnLock (met another transaction's lock), "
       "regionMiss/updateLeader (stale region cache), tikvRPC (store unreachable), serverBusy",
       "txnLock: lock conflicts; serverBusy: TiKV is overloaded (write stall, full scheduler)", by=("type",),
       aliases=("tidb_tikvclient_backoff_seconds_count",)),
    _m("tidb.lock_resolve", "tidb", "tidb_tikvclient_lock_resolver_actions_total", RATE, "Lock resolve actions",
       "actions/s", "TiDB > KV Errors > Lock Resolve OPS",
       "locks of other transactions TiDB met and resolved (checked, expired, cleaned up)",
       "high: transactions run into each other's locks", by=("type",)),
    _m("tidb.tso_wait_p99", "tidb", "pd_client_cmd_handle_cmds_duration_seconds", QUANTILE, "PD TSO wait p99", "s",
       "TiDB > PD Client > PD TSO Wait Duration",
       "time a statement waits for its timestamp from PD (type=wait)",
       "high: PD is slow or far (network), or TiDB's CPU is saturated so the TSO goroutine runs late",
       where=(("type", "wait"),)),
    # ------------------------------------------------------------------ TiKV (storage, Rust)
    _m("tikv.grpc_qps", "tikv", "tikv_grpc_msg_duration_seconds_count", RATE, "gRPC requests per second by type",
       "requests/s", "TiKV-Details > gRPC > gRPC message count",
       "requests TiKV handled per second, by message type (kv_get, kv_prewrite, kv_commit, coprocessor...)",
       "the load this store serves; a store far below its peers is not getting the load (seed 002)", by=("type",)),
    _m("tikv.grpc_p99", "tikv", "tikv_grpc_msg_duration_seconds", QUANTILE, "gRPC message duration p99 by type", "s",
       "TiKV-Details > gRPC > 99% gRPC message duration",
       "time TiKV spends on one request, from receiving it to answering",
       "high for kv_prewrite/kv_commit/kv_pessimistic_lock: the write path (scheduler latch, raftstore, apply, "
       "disk); for kv_get/coprocessor: the read path (block cache misses, disk reads)", by=("type",), timeline=True),
    _m("tikv.latch_wait_p99", "tikv", "tikv_scheduler_latch_wait_duration_seconds", QUANTILE,
       "Scheduler latch wait p99 by command", "s", "TiKV-Details > Scheduler > Scheduler latch wait duration",
       "time a write command waits for the latches on its keys before the scheduler runs it",
       "high (acquire_pessimistic_lock, prewrite): commands on the same keys queue behind each other: hot keys "
       "or conflicting transactions (latency-breakdown.md: check it first when writes are slow)", by=("type",),
       timeline=True),
    _m("tikv.scheduler_p99", "tikv", "tikv_scheduler_command_duration_seconds", QUANTILE,
       "Scheduler command duration p99", "s", "TiKV-Details > Scheduler > Scheduler command duration",
       "a transactional command's whole time in the scheduler", "", by=("type",)),
    _m("tikv.lock_wait_p99", "tikv", "tikv_lock_manager_waiter_lifetime_duration", QUANTILE,
       "Pessimistic lock wait p99", "s", "TiKV-Details > Pessimistic Locking > Waiter lifetime duration",
       "how long a pessimistic lock request waited for the transaction holding the lock",
       "high: hot rows; many waiters: transactions serialize on the same keys"),
    _m("tikv.lock_waiters", "tikv", "tikv_lock_manager_waiter_lifetime_duration_count", RATE,
       "Pessimistic lock waits per second", "waits/s", "TiKV-Details > Pessimistic Locking",
       "lock requests that had to wait", "above zero: lock conflicts on the same keys"),
    _m("tikv.append_log_p99", "tikv", "tikv_raftstore_append_log_duration_seconds", QUANTILE,
       "Raft append log duration p99", "s", "TiKV-Details > Raft IO > Append log duration",
       "writing Raft log entries to the raft engine (fsync included)",
       "high: the disk is slow for synchronous writes (fsync latency)"),
    _m("tikv.commit_log_p99", "tikv", "tikv_raftstore_commit_log_duration_seconds", QUANTILE,
       "Raft commit log duration p99", "s", "TiKV-Details > Raft IO > Commit log duration",
       "from proposing a write to a quorum having it (replication included)",
       "high with low append duration: followers or the network are slow"),
    _m("tikv.apply_log_p99", "tikv", "tikv_raftstore_apply_log_duration_seconds", QUANTILE,
       "Apply log duration p99", "s", "TiKV-Details > Raft IO > Apply log duration",
       "applying committed entries to the KV RocksDB", "high: RocksDB writes are slow (write stall, disk)",
       timeline=True),
    _m("tikv.apply_wait_p99", "tikv", "tikv_raftstore_apply_wait_time_duration_secs", QUANTILE,
       "Apply wait duration p99", "s", "TiKV-Details > Raft propose > Apply wait duration",
       "committed entries waiting for an apply thread",
       "high: the apply pool is saturated (raise raftstore.apply-pool-size if its threads are busy)"),
    _m("tikv.propose_wait_p99", "tikv", "tikv_raftstore_request_wait_time_duration_secs", QUANTILE,
       "Propose wait duration p99", "s", "TiKV-Details > Raft propose > Propose wait duration",
       "requests waiting for the raftstore thread to propose them",
       "high: the raftstore pool is saturated (raise raftstore.store-pool-size if its threads are busy)"),
    _m("tikv.block_cache_hit", "tikv", "tikv_engine_cache_efficiency", HIT_RATIO, "Block cache hit ratio", "ratio",
       "TiKV-Details > RocksDB - kv > Block cache hit",
       "share of RocksDB block reads served from the block cache (db=kv)",
       "low (under ~0.9 for OLTP reads): reads go to disk; a larger storage.block-cache.capacity helps if memory "
       "allows (seed 004: block cache misses made reads slow)", where=(("db", "kv"),),
       ratio=("type", "block_cache_hit", "block_cache_miss"), timeline=True),
    _m("tikv.memtable_hit", "tikv", "tikv_engine_memtable_efficiency", HIT_RATIO, "Memtable hit ratio", "ratio",
       "TiKV-Details > RocksDB - kv > Memtable hit",
       "share of point reads answered by the memtable (recent writes) before reading SST files",
       "low for a read-your-writes load: reads go to SSTs (and the block cache or disk) (seed 003)",
       where=(("db", "kv"),), ratio=("type", "memtable_hit", "memtable_miss")),
    _m("tikv.write_stall", "tikv", "tikv_engine_write_stall", LEVEL, "Write stall duration (max)", "s",
       "TiKV-Details > RocksDB - kv > Write stall duration",
       "time RocksDB stopped or slowed writes because flushes or compactions fell behind (microseconds)",
       "above zero: writes are throttled by RocksDB itself: compaction cannot keep up (disk, "
       "rocksdb.max-background-jobs) or the disk is nearly full (seed 004)", where=(("type", "write_stall_max"),),
       scale=1e-6),
    _m("tikv.write_stall_reason", "tikv", "tikv_engine_write_stall_reason", RATE, "Write stall reasons", "events/s",
       "TiKV-Details > RocksDB - kv > Write Stall Reason",
       "why RocksDB throttled writes (memtable count, level0 files, pending compaction bytes)",
       "names the part of RocksDB that falls behind", by=("type",)),
    _m("tikv.pool_cpu", "tikv", "tikv_thread_cpu_seconds_total", POOL_CPU, "Thread CPU by pool", "cores",
       "TiKV-Details > Thread CPU", "CPU used by each TiKV thread pool (threads grouped by name)",
       "a pool near its thread count is saturated: its knob (knowledge.TIKV_POOLS) is the lever",
       by=("name",), timeline=True),
    _m("tikv.too_busy", "tikv", "tikv_scheduler_too_busy_total", RATE, "Scheduler too busy", "events/s",
       "TiKV-Details > Errors > Server is busy", "write commands refused because the scheduler queue is full",
       "above zero: TiKV's write path is overloaded"),
    _m("tikv.gc_p99", "tikv", "tikv_gcworker_gc_task_duration_vec", QUANTILE, "MVCC GC task duration p99", "s",
       "TiKV-Details > GC", "TiKV's MVCC garbage collection tasks", "long: many old versions to collect",
       by=("task",)),
    # ------------------------------------------------------------------ PD (placement driver, Go)
    _m("pd.tso_p99", "pd", "pd_server_handle_tso_duration_seconds", QUANTILE, "TSO handle duration p99", "s",
       "PD > TiDB > Handle requests duration (tso)", "time PD takes to hand out a batch of timestamps",
       "high: PD is overloaded or its disk (embedded etcd) is slow", timeline=True),
    _m("pd.grpc_p99", "pd", "grpc_server_handling_seconds", QUANTILE, "gRPC handling p99 by method", "s",
       "PD > gRPC > 99% completed_cmds_duration_seconds", "time PD spends on each gRPC method",
       "", by=("grpc_method",)),
    # ------------------------------------------------------------------ etcd (Go; PD embeds it)
    _m("etcd.wal_fsync_p99", "etcd", "etcd_disk_wal_fsync_duration_seconds", QUANTILE, "WAL fsync p99", "s",
       "etcd > Disk > WAL fsync duration",
       "fsync of the write-ahead log: every write waits for it before it is acknowledged",
       "above ~10 ms: the disk is too slow for etcd (etcd's own guidance); every write waits on it", timeline=True),
    _m("etcd.backend_commit_p99", "etcd", "etcd_disk_backend_commit_duration_seconds", QUANTILE,
       "Backend commit p99", "s", "etcd > Disk > Backend commit duration",
       "committing the bbolt database (fsync included)", "above ~25 ms: the disk is slow", timeline=True),
    _m("etcd.proposals", "etcd", "etcd_server_proposals_committed_total", RATE, "Raft proposals committed",
       "proposals/s", "etcd > Raft > Proposals committed", "writes agreed by the cluster per second",
       "the write load etcd serves"),
    _m("etcd.proposals_pending", "etcd", "etcd_server_proposals_pending", LEVEL, "Proposals pending", "proposals",
       "etcd > Raft > Proposals pending", "writes proposed but not yet committed",
       "growing: the cluster cannot commit as fast as clients write (disk, network, leader CPU)"),
    _m("etcd.grpc_qps", "etcd", "grpc_server_handled_total", RATE, "gRPC requests per second by method",
       "requests/s", "etcd > gRPC > RPC rate", "requests handled per method (Range, Put, Txn, LeaseGrant...)",
       "", by=("grpc_method",), timeline=True),
    # ------------------------------------------------------------------ any Go program (client_golang)
    _m("go.goroutines", "go", "go_goroutines", LEVEL, "Goroutines", "goroutines",
       "TiDB > Server > Goroutine Count", "goroutines that exist",
       "growing without a matching load: goroutines pile up waiting (locks, channels, slow downstream)",
       timeline=True),
    _m("go.threads", "go", "go_threads", LEVEL, "OS threads", "threads", "TiDB > Server > Go Threads",
       "OS threads the Go runtime made", "many more than GOMAXPROCS: goroutines blocked in syscalls (disk IO)"),
    _m("go.gc_per_s", "go", "go_gc_duration_seconds_count", RATE, "GC cycles per second", "cycles/s",
       "TiDB > Server > Go GC Count", "completed garbage collections per second",
       "many per second: the heap grows fast against its goal (GOGC) or hits GOMEMLIMIT"),
    _m("go.gc_pause", "go", "go_gc_duration_seconds_sum", RATE, "GC stop-the-world time", "s/s",
       "TiDB > Server > Go GC Duration", "stop-the-world pause time per second",
       "above a few ms/s: pauses add to every request's latency"),
    _m("go.gc_cpu", "go", "go_cpu_classes_gc_total_cpu_seconds_total", RATE, "GC CPU", "cores",
       "TiDB > Server > Go GC CPU Usage", "CPU the garbage collector used (runtime/metrics, Go 1.20+)",
       "a large share of the process's CPU: memory pressure in Go terms: the heap is near its goal or "
       "GOMEMLIMIT and the collector runs constantly", timeline=True),
    _m("go.gc_cpu_fraction", "go", "go_memstats_gc_cpu_fraction", LEVEL, "GC CPU fraction since start", "ratio",
       "TiDB > Server > Go GC CPU Usage (older)", "share of the available CPU used by GC since the process started",
       "an average over the process's life: a recent change hardly moves it"),
    _m("go.heap_inuse", "go", "go_memstats_heap_inuse_bytes", LEVEL, "Heap in use", "bytes",
       "TiDB > Server > Heap Memory Usage", "bytes in in-use heap spans", "compare with the GC goal and GOMEMLIMIT",
       timeline=True),
    _m("go.heap_goal", "go", "go_gc_heap_goal_bytes", LEVEL, "GC heap goal", "bytes", "Go runtime metrics",
       "the heap size at which the next GC finishes", "", aliases=("go_memstats_next_gc_bytes",)),
    _m("go.memory_limit", "go", "go_gc_gomemlimit_bytes", LEVEL, "GOMEMLIMIT", "bytes", "Go runtime metrics",
       "the runtime's soft memory limit (GOMEMLIMIT; max int64 when unset)", ""),
    _m("go.sched_latency_p99", "go", "go_sched_latencies_seconds", QUANTILE, "Goroutine scheduling latency p99", "s",
       "Go runtime metrics (/sched/latencies)", "time runnable goroutines waited for a thread to run them",
       "high: the process is CPU-starved (all GOMAXPROCS busy, or the cgroup quota throttles it)"),
    _m("go.mutex_wait", "go", "go_sync_mutex_wait_total_seconds_total", RATE, "Mutex wait", "s/s",
       "Go runtime metrics (/sync/mutex/wait/total)", "time goroutines spent blocked on sync.Mutex/RWMutex per second",
       "above 1: on average more than one goroutine is always waiting for a lock: lock contention"),
    _m("process.cpu", "go", "process_cpu_seconds_total", RATE, "Process CPU", "cores",
       "TiDB > Server > CPU Usage", "user+system CPU of the process", ""),
)

BY_KEY = {m.key: m for m in METRICS}

# Families whose presence says which server a /metrics page belongs to (first match wins:
# PD embeds etcd and exports etcd_* too, so pd comes before etcd).
SERVER_PREFIXES: tuple[tuple[str, str], ...] = (
    ("tidb_server_", "tidb"), ("tikv_", "tikv"), ("pd_server_", "pd"), ("pd_scheduler_", "pd"),
    ("etcd_server_", "etcd"),
)
SERVER_NAMES = {"tidb": "TiDB", "tikv": "TiKV", "pd": "PD", "etcd": "etcd", "go": "Go runtime"}


def server_of(names: set[str]) -> str | None:
    """Which server exported these metric families (tidb, tikv, pd, etcd), or None."""
    for prefix, server in SERVER_PREFIXES:
        if any(n.startswith(prefix) for n in names):
            return server
    return None


def for_server(server: str | None) -> list[MetricInfo]:
    """The metrics worth reading for a server: its own, then the Go runtime's (any Go server)."""
    own = [m for m in METRICS if m.server == server] if server else []
    return own + [m for m in METRICS if m.server == "go"]
