"""A TiDB Operator cluster as a topology (cluster layer): TidbCluster manifest + its pods -> node specs.

TiDB Operator runs each component as a StatefulSet of pods named ``<cluster>-<component>-<i>``
(``basic-tikv-0``), labelled ``app.kubernetes.io/instance=<cluster>`` and
``app.kubernetes.io/component=pd|tikv|tidb``, the server in a container named after the
component. The ``TidbCluster`` says how many of each, their resources and their config (TOML
text or a mapping, the same knobs as TiUP's ``server_configs``); the pods say where each runs
(``status.hostIP``) and which container is the server (``status.containerStatuses[].containerID``,
``containerd://<64 hex>``).

One file holds both, as ``kubectl`` writes them::

    kubectl get tidbcluster basic -n tidb-cluster -o yaml > tc.yaml                   # the plan alone
    kubectl get tidbcluster/basic pods -l app.kubernetes.io/instance=basic \\
        -n tidb-cluster -o yaml > cluster.yaml                                          # a List: plan + pods

Each running pod of pd, tikv or tidb becomes one node: host = its node's address (reached over
SSH like a TiUP host), name = the pod's name, the target = its server container by id (the
node's agent finds the container's processes through their cgroup paths:
collectors/containers/), knobs = the component's config. docs/kubernetes.md says how a
capture runs on Kubernetes and what is not built yet.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from typing import Any

from profiler.cluster.topology import NodeSpec, TargetSpec
from profiler.errors import UsageError
from profiler.knowledge.knobs import flatten

COMPONENTS = {"pd": "pd-server", "tikv": "tikv-server", "tidb": "tidb-server"}
OTHER_COMPONENTS = ("tiflash", "ticdc", "pump", "tiproxy")
MAX_REPLICAS = 1000
INSTANCE_LABEL = "app.kubernetes.io/instance"
COMPONENT_LABEL = "app.kubernetes.io/component"
_DNS = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_CPU = re.compile(r"^(\d+(?:\.\d+)?)(m?)$")
_MEM = re.compile(r"^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|K|M|G|T|P|E|m)?$")
_MEM_UNITS = {None: 1, "m": 1e-3, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
              "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60}


@dataclass
class PodPlan:
    """One pod the TidbCluster asks for, and where it runs when its pod was given."""

    name: str  # basic-tikv-0
    namespace: str
    role: str  # pd | tikv | tidb
    container: str  # the server's container in the pod (named after the component)
    cpu_limit: float | None = None  # cores (resources.limits.cpu): the container's CFS quota
    cpu_request: float | None = None
    memory_limit: int | None = None  # bytes
    knobs: dict[str, Any] = field(default_factory=dict)
    host: str | None = None  # status.hostIP of the pod
    node: str | None = None  # spec.nodeName
    uid: str | None = None  # metadata.uid (the pod's cgroup path names it)
    container_id: str | None = None  # the server container's id (64 hex), from containerStatuses
    phase: str | None = None

    @property
    def query(self) -> str:
        """What the node's agent resolves: the container's id when known, else NAMESPACE/POD/CONTAINER."""
        return self.container_id or f"{self.namespace}/{self.name}/{self.container}"


@dataclass
class TidbClusterPlan:
    name: str
    namespace: str
    pods: list[PodPlan]
    notes: list[str] = field(default_factory=list)

    def selector(self, role: str | None = None) -> str:
        """The label selector kubectl takes for this cluster's pods (of one role)."""
        sel = f"{INSTANCE_LABEL}={self.name}"
        return sel + (f",{COMPONENT_LABEL}={role}" if role else "")


