"""Real containers for the tests (test layer): podman images built from this host's own binaries,
containers run with their limits, removed by id.

No registry: an image is a root filesystem the test assembles (the binaries it names, the shared
libraries ``ldd`` lists for them, at paths of the test's choosing, so a binary can exist only
inside the container) and ``podman import``s. Containers run detached with ``--network none``,
``--timeout`` (conmon kills them when a test dies without removing them) and names that carry
the test's pid; ``Lab.close()`` removes exactly the containers and images it made.

On this kind of host (cgroup v1 controllers beside a cgroup2 mount that holds a controller, and
no CAP_SYS_RESOURCE) podman's default runtime crun refuses ("cgroups in hybrid mode not
supported") and raising RLIMIT_NPROC fails: the lab picks runc when it is installed and passes
the current rlimits, so the same commands run on a plain cgroup v2 CI host.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import resource
import shutil
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

_SEQ = itertools.count(1)


def why_not() -> str | None:
    """None when podman can run containers here, else the reason (for pytest.skip)."""
    if os.geteuid() != 0:
        return "containers need root"
    if shutil.which("podman") is None:
        return "podman is not installed (apt-get install podman runc)"
    return None


def _hybrid() -> bool:
    ctrls = Path("/sys/fs/cgroup/unified/cgroup.controllers")
    try:
        return ctrls.is_file() and bool(ctrls.read_text().split())
    except OSError:
        return False


def runtime_args() -> list[str]:
    """podman's global options for this host (see the module's docstring)."""
    args = ["--cgroup-manager", "cgroupfs", "--events-backend", "file"]
    if _hybrid() and shutil.which("runc"):
        args += ["--runtime", "runc"]
    return args


def _ulimits() -> list[str]:
    """rlimits no higher than ours (without CAP_SYS_RESOURCE a container cannot get more; here
    even an equal RLIMIT_NPROC of 96551 was refused, 16384 is not)."""
    out = []
    for name, res, cap in (("nofile", resource.RLIMIT_NOFILE, 1 << 20), ("nproc", resource.RLIMIT_NPROC, 16384)):
        _soft, hard = resource.getrlimit(res)
        n = min(cap, hard if hard != resource.RLIM_INFINITY else cap)
        out += ["--ulimit", f"{name}={n}:{n}"]
    return out


def _libs(binary: Path) -> list[Path]:
    """The shared libraries and loader a dynamically linked binary needs (ldd), as host paths."""
    p = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, timeout=30)
    out = []
    for line in p.stdout.splitlines():
        m = re.search(r"(/\S+)\s+\(0x", line)
        if m:
            out.append(Path(m.group(1)))
    return out


def rootfs_tar(root: Path, files: dict[str, Path]) -> Path:
    """A root filesystem holding ``files`` (path inside -> host file) and the shared libraries
    they need, as a tar file beside ``root`` for ``podman/docker import``."""
    for inside, src in files.items():
        dest = root / inside.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest)
        for lib in _libs(src):
            ldest = root / str(lib).lstrip("/")
            if not ldest.exists():
                ldest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(lib.resolve(), ldest)
    for d in ("tmp", "proc", "sys", "dev", "etc"):
        (root / d).mkdir(exist_ok=True)
    tar = root.with_suffix(".tar")
    with tarfile.open(tar, "w") as tf:
        tf.add(root, arcname=".")
    return tar


@dataclass
class Running:
    """A running container: its id, name and the host pid of its first process."""

    id: str
    name: str
    pid: int


class Lab:
    """Images and containers made by one test; ``close()`` removes them all, by id."""

    def __init__(self) -> None:
        self.tag = f"profiler-test-{os.getpid()}-{next(_SEQ)}"
        self.images: list[str] = []
        self.containers: list[str] = []
        self.tmp = Path(tempfile.mkdtemp(prefix=f"{self.tag}-"))

    def podman(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        p = subprocess.run(["podman", *runtime_args(), *args], capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise RuntimeError(f"podman {' '.join(args[:3])} failed: {(p.stderr or p.stdout).strip()[-600:]}")
        return p

    def image(self, files: dict[str, Path]) -> str:
        """An image holding ``files`` (path inside -> host file) and the libraries they need."""
        ref = f"localhost/{self.tag}-img{len(self.images)}:1"
        self.podman("import", str(rootfs_tar(self.tmp / f"rootfs{len(self.images)}", files)), ref)
        self.images.append(ref)
        return ref

    def run(self, image: str, argv: list[str], *, cpuset: str | None = None, cpus: float | None = None,
            memory: str | None = None, env: dict[str, str] | None = None, lifetime: int = 300,
            extra: list[str] | None = None) -> Running:
        name = f"{self.tag}-c{len(self.containers)}"
        limits: list[str] = []
        if cpuset is not None:
            limits += ["--cpuset-cpus", cpuset]
        if cpus is not None:
            limits += ["--cpus", str(cpus)]
        if memory is not None:
            limits += ["--memory", memory]
        for k, v in (env or {}).items():
            limits += ["--env", f"{k}={v}"]
        limits += extra or []
        p = self.podman("run", "-d", "--name", name, "--network", "none", "--timeout", str(lifetime),
                        *_ulimits(), *limits, image, *argv)
        cid = p.stdout.strip().splitlines()[-1]
        self.containers.append(cid)
        pid = int(self.podman("inspect", "--format", "{{.State.Pid}}", cid).stdout.strip())
        return Running(cid, name, pid)

    def inspect(self, cid: str, fmt: str) -> str:
        return self.podman("inspect", "--format", fmt, cid).stdout.strip()

    def close(self) -> None:
        for cid in self.containers:
            self.podman("rm", "-f", "-t", "0", cid, check=False)
        for ref in self.images:
            self.podman("rmi", "-f", ref, check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)


DOCKER = "/usr/bin/docker"  # docker.io's client (another `docker` may come first on PATH)


def docker_why_not() -> str | None:
    """None when a private dockerd can run here, else the reason (for pytest.skip)."""
    if os.geteuid() != 0:
        return "docker needs root"
    if shutil.which("dockerd") is None or not os.access(DOCKER, os.X_OK):
        return "docker.io is not installed (apt-get install docker.io)"
    return None


class DockerLab:
    """A dockerd of the test's own (data root, exec root and socket in a temporary directory, no
    network setup: --bridge none, no iptables), bounded by ``timeout`` (SIGTERM stops its
    containers), stopped by pid in ``close()``; images imported from root filesystems as
    :class:`Lab` builds them. Nothing is asked of a docker already running on the host."""

    def __init__(self, lifetime: int = 600) -> None:
        self.tag = f"profiler-test-{os.getpid()}-{next(_SEQ)}"
        self.tmp = Path(tempfile.mkdtemp(prefix=f"{self.tag}-docker-"))
        self.sock = self.tmp / "docker.sock"
        self.containers: list[str] = []
        log = open(self.tmp / "dockerd.log", "wb")
        self.proc = subprocess.Popen(
            ["timeout", str(lifetime), "dockerd", "--data-root", str(self.tmp / "root"), "--exec-root",
             str(self.tmp / "exec"), "--pidfile", str(self.tmp / "dockerd.pid"), "-H", f"unix://{self.sock}",
             "--bridge", "none", "--iptables=false", "--ip6tables=false", "--ip-masq=false"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.docker("info", check=False).returncode == 0:
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.5)
        self.close()
        raise RuntimeError(f"dockerd did not start: {(self.tmp / 'dockerd.log').read_text()[-600:]}")

    def docker(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        p = subprocess.run([DOCKER, "-H", f"unix://{self.sock}", *args], capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise RuntimeError(f"docker {' '.join(args[:3])} failed: {(p.stderr or p.stdout).strip()[-600:]}")
        return p

    def image(self, files: dict[str, Path]) -> str:
        ref = f"{self.tag}-img:1"
        self.docker("import", str(rootfs_tar(self.tmp / "rootfs", files)), ref)
        return ref

    def run(self, image: str, argv: list[str], *, cpuset: str | None = None, cpus: float | None = None,
            env: dict[str, str] | None = None) -> Running:
        name = f"{self.tag}-c{len(self.containers)}"
        opts = ["--cpuset-cpus", cpuset] if cpuset is not None else []
        opts += ["--cpus", str(cpus)] if cpus is not None else []
        for k, v in (env or {}).items():
            opts += ["--env", f"{k}={v}"]
        cid = self.docker("run", "-d", "--name", name, "--network", "none", *opts, image, *argv).stdout.strip()
        self.containers.append(cid)
        pid = int(self.docker("inspect", "--format", "{{.State.Pid}}", cid).stdout.strip())
        return Running(cid, name, pid)

    def inspect(self, cid: str, fmt: str) -> str:
        return self.docker("inspect", "--format", fmt, cid).stdout.strip()

    def close(self) -> None:
        for cid in self.containers:
            self.docker("rm", "-f", cid, check=False)
        if self.proc.poll() is None:
            self.proc.terminate()  # timeout passes it on: dockerd stops its containers and its containerd
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait(10)
        subprocess.run(["umount", "-R", str(self.tmp / "root")], capture_output=True)  # overlay mounts, if any
        shutil.rmtree(self.tmp, ignore_errors=True)


def containerd_why_not() -> str | None:
    """None when a private containerd can run here, else the reason (for pytest.skip)."""
    if os.geteuid() != 0:
        return "containerd needs root"
    if shutil.which("containerd") is None or shutil.which("ctr") is None or shutil.which("runc") is None:
        return "containerd, ctr and runc are not installed (apt-get install containerd runc, or docker.io)"
    return None


class ContainerdLab:
    """A containerd of the test's own (root, state and socket in a temporary directory, the CRI
    plugin off), bounded by ``timeout`` and stopped by pid in ``close()``. ``run`` starts a
    container from a root filesystem with ``ctr run --rootfs``, in the cgroup and with the OCI
    annotations the test gives: as containerd's CRI plugin lays out a Kubernetes pod's container
    on a node (cgroupfs driver), without the kubelet."""

    def __init__(self, lifetime: int = 600, own_mount_namespace: bool = False) -> None:
        """``own_mount_namespace``: containerd runs in a mount namespace of its own whose config,
        state and socket are on a tmpfs only it sees (as a kind node's containerd runs inside the
        node's container): the host finds its containers' state only through /proc/PID/root."""
        self.tag = f"profiler-test-{os.getpid()}-{next(_SEQ)}"
        self.tmp = Path(tempfile.mkdtemp(prefix=f"{self.tag}-containerd-"))
        run = self.tmp / "run"  # the daemon's config, state and socket
        run.mkdir()
        self.sock = run / "containerd.sock"
        self.ids: list[str] = []
        self.cgroup_top = f"/{self.tag}"  # every container's cgroup goes under this
        self.nsenter: list[str] = []
        config = (f'version = 2\nroot = "{self.tmp}/root"\nstate = "{run}/state"\n'
                  f'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n[grpc]\n  address = "{self.sock}"\n')
        (self.tmp / "config.toml").write_text(config)
        argv = ["containerd", "--config", str(run / "config.toml")]
        if own_mount_namespace:
            argv = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                    f"mount -t tmpfs -o size=64m tmpfs {run} && cp {self.tmp}/config.toml {run}/ && exec \"$@\"", "sh", *argv]
        else:
            (run / "config.toml").write_text(config)
        self.proc = subprocess.Popen(["timeout", str(lifetime), *argv],
                                     stdout=open(self.tmp / "containerd.log", "wb"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        if own_mount_namespace:
            for _ in range(100):
                kids = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
                if kids:
                    self.nsenter = ["nsenter", "-t", kids[0], "-m"]
                    break
                time.sleep(0.05)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.ctr("version", check=False).returncode == 0:
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.3)
        self.close()
        raise RuntimeError(f"containerd did not start: {(self.tmp / 'containerd.log').read_text()[-600:]}")

    def ctr(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        p = subprocess.run([*self.nsenter, "ctr", "-a", str(self.sock), "-n", "k8s.io", *args], capture_output=True,
                           text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise RuntimeError(f"ctr {' '.join(args[:3])} failed: {(p.stderr or p.stdout).strip()[-600:]}")
        return p

    def run(self, files: dict[str, Path], argv: list[str], cgroup: str, *, cpus: float | None = None,
            annotations: dict[str, str] | None = None) -> Running:
        """A container (64-hex id) in cgroup ``<cgroup_top>/<cgroup>/<id>``."""
        cid = os.urandom(32).hex()
        root = self.tmp / f"rootfs-{cid[:12]}"
        rootfs_tar(root, files)
        opts = [f"--cgroup={self.cgroup_top}/{cgroup.strip('/')}/{cid}"]
        opts += [f"--cpus={cpus}"] if cpus is not None else []
        for k, v in (annotations or {}).items():
            opts += ["--annotation", f"{k}={v}"]
        self.ctr("run", "-d", "--rootfs", *opts, str(root), cid, *argv)
        self.ids.append(cid)
        for line in self.ctr("task", "ls").stdout.splitlines():
            parts = line.split()
            if parts and parts[0] == cid:
                return Running(cid, cid, int(parts[1]))
        raise RuntimeError(f"container {cid} has no task")

    def close(self) -> None:
        for cid in self.ids:
            self.ctr("task", "kill", "-s", "SIGKILL", cid, check=False)
            for _ in range(50):
                if self.ctr("task", "rm", cid, check=False).returncode == 0:
                    break
                time.sleep(0.1)
            self.ctr("container", "rm", cid, check=False)
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait(10)
        # runc removes each container's own cgroup; the parents are ours, in every hierarchy
        tops = [*Path("/sys/fs/cgroup").glob(f"*{self.cgroup_top}"), Path(f"/sys/fs/cgroup{self.cgroup_top}")]
        for top in (t for t in tops if t.is_dir()):
            for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) + [top]:
                with contextlib.suppress(OSError):
                    d.rmdir()
        subprocess.run(["umount", "-R", str(self.tmp / "root")], capture_output=True)
        shutil.rmtree(self.tmp, ignore_errors=True)
