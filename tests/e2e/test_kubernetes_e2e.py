"""End to end: a TidbCluster and its pods as the topology of `profiler cluster` (privileged).

What a Kubernetes node holds, without Kubernetes: on each namespaced host (tests/hosts.py, its own
sshd) a real server runs in a real cgroup of the kubelet's layout
(``kubepods/burstable/pod<UID>/<container id>``) with the pod's CPU limit as the cgroup's CFS
quota; the topology is what ``kubectl get tidbcluster/basic pods -o yaml`` would print for them
(the TidbCluster, and each pod's hostIP, UID and containerID). One command captures every pod's
node over SSH, each node's agent finds its server by the container id through the processes'
cgroup paths, and the reports name the pods, their limits and their knobs. The API server, the
kubelet and the container runtime are what is left out: docs/kubernetes.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from profiler.bundle.cluster import load_cluster
from profiler.cli import main
from tests import containers as lab_mod
from tests.e2e.test_cluster_e2e import _cli, _ok_or_losses, _redis, _wait_port
from tests.hosts import HostLab, host_lab  # noqa: F401 - the fixture

pytestmark = [pytest.mark.privileged, pytest.mark.slow]

TC = """
apiVersion: pingcap.com/v1alpha1
kind: TidbCluster
metadata: {name: basic, namespace: tidb-cluster}
spec:
  version: v8.5.3
  tikv:
    baseImage: pingcap/tikv
    replicas: 2
    limits: {cpu: 250m, memory: 2Gi}
    config: |
      [server]
      grpc-concurrency = 2
      [readpool.unified]
      max-thread-count = 3