def _map(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def is_kubernetes(data: Any) -> bool:
    """Does this parsed YAML hold a TidbCluster (alone, or in a kubectl List)?"""
    if not isinstance(data, dict):
        return False
    if data.get("kind") == "TidbCluster":
        return True
    return data.get("kind") == "List" and any(isinstance(i, dict) and i.get("kind") == "TidbCluster"
                                              for i in data.get("items") or [])


def from_manifest(data: Any, where: str = "topology") -> TidbClusterPlan:
    """A TidbCluster, or a kubectl List holding one TidbCluster and its pods -> the plan."""
    items = data.get("items") if isinstance(data, dict) and data.get("kind") == "List" else [data]
    if not isinstance(items, list):
        raise UsageError(f"{where}: a List's items should be a list")
    tcs = [i for i in items if isinstance(i, dict) and i.get("kind") == "TidbCluster"]
    if len(tcs) != 1:
        raise UsageError(f"{where}: expected one TidbCluster, found {len(tcs)}")
    plan = _plan(tcs[0], where)
    pods = [i for i in items if isinstance(i, dict) and i.get("kind") == "Pod"]
    _place(plan, pods, where)
    return plan


def _plan(tc: dict[str, Any], where: str) -> TidbClusterPlan:
    api = tc.get("apiVersion")
    if not isinstance(api, str) or not api.startswith("pingcap.com/"):
        raise UsageError(f"{where}: a TidbCluster's apiVersion is pingcap.com/..., not {str(api)[:40]!r}")
    meta = _map(tc.get("metadata"))
    name, ns = meta.get("name"), meta.get("namespace") or "default"
    for what, v in (("metadata.name", name), ("metadata.namespace", ns)):
        if not isinstance(v, str) or not _DNS.match(v):
            raise UsageError(f"{where}: TidbCluster {what} should be a Kubernetes name, not {str(v)[:40]!r}")
    spec = tc.get("spec")
    if not isinstance(spec, dict):
        raise UsageError(f"{where}: TidbCluster {name} has no spec")
    plan = TidbClusterPlan(name=str(name), namespace=str(ns), pods=[])
    for comp in COMPONENTS:
        cs = spec.get(comp)
        if cs is None:
            continue
        at = f"{where}: spec.{comp}"
        if not isinstance(cs, dict):
            raise UsageError(f"{at} should be a mapping")
        replicas = cs.get("replicas", 1)
        if isinstance(replicas, bool) or not isinstance(replicas, int) or not 0 <= replicas <= MAX_REPLICAS:
            raise UsageError(f"{at}.replicas should be a number from 0 to {MAX_REPLICAS}")
        knobs = _config(cs.get("config"), f"{at}.config")
        limits = _map(cs.get("limits"))
        requests = _map(cs.get("requests"))
        for i in range(replicas):
            plan.pods.append(PodPlan(
                name=f"{name}-{comp}-{i}", namespace=ns, role=comp, container=comp,
                cpu_limit=cpu_cores(limits.get("cpu"), f"{at}.limits.cpu"),
                cpu_request=cpu_cores(requests.get("cpu"), f"{at}.requests.cpu"),
                memory_limit=memory_bytes(limits.get("memory"), f"{at}.limits.memory"), knobs=dict(knobs)))
    for comp in OTHER_COMPONENTS:
        if isinstance(spec.get(comp), dict):
            plan.notes.append(f"spec.{comp}: not captured (only pd, tidb and tikv servers are)")
    if not plan.pods:
        raise UsageError(f"{where}: TidbCluster {name} asks for no pd, tikv or tidb pods")
    return plan


def _config(cfg: Any, at: str) -> dict[str, Any]:
    """spec.<component>.config: TOML text (TiDB Operator's usual form) or a mapping."""
    if cfg is None:
        return {}
    if isinstance(cfg, str):
        try:
            return flatten(tomllib.loads(cfg))
        except tomllib.TOMLDecodeError as exc:
            raise UsageError(f"{at} is not valid TOML ({str(exc)[:80]})") from None
    if isinstance(cfg, dict):
        return flatten(cfg)
    raise UsageError(f"{at} should be TOML text or a mapping")


def cpu_cores(q: Any, at: str) -> float | None:
    """A Kubernetes CPU quantity (``2``, ``500m``, ``1.5``) in cores."""
    if q is None:
        return None
    m = _CPU.match(str(q).strip()) if isinstance(q, str | int | float) and not isinstance(q, bool) else None
    if m is None:
        raise UsageError(f"{at}: {str(q)[:40]!r} is not a CPU quantity (2, 500m)")
    return float(m.group(1)) / (1000 if m.group(2) else 1)


def memory_bytes(q: Any, at: str) -> int | None:
    """A Kubernetes memory quantity (``4Gi``, ``512M``, ``1073741824``) in bytes."""
    if q is None:
        return None
    m = _MEM.match(str(q).strip()) if isinstance(q, str | int) and not isinstance(q, bool) else None
    if m is None:
        raise UsageError(f"{at}: {str(q)[:40]!r} is not a memory quantity (4Gi, 512M)")
    return int(float(m.group(1)) * _MEM_UNITS[m.group(2)])


def _place(plan: TidbClusterPlan, pods: list[dict[str, Any]], where: str) -> None:
    """Each planned pod's host, UID and server container id from the pods kubectl listed."""
    by = {p.name: p for p in plan.pods}
    for pod in pods:
        meta = _map(pod.get("metadata"))
        p = by.get(str(meta.get("name")))
        if p is None or (meta.get("namespace") or "default") != plan.namespace:
            continue
        spec = _map(pod.get("spec"))
        status = _map(pod.get("status"))
        host = status.get("hostIP")
        if isinstance(host, str) and re.match(r"^[0-9A-Fa-f:.]{2,45}$", host):
            p.host = host
        p.node = spec.get("nodeName") if isinstance(spec.get("nodeName"), str) else None
        p.uid = meta.get("uid") if isinstance(meta.get("uid"), str) else None
        p.phase = status.get("phase") if isinstance(status.get("phase"), str) else None
        for cs in status.get("containerStatuses") or []:
            if isinstance(cs, dict) and cs.get("name") == p.container and isinstance(cs.get("containerID"), str):
                cid = cs["containerID"].split("://", 1)[-1].strip().lower()
                if re.fullmatch(r"[0-9a-f]{64}", cid):
                    p.container_id = cid


def to_nodes(plan: TidbClusterPlan) -> tuple[list[NodeSpec], list[str]]:
    """A node per pod placed on a host; notes name the pods left out and why."""
    notes = list(plan.notes)
    nodes: list[NodeSpec] = []
    for p in plan.pods:
        if p.host is None:
            notes.append(f"{p.namespace}/{p.name}: not captured (its pod was not listed with a hostIP: "
                         f"kubectl get tidbcluster/{plan.name} pods -l {plan.selector()} -n {plan.namespace} -o yaml)")
            continue
        if p.phase not in (None, "Running"):
            notes.append(f"{p.namespace}/{p.name}: not captured (pod {p.phase})")
            continue
        nodes.append(NodeSpec(host=p.host, role=p.role, targets=[TargetSpec(p.query)], name=p.name,
                              config=dict(p.knobs), notes=[f"pod {p.namespace}/{p.name} on {p.node or p.host}"]))
    if not nodes:
        raise UsageError(f"TidbCluster {plan.namespace}/{plan.name}: no running pod with a host; list them in the "
                         f"same file: kubectl get tidbcluster/{plan.name} pods -l {plan.selector()} "
                         f"-n {plan.namespace} -o yaml")
    return nodes, notes
