"""Hosts on this one machine for end-to-end tests (test support): network, PID and mount namespaces, each with its own sshd.

A :class:`HostLab` makes a private bridge in the root network namespace (``10.213.N.1/24``,
N picked free) and any number of :class:`Host` s on it. Each host is:

- a network namespace (``ip netns``) joined to the bridge by a veth pair, address
  ``10.213.N.(10+i)``;
- a PID namespace and a mount namespace (``unshare``) whose init is a small Python reaper;
  inside, ``/tmp``, ``/run`` and ``/root`` are private tmpfs, and the paths that would let a
  remote command find this project (``/usr/local/bin``, ``/work``, the repository, the venv)
  are hidden under empty tmpfs, so the host looks like a plain Debian box with python3 and perf;
  tracefs and the machine's cgroup hierarchies are mounted as on a real host;
- its own ``sshd`` in the foreground, with a host key, config and ``authorized_keys`` the lab
  generated in its temporary directory (never ``/etc/ssh`` nor root's ``~/.ssh``).

The lab writes an ``ssh_config`` (identity, ``known_hosts`` with each host's key,
``StrictHostKeyChecking yes``) that tests pass to the tool with ``--ssh-config``, and
:meth:`Host.ssh` runs a command on a host through it. Everything the lab started is stopped
by pid and every namespace, veth, cgroup (:meth:`Host.limit_cpu`) and the bridge are removed in
:meth:`HostLab.close`, which
the ``host_lab`` fixture calls even when the test fails.

Needs root, ``ip``, ``unshare``, ``nsenter`` and ``/usr/sbin/sshd``; :func:`lab_unavailable`
says why a host cannot run it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SSHD = "/usr/sbin/sshd"
SUBNET_PREFIX = "10.213"  # 10.213.N.0/24, N chosen free per lab
# What a host must not see: this project and every Python that has it or its dependencies.
HIDE = ("/usr/local/bin", "/work", "/root", str(ROOT), sys.prefix, "/opt")

# pid 1 of a host's PID namespace: set up the mounts, start sshd, reap orphans until told to stop.
_INIT = r"""
import json, os, signal, socket, subprocess, sys, time
hostdir, hostname, cgroups, hide = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4:]
socket.sethostname(hostname)
def sh(*a):
    subprocess.run(a, check=True)
sh("mount", "--bind", hostdir, "/mnt")
for d in ("/run", "/tmp"):
    sh("mount", "-t", "tmpfs", "-o", "mode=1777" if d == "/tmp" else "mode=755", "tmpfs", d)
os.mkdir("/run/sshd", 0o755)
# `ip netns exec` mounted a fresh /sys without tracefs: a real host has it
subprocess.run(["mount", "-t", "tracefs", "nodev", "/sys/kernel/tracing"], stderr=subprocess.DEVNULL)
# ... nor the cgroup hierarchies: mount the same ones again (a v1 hierarchy or v2 is shared, not new)
for fstype, path, opts in cgroups:
    if not os.path.isdir(path):
        os.mkdir(path)
    subprocess.run(["mount", "-t", fstype, "-o", opts, fstype, path], stderr=subprocess.DEVNULL)
for d in hide:
    if os.path.isdir(d):
        sh("mount", "-t", "tmpfs", "-o", "mode=755,size=1m", "tmpfs", d)
os.chdir("/")
sshd = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", "/mnt/sshd_config"],
                        stdout=open("/mnt/sshd.log", "ab"), stderr=subprocess.STDOUT)
open("/mnt/sshd.pid", "w").write(str(sshd.pid))
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
while not stop:
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        time.sleep(0.2)
    except InterruptedError:
        pass
