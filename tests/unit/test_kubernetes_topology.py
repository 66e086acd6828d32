"""A TiDB Operator cluster as a topology (profiler/cluster/kubernetes.py): the TidbCluster manifest
(TOML or mapping config, resources) and the pods kubectl lists beside it -> one node per pod."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from profiler.cluster import kubernetes, topology
from profiler.errors import UsageError

# As seed 002 deploys it (1 pd, 3 tikv, 1 tidb; its TiKV config), in TiDB Operator's TidbCluster form.
TC = """
apiVersion: pingcap.com/v1alpha1
kind: TidbCluster
metadata: {name: basic, namespace: tidb-cluster}
spec:
  version: v8.5.3
  pd: {baseImage: pingcap/pd, replicas: 1, requests: {storage: 1Gi}, config: {}}
  tikv:
    baseImage: pingcap/tikv
    replicas: 3
    requests: {cpu: 500m, memory: 1Gi, storage: 10Gi}
    limits: {cpu: "2", memory: 4Gi}
    config: |
      log-level = "info"
      [server]
      grpc-concurrency = 2
      [rocksdb]
      max-background-jobs = 4
      [raftdb]
      max-background-jobs = 4
  tidb:
    baseImage: pingcap/tidb
    replicas: 1
    service: {type: ClusterIP}
    config: {performance: {max-procs: 2}}
  tiflash: {replicas: 1}
"""

CID = "3f2a9c1b7d0e" + "4" * 52


def _pod(name: str, host: str, cid: str | None, phase: str = "Running", container: str = "tikv") -> dict:
    statuses = [{"name": container, "containerID": f"containerd://{cid}", "ready": True}] if cid else []
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "tidb-cluster", "uid": "12345678-9abc-def0-1234-56789abcdef0",
                         "labels": {"app.kubernetes.io/instance": "basic", "app.kubernetes.io/component": container}},
            "spec": {"nodeName": f"node-{host}", "containers": [{"name": container}]},
            "status": {"phase": phase, "hostIP": host, "containerStatuses": statuses}}


def test_the_tidbcluster_alone_is_the_plan() -> None:
    plan = kubernetes.from_manifest(yaml.safe_load(TC))
    assert [p.name for p in plan.pods] == ["basic-pd-0", "basic-tikv-0", "basic-tikv-1", "basic-tikv-2", "basic-tidb-0"]
    kv = plan.pods[1]
    assert (kv.role, kv.container, kv.cpu_limit, kv.cpu_request, kv.memory_limit) == ("tikv", "tikv", 2.0, 0.5, 4 << 30)
    assert kv.knobs == {"log-level": "info", "server.grpc-concurrency": 2, "rocksdb.max-background-jobs": 4,
                        "raftdb.max-background-jobs": 4}
    assert plan.pods[-1].knobs == {"performance.max-procs": 2}
    assert kv.query == "tidb-cluster/basic-tikv-0/tikv"  # before the pods are known
    assert plan.selector("tikv") == "app.kubernetes.io/instance=basic,app.kubernetes.io/component=tikv"
    assert plan.notes == ["spec.tiflash: not captured (only pd, tidb and tikv servers are)"]
    with pytest.raises(UsageError, match="no running pod with a host; list them in the same file: kubectl get "
                                         "tidbcluster/basic pods -l app.kubernetes.io/instance=basic"):
        kubernetes.to_nodes(plan)


def test_a_list_with_the_pods_places_each_on_its_node(tmp_path: Path) -> None:
    doc = {"apiVersion": "v1", "kind": "List", "items": [
        yaml.safe_load(TC),
        _pod("basic-pd-0", "10.0.1.4", "a" * 64, container="pd"),
        _pod("basic-tikv-0", "10.0.1.1", CID),
        _pod("basic-tikv-1", "10.0.1.2", None),  # no container status yet: found by namespace/pod/container
        _pod("basic-tikv-2", "10.0.1.3", "b" * 64, phase="Pending"),
        _pod("other-tikv-0", "10.0.1.9", "c" * 64),  # another cluster's pod
    ]}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(doc))
    nodes, notes = topology.load_topology(path)
    by = {n.name: n for n in nodes}
    assert set(by) == {"basic-pd-0", "basic-tikv-0", "basic-tikv-1"}
    assert (by["basic-tikv-0"].host, by["basic-tikv-0"].role, by["basic-tikv-0"].targets[0].query) == ("10.0.1.1", "tikv", CID)
    assert by["basic-tikv-1"].targets[0].query == "tidb-cluster/basic-tikv-1/tikv"
    assert by["basic-tikv-0"].config["server.grpc-concurrency"] == 2
    assert any("basic-tikv-2: not captured (pod Pending)" in n for n in notes)
    assert any("basic-tidb-0: not captured" in n for n in notes)


@pytest.mark.parametrize(("change", "message"), [
    ({"apiVersion": "v1"}, "apiVersion is pingcap.com/"),
    ({"metadata": {"name": "Bad_Name"}}, "metadata.name should be a Kubernetes name"),
    ({"spec": {"tikv": {"replicas": -1}}}, r"spec.tikv.replicas should be a number from 0 to 1000"),
    ({"spec": {"tikv": {"replicas": 1, "config": "[server\ngrpc"}}}, "spec.tikv.config is not valid TOML"),
    ({"spec": {"tikv": {"replicas": 1, "limits": {"cpu": "two"}}}}, "is not a CPU quantity"),
    ({"spec": {"tikv": {"replicas": 1, "limits": {"memory": "4 GB"}}}}, "is not a memory quantity"),
    ({"spec": {"tiflash": {"replicas": 1}}}, "asks for no pd, tikv or tidb pods"),
])
def test_bad_manifests_are_one_line(change: dict, message: str) -> None:
    tc = {**yaml.safe_load(TC), **change}
    with pytest.raises(UsageError, match=message):
        kubernetes.from_manifest(tc)


def test_quantities() -> None:
    assert kubernetes.cpu_cores("250m", "x") == 0.25 and kubernetes.cpu_cores(3, "x") == 3.0
    assert kubernetes.memory_bytes("512Mi", "x") == 512 << 20 and kubernetes.memory_bytes("2G", "x") == 2_000_000_000
    assert kubernetes.memory_bytes(1024, "x") == 1024
