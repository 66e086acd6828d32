"""What we know about TiKV, TiDB, PD and common runtimes (core layer, pure data and functions).

Thread names on Linux are cut to 15 bytes, so TiKV's ``unified-read-pool-3`` shows as
``unified-read-po``; the tables below use the names as /proc shows them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Trailing instance numbers: "grpc-server-3", "raftstore-1-0", "rocksdb:low12", "apply-0".
_TRAILING_INDEX = re.compile(r"(?:[-_:.#]?\d+)+$")


def pool_of(thread_name: str) -> str:
    """Normalise a thread name to the name of its pool.

    >>> pool_of("grpc-server-3"), pool_of("raftstore-1-0"), pool_of("rocksdb:low12")
    ('grpc-server', 'raftstore', 'rocksdb:low')
    """
    name = thread_name.strip()
    pool = _strip_index(name).rstrip("-_:.# ")
    return pool or name


def _strip_index(name: str) -> str:
    """``name`` without its trailing instance numbers (what ``_TRAILING_INDEX`` matches), found
    by one scan from the end: the regular expression backtracks exponentially on a long run of
    digits that is not at the end, which a damaged thread name can hold."""
    j = len(name)
    while True:
        k = j
        while k > 0 and name[k - 1].isdecimal():
            k -= 1
        if k == j:  # no digits: the index ends here
            return name[:j]
        j = k
        if j > 0 and name[j - 1] in "-_:.#":
            j -= 1  # the separator before these digits belongs to them
        else:
            return name[:j]


def target_kind(comm: str, exe: str | None = None, cmdline: list[str] | None = None) -> str | None:
    """Recognise TiDB-cluster components by process name or executable."""
    names = [comm or ""]
    if exe:
        names.append(exe.rsplit("/", 1)[-1])
    if cmdline:
        names.append(cmdline[0].rsplit("/", 1)[-1])
    for n in names:
        for kind in ("tikv", "tidb", "pd", "tiflash"):
            if n == f"{kind}-server" or n.startswith(f"{kind}-server"):
                return kind
        if n == "TiFlashMain" or n.startswith("tiflash"):
            return "tiflash"
    return None


def tidb_store(cmdline: list[str] | None) -> str | None:
    """The storage a tidb-server runs on, from its command line: ``tikv`` (a real cluster: its
    locks and data live in the TiKV tier), ``unistore`` (embedded, in the process), or None when
    the command line does not say (the config file's ``store`` then decides; not read here).

    >>> tidb_store(["tidb-server", "-store", "tikv", "-path", "127.0.0.1:2379"])
    'tikv'
    >>> tidb_store(["tidb-server", "--store=unistore"]), tidb_store(["tidb-server", "-P", "4000"])
    ('unistore', None)
    """
    args = list(cmdline or [])[1:]
    for i, a in enumerate(args):
        name, eq, value = a.partition("=")
        if name in ("-store", "--store"):
            value = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            return value.strip().lower() or None
    return None


@dataclass(frozen=True)
class PoolInfo:
    """A TiKV/TiDB thread pool: what it does and the knob that sizes it."""

    pool: str
    role: str
    knob: str | None
    advice: str


# TiKV thread pools (names as /proc shows them after pool_of) and their config knobs.
TIKV_POOLS: dict[str, PoolInfo] = {
    p.pool: p
    for p in [
        PoolInfo("grpc-server", "gRPC request handling", "server.grpc-concurrency",
                 "raise server.grpc-concurrency if every grpc-server thread is busy (>80%)"),
        PoolInfo("raftstore", "Raft log handling and proposals", "raftstore.store-pool-size",
                 "raise raftstore.store-pool-size when raftstore threads run above 80%"),
        PoolInfo("apply", "applying committed Raft entries", "raftstore.apply-pool-size",
                 "raise raftstore.apply-pool-size when apply threads run above 80%"),
        PoolInfo("unified-read-po", "reads and coprocessor (unified read pool)",
                 "readpool.unified.max-thread-count",
                 "raise readpool.unified.max-thread-count, or look at slow coprocessor requests"),
        PoolInfo("sched-worker-po", "transaction scheduler (prewrite/commit, pessimistic locks)",
                 "storage.scheduler-worker-pool-size",
                 "raise storage.scheduler-worker-pool-size; heavy lock waits point at hot rows"),
        PoolInfo("store-read-norm", "storage read pool (non-unified)", "readpool.storage.normal-concurrency",
                 "raise readpool.storage.*-concurrency or switch to the unified read pool"),
        PoolInfo("cop-normal", "coprocessor pool (non-unified)", "readpool.coprocessor.normal-concurrency",
                 "raise readpool.coprocessor.*-concurrency or switch to the unified read pool"),
        PoolInfo("rocksdb:low", "RocksDB compaction", "rocksdb.max-background-jobs",
                 "raise rocksdb.max-background-jobs (and max-sub-compactions) if compaction lags"),
        PoolInfo("rocksdb:high", "RocksDB flush", "rocksdb.max-background-jobs",
                 "raise rocksdb.max-background-flushes / max-background-jobs if flushes lag"),
        PoolInfo("rocksdb:bg", "RocksDB background jobs", "rocksdb.max-background-jobs",
                 "raise rocksdb.max-background-jobs if background work lags"),
        PoolInfo("raftdb:bg", "Raft RocksDB background jobs", "raftdb.max-background-jobs",
                 "raise raftdb.max-background-jobs"),
        PoolInfo("split-check", "region split checks", None, "usually light; heavy use means many large regions"),
        PoolInfo("snap-handler", "snapshot send/apply", "server.snap-max-write-bytes-per-sec",
                 "snapshot traffic: check rebalancing and snap-max-write-bytes-per-sec"),
    ]
}

# TiDB is a Go program: its threads are all "tidb-server"; its knobs are process-wide.
TIDB_KNOBS = {
    "cpu": "GOMAXPROCS / cores given to tidb-server; add TiDB instances if all cores are busy",
    "token": "token-limit (concurrent sessions executing)",
    "txn": "tidb_txn_mode: pessimistic vs optimistic transactions",
}


def runtime_of(frames: list[str]) -> str | None:
    """Guess a program's runtime from frame names (Go, Rust) seen in its stacks."""
    go = rust = 0
    for f in frames:
        if f.startswith(("runtime.", "runtime/")) or ".(*" in f:
            go += 1
        elif f.startswith(("_ZN", "_R")) or "::" in f:
            rust += 1
    if go > rust and go:
        return "go"
    if rust:
        return "rust"
    return None


def pool_info(kind: str | None, pool: str) -> PoolInfo | None:
    """What we know about a pool of a target of this kind (TiKV pools only, for now)."""
    if kind in ("tikv", None):
        info = TIKV_POOLS.get(pool)
        if info is not None and (kind == "tikv" or pool not in _GENERIC_POOL_NAMES):
            return info
    return None


# Pool names that other programs use too: only trust them as TiKV pools when the target is TiKV.
_GENERIC_POOL_NAMES = frozenset({"apply", "split-check"})

# TiDB/PD are Go programs: the knobs that matter when they are the bottleneck.
TIDB_ADVICE = {
    "cpu": ("tidb-server uses all the CPU it has: add tidb-server instances (or cores), check GOMAXPROCS "
            "matches the cores it may use, and look at the on-CPU flame graph for SQL parsing/planning cost"),
    "lock_contention": ("tidb-server goroutines wait on each other: with pessimistic transactions "
                        "(tidb_txn_mode) hot rows serialise updates; try optimistic mode where conflicts "
                        "are rare, or spread the hot keys"),
    "not_saturated": "tidb-server is not saturated: raise the client concurrency or look at TiKV/PD",
}

TIKV_ADVICE = {
    "io_wait": ("TiKV waits on the disk: raftstore/apply fsyncs and RocksDB writes dominate; use faster "
                "storage (SSD/NVMe), check rocksdb.max-background-jobs and raftstore.sync-log, and the "
                "block-cache capacity (storage.block-cache.capacity) for reads"),
    "memory": ("TiKV is short of memory: lower storage.block-cache.capacity to fit the memory limit, or "
               "give the instance more memory; major faults mean the working set no longer fits"),
    "lock_contention": ("TiKV threads wait on locks: look at the scheduler (storage.scheduler-worker-pool-size) "
                        "and pessimistic lock waits (hot rows); in TiDB consider tidb_txn_mode=optimistic "
                        "where conflicts are rare"),
    "not_saturated": ("TiKV is not saturated (CPU well under its cores, little waiting): the bottleneck is "
                      "elsewhere: TiDB, the client's concurrency, or the network"),
}


def runtime_from_threads(comms: list[str], process_comm: str) -> str | None:
    """Guess a runtime from thread names alone (no stacks needed).

    Go names no threads (every thread shows the process name); Rust/Java/C++ servers name
    their pools (tokio-runtime-w, grpc-server-0, GC Thread#0).
    """
    if not comms:
        return None
    if any(c.startswith(("tokio-runtime", "grpc-server", "raftstore", "rocksdb:")) for c in comms):
        return "rust"
    if any(c.startswith(("GC Thread", "C2 CompilerThre", "VM Thread")) for c in comms):
        return "jvm"
    # Go names no threads, but neither do many C programs (fio, redis): thread names alone
    # cannot tell Go apart; runtime_of(frames) does, from the stacks.
    return None