"""

_SSHD_CONFIG = """\
Port 22
ListenAddress {addr}
HostKey /mnt/ssh_host_ed25519_key
PidFile none
AuthorizedKeysFile /mnt/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
MaxSessions 64
MaxStartups 64
ClientAliveInterval 2
ClientAliveCountMax 3
LogLevel ERROR
"""


def lab_unavailable() -> str | None:
    """Why namespaced hosts cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, mounts)"
    for tool in ("ip", "unshare", "nsenter", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not os.access(SSHD, os.X_OK):
        return "openssh-server (/usr/sbin/sshd) is not installed"
    if not os.path.exists("/usr/bin/python3"):
        return "/usr/bin/python3 is missing"
    return None


def _run(argv: list[str], check: bool = True, timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=check, capture_output=True, text=True, timeout=timeout)


def _free_subnet() -> int:
    used = _run(["ip", "-o", "-4", "addr"]).stdout
    for n in range(1, 250):
        if f" {SUBNET_PREFIX}.{n}." not in used:
            return n
    raise RuntimeError("no free 10.213.N.0/24 subnet")


class Host:
    """One namespaced host: its address, its sshd, its processes."""

    def __init__(self, lab: HostLab, index: int, name: str) -> None:
        self.lab = lab
        self.index = index
        self.name = name
        self.netns = f"{lab.tag}-{index}"
        self.addr = f"{SUBNET_PREFIX}.{lab.subnet}.{10 + index}"
        self.dir = lab.dir / f"host-{index}"
        self.veth = f"{lab.tag}v{index}"
        self.unshare: subprocess.Popen[bytes] | None = None
        self.init_pid: int | None = None  # pid 1 of the host's PID namespace, as the root namespace sees it

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        self.dir.mkdir(parents=True)
        _run(["ip", "netns", "add", self.netns])
        peer = f"{self.veth}p"
        _run(["ip", "link", "add", self.veth, "type", "veth", "peer", "name", peer])
        _run(["ip", "link", "set", self.veth, "master", self.lab.bridge, "up"])
        _run(["ip", "link", "set", peer, "netns", self.netns])
        inside = ["ip", "netns", "exec", self.netns]
        _run(inside + ["ip", "link", "set", "lo", "up"])
        _run(inside + ["ip", "link", "set", peer, "name", "eth0"])
        _run(inside + ["ip", "addr", "add", f"{self.addr}/24", "dev", "eth0"])
        _run(inside + ["ip", "link", "set", "eth0", "up"])
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{self.name}-host",
              "-f", str(self.dir / "ssh_host_ed25519_key")])
        shutil.copy(self.lab.dir / "id_ed25519.pub", self.dir / "authorized_keys")
        (self.dir / "sshd_config").write_text(_SSHD_CONFIG.format(addr=self.addr))
        self.unshare = subprocess.Popen(
            inside + ["unshare", "--pid", "--fork", "--mount", "--uts", "--mount-proc", "--propagation", "private",
                      "/usr/bin/python3", "-I", "-c", _INIT, str(self.dir), self.name, json.dumps(_cgroup_mounts()), *HIDE],
            stdout=subprocess.DEVNULL, stderr=open(self.dir / "init.log", "ab"), start_new_session=True)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.init_pid is None:
                self.init_pid = _child_of(self.unshare.pid)
            if self.init_pid is not None and self._sshd_ready():
                return
            if self.unshare.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError(f"host {self.name} did not start: {(self.dir / 'init.log').read_text()[-500:]}"
                           f"{_tail(self.dir / 'sshd.log')}")

    def _sshd_ready(self) -> bool:
        r = _run(["ip", "netns", "exec", self.netns, "ss", "-Hltn", "sport = :22"], check=False)
        return self.addr in r.stdout

    def stop(self) -> None:
        """Stop everything in the host (its PID namespace dies with its init)."""
        if self.unshare is not None:
            if self.init_pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.init_pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.unshare.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.unshare.wait(10)
            self.unshare = None

    def remove(self) -> None:
        """Take the host off the network entirely (a host that is down)."""
        self.stop()
        _run(["ip", "link", "del", self.veth], check=False)
        _run(["ip", "netns", "del", self.netns], check=False)

    # ---------------------------------------------------------------- use
    def ssh(self, command: str, timeout: float = 30.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a shell command on the host over SSH, as a user of the tool would reach it."""
        r = subprocess.run(["ssh", "-F", str(self.lab.ssh_config), self.addr, command],
                           capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if check and r.returncode != 0:
            raise RuntimeError(f"ssh {self.name} {command!r}: exit {r.returncode}: {r.stderr.strip()[-400:]}")
        return r

    def start_server(self, command: str, log: str) -> None:
        """Start a long-running server on the host over SSH, detached from the session (output to ``log`` on the host)."""
        self.ssh(f"cd /tmp; setsid sh -c {shlex.quote('exec ' + command)} > {shlex.quote(log)} 2>&1 < /dev/null &")

    def inside(self, argv: list[str], timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
        """Run a command in the host's namespaces directly (for checks the test makes, not the tool)."""
        assert self.init_pid is not None
        return _run(["nsenter", "-t", str(self.init_pid), "--net", "--pid", "--mount", "--", *argv],
                    check=False, timeout=timeout)

    def processes(self) -> list[tuple[int, str, str]]:
        """(pid, comm, command line) of every process in the host's PID namespace but its init."""
        r = self.inside(["/bin/sh", "-c", "for d in /proc/[0-9]*; do "
                                          "printf '%s\\t%s\\t' ${d#/proc/} \"$(cat $d/comm 2>/dev/null)\"; "
                                          "tr '\\0' ' ' < $d/cmdline 2>/dev/null; echo; done"])
        out = []
        for line in r.stdout.splitlines():
            parts = line.split("\t", 2)
            if len(parts) == 3 and parts[0].isdigit() and parts[0] != "1":
                out.append((int(parts[0]), parts[1], parts[2].strip()))
        return out

    def sshd_pids(self) -> list[int]:
        """Every sshd process of the host (listener and sessions), as the root namespace sees them."""
        if self.init_pid is None:
            return []
        out = []
        for pid in _descendants(self.init_pid):
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/comm").read_text().strip() == "sshd":
                    out.append(pid)
        return out

    def pids_of(self, comm: str) -> list[int]:
        """Pids (as the root namespace sees them) of the host's processes named ``comm``."""
        out = []
        for pid in _descendants(self.init_pid) if self.init_pid is not None else []:
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/comm").read_text().strip() == comm:
                    out.append(pid)
        return out

    def limit_cpu(self, pid: int, cores: float) -> None:
        """Put a process (root-namespace pid) in a cgroup of its own with a CPU quota of ``cores``:
        a server that is CPU-bound by its limit whatever else the shared machine runs."""
        self.lab.limit_cpu(f"{self.lab.tag}-{self.name}", pid, cores)

    def drop_sshd(self) -> None:
        """Kill the host's sshd and every SSH session it serves: connections drop, other processes stay."""
        for pid in self.sshd_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


class HostLab:
    """A private bridge and the namespaced hosts on it; see the module docstring."""

    def __init__(self, workdir: Path) -> None:
        self.tag = f"pcl{os.getpid() % 100000}"
        self.bridge = f"{self.tag}br"
        self.dir = workdir
        self.hosts: list[Host] = []
        self.subnet = 0
        self.ssh_config = self.dir / "ssh_config"
        self.known_hosts = self.dir / "known_hosts"
        self.cgroups: list[Path] = []

    def open(self) -> None:
        _cleanup_stale()
        self.dir.mkdir(parents=True, exist_ok=True)
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "profiler-test", "-f", str(self.dir / "id_ed25519")])
        self.subnet = _free_subnet()
        _run(["ip", "link", "add", self.bridge, "type", "bridge"])
        _run(["ip", "addr", "add", f"{SUBNET_PREFIX}.{self.subnet}.1/24", "dev", self.bridge])
        _run(["ip", "link", "set", self.bridge, "up"])
        self.known_hosts.write_text("")
        self.ssh_config.write_text(
            f"Host {SUBNET_PREFIX}.{self.subnet}.*\n"
            f"  User root\n"
            f"  IdentityFile {self.dir / 'id_ed25519'}\n"
            f"  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {self.known_hosts}\n"
            f"  GlobalKnownHostsFile /dev/null\n"
            f"  StrictHostKeyChecking yes\n"
            f"  ConnectTimeout 3\n"
            f"  ServerAliveInterval 2\n"
            f"  ServerAliveCountMax 3\n"
        )

    def add(self, name: str, *, known: bool = True) -> Host:
        """Start one more host; ``known=False`` leaves its key out of known_hosts (an unknown host)."""
        h = Host(self, len(self.hosts) + 1, name)
        self.hosts.append(h)
        h.start()
        if known:
            key = (h.dir / "ssh_host_ed25519_key.pub").read_text().split()
            with open(self.known_hosts, "a") as fh:
                fh.write(f"{h.addr} {key[0]} {key[1]}\n")
        return h

    def limit_cpu(self, name: str, pid: int, cores: float) -> None:
        period = 100_000
        quota = max(1000, int(cores * period))
        v1 = Path("/sys/fs/cgroup/cpu")
        if (v1 / "cpu.cfs_quota_us").exists():
            cg = v1 / name
            cg.mkdir()
            self.cgroups.append(cg)
            (cg / "cpu.cfs_period_us").write_text(str(period))
            (cg / "cpu.cfs_quota_us").write_text(str(quota))
        else:
            root = Path("/sys/fs/cgroup")
            if "cpu" not in (root / "cgroup.subtree_control").read_text().split():
                (root / "cgroup.subtree_control").write_text("+cpu")
            cg = root / name
            cg.mkdir()
            self.cgroups.append(cg)
            (cg / "cpu.max").write_text(f"{quota} {period}")
        (cg / "cgroup.procs").write_text(str(pid))

    def close(self) -> None:
        for h in self.hosts:
            with contextlib.suppress(Exception):
                h.stop()
        for cg in self.cgroups:  # empty once the hosts' processes are gone
            deadline = time.monotonic() + 5
            while True:
                try:
                    cg.rmdir()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.1)
        for h in self.hosts:
            _run(["ip", "link", "del", h.veth], check=False)
            _run(["ip", "netns", "del", h.netns], check=False)
        _run(["ip", "link", "del", self.bridge], check=False)


