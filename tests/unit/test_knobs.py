"""TiUP server_configs (and an instance's config) -> each node's knobs, and which pools a knob sizes
(profiler/knowledge/knobs.py, profiler/cluster/topology.py); the cluster report puts them beside
the pools a capture measured (profiler/usecases/cluster.node_knobs)."""

from __future__ import annotations

import yaml

from profiler.cluster import topology
from profiler.knowledge import TIKV_POOLS
from profiler.knowledge.knobs import flatten, pools_of

# seed 003's server_configs, as its author wrote them
SEED_003 = """
global: {user: tidb, deploy_dir: /tidb-deploy}
server_configs:
 tidb:
   log.slow-threshold: 300
   server.mem-quota-query: 1073741824
 tikv:
   readpool.storage.use-unified-pool: false
   readpool.coprocessor.use-unified-pool: true
   server.grpc-concurrency: 2
   raftdb.max-background-jobs: 4
   rocksdb.max-background-jobs: 4
   rocksdb.max-sub-compactions: 2
 pd:
   replication.enable-placement-rules: true
pd_servers: [{host: 10.0.1.4}]
tidb_servers: [{host: 10.0.1.7}]
tikv_servers:
  - {host: 10.0.1.1}
  - host: 10.0.1.2
    config: {server.grpc-concurrency: 4, readpool: {unified: {max-thread-count: 3}}}
"""


def test_server_configs_become_each_nodes_knobs_the_instance_config_wins() -> None:
    nodes, _ = topology.from_topology(yaml.safe_load(SEED_003))
    by = {n.name: n for n in nodes}
    kv1, kv2 = by["10.0.1.1-tikv"].config, by["10.0.1.2-tikv"].config
    assert kv1 == {"readpool.storage.use-unified-pool": False, "readpool.coprocessor.use-unified-pool": True,
                   "server.grpc-concurrency": 2, "raftdb.max-background-jobs": 4, "rocksdb.max-background-jobs": 4,
                   "rocksdb.max-sub-compactions": 2}
    assert kv2["server.grpc-concurrency"] == 4 and kv2["readpool.unified.max-thread-count"] == 3
    assert kv2["rocksdb.max-background-jobs"] == 4
    assert by["10.0.1.7-tidb"].config == {"log.slow-threshold": 300, "server.mem-quota-query": 1073741824}
    assert by["10.0.1.4-pd"].config == {"replication.enable-placement-rules": True}


def test_knobs_name_the_pools_they_size() -> None:
    assert pools_of("server.grpc-concurrency") == ("grpc-server",)
    assert pools_of("readpool.storage.use-unified-pool") == ("store-read-norm", "store-read-high", "store-read-low")
    assert pools_of("readpool.unified.max-thread-count") == ("unified-read-po",)
    assert set(pools_of("rocksdb.max-background-jobs")) == {"rocksdb:low", "rocksdb:high", "rocksdb:bg"}
    assert pools_of("raftdb.max-background-jobs") == ("raftdb:bg",)
    assert pools_of("log.slow-threshold") == ()
    for p in TIKV_POOLS.values():  # every pool's own knob names it
        if p.knob:
            assert p.pool in pools_of(p.knob), p


def test_flatten_is_bounded_and_keeps_scalars() -> None:
    deep: dict = {}
    cur = deep
    for i in range(20):
        cur[f"k{i}"] = {}
        cur = cur[f"k{i}"]
    cur["x"] = 1
    assert flatten(deep) == {}  # deeper than any TiKV setting: left out, not a recursion
    assert flatten({"a": {"b": [1, "x", {"no": 1}]}, "c": None, "d": object()}) == {"a.b": [1, "x"], "c": None}
    assert len(flatten({f"k{i}": i for i in range(5000)})) == 2000
