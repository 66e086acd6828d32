"""The server-status collector (collectors layer): what each target's HTTP status port says about it.

TiDB, PD, TiKV and etcd serve their own introspection over HTTP: Prometheus ``/metrics`` (what
Grafana draws) and, for the Go servers, ``/debug/pprof/`` (goroutine, mutex, block and CPU
profiles). This collector finds that port for each target and, over the capture window and on
the capture clock, takes:

- ``/metrics`` at the start, every ``status_interval`` seconds and at the end
  (-> ``server-metrics.jsonl.gz``, one JSON record per scrape, the body verbatim);
- the goroutine profile at the start, the middle and the end (``debug=0`` pprof, or the
  ``debug=2`` text where that is all there is) -> ``server-PID-goroutine-N.pb.gz``;
- the mutex and block profiles at the start and the end (their difference is the window's;
  empty when the server did not turn them on) -> ``server-PID-mutex-start.pb.gz`` ...;
- the server's own CPU profile over the window, a cross-check of perf's
  (``/debug/pprof/profile?seconds=N``, when the duration is known) -> ``server-PID-cpu.pb.gz``;
- an index of every request, its time, status, size and error -> ``server-status.jsonl``.

Finding the port: the known flags and defaults of each server kind (tidb-server ``-status``
10080, pd-server ``--client-urls`` 2379, tikv-server ``--status-addr`` 20180, etcd
``--listen-client-urls`` / ``--listen-metrics-urls`` 2379), else the target's own listening TCP
sockets (``/proc/PID/net/tcp*`` matched to the inodes of its ``/proc/PID/fd``), each probed for
``/metrics`` and ``/debug/pprof/``. Only this host's addresses are used (a wildcard listener is
reached on loopback; an address of another host is refused) unless the user names a URL with
``--status-url``. A target in another network namespace (a container) is reached from a
thread that joins that namespace (root).

Nothing the server returns is trusted: every request has a time budget (connect, each read,
and the whole body) and a size cap (a larger body is cut and not kept), HTML and other
non-profile answers are refused, and every failure is counted by kind in the collector's
stats (``failures``) and named in the index. A target without such a port is skipped with the
reason; the capture and the other collectors are never held up beyond one request's budget.
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import json
import os
import re
import socket
import ssl
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import IO, Any
from urllib.parse import urlsplit

from profiler.collectors.base import CaptureContext, CollectorBase, Probe, Target

from profiler.bundle import FAILED, OK, PARTIAL, SKIPPED, CollectorRecord, members

INDEX = members.SERVER_STATUS
METRICS = members.SERVER_METRICS

PROBE_TIMEOUT = 2.0  # s, each probe request
METRICS_TIMEOUT = 5.0
PROFILE_TIMEOUT = 10.0
GIVE_UP_AFTER = 2  # consecutive timeouts or refusals after which a port is left alone
READ_TIMEOUT = 5.0  # s, each read of a body once its headers arrived
METRICS_MAX = 32 << 20  # bytes of one /metrics body (decompressed)
PROFILE_MAX = 64 << 20  # bytes of one profile
PROBE_MAX = 256 << 10
MAX_CANDIDATES = 16
END_BUDGET = 10.0  # s the end-of-capture requests may take in all, once the capture is asked to stop
MIDDLE_EVERY = 60.0  # s between goroutine profiles when the duration is not known

# Flags that name a server's status address, by server kind: (flag, is a URL list).
STATUS_FLAGS: dict[str, tuple[tuple[str, bool], ...]] = {
    "tidb": (("status", False), ("status-host", False)),
    "pd": (("client-urls", True), ("advertise-client-urls", True)),
    "tikv": (("status-addr", False), ("advertise-status-addr", False)),
    "etcd": (("listen-metrics-urls", True), ("listen-client-urls", True), ("advertise-client-urls", True)),
}
DEFAULTS = {"tidb": ["http://127.0.0.1:10080"], "pd": ["http://127.0.0.1:2379"],
            "tikv": ["http://127.0.0.1:20180"], "etcd": ["http://127.0.0.1:2379"]}

# failure kinds, as counted in stats["failures"] and named in the index
TIMEOUT, REFUSED, HTTP_ERROR, NOT_TEXT, HTML, TOO_LARGE, CUT, BAD_GZIP, NOT_PPROF, ERROR = (
    "timeout", "refused", "http-error", "not-text", "html", "too-large", "closed-mid-body", "bad-gzip",
    "not-pprof", "error")


# --------------------------------------------------------------------------- finding the port


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


def _as_url(value: str, default_scheme: str = "http") -> str | None:
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
                url = _as_url(p)
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
    out = {"127.0.0.1", "::1", "localhost"}
    with contextlib.suppress(Exception):
        import psutil

        for addrs in psutil.net_if_addrs().values():
            for a in addrs:
                if a.family in (socket.AF_INET, socket.AF_INET6):
                    out.add(a.address.split("%", 1)[0])
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


# --------------------------------------------------------------------------- bounded HTTP


@dataclass
class Reply:
    status: int = 0
    content_type: str = ""
    body: bytes = b""
    error: str | None = None  # failure kind (TIMEOUT, HTML, ...)
    detail: str = ""  # one line for the index and the report
    seconds: float = 0.0


def fetch(url: str, *, timeout: float, max_bytes: int, accept: str = "*/*", gzip_ok: bool = False) -> Reply:
    """GET with a deadline for the whole exchange and a cap on the body (decompressed size)."""
    t0 = time.monotonic()
    deadline = t0 + timeout
    parts = urlsplit(url)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    port = parts.port or (443 if parts.scheme == "https" else 80)
    reply = Reply()
    conn: http.client.HTTPConnection
    try:
        if parts.scheme == "https":
            ctx = ssl.create_default_context()
            ctx.check_hostname = False  # our own host, reached by its loopback address
            ctx.verify_mode = ssl.CERT_NONE
            conn = http.client.HTTPSConnection(parts.hostname or "127.0.0.1", port, timeout=timeout, context=ctx)
        else:
            # the whole budget for connecting and the first answer (a CPU profile answers after its
            # seconds); each later read of the body is bounded by READ_TIMEOUT and the deadline
            conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", port, timeout=timeout)
    except (ValueError, OSError) as exc:
        return Reply(error=ERROR, detail=str(exc)[:200])
    try:
        headers = {"Accept": accept, "User-Agent": "profiler-server-status", "Connection": "close"}
        if gzip_ok:
            headers["Accept-Encoding"] = "gzip"
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        reply.status = resp.status
        reply.content_type = (resp.getheader("Content-Type") or "")[:200]
        encoding = (resp.getheader("Content-Encoding") or "").lower()
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS) if encoding == "gzip" else None
        chunks: list[bytes] = []
        size = raw = 0
        declared = resp.getheader("Content-Length")
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            if conn.sock is not None:
                conn.sock.settimeout(min(left, READ_TIMEOUT))
            piece = resp.read1(1 << 16) if hasattr(resp, "read1") else resp.read(1 << 16)
            if not piece:
                break
            raw += len(piece)
            if inflate is not None:
                try:
                    piece = inflate.decompress(piece, max_bytes + 1 - size)
                except zlib.error as exc:
                    return _fail(reply, BAD_GZIP, f"Content-Encoding gzip that does not inflate ({exc})", t0)
            size += len(piece)
            if size > max_bytes:
                return _fail(reply, TOO_LARGE, f"body larger than {max_bytes >> 20} MiB: cut, not kept", t0)
            chunks.append(piece)
        if declared is not None and declared.isdigit() and raw < int(declared):
            return _fail(reply, CUT, f"the server closed the connection after {raw} of {declared} bytes", t0)
        if inflate is not None and not inflate.eof:
            return _fail(reply, CUT, "the compressed body ends before its gzip stream does", t0)
        reply.body = b"".join(chunks)
        if resp.status != 200:
            snippet = reply.body[:80].decode("utf-8", "replace").strip().splitlines()
            return _fail(reply, HTTP_ERROR, f"HTTP {resp.status}" + (f": {snippet[0]}" if snippet else ""), t0)
    except TimeoutError:
        return _fail(reply, TIMEOUT, f"no complete answer within {timeout:g}s", t0)
    except http.client.IncompleteRead as exc:
        return _fail(reply, CUT, f"the server closed the connection mid-body ({len(exc.partial)} bytes read)", t0)
    except ConnectionRefusedError:
        return _fail(reply, REFUSED, "connection refused", t0)
    except (http.client.HTTPException, OSError, ssl.SSLError) as exc:
        kind = CUT if reply.status else ERROR
        return _fail(reply, kind, f"{type(exc).__name__}: {str(exc)[:160]}", t0)
    finally:
        conn.close()
    reply.seconds = time.monotonic() - t0
    return reply


def _fail(reply: Reply, kind: str, detail: str, t0: float) -> Reply:
    reply.error, reply.detail, reply.body = kind, detail, b""
    reply.seconds = time.monotonic() - t0
    return reply


def looks_html(body: bytes, content_type: str) -> bool:
    head = body[:512].lstrip().lower()
    return "html" in content_type.lower() or head.startswith((b"<!doctype", b"<html", b"<head", b"<body"))


def looks_exposition(body: bytes) -> bool:
    """Prometheus text: the first meaningful line is a # HELP/# TYPE comment or a sample."""
    for line in body[:65536].splitlines():
        s = line.strip()
        if not s:
            continue
        if s.startswith(b"#"):
            return True  # HELP, TYPE or another comment: HTML and JSON never start so
        name = re.match(rb"^[A-Za-z_:][A-Za-z0-9_:]*(\{|\s)", s)
        return name is not None
    return False