def _cgroup_mounts() -> list[tuple[str, str, str]]:
    """(type, path, options) of this machine's cgroup mounts, for the hosts to mount the same."""
    out = []
    with open("/proc/self/mounts") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) < 4 or not parts[1].startswith("/sys/fs/cgroup"):
                continue
            if parts[2] in ("cgroup", "cgroup2") or (parts[2] == "tmpfs" and parts[1] == "/sys/fs/cgroup"):
                out.append((parts[2], parts[1], parts[3]))
    return out


def _child_of(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    return int(text[0]) if text else None


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        with contextlib.suppress(OSError):
            for t in os.listdir(f"/proc/{p}/task"):
                with contextlib.suppress(OSError):
                    kids = [int(x) for x in Path(f"/proc/{p}/task/{t}/children").read_text().split()]
                    out.extend(kids)
                    todo.extend(kids)
    return out


def _tail(path: Path) -> str:
    with contextlib.suppress(OSError):
        return "; sshd: " + path.read_text()[-300:]
    return ""


def _cleanup_stale() -> None:
    """Remove namespaces and links a killed test run left behind (its pid is in their name)."""
    names = _run(["ip", "netns", "list"], check=False).stdout.split()
    links = _run(["ip", "-o", "link"], check=False).stdout
    for name in set(names) | {w.split("@")[0].rstrip(":") for w in links.split() if w.startswith("pcl")}:
        if not name.startswith("pcl"):
            continue
        digits = "".join(c for c in name[3:].split("-")[0].split("v")[0].split("b")[0] if c.isdigit())
        if digits and not _pid_alive_with_tag(int(digits)):
            _run(["ip", "netns", "del", name], check=False)
            _run(["ip", "link", "del", name], check=False)


def _pid_alive_with_tag(n: int) -> bool:
    """Is a process whose pid ends in ``n`` (pid % 100000) alive? Conservative: any match counts."""
    return any(int(p) % 100000 == n for p in os.listdir("/proc") if p.isdigit())


@pytest.fixture
def host_lab(tmp_path: Path) -> Iterator[HostLab]:
    """A lab to add namespaced hosts to; everything is stopped and removed after the test."""
    why = lab_unavailable()
    if why:
        pytest.skip(why)
    lab = HostLab(tmp_path / "lab")
    try:
        lab.open()
        yield lab
    finally:
        lab.close()
