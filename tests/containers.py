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

import itertools
import os
import re
import resource
import shutil
import subprocess
import tarfile
import tempfile
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
        root = self.tmp / f"rootfs{len(self.images)}"
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
        tar = self.tmp / f"rootfs{len(self.images)}.tar"
        with tarfile.open(tar, "w") as tf:
            tf.add(root, arcname=".")
        ref = f"localhost/{self.tag}-img{len(self.images)}:1"
        self.podman("import", str(tar), ref)
        self.images.append(ref)
        return ref

    def run(self, image: str, argv: list[str], *, cpuset: str | None = None, cpus: float | None = None,
            memory: str | None = None, env: dict[str, str] | None = None, lifetime: int = 300) -> Running:
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
