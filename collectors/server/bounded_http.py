"""Bounded HTTP GET for the server-status collector (collectors layer): nothing a server returns is trusted.

Every request has a deadline for the whole exchange, kept by a watchdog that shuts the socket
down when it passes (a server that drips its status line or headers a byte a second is cut
there, a timeout, not read for as long as it cares to drip), a deadline for each read of its
body, and a cap on the body's decompressed size (a larger body is cut and not kept); every failure comes back as a
:class:`Reply` whose ``error`` is one of the failure kinds below, counted by kind in the
collector's stats and named in its index. The ``looks_*`` checks refuse HTML and other answers
that are not what was asked for.
"""

from __future__ import annotations

import http.client
import re
import socket
import ssl
import threading
import time
import zlib
from dataclasses import dataclass
from urllib.parse import urlsplit

READ_TIMEOUT = 5.0  # s, each read of a body once its headers arrived

# failure kinds, as counted in stats["failures"] and named in the index
TIMEOUT, REFUSED, HTTP_ERROR, NOT_TEXT, HTML, TOO_LARGE, CUT, BAD_GZIP, NOT_PPROF, ERROR = (
    "timeout", "refused", "http-error", "not-text", "html", "too-large", "closed-mid-body", "bad-gzip",
    "not-pprof", "error")


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
    watchdog = threading.Timer(timeout, _cut, (conn,))
    watchdog.daemon = True
    watchdog.start()
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
                if time.monotonic() >= deadline:
                    raise TimeoutError
                break
            raw += len(piece)
            if inflate is not None:
                try:
                    piece = inflate.decompress(piece, max_bytes + 1 - size)
                except zlib.error as exc:
                    return fail_reply(reply, BAD_GZIP, f"Content-Encoding gzip that does not inflate ({exc})", t0)
            size += len(piece)
            if size > max_bytes:
                return fail_reply(reply, TOO_LARGE, f"body larger than {max_bytes >> 20} MiB: cut, not kept", t0)
            chunks.append(piece)
        if declared is not None and declared.isdigit() and raw < int(declared):
            return fail_reply(reply, CUT, f"the server closed the connection after {raw} of {declared} bytes", t0)
        if inflate is not None and not inflate.eof:
            return fail_reply(reply, CUT, "the compressed body ends before its gzip stream does", t0)
        reply.body = b"".join(chunks)
        if resp.status != 200:
            snippet = reply.body[:80].decode("utf-8", "replace").strip().splitlines()
            return fail_reply(reply, HTTP_ERROR, f"HTTP {resp.status}" + (f": {snippet[0]}" if snippet else ""), t0)
    except TimeoutError:
        return fail_reply(reply, TIMEOUT, f"no complete answer within {timeout:g}s", t0)
    except http.client.IncompleteRead as exc:
        if time.monotonic() >= deadline:
            return fail_reply(reply, TIMEOUT, f"no complete answer within {timeout:g}s", t0)
        return fail_reply(reply, CUT, f"the server closed the connection mid-body ({len(exc.partial)} bytes read)", t0)
    except ConnectionRefusedError:
        return fail_reply(reply, REFUSED, "connection refused", t0)
    except (http.client.HTTPException, OSError, ssl.SSLError) as exc:
        if time.monotonic() >= deadline:  # the watchdog cut a server that dripped past the deadline
            return fail_reply(reply, TIMEOUT, f"no complete answer within {timeout:g}s", t0)
        kind = CUT if reply.status else ERROR
        return fail_reply(reply, kind, f"{type(exc).__name__}: {str(exc)[:160]}", t0)
    finally:
        watchdog.cancel()
        conn.close()
    reply.seconds = time.monotonic() - t0
    return reply


def _cut(conn: http.client.HTTPConnection) -> None:
    """The deadline passed: end the exchange wherever it is (the reading side then fails)."""
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def fail_reply(reply: Reply, kind: str, detail: str, t0: float) -> Reply:
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