"""


def _cpu_root() -> tuple[Path, str]:
    """Where a CPU quota can be set: the v1 cpu hierarchy, else the cgroup2 mount."""
    v1 = Path("/sys/fs/cgroup/cpu")
    if (v1 / "cpu.cfs_quota_us").exists():
        return v1, "v1"
    return Path("/sys/fs/cgroup"), "v2"


@contextlib.contextmanager
def pod_cgroups() -> Iterator[list[Path]]:
    """Cgroups this test makes (under profiler-test-<pid>-...), removed deepest first after it;
    a process still in one (a host's server) goes back to the hierarchy's root first."""
    made: list[Path] = []
    try:
        yield made
    finally:
        root, _ = _cpu_root()
        for d in sorted(made, key=lambda p: -len(p.parts)):
            for pid in (d / "cgroup.procs").read_text().split() if d.exists() else []:
                with contextlib.suppress(OSError):
                    (root / "cgroup.procs").write_text(pid)
            deadline = time.monotonic() + 5
            while d.exists():
                try:
                    d.rmdir()
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)


def _into_pod(made: list[Path], pid: int, uid: str, cid: str, cores: float) -> None:
    """Move ``pid`` into the kubelet's cgroupfs layout for a burstable pod's container, with the
    pod's CPU limit as the container's quota."""
    root, version = _cpu_root()
    base = root / f"profiler-test-{os.getpid()}-{uid[:8]}"
    leaf = base / "kubepods" / "burstable" / f"pod{uid}" / cid
    d = root
    for part in leaf.relative_to(root).parts:
        if version == "v2" and "cpu" not in (d / "cgroup.subtree_control").read_text().split():
            (d / "cgroup.subtree_control").write_text("+cpu")
        d = d / part
        if not d.exists():
            d.mkdir()
            made.append(d)
    quota = int(cores * 100_000)
    if version == "v1":
        (leaf / "cpu.cfs_period_us").write_text("100000")
        (leaf / "cpu.cfs_quota_us").write_text(str(quota))
    else:
        (leaf / "cpu.max").write_text(f"{quota} 100000")
    (leaf / "cgroup.procs").write_text(str(pid))


def _pod(name: str, uid: str, host: str, cid: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "tidb-cluster", "uid": uid,
                         "labels": {"app.kubernetes.io/instance": "basic", "app.kubernetes.io/component": "tikv"}},
            "spec": {"nodeName": f"node-{host}", "containers": [{"name": "tikv"}]},
            "status": {"phase": "Running", "hostIP": host,
                       "containerStatuses": [{"name": "tikv", "containerID": f"containerd://{cid}", "ready": True}]}}


def test_tidbcluster_pods_captured_by_container_id_with_their_limits(host_lab: HostLab, tmp_path: Path) -> None:  # noqa: F811
    n0, n1 = host_lab.add("node0"), host_lab.add("node1")
    pods = {}
    with pod_cgroups() as made:
        for i, h in enumerate((n0, n1)):
            _redis(h)
            _wait_port(h, 6379)
            uid, cid = str(uuid.uuid4()), os.urandom(32).hex()
            _into_pod(made, h.pids_of("redis-server")[0], uid, cid, 0.25)
            pods[f"basic-tikv-{i}"] = (h, uid, cid)
        topo = tmp_path / "cluster.yaml"
        topo.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [
            yaml.safe_load(TC), *[_pod(name, uid, h.addr, cid) for name, (h, uid, cid) in pods.items()]]}))
        out = tmp_path / "cap"
        code, text = _cli([
            "cluster", "run", "--topology", str(topo), "--ssh-config", str(host_lab.ssh_config),
            "--collector", "perf-stat", "--collector", "procfs", "--collector", "cpu-stacks",
            "-d", "8s", "-o", str(out), "--no-report", "--",
            # Lua calls that keep basic-tikv-0's server busy: its pod's limit (250m) holds it
            "redis-benchmark", "-h", n0.addr, "-p", "6379", "-n", "100000000", "-c", "4", "-q",
            "eval", "local i = 0 while i < 20000 do i = i + 1 end return i", "0"])
        assert code in (0, 130, 143), text
        m = load_cluster(out)
        assert {n.name for n in m.nodes} == set(pods)
        for n in m.nodes:
            assert _ok_or_losses(n.status, n.reason), (n.name, n.reason)
            h, uid, cid = pods[n.name]
            assert n.host == h.addr and n.role == "tikv" and n.targets == [cid]
            target = json.loads((out / "nodes" / n.name / "manifest.json").read_text())["targets"]
            assert [t["pid"] for t in target] == [t["pid"] for t in n.resolved] and len(target) == 1
            ci = target[0]["container_info"]
            assert (ci["id"], ci["pod_uid"], ci["qos"], ci["runtime"]) == (cid, uid, "burstable", "kubernetes")
            assert target[0]["cgroup"]["cpu_quota_us"] == 25000 and target[0]["comm"] == "redis-server"
        code, text = _cli(["report", str(out), "--format", "json"])
        assert code == 0, text
        rep = json.loads(text)
    nodes = {n["name"]: n for n in rep["nodes"]}
    busy, idle = nodes["basic-tikv-0"], nodes["basic-tikv-1"]
    v = busy["verdict"]
    assert v["category"] == "cpu", v["headline"]
    assert "quota" in v["headline"] and f"kubernetes container {pods['basic-tikv-0'][2][:12]}" in v["headline"], v["headline"]
    assert idle["verdict"]["category"] == "not_saturated", idle["verdict"]["headline"]
    assert rep["verdict"]["limiting_tier"] == "tikv" and rep["verdict"]["limiting_node"] == "basic-tikv-0"
    knobs = {k["knob"]: k for k in busy["knobs"]}
    assert knobs["server.grpc-concurrency"]["value"] == 2 and knobs["server.grpc-concurrency"]["sizes"] == ["grpc-server"]
    assert knobs["readpool.unified.max-thread-count"]["value"] == 3


@pytest.mark.skipif(lab_mod.containerd_why_not() is not None, reason=lab_mod.containerd_why_not() or "")
@pytest.mark.parametrize("node", ["host", "kind"])
def test_a_pods_container_under_containerd_found_by_namespace_pod_and_container(tmp_path: Path, node: str) -> None:
    """What a node of a containerd-based Kubernetes holds for one TiKV pod, made by containerd
    itself (tests/containers.ContainerdLab): the pod's pause container and its server container
    in the kubelet's cgroupfs layout, with the CRI plugin's annotations and the pod's CPU limit.
    `attach --container NAMESPACE/POD` takes the server and not the pause container, names it from
    containerd's own state, and the verdict names the pod's limit. ``kind``: containerd runs in a
    mount namespace of its own with its config and state on a tmpfs only it sees, as a kind node's
    containerd runs inside the node's container: the state is read through /proc/PID/root."""
    from profiler.collectors import containers as ctr

    from profiler.bundle import Bundle
    from tests.workloads import gobuild

    try:
        binary = gobuild.build()
    except (FileNotFoundError, RuntimeError) as exc:
        pytest.skip(f"the Go workload cannot be built: {exc}")
    lab = lab_mod.ContainerdLab(own_mount_namespace=node == "kind")
    if node == "kind":  # the host cannot see the daemon's files where its command line says they are
        assert not (lab.tmp / "run" / "config.toml").exists()
    uid = str(uuid.uuid4())
    ann = {"io.kubernetes.cri.sandbox-name": "basic-tikv-0", "io.kubernetes.cri.sandbox-namespace": "tidb-cluster",
           "io.kubernetes.cri.sandbox-uid": uid}
    app = "/tikv-server"  # the server's path in the image; the Go workload stands in for it
    try:
        pause = lab.run({"/pause": binary}, ["/pause", "-mode", "idle", "-workers", "1", "-stdin-exit=false"],
                        f"kubepods/burstable/pod{uid}", annotations={**ann, "io.kubernetes.cri.container-type": "sandbox"})
        server = lab.run({app: binary}, [app, "-mode", "cpu", "-workers", "2", "-stdin-exit=false"],
                         f"kubepods/burstable/pod{uid}", cpus=0.25,
                         annotations={**ann, "io.kubernetes.cri.container-type": "container",
                                      "io.kubernetes.cri.container-name": "tikv"})
        assert ctr.pod_pids(uid) == {pause.id: [pause.pid], server.id: [server.pid]}
        out = tmp_path / "cap"
        assert main(["attach", "--container", "tidb-cluster/basic-tikv-0", "-d", "6s", "-o", str(out), "--no-report",
                     "--collector", "procfs", "--collector", "cpu-stacks"]) == 0
        m = Bundle.open(out).manifest
        assert [t.pid for t in m.targets] == [server.pid]  # not the pause container
        ci = m.targets[0].container_info
        assert ci is not None
        assert (ci.runtime, ci.id, ci.pod, ci.namespace, ci.pod_uid, ci.container, ci.qos) == \
            ("containerd", server.id, "basic-tikv-0", "tidb-cluster", uid, "tikv", "burstable")
        assert ci.state is not None and ci.state.endswith(f"/io.containerd.runtime.v2.task/k8s.io/{server.id}/config.json")
        assert ci.state.startswith("/proc/") == (node == "kind"), ci.state
        assert m.targets[0].cgroup.get("cpu_quota_us") == 25000
        assert any("main.burnCPU" in ln and f"({app})" in ln for ln in Bundle.open(out).iter_lines("cpu.perf.txt.gz"))
        code, text = _cli(["report", str(out), "--format", "json"])
        v = json.loads(text)["verdict"]
        assert v["category"] == "cpu" and "quota" in v["headline"], v["headline"]
        assert "containerd container basic-tikv-0/tikv" in v["headline"], v["headline"]
    finally:
        lab.close()