def looks_pprof(body: bytes) -> bool:
    """A pprof profile: gzip (what Go sends) or a protobuf whose first field is a sample type."""
    return body[:2] == b"\x1f\x8b" or (len(body) > 2 and body[0] == 0x0A)


# --------------------------------------------------------------------------- network namespaces

_CLONE_NEWNET = 0x40000000


def _netns(pid: int | str) -> str | None:
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


# --------------------------------------------------------------------------- the collector


@dataclass
class _Plan:
    """What one target's worker thread does."""

    target: Target
    kind: str | None
    candidates: list[Candidate]
    refused: list[str]
    endpoint: Endpoint | None = None
    thread: threading.Thread | None = None
    seq: dict[str, int] = field(default_factory=dict)
    misses: int = 0  # consecutive timeouts/refusals
    gave_up: str = ""  # why its port is no longer asked


def parse_status_urls(values: list[str]) -> dict[int | None, list[str]]:
    """``--status-url [PID=]URL`` values: pid (None: every target) -> URLs."""
    out: dict[int | None, list[str]] = {}
    for v in values:
        head, sep, rest = v.partition("=")
        if sep and head.strip().isdigit() and "://" not in head:
            out.setdefault(int(head), []).append(rest.strip())
        else:
            out.setdefault(None, []).append(v.strip())
    return out


