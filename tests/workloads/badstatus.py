"""A real HTTP status port that misbehaves, for the server-status collector's tests (test layer).

    python -m tests.workloads.badstatus --mode MODE

Serves on 127.0.0.1 (port chosen by the kernel, printed as ``127.0.0.1:PORT`` on the first line
of stdout) what a status port serves: ``/metrics`` and ``/debug/pprof/``. The first request to
each path gets a good answer (so the collector finds the port); later ones misbehave:

    hang       accept, read the request, never answer
    html       200 with an HTML page
    huge       a 1 GiB body (Content-Length says so; Prometheus text, streamed until the client leaves)
    badtext    exposition text with malformed lines among good ones
    cut        Content-Length 100000, 1000 bytes sent, connection closed
    badgzip    Content-Encoding: gzip with bytes that do not inflate
    badpprof   profiles that are not pprof: gzip of garbage, a truncated protobuf
    good       always good (the control)

Runs until killed, or until its stdin closes.
"""

from __future__ import annotations

import argparse
import gzip
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GOOD_METRICS = (
    "# HELP go_goroutines Number of goroutines that currently exist.\n"
    "# TYPE go_goroutines gauge\n"
    "go_goroutines 12\n"
    "# HELP requests_total Requests.\n# TYPE requests_total counter\n"
    'requests_total{path="/x"} %d\n'
)
INDEX = "<html><body>/debug/pprof/<br>goroutine<br>mutex<br>block</body></html>"


def _profile() -> bytes:
    """A minimal valid goroutine profile: one sample type, one sample of 3 goroutines in main.wait."""
    def varint(v: int) -> bytes:
        out = bytearray()
        while True:
            b = v & 0x7F
            v >>= 7
            out.append(b | 0x80 if v else b)
            if not v:
                return bytes(out)

    def field(n: int, data: bytes) -> bytes:
        return varint(n << 3 | 2) + varint(len(data)) + data

    def num(n: int, v: int) -> bytes:
        return varint(n << 3) + varint(v)

    body = field(1, num(1, 1) + num(2, 2))  # sample_type goroutine/count
    body += field(2, field(1, varint(1)) + field(2, varint(3)))  # sample: location 1, value 3
    body += field(4, num(1, 1) + field(4, num(1, 1)))  # location 1 -> function 1
    body += field(5, num(1, 1) + num(2, 3))  # function 1 named string 3
    for s in ("", "goroutine", "count", "main.wait"):
        body += field(6, s.encode())
    return gzip.compress(body)


class Handler(BaseHTTPRequestHandler):
    mode = "good"
    seen: dict[str, int] = {}
    lock = threading.Lock()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass

    def _send(self, code: int, body: bytes, ctype: str, extra: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        if "Content-Length" not in (extra or {}):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        path = self.path.split("?", 1)[0]
        with self.lock:
            n = self.seen.get(path, 0)
            self.seen[path] = n + 1
        if self.mode == "good" or n == 0:
            return self._good(path, n)
        mode = self.mode
        if mode == "hang":
            time.sleep(3600)
        elif mode == "html":
            self._send(200, b"<!DOCTYPE html><html><body><h1>Login</h1></body></html>", "text/html")
        elif mode == "huge":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(1 << 30))
            self.end_headers()
            line = b'requests_total{path="/a-rather-long-label-value-to-fill-the-pipe"} 1\n' * 16384
            sent = 0
            try:
                while sent < (1 << 30):
                    self.wfile.write(line)
                    sent += len(line)
            except OSError:
                pass
        elif mode == "badtext":
            body = (GOOD_METRICS % (100 + n)
                    + 'bad{label="unterminated 1\n'
                    + "no_value\n"
                    + "name_with_bad_value{a=\"b\"} twelve\n"
                    + "\x1b[31mred 1\n"
                    + "ok_metric 3 1700000000000\n").encode()
            self._send(200, body, "text/plain; version=0.0.4")
        elif mode == "cut":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", "100000")
            self.end_headers()
            self.wfile.write((GOOD_METRICS % n).encode().ljust(1000, b"#"))
            self.wfile.flush()
            self.close_connection = True
        elif mode == "badgzip":
            self._send(200, b"\x1f\x8b\x08\x00garbage-that-is-not-deflate" * 10, "text/plain; version=0.0.4",
                       {"Content-Encoding": "gzip"})
        elif mode == "badpprof":
            if path.startswith("/debug/pprof/goroutine"):
                self._send(200, gzip.compress(b"\x0a\xff\xff\xff\xff\x0f" + b"\x00" * 50), "application/octet-stream")
            elif path.startswith("/debug/pprof/"):
                self._send(200, b"\x0a\x05\x08\x01\x10", "application/octet-stream")  # a field cut short
            else:
                self._good(path, n)
        else:
            self._send(500, b"unknown mode", "text/plain")

    def _good(self, path: str, n: int) -> None:
        if path == "/metrics":
            self._send(200, (GOOD_METRICS % (100 + n)).encode(), "text/plain; version=0.0.4; charset=utf-8")
        elif path in ("/debug/pprof/", "/debug/pprof"):
            self._send(200, INDEX.encode(), "text/html; charset=utf-8")
        elif path.startswith("/debug/pprof/"):
            self._send(200, _profile(), "application/octet-stream")
        else:
            self._send(404, b"404 page not found\n", "text/plain")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="good")
    args = ap.parse_args(argv)
    Handler.mode = args.mode
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    print(f"127.0.0.1:{srv.server_address[1]}", flush=True)

    def watch() -> None:
        sys.stdin.read()
        srv.shutdown()

    threading.Thread(target=watch, daemon=True).start()
    srv.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
