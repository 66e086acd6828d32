"""Finding a server's status port (collectors layer), for the server-status collector.

Attaching to a production server must never look like an attack on it, nor count as a failed
client: a Redis logs "Possible SECURITY ATTACK" for an HTTP request line, a MariaDB counts a
connection closed before its handshake as an aborted connect. So a port is asked only where it
is named, or where the target is known to serve HTTP:

- the known flags of each server kind (tidb-server ``-status`` 10080, pd-server
  ``--client-urls`` 2379, tikv-server ``--status-addr`` 20180, etcd ``--listen-client-urls`` /
  ``--listen-metrics-urls`` 2379), and its kind's default port only where the target itself
  listens on that port (another process's server there is never asked);
- ``--status-url``, the user's own word;
- the target's own listening TCP sockets (``/proc/PID/net/tcp*`` matched to the inodes of its
  ``/proc/PID/fd``) only when its executable is a Go program that links Go's HTTP server
  (:func:`serves_http`: ``net/http.(*conn).serve`` in its function table), never for a known
  kind (its flags and defaults say where its status port is), and each socket is first only
  connected to and listened on (:func:`speaks_first`): a server that talks first (MySQL's
  handshake, SSH, SMTP) is no HTTP server and is left without being sent anything.

Only this host's addresses are kept (a wildcard listener is reached on loopback); a target in
another network namespace is reached from a thread that joins it (:func:`join_netns`). Probing
what answers is the collector's (collectors/server/status.py), over bounded_http.py.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import select
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


def flag_candidates(kind: str | None, cmdline: list[str],
                    listening: list[tuple[str, int]] | None = None) -> list[Candidate]:
    """Status URLs named by the target's own flags, then its kind's default (only where the
    target listens on that port, when ``listening``, its own sockets, is given)."""
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
    ports = None if listening is None else {port for _ip, port in listening}
    for url in DEFAULTS[kind]:
        if ports is None or urlsplit(url).port in ports:
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


LISTENING = "listening socket"  # a candidate's source when nothing named it: checked before it is asked
GO_HTTP_SERVER = b"net/http.(*conn).serve"  # in the function table of every Go program serving HTTP
_HTTP_SERVERS: dict[tuple[int, int, int], bool] = {}  # (dev, inode, size) of an executable -> serves_http


def serves_http(pid: int) -> bool:
    """Whether the target's executable is a Go program linking Go's HTTP server (the one kind of
    program whose unnamed sockets are worth asking: Go's /metrics and /debug/pprof handlers)."""
    try:
        fd = os.open(f"/proc/{pid}/exe", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino, st.st_size)
        if key not in _HTTP_SERVERS:
            found = False
            if st.st_size > 0:
                with contextlib.suppress(OSError, ValueError), mmap.mmap(fd, 0, prot=mmap.PROT_READ) as mm:
                    found = mm.find(GO_HTTP_SERVER) >= 0
            _HTTP_SERVERS[key] = found
        return _HTTP_SERVERS[key]
    finally:
        os.close(fd)


def speaks_first(host: str, port: int, wait: float = 0.3) -> str | None:
    """Connect, send nothing and listen for ``wait`` seconds: what a server that talks first said
    (a MySQL handshake, an SSH banner), or None when it waited for the client, as HTTP does, or
    could not be reached (the request that follows says why)."""
    try:
        sock = socket.create_connection((host.strip("[]"), port), timeout=wait)
    except OSError:
        return None
    try:
        ready, _, _ = select.select([sock], [], [], wait)
        if not ready:
            return None
        with contextlib.suppress(OSError):
            head = sock.recv(64)
            return repr(head[:32]) if head else None
        return None
    finally:
        sock.close()


def socket_candidates(pid: int, kind: str | None = None) -> tuple[list[Candidate], str | None]:
    """The target's own listening sockets worth asking, and why none are (None when some are)."""
    if kind is not None:
        return [], None  # a known server: its flags and defaults name its status port
    found = listening_sockets(pid)
    if not found:
        return [], None
    if not serves_http(pid):
        return [], (f"its {len(found)} listening socket(s) were not asked: it is no Go HTTP server, and another "
                    "protocol (Redis, MySQL...) would take an HTTP request as an attack or a failed client")
    out = []
    for ip, port in found:
        host = f"[{ip}]" if ":" in ip else ip
        out.append(Candidate(f"http://{host}:{port}", LISTENING))
    return out, None


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
