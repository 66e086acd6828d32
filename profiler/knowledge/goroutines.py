"""What a goroutine waits for, by the program's own code above the runtime (core layer, pure data).

The Go runtime says how a goroutine is parked (``select``, ``chan receive``, ``semacquire``), not
what for: a TiDB session waiting for a row lock another transaction holds sits in ``select``
inside ``lockwaiter.(*Waiter).Wait``, exactly like an idle worker waiting for its next job; a
session waiting for TiKV sits in ``select`` inside client-go's ``sendBatchRequest``. The
application frames above the runtime's wait say which it is. Each :class:`GoWait` names one
such wait by the function that waits (a pattern matched against the frames, innermost first,
once the runtime and standard library are passed) and says what kind of wait it is:

- ``lock``: waits for a lock another goroutine or transaction holds (lock waiters, latches,
  lock tables): lock contention when many wait;
- ``queue``: waits for a free slot (a semaphore, execution tokens): a concurrency limit;
- ``rpc``: waits for another server's answer (``tier``: which tier answers): the time is spent
  there, not here;
- ``commit``: waits for its write to be replicated and made durable (raft): the log's disk and
  the network;
- ``backoff``: sleeps before retrying a request that met a lock or a stale region.

Sources: the servers' code at the versions users run (TiDB v8.5 and its embedded unistore,
client-go v2, PD's client, etcd 3.4/3.5, golang.org/x/sync); patterns are the function's name
after its import path's last element (``lockwaiter.(*Waiter).Wait``), so they hold across the
path changes between versions (``tidb/store/...`` -> ``tidb/pkg/store/...``, ``etcd/etcdserver`` ->
``etcd/server/v3/etcdserver``). docs/verdict.md#goroutine-waits renders this table.
"""

from __future__ import annotations

from dataclasses import dataclass

LOCK, QUEUE, RPC, COMMIT, BACKOFF = "lock", "queue", "rpc", "commit", "backoff"
KINDS = (LOCK, QUEUE, RPC, COMMIT, BACKOFF)


@dataclass(frozen=True)
class GoWait:
    key: str
    kind: str  # one of KINDS
    server: str  # the program it belongs to: tidb, pd, etcd, any (a library)
    what: str  # one line, as the report says it
    frames: tuple[str, ...]  # function patterns, matched at the end of a frame's name (see ``frame_hit``)
    tier: str | None = None  # rpc: the tier that answers (tikv, pd)
    advice: str = ""  # what to do when many wait here


_HOT_ROWS = ("transactions wait for rows other transactions hold (hot rows): spread the hot keys, keep "
             "transactions short, or, where conflicts are rare, use optimistic transactions (tidb_txn_mode)")

GO_WAITS: tuple[GoWait, ...] = (
    # ---- lock waits: a transaction or goroutine holds what this one needs
    GoWait("unistore-lock-waiter", LOCK, "tidb",
           "a pessimistic lock request waiting for the transaction that holds the row (unistore, TiDB's embedded "
           "storage)", ("lockwaiter.(*Waiter).Wait",), advice=_HOT_ROWS),
    GoWait("unistore-latch", LOCK, "tidb",
           "a write waiting for the latches on its keys (unistore, TiDB's embedded storage)",
           ("tikv.(*latches).acquireOne", "tikv.(*latches).acquire"), advice=_HOT_ROWS),
    GoWait("client-go-latch", LOCK, "tidb",
           "an optimistic transaction waiting for TiDB's local latches on its keys (txn-local-latches)",
           ("latch.(*LatchesScheduler).", "latch.(*Latches)."), advice=_HOT_ROWS),
    # ---- queues for a slot
    GoWait("tidb-token", QUEUE, "tidb",
           "a session waiting for one of TiDB's execution tokens before its statement runs (token-limit)",
           ("util.(*TokenLimiter).Get", "server.(*Server).getToken"),
           advice=("sessions queue for TiDB's execution tokens: raise token-limit (tidb-server's config; the "
                   "number of statements that may run at once) if the CPU has room, else add tidb-server instances")),
    GoWait("x-semaphore", QUEUE, "any", "waiting to acquire a weighted semaphore (golang.org/x/sync)",
           ("semaphore.(*Weighted).Acquire",)),
    # ---- another server's answer
    GoWait("client-go-rpc", RPC, "tidb", "a request waiting for TiKV's answer (client-go batch RPC)",
           ("client.sendBatchRequest", "client.(*RPCClient).sendRequest", "client.(*RPCClient).SendRequest"),
           tier="tikv"),
    GoWait("pd-tso", RPC, "tidb", "a transaction waiting for its timestamp from PD (TSO)",
           ("client.(*tsoRequest).Wait", "client.(*tsoRequest).waitCtx", "client.(*tsoRequest).waitTimeout",
            "oracles.(*tsFuture).Wait"), tier="pd"),
    # ---- raft: waiting for the write to be committed and applied
    GoWait("etcd-raft-commit", COMMIT, "etcd",
           "a write waiting for raft to commit and apply it (WAL fsync, replication, apply)",
           ("etcdserver.(*EtcdServer).processInternalRaftRequestOnce", "etcdserver.(*EtcdServer).linearizableReadNotify")),
    # ---- retries
    GoWait("client-go-backoff", BACKOFF, "tidb",
           "a KV request sleeping before its retry (it met another transaction's lock, a stale region, a busy store)",
           ("retry.(*Backoffer).BackoffWithCfgAndMaxSleep", "retry.newBackoffFn")),
)

BY_KEY = {w.key: w for w in GO_WAITS}


def frame_hit(frame: str, pattern: str) -> bool:
    """A frame is this function (its name after the import path's last '/', ``.funcN`` closures
    and inlined copies included), or, for a pattern ending in '.', a method of that type."""
    name = frame.rsplit("/", 1)[-1]
    if pattern.endswith("."):
        return name.startswith(pattern)
    return name == pattern or name.startswith(pattern + ".func")


DEPTH = 16  # innermost frames of a goroutine searched for a table entry


def match_frame(frame: str) -> GoWait | None:
    """The entry naming this function, or None."""
    for w in GO_WAITS:
        if any(frame_hit(frame, p) for p in w.frames):
            return w
    return None
