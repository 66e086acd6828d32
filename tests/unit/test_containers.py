"""Containers found from cgroup paths (collectors/containers.py): the layouts of docker, podman,
containerd, CRI-O and Kubernetes (cgroup v1 and v2, cgroupfs and systemd drivers), and the
Kubernetes pod/container -> host pid resolution on real cgroup trees this test creates.

The privileged tests make real cgroups (directories under a mounted v1 hierarchy and under the
cgroup2 mount), move a real process into each and let the resolver find it through the kernel's
/proc/PID/cgroup; they remove exactly what they created.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from profiler.collectors import containers as ctr

from profiler.capture import targets
from profiler.errors import TargetError

CID = "3f2a9c1b7d0e" + "a" * 52
NODE = "9" * 64
UID = "12345678-9abc-def0-1234-56789abcdef0"


@pytest.mark.parametrize(("path", "runtime", "pod", "qos"), [
    (f"/docker/{CID}", "docker", None, None),
    (f"/system.slice/docker-{CID}.scope", "docker", None, None),
    (f"/libpod_parent/libpod-{CID}", "podman", None, None),
    (f"/machine.slice/libpod-{CID}.scope/container", "podman", None, None),
    (f"/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{CID}.scope", "podman", None, None),
    (f"/default/{CID}", "containerd", None, None),
    (f"/system.slice/nerdctl-{CID}.scope", "containerd", None, None),
    (f"/kubepods/burstable/pod{UID}/{CID}", "kubernetes", UID, "burstable"),
    (f"/kubepods/pod{UID}/{CID}", "kubernetes", UID, "guaranteed"),
    (f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope",
     "containerd", UID, "besteffort"),
    (f"/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/crio-{CID}.scope", "cri-o", UID, "guaranteed"),
    # kind: a pod's container inside the node's own docker container
    (f"/docker/{NODE}/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/"
     f"kubelet-kubepods-burstable-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope", "containerd", UID, "burstable"),
    # a private cgroup namespace shows other cgroups relative to its own
    (f"/../../kubepods/besteffort/pod{UID}/{CID}", "kubernetes", UID, "besteffort"),
])
def test_cgroup_layouts_name_the_container(path: str, runtime: str, pod: str | None, qos: str | None) -> None:
    ref = ctr.parse_cgroup_path(path)
    assert ref is not None
    assert (ref.runtime, ref.id, ref.pod_uid, ref.qos) == (runtime, CID, pod, qos)


@pytest.mark.parametrize("path", [
    "/", "/user.slice/user-0.slice/session-3.scope", f"/machine.slice/libpod-conmon-{CID}.scope",
    f"/system.slice/crio-conmon-{CID}.scope", f"/kubepods/burstable/pod{UID}", "/docker/" + "a" * 63,
    "/libpod_parent/conmon",
])
def test_host_processes_and_monitors_are_not_containers(path: str) -> None:
    assert ctr.parse_cgroup_path(path) is None


def _c(cid: str, name: str | None, pod: str | None = None, ns: str | None = None, cont: str | None = None,
       sandbox: bool = False) -> ctr.Container:
    st = ctr.State(runtime="containerd", id=cid, name=name, pod=pod, namespace=ns, container=cont, sandbox=sandbox)
    return ctr.Container(ref=ctr.CgroupRef("containerd", cid), pids=[1], state=st)


def test_match_rules_most_exact_first() -> None:
    a = _c("ab" + "0" * 62, "tikv1")
    b = _c("ab" + "1" * 62, "tikv2")
    pod = _c("cd" + "0" * 62, None, "basic-tikv-0", "tidb-cluster", "tikv")
    pause = _c("cd" + "1" * 62, None, "basic-tikv-0", "tidb-cluster", "POD", sandbox=True)
    found = [a, b, pod, pause]
    assert ctr.match("tikv1", found) == ("name", [a])
    assert ctr.match("basic-tikv-0", found) == ("pod", [pod])  # never the pause container
    assert ctr.match("tidb-cluster/basic-tikv-0", found) == ("pod", [pod])
    assert ctr.match("basic-tikv-0/tikv", found) == ("pod", [pod])
    assert ctr.match("tidb-cluster/basic-tikv-0/tikv", found) == ("pod", [pod])
    assert ctr.match("ab00", found) == ("id", [a])
    assert ctr.match("AB", found) == ("", [])  # too short to be an id prefix
    assert ctr.match("abab", found) == ("id", [])
    assert ctr.match("ab", found)[1] == []
    assert ctr.match("ab" + "0" * 62, found) == ("id", [a])


def test_ambiguous_id_prefix_and_unknown_names_are_one_line() -> None:
    found = [_c("abcd" + "0" * 60, "tikv1"), _c("abcd" + "1" * 60, "tikv2")]
    with pytest.raises(TargetError, match=r"container id prefix 'abcd' matches 2 containers .*give more digits"):
        targets.resolve_container("abcd", found)
    with pytest.raises(TargetError, match="no running container matches 'pd'; running: tikv1"):
        targets.resolve_container("pd", found)
    with pytest.raises(TargetError, match="no container runs on this host"):
        targets.resolve_container("pd", [])


# --------------------------------------------------------------------------- real cgroup trees


def _mounts(fstype: str) -> list[tuple[str, str]]:
    """(mount point, super options) of each mounted hierarchy of this type."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        pre, _, post = line.partition(" - ")
        f = pre.split()
        g = post.split()
        if g and g[0] == fstype:
            out.append((f[4], g[2] if len(g) > 2 else ""))
    return out


