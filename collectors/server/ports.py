"""Finding a server's status port (collectors layer), for the server-status collector.

The known flags and defaults of each server kind (tidb-server ``-status`` 10080, pd-server
``--client-urls`` 2379, tikv-server ``--status-addr`` 20180, etcd ``--listen-client-urls`` /
``--listen-metrics-urls`` 2379), else the target's own listening TCP sockets
(``/proc/PID/net/tcp*`` matched to the inodes of its ``/proc/PID/fd``). Only this host's
addresses are kept (a wildcard listener is reached on loopback); a target in another network
namespace is reached from a thread that joins it (:func:`join_netns`). Probing what answers is
the collector's (collectors/server/status.py), over collectors/server/bounded_http.py.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
from dataclasses import dataclass, field
from urllib.parse import urlsplit

# Flags that name a server's status address, by server kind: (flag, is a URL list).
STATUS_FLAGS: dict[str, tuple[tuple[str, bool], ...]] = {
    "tidb": (("status", False), ("status-host", False)),
    "pd": (("client-urls", True), ("advertise-client-urls", True)),
    "tikv": (("status-addr", False), ("advertise-status-addr", False)),
    "etcd": (("listen-metrics-urls", True), ("listen-client-urls", True), ("advertise-client-urls", True)),
}
DEFAULTS = {"tidb": ["http://127.0.0.1:10080"], "pd": ["http://127.0.0.1:2379"],
            "tikv": ["http://127.0.0.1:20180"], "etcd": ["http://127.0.0.1:2379"]}


@dataclass
class Candidate:
    url: str  # scheme://host:port, no path
    source: str  # "flag --status-addr", "default for tikv", "listening socket", "--status-url"


@dataclass
class Endpoint:
    pid: int
    kind: str | None  # tidb | pd | tikv | etcd | None
    metrics: str | None = None  # base URL serving /metrics
    pprof: str | None = None  # base URL serving /debug/pprof/
    source: str = ""
    tried: list[str] = field(default_factory=list)  # what was probed and why it was not it
    netns: str | None = None  # /proc/PID/ns/net when not ours


def server_kind(comm: str, cmdline: list[str], kind: str | None) -> str | None:
    if kind in STATUS_FLAGS:
        return kind
    names = [comm] + ([cmdline[0].rsplit("/", 1)[-1]] if cmdline else [])
    if any(n == "etcd" or n.startswith("etcd-") or n == "etcd" for n in names):
        return "etcd"
    return None


def _flag_values(cmdline: list[str], flag: str) -> list[str]:
    """Values of ``-flag v``, ``--flag v``, ``-flag=v``, ``--flag=v``."""
    out = []
    for i, a in enumerate(cmdline):
        for dash in ("--", "-"):
            if a == dash + flag and i + 1 < len(cmdline):
                out.append(cmdline[i + 1])
            elif a.startswith(f"{dash}{flag}="):
                out.append(a.split("=", 1)[1])
    return out


def as_url(value: str, default_scheme: str = "http") -> str | None:
    value = value.strip()
    if not value:
        return None
    if "://" not in value:
        if value.isdigit():
            value = f"127.0.0.1:{value}"
        value = f"{default_scheme}://{value}"
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname or not port:
        return None
    host = parts.hostname
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}:{port}"


def flag_candidates(kind: str | None, cmdline: list[str]) -> list[Candidate]:
    """Status URLs named by the target's own flags, then its kind's default."""
    out: list[Candidate] = []
    if kind is None:
        return out
    hosts = _flag_values(cmdline, "status-host") if kind == "tidb" else []
    status_host = hosts[-1] if hosts else None
    for flag, is_list in STATUS_FLAGS[kind]:
        if kind == "tidb" and flag == "status-host":
            continue
        for value in _flag_values(cmdline, flag):
            pieces = value.split(",") if is_list else [value]
            for p in pieces:
                if kind == "tidb" and flag == "status" and p.strip().isdigit():
                    p = f"{status_host or '127.0.0.1'}:{p.strip()}"
                url = as_url(p)
                if url:
                    out.append(Candidate(url, f"flag --{flag}"))
    for url in DEFAULTS[kind]:
        out.append(Candidate(url, f"default for {kind}"))
    return out


def _hex_addr(text: str) -> tuple[str, int] | None:
    """``0100007F:0BB8`` (IPv4, little-endian words) or the 32-hex-digit IPv6 form -> (ip, port)."""
    try:
        addr, port = text.split(":")
        raw = bytes.fromhex(addr)
        if len(raw) == 4:
            ip = socket.inet_ntop(socket.AF_INET, raw[::-1])
        elif len(raw) == 16:
            words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
            ip = socket.inet_ntop(socket.AF_INET6, words)
        else:
            return None
        return ip, int(port, 16)
    except (ValueError, OSError):
        return None


def socket_inodes(pid: int) -> set[int]:
    out: set[int] = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    out.add(int(link[8:-1]))
    return out


def listening_sockets(pid: int) -> list[tuple[str, int]]:
    """(ip, port) of the TCP sockets the process itself listens on."""
    inodes = socket_inodes(pid)
    out: list[tuple[str, int]] = []
    for name in ("tcp", "tcp6"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/net/{name}", encoding="ascii", errors="replace") as fh:
            next(fh, None)
            for line in fh:
                f = line.split()
                if len(f) < 10 or f[3] != "0A":  # 0A: LISTEN
                    continue
                with contextlib.suppress(ValueError):
                    if int(f[9]) not in inodes:
                        continue
                addr = _hex_addr(f[1])
                if addr is not None and addr not in out:
                    out.append(addr)
    return sorted(out, key=lambda a: a[1])


def local_addresses() -> set[str]:
    """This network namespace's addresses: psutil's, and /proc's (a cluster node's bare python3
    has no psutil, and TiUP binds every status port to the host's address)."""
    out = {"127.0.0.1", "::1", "localhost"} | proc_addresses()
    with contextlib.suppress(Exception):
        import psutil

        for addrs in psutil.net_if_addrs().values():
            for a in addrs:
                if a.family in (socket.AF_INET, socket.AF_INET6):
                    out.add(a.address.split("%", 1)[0])
    return out