class ServerStatus(CollectorBase):
    """Collector protocol: one worker thread per target that has a status port."""

    name = "server-status"
    backend = "http"

    def __init__(self, urls: dict[int | None, list[str]] | None = None) -> None:
        self.urls = urls or {}  # --status-url: pid (None: every target) -> URLs
        self.plans: list[_Plan] = []
        self.stop_event = threading.Event()
        self._lock = threading.Lock()
        self._index: IO[bytes] | None = None
        self._metrics: IO[bytes] | None = None
        self._stack: contextlib.ExitStack | None = None
        self.started: float | None = None
        self.requests = 0
        self.ok = 0
        self.bytes = 0
        self.failures: dict[str, int] = {}
        self.files: list[str] = [INDEX]
        self.errors: list[str] = []
        self.duration: float | None = None
        self.interval = 5.0
        self.cpu_profile = True
        self._cpu_threads: list[threading.Thread] = []
        self._end_deadline: float | None = None
        self._closed = False

    # ------------------------------------------------------------------ protocol
    def _plan(self, t: Target, local: set[str]) -> _Plan:
        kind = server_kind(t.comm, list(t.cmdline), t.kind)
        named = [Candidate(u, "--status-url") for u in self.urls.get(t.pid, []) + self.urls.get(None, [])]
        cands: list[Candidate] = []
        refused: list[str] = []
        for c in flag_candidates(kind, list(t.cmdline)) + socket_candidates(t.pid):
            url, why = reachable(c.url, local)
            if url is None:
                refused.append(why)
                continue
            if all(x.url != url for x in cands):
                cands.append(Candidate(url, c.source))
        named = [Candidate(u, c.source) for c in named if (u := _as_url(c.url))]
        return _Plan(t, kind, (named + cands)[:MAX_CANDIDATES], refused)

    def probe(self, ctx: CaptureContext) -> Probe:
        if ctx.options.status_urls:
            self.urls = parse_status_urls(list(ctx.options.status_urls))
        local = local_addresses()
        self.plans = [self._plan(t, local) for t in ctx.targets]
        if not any(p.candidates for p in self.plans):
            why = "; ".join(f"{p.target.comm} (pid {p.target.pid}) listens on no TCP port and names no status address"
                            + (f" ({'; '.join(p.refused)})" if p.refused else "") for p in self.plans)
            return Probe(False, f"no HTTP status port to ask: {why} (name one with --status-url http://HOST:PORT)",
                         "name one with --status-url http://HOST:PORT")
        return Probe(True)

    def argv(self, ctx: CaptureContext) -> list[str]:
        return []

    def size(self) -> int:
        return self.bytes

    def start(self, ctx: CaptureContext) -> None:
        if not self.plans:
            self.plans = [self._plan(t, local_addresses()) for t in ctx.targets]
        self.duration = ctx.options.duration
        self.interval = max(0.5, float(ctx.options.status_interval or 5.0))
        self.cpu_profile = bool(ctx.options.server_cpu_profile)
        self._stack = contextlib.ExitStack()
        self._index = self._stack.enter_context(ctx.writer.open_member(INDEX))
        self._metrics = self._stack.enter_context(ctx.writer.open_member(METRICS))
        self.files.append(METRICS)
        self.started = time.monotonic()
        self.writer = ctx.writer
        for plan in self.plans:
            if not plan.candidates:
                continue
            plan.thread = threading.Thread(target=self._run, args=(plan,), name=f"profiler-status-{plan.target.pid}",
                                           daemon=True)
            plan.thread.start()

    def request_stop(self) -> None:
        if self._end_deadline is None:
            self._end_deadline = time.monotonic() + END_BUDGET
        self.stop_event.set()

    def _timeout(self, default: float) -> float:
        """A request's time budget: its own, cut to what is left of the end budget once stopping."""
        if self._end_deadline is None:
            return default
        return max(0.2, min(default, self._end_deadline - time.monotonic()))

    def stop(self, ctx: CaptureContext) -> CollectorRecord:
        rec = CollectorRecord(name=self.name, backend=self.backend, argv=[], started=self.started)
        self.request_stop()
        deadline = (self._end_deadline or time.monotonic()) + 1.0
        for plan in self.plans:
            if plan.thread is not None:
                plan.thread.join(timeout=max(0.1, deadline - time.monotonic()))
        for th in self._cpu_threads:
            th.join(timeout=max(0.1, deadline - time.monotonic()))
        with self._lock:
            self._closed = True  # a request still out (a hung port) can no longer write into the bundle
            if self._stack is not None:
                try:
                    self._stack.close()
                except OSError as exc:
                    self.errors.append(f"closing {INDEX}: {exc}")
            self._stack = None
            self._index = self._metrics = None
        rec.ended = time.monotonic()
        rec.files = list(dict.fromkeys(self.files))
        eps = [p.endpoint for p in self.plans if p.endpoint is not None]
        found = [e for e in eps if e.metrics or e.pprof]
        rec.stats = {
            "endpoints": [{"pid": e.pid, "server": e.kind, "metrics": e.metrics, "pprof": e.pprof, "source": e.source,
                           **({"network_namespace": e.netns} if e.netns else {})} for e in found],
            "not_found": {str(p.target.pid): (p.endpoint.tried if p.endpoint else []) + p.refused
                          for p in self.plans if p.endpoint is None or not (p.endpoint.metrics or p.endpoint.pprof)},
            "requests": self.requests, "ok": self.ok, "bytes": self.bytes, "failures": dict(sorted(self.failures.items())),
            "interval": self.interval,
        }
        gave_up = {str(p.target.pid): p.gave_up for p in self.plans if p.gave_up}
        if gave_up:
            rec.stats["gave_up"] = gave_up
        if not found:
            why = "; ".join(f"pid {p.target.pid}: " + ("; ".join(((p.endpoint.tried if p.endpoint else []) + p.refused)[:4])
                                                      or "no candidate")
                            for p in self.plans)
            rec.status, rec.reason = SKIPPED, f"no HTTP status port answered /metrics or /debug/pprof/ ({why})"
            return rec
        failed = sum(self.failures.values())
        if self.ok == 0:
            rec.status, rec.reason = FAILED, f"every request failed ({self._failure_text()})"
        elif self.errors:
            rec.status, rec.reason = PARTIAL, "; ".join(self.errors[:2])
        else:
            # Requests a server answered badly are its own evidence (counted, named in the index and the
            # report), not a hole in the capture: the collector covered the window.
            rec.status = OK
            if failed:
                rec.reason = f"{failed} of {self.requests} requests failed: {self._failure_text()}"
        return rec

    def _failure_text(self) -> str:
        return ", ".join(f"{n} {k}" for k, n in sorted(self.failures.items()))

    # ------------------------------------------------------------------ the worker
    def _run(self, plan: _Plan) -> None:
        pid = plan.target.pid
        ns = _netns(pid)
        netns = ns if ns is not None and ns != _netns("self") else None
        if netns is not None:
            why = join_netns(pid)
            if why is not None:
                plan.endpoint = Endpoint(pid, plan.kind, tried=[f"the target is in another network namespace: {why}"],
                                         netns=netns)
                return
        ep = self._discover(plan)
        ep.netns = netns
        plan.endpoint = ep
        if not (ep.metrics or ep.pprof):
            return
        t_start = time.monotonic()
        self._round(plan, "start")
        if ep.pprof and self.cpu_profile and self.duration:
            secs = int(self.duration - (time.monotonic() - t_start) - 1)
            if secs >= 1:
                th = threading.Thread(target=self._cpu, args=(plan, secs), daemon=True,
                                      name=f"profiler-status-cpu-{pid}")
                self._cpu_threads.append(th)
                th.start()
        next_metrics = t_start + self.interval
        middle = t_start + self.duration / 2 if self.duration else t_start + MIDDLE_EVERY
        while not self.stop_event.is_set():
            now = time.monotonic()
            if ep.metrics and now >= next_metrics:
                self._metrics_once(plan)
                next_metrics = max(next_metrics + self.interval, time.monotonic() + 0.1)
            if ep.pprof and now >= middle:
                self._goroutines(plan)
                middle = now + (MIDDLE_EVERY if not self.duration else 1e18)
            wait = min(next_metrics if ep.metrics else now + 1.0, middle) - time.monotonic()
            self.stop_event.wait(max(0.05, min(wait, 1.0)))
        self._round(plan, "end")

    def _round(self, plan: _Plan, when: str) -> None:
        """The start or end set: metrics, goroutines, mutex and block profiles."""
        assert plan.endpoint is not None
        if plan.endpoint.metrics:
            self._metrics_once(plan)
        if plan.endpoint.pprof:
            self._goroutines(plan)
            for kind in ("mutex", "block"):
                self._profile(plan, kind, f"/debug/pprof/{kind}", when, PROFILE_TIMEOUT)

    def _discover(self, plan: _Plan) -> Endpoint:
        ep = Endpoint(plan.target.pid, plan.kind)
        for c in plan.candidates:
            if self.stop_event.is_set():
                break
            if ep.metrics is None:
                r = fetch(f"{c.url}/metrics", timeout=PROBE_TIMEOUT, max_bytes=PROBE_MAX)
                if r.error is None and looks_exposition(r.body) and not looks_html(r.body, r.content_type):
                    ep.metrics, ep.source = c.url, ep.source or c.source
                elif r.error == TOO_LARGE and "text/plain" in r.content_type:
                    ep.metrics, ep.source = c.url, ep.source or c.source  # big, but Prometheus text
                else:
                    ep.tried.append(f"{c.url}/metrics ({c.source}): {r.detail or 'not Prometheus text'}")
            if ep.pprof is None:
                r = fetch(f"{c.url}/debug/pprof/", timeout=PROBE_TIMEOUT, max_bytes=PROBE_MAX)
                if r.error is None and b"goroutine" in r.body:
                    ep.pprof = c.url
                    ep.source = ep.source or c.source
                elif ep.metrics == c.url:
                    ep.tried.append(f"{c.url}/debug/pprof/: {r.detail or 'no pprof index'}")
            if ep.metrics and ep.pprof:
                break
        self._log({"kind": "endpoint", "pid": plan.target.pid, "server": plan.kind, "metrics": ep.metrics,
                   "pprof": ep.pprof, "source": ep.source, "tried": ep.tried[:MAX_CANDIDATES],
                   "refused": plan.refused})
        return ep

    # ------------------------------------------------------------------ requests
    def _count(self, r: Reply, plan: _Plan | None = None) -> None:
        if plan is not None:
            if r.error in (TIMEOUT, REFUSED):
                plan.misses += 1
                if plan.misses >= GIVE_UP_AFTER and not plan.gave_up:
                    plan.gave_up = f"{plan.misses} requests in a row: {r.detail}; its port was left alone after that"
            elif r.error is None:
                plan.misses = 0
        with self._lock:
            self.requests += 1
            if r.error is None:
                self.ok += 1
                self.bytes += len(r.body)
            else:
                self.failures[r.error] = self.failures.get(r.error, 0) + 1

    def _log(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, sort_keys=True, separators=(",", ":")).encode() + b"\n"
        with self._lock:
            if self._index is not None and not self._closed:
                try:
                    self._index.write(line)
                except OSError as exc:
                    self.errors.append(f"{INDEX}: {exc}")

    def _entry(self, plan: _Plan, kind: str, url: str, t0: float, r: Reply, member: str | None) -> None:
        self._log({"kind": kind, "pid": plan.target.pid, "url": url, "t0": round(t0, 6),
                   "t1": round(t0 + r.seconds, 6), "status": r.status, "bytes": len(r.body),
                   "content_type": r.content_type, "member": member, "error": r.error, "detail": r.detail or None})

    def _metrics_once(self, plan: _Plan) -> None:
        assert plan.endpoint is not None and plan.endpoint.metrics
        url = f"{plan.endpoint.metrics}/metrics"
        t0 = time.monotonic()
        if plan.gave_up:
            return
        r = fetch(url, timeout=self._timeout(METRICS_TIMEOUT), max_bytes=METRICS_MAX, gzip_ok=True,
                  accept="text/plain;version=0.0.4;q=1,*/*;q=0.1")
        if r.error is None:
            if looks_html(r.body, r.content_type):
                r = _fail(r, HTML, "answered HTML, not Prometheus text", t0)
                r.seconds = time.monotonic() - t0
            elif not looks_exposition(r.body):
                r = _fail(r, NOT_TEXT, "not Prometheus text exposition", t0)
        self._count(r, plan)
        member = None
        if r.error is None:
            rec = {"pid": plan.target.pid, "t0": round(t0, 6), "t1": round(t0 + r.seconds, 6), "url": url,
                   "body": r.body.decode("utf-8", "replace")}
            line = json.dumps(rec, separators=(",", ":")).encode() + b"\n"
            with self._lock:
                if self._metrics is not None and not self._closed:
                    try:
                        self._metrics.write(line)
                        member = METRICS
                    except OSError as exc:
                        self.errors.append(f"{METRICS}: {exc}")
        self._entry(plan, "metrics", url, t0, r, member)

    def _next(self, plan: _Plan, kind: str) -> int:
        with self._lock:
            n = plan.seq.get(kind, 0) + 1
            plan.seq[kind] = n
        return n

    def _save(self, name: str, body: bytes) -> bool:
        with self._lock:
            if self._closed:
                return False
        try:
            with self.writer.open_member(name, compress=False) as fh:
                fh.write(body)
        except OSError as exc:
            with self._lock:
                self.errors.append(f"{name}: {exc}")
            return False
        with self._lock:
            self.files.append(name)
        return True

    def _goroutines(self, plan: _Plan) -> None:
        assert plan.endpoint is not None and plan.endpoint.pprof
        if plan.gave_up:
            return
        n = self._next(plan, "goroutine")
        url = f"{plan.endpoint.pprof}/debug/pprof/goroutine"
        t0 = time.monotonic()
        r = fetch(url, timeout=self._timeout(PROFILE_TIMEOUT), max_bytes=PROFILE_MAX)
        member = None
        if r.error is None and looks_pprof(r.body) and not looks_html(r.body, r.content_type):
            member = members.server_profile(plan.target.pid, "goroutine", str(n), r.body[:2] == b"\x1f\x8b")
        else:
            if r.error is None:
                r = _fail(r, HTML if looks_html(r.body, r.content_type) else NOT_PPROF,
                          "the goroutine profile is not pprof: asking for the text dump (debug=2)", t0)
            self._count(r, plan)
            self._entry(plan, "goroutine", url, t0, r, None)
            if plan.gave_up:
                return
            url = f"{plan.endpoint.pprof}/debug/pprof/goroutine?debug=2"
            t0 = time.monotonic()
            r = fetch(url, timeout=self._timeout(PROFILE_TIMEOUT), max_bytes=PROFILE_MAX)
            if r.error is None and (looks_html(r.body, r.content_type) or not r.body.startswith(b"goroutine ")):
                r = _fail(r, HTML if looks_html(r.body, r.content_type) else NOT_TEXT,
                          "the goroutine dump is not Go's text format", t0)
            if r.error is None:
                member = members.server_goroutine_text(plan.target.pid, str(n))
        if member is not None and not self._save(member, r.body):
            member = None
        self._count(r, plan)
        self._entry(plan, "goroutine", url, t0, r, member)

    def _profile(self, plan: _Plan, kind: str, path: str, tag: str, timeout: float) -> None:
        assert plan.endpoint is not None and plan.endpoint.pprof
        if plan.gave_up:
            return
        url = f"{plan.endpoint.pprof}{path}"
        t0 = time.monotonic()
        r = fetch(url, timeout=timeout if kind == "cpu" else self._timeout(timeout), max_bytes=PROFILE_MAX)
        member = None
        if r.error is None:
            if looks_html(r.body, r.content_type):
                r = _fail(r, HTML, "answered HTML, not a pprof profile", t0)
            elif not looks_pprof(r.body):
                r = _fail(r, NOT_PPROF, "not a pprof profile", t0)
            else:
                member = members.server_profile(plan.target.pid, kind, tag, r.body[:2] == b"\x1f\x8b")
                if not self._save(member, r.body):
                    member = None
        self._count(r, plan)
        self._entry(plan, kind, url, t0, r, member)

    def _cpu(self, plan: _Plan, seconds: int) -> None:
        self._profile(plan, "cpu", f"/debug/pprof/profile?seconds={seconds}", "window", seconds + PROFILE_TIMEOUT)