def _v1_hierarchy() -> Path | None:
    for point, opts in _mounts("cgroup"):
        if "cpu" in opts.split(",") and os.access(point, os.W_OK):
            return Path(point)
    for point, _ in _mounts("cgroup"):
        if os.access(point, os.W_OK):
            return Path(point)
    return None


def _v2_hierarchy() -> Path | None:
    for point, _ in _mounts("cgroup2"):
        if os.access(point, os.W_OK):
            return Path(point)
    return None


@contextlib.contextmanager
def _in_cgroup(base: Path, leaf: Path) -> Iterator[int]:
    """A real process (sleep) moved into cgroup ``leaf``, made with its parents up to ``base``
    (a new directory of this test's); every directory made is removed after, deepest first."""
    assert not base.exists() and base in leaf.parents
    leaf.mkdir(parents=True)
    proc = subprocess.Popen(["sleep", "60"])
    try:
        (leaf / "cgroup.procs").write_text(str(proc.pid))
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()
        for d in [leaf, *[p for p in leaf.parents if p == base or base in p.parents]]:
            with contextlib.suppress(OSError):
                d.rmdir()


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="creating cgroups needs root")


@pytest.mark.privileged
@needs_root
@pytest.mark.parametrize("layout", ["cgroupfs", "kind"])
def test_pod_container_to_host_pid_on_a_real_v1_tree(layout: str) -> None:
    root = _v1_hierarchy()
    if root is None:
        pytest.skip("no writable cgroup v1 hierarchy on this host (cgroup v2 only)")
    uid = str(uuid.uuid4())
    cid = os.urandom(32).hex()
    base = root / f"profiler-test-{os.getpid()}-{uid[:8]}"
    inner = f"kubepods/burstable/pod{uid}/{cid}"
    leaf = base / (f"docker/{os.urandom(32).hex()}/{inner}" if layout == "kind" else inner)
    with _in_cgroup(base, leaf) as pid:
        assert f":{leaf.relative_to(root).as_posix()}" in Path(f"/proc/{pid}/cgroup").read_text().replace(":/", ":")
        assert ctr.pod_pids(uid) == {cid: [pid]}
        assert ctr.pod_pids(uid, f"containerd://{cid}") == {cid: [pid]}
        assert ctr.pod_pids(uid, "containerd://" + "0" * 64) == {}
        assert ctr.pod_pids(str(uuid.uuid4())) == {}
        ref = ctr.process_ref(pid)
        assert ref is not None and (ref.id, ref.pod_uid, ref.qos) == (cid, uid, "burstable")
        assert targets.resolve([], [cid[:12]])[0].pid == pid  # --container by id prefix


@pytest.mark.privileged
@needs_root
def test_pod_container_to_host_pid_on_a_real_v2_tree() -> None:
    root = _v2_hierarchy()
    if root is None:
        pytest.skip("no writable cgroup2 mount on this host")
    uid = str(uuid.uuid4())
    cid = os.urandom(32).hex()
    u = uid.replace("-", "_")
    base = root / f"profiler-test-{os.getpid()}-{uid[:8]}.slice"
    leaf = base / "kubepods-besteffort.slice" / f"kubepods-besteffort-pod{u}.slice" / f"cri-containerd-{cid}.scope"
    with _in_cgroup(base, leaf) as pid:
        assert Path(f"/proc/{pid}/cgroup").read_text().splitlines()[-1] == f"0::/{leaf.relative_to(root).as_posix()}"
        assert ctr.pod_pids(uid) == {cid: [pid]}
        ref = ctr.process_ref(pid)
        assert ref is not None and (ref.runtime, ref.id, ref.pod_uid, ref.qos) == ("containerd", cid, uid, "besteffort")
        c = ctr.container_of(pid)
        assert c is not None and c.to_dict()["pod_uid"] == uid and c.to_dict()["cgroup"].endswith(f"cri-containerd-{cid}.scope")