def proc_addresses() -> set[str]:
    """IPv4 addresses the kernel delivers locally (/proc/net/fib_trie: an address line followed by
    ``/32 host LOCAL``) and the IPv6 ones of /proc/net/if_inet6, in this network namespace."""
    import ipaddress

    out: set[str] = set()
    with contextlib.suppress(OSError):
        with open("/proc/net/fib_trie") as fh:
            lines = [ln.strip() for ln in fh.read(1 << 20).splitlines()]
        for prev, cur in zip(lines, lines[1:], strict=False):
            if cur == "/32 host LOCAL" and prev.startswith("|-- "):
                out.add(prev[4:].strip())
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/net/if_inet6") as fh:
            for line in fh.read(1 << 20).splitlines():
                f = line.split()
                if f and len(f[0]) == 32:
                    out.add(str(ipaddress.IPv6Address(int(f[0], 16))))
    return out


def reachable(url: str, local: set[str]) -> tuple[str | None, str]:
    """The URL to use for a candidate (wildcards -> loopback), or None and why it is refused."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if host in ("0.0.0.0", ""):
        return f"{parts.scheme}://127.0.0.1:{parts.port}", ""
    if host == "::":
        return f"{parts.scheme}://[::1]:{parts.port}", ""
    if host.startswith("127.") or host in local:
        return url, ""
    with contextlib.suppress(OSError):
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        ips = {str(i[4][0]) for i in infos}
        if ips and ips <= local | {ip for ip in ips if ip.startswith("127.")}:
            return url, ""
    return None, f"{url}: {host} is not an address of this host (name it with --status-url to use it)"


def socket_candidates(pid: int) -> list[Candidate]:
    out = []
    for ip, port in listening_sockets(pid):
        host = f"[{ip}]" if ":" in ip else ip
        out.append(Candidate(f"http://{host}:{port}", "listening socket"))
    return out


# --------------------------------------------------------------------------- network namespaces

_CLONE_NEWNET = 0x40000000


def netns_of(pid: int | str) -> str | None:
    with contextlib.suppress(OSError):
        return os.readlink(f"/proc/{pid}/ns/net")
    return None


def join_netns(pid: int) -> str | None:
    """Move the calling thread into the target's network namespace; None or why not."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    except OSError as exc:
        return f"cannot open its network namespace: {exc.strerror or exc}"
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            return f"cannot join its network namespace: {os.strerror(err)}"
    finally:
        os.close(fd)
    return None
