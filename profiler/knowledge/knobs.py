"""TiKV and TiDB configuration knobs and the thread pools they size (core layer).

A TiUP topology's ``server_configs`` (and an instance's ``config``) or a TidbCluster's
``spec.tikv.config`` set knobs by dotted name (``server.grpc-concurrency: 2``) or as nested
mappings (``readpool: {storage: {use-unified-pool: false}}``); :func:`flatten` makes both the
dotted form. :func:`pools_of` says which pools (names as the verdict's pool table shows them,
``TIKV_POOLS``) a knob sizes or switches, so a report can put the configured value beside the
pool's measured threads and load: ``server.grpc-concurrency = 2`` beside ``grpc-server: 2
threads, 95% busy``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from profiler.knowledge import TIKV_POOLS

MAX_KNOBS = 2000  # knobs kept of one configuration (a mapping is input: bounded)
MAX_DEPTH = 8

# Knob families -> pools, beyond each pool's own sizing knob in TIKV_POOLS.
_FAMILIES: dict[str, tuple[str, ...]] = {
    "server.grpc-": ("grpc-server",),
    "readpool.unified.": ("unified-read-po",),
    "readpool.storage.": ("store-read-norm", "store-read-high", "store-read-low"),
    "readpool.coprocessor.": ("cop-normal", "cop-high", "cop-low"),
    "raftstore.store-": ("raftstore",),
    "raftstore.apply-": ("apply",),
    "storage.scheduler-": ("sched-worker-po",),
    "rocksdb.max-background-jobs": ("rocksdb:low", "rocksdb:high", "rocksdb:bg"),
    "rocksdb.max-background-flushes": ("rocksdb:high",),
    "rocksdb.max-sub-compactions": ("rocksdb:low",),
    "raftdb.max-background-jobs": ("raftdb:bg",),
    "raftdb.max-sub-compactions": ("raftdb:bg",),
}
TIDB_KNOBS: dict[str, str] = {
    "performance.max-procs": "GOMAXPROCS: the cores tidb-server's Go scheduler uses",
    "token-limit": "sessions executing at once",
    "performance.txn-total-size-limit": "largest transaction",
}


def flatten(config: Any, prefix: str = "", depth: int = 0, out: dict[str, Any] | None = None) -> dict[str, Any]:
    """Nested mappings and dotted keys alike -> {"dotted.name": scalar or list}."""
    out = {} if out is None else out
    if not isinstance(config, Mapping) or depth > MAX_DEPTH:
        return out
    for key, value in config.items():
        if len(out) >= MAX_KNOBS:
            break
        name = f"{prefix}{key}" if isinstance(key, str) else f"{prefix}{key!r}"
        if isinstance(value, Mapping):
            flatten(value, name + ".", depth + 1, out)
        elif isinstance(value, str | int | float | bool) or value is None:
            out[name] = value
        elif isinstance(value, list):
            out[name] = [v for v in value[:32] if isinstance(v, str | int | float | bool)]
    return out


def pools_of(knob: str) -> tuple[str, ...]:
    """The TiKV pools a knob sizes or switches (empty: none we name)."""
    own = tuple(p.pool for p in TIKV_POOLS.values() if p.knob == knob)
    fam = next((pools for prefix, pools in _FAMILIES.items() if knob.startswith(prefix)), ())
    return tuple(dict.fromkeys(own + fam))


def describes_a_pool(role: str, knob: str) -> bool:
    """Is this a knob a report shows beside the role's pools (TiKV's pools, TiDB's process-wide knobs)?"""
    if role == "tikv":
        return bool(pools_of(knob))
    if role == "tidb":
        return knob in TIDB_KNOBS
    return False
