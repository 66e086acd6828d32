"""Hostile status ports and server-status members (issue 27): bounded, counted, one record at a time.

A status port that drips its answer a byte at a time is cut at the request's deadline, counted
as a failed request and never holds the capture past its end budget; a /metrics body of 17 MB
(above the text line limit, under the 32 MiB cap) is kept and read back; in the bundle, a scrape
or a profile that cannot be read (NaN times, a body of the wrong type, a broken profile) skips
only itself, with a warning naming its own file. Real local servers, real captures.
"""

from __future__ import annotations

import gzip
import json
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from profiler.collectors.server import bounded_http
from profiler.collectors.server import status as ss

from profiler.bundle import Bundle, members
from profiler.cli import main


@pytest.fixture
def target() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def dripping() -> Iterator[int]:
    """A port that reads the request, then drips a status line and headers a byte every 0.3 s."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve(c: socket.socket) -> None:
        try:
            c.recv(4096)
            for b in b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Drip: " + b"a" * 10_000:
                if stop.is_set():
                    return
                c.send(bytes([b]))
                time.sleep(0.3)
        except OSError:
            pass
        finally:
            c.close()

    def accept() -> None:
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                continue
            threading.Thread(target=serve, args=(c,), daemon=True).start()

    th = threading.Thread(target=accept, daemon=True)
    th.start()
    yield srv.getsockname()[1]
    stop.set()
    th.join(2)
    srv.close()


def test_a_dripping_answer_is_cut_at_the_deadline_as_a_timeout(dripping: int) -> None:
    t0 = time.monotonic()
    r = bounded_http.fetch(f"http://127.0.0.1:{dripping}/metrics", timeout=1.5, max_bytes=1 << 20)
    took = time.monotonic() - t0
    assert r.error == bounded_http.TIMEOUT and took < 3.0, (r, took)


def test_a_dripping_status_port_is_a_counted_failure_within_the_capture(dripping: int, tmp_path: Path,
                                                                         target: subprocess.Popen[bytes]) -> None:
    out = tmp_path / "cap"
    rc = main(["attach", "--pid", str(target.pid), "-d", "2s", "-o", str(out), "--no-report", "--collector", "procfs",
               "--collector", "server-status", "--status-url", f"http://127.0.0.1:{dripping}"])
    assert rc == 0
    m = Bundle.open(out).manifest
    rec = m.collector("server-status")
    assert rec is not None and rec.stats["failures"].get("timeout", 0) >= 1, rec.stats
    assert rec.stats["requests"] >= 1
    # the probes have PROBE_TIMEOUT each and stop at the end budget: never the drip's own pace
    assert m.ended is not None and m.ended - m.clock.monotonic_start < 2 + ss.END_BUDGET + 4


def _metrics_server(body: bytes) -> tuple[ThreadingHTTPServer, threading.Thread]:
    class H(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if not self.path.startswith("/metrics"):
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    return srv, th


def test_a_metrics_body_above_the_line_limit_is_kept_and_read(tmp_path: Path, target: subprocess.Popen[bytes],
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """17 MB of /metrics (long HELP texts: few lines, quick to parse) under the 32 MiB cap: each
    scrape is one record longer than the 16 MiB text line limit; every scrape is kept and read."""
    text = "a help text, with a quote \" and a backslash \\\\ escaped " * 320
    body = "".join(f"# HELP m{i} {text}\n# TYPE m{i} gauge\nm{i}{{v=\"{i}\"}} {i}\n" for i in range(1100)).encode()
    assert 16 << 20 < len(body) < ss.METRICS_MAX
    srv, th = _metrics_server(body)
    try:
        out = tmp_path / "cap"
        rc = main(["attach", "--pid", str(target.pid), "-d", "4s", "-o", str(out), "--no-report", "--collector",
                   "procfs", "--collector", "server-status", "--status-interval", "1s",
                   "--status-url", f"http://127.0.0.1:{srv.server_address[1]}"])
    finally:
        srv.shutdown()
        th.join(5)
    assert rc == 0
    capsys.readouterr()
    assert main(["report", str(out), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    t = doc["server_status"]["targets"][0]
    assert t["scrapes"] >= 2 and t["bad_metric_lines"] == 0, t
    assert not [w for w in doc["warnings"] if "longer than" in w or "cannot be read" in w], doc["warnings"]


# --------------------------------------------------------------------------- one bad record skips itself

def _seed(tmp_path: Path) -> Path:
    from tests import server_status_seed

    return server_status_seed.make(tmp_path / "srv")


def _metrics(d: Path, edit: Callable[[list[Any]], None]) -> None:
    recs = [json.loads(ln) for ln in gzip.decompress((d / members.SERVER_METRICS).read_bytes()).decode().splitlines()]
    edit(recs)
    (d / members.SERVER_METRICS).write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in recs).encode()))


def _index(d: Path, edit: Callable[[list[dict[str, Any]]], None]) -> None:
    recs = [json.loads(ln) for ln in (d / members.SERVER_STATUS).read_text().splitlines()]
    edit(recs)
    (d / members.SERVER_STATUS).write_text("".join(json.dumps(r) + "\n" for r in recs))


def _profile_file(d: Path, part: str) -> Path:
    return next(p for p in d.iterdir() if part in p.name)


CASES: dict[str, tuple[Callable[[Path], None], str, dict[str, int]]] = {
    # edit, the file the warning must name, what must still be read: scrapes, goroutine snapshots
    "a scrape with NaN times": (lambda d: _metrics(d, lambda r: r[1].update(t0=float("nan"))),
                                members.SERVER_METRICS, {"scrapes": 2, "goroutines": 2}),
    "a scrape ending at infinity": (lambda d: _metrics(d, lambda r: r[0].update(t1=float("inf"))),
                                    members.SERVER_METRICS, {"scrapes": 2, "goroutines": 2}),
    "a scrape at 1e300 s": (lambda d: _metrics(d, lambda r: r[2].update(t0=1e300, t1=1e300)),
                            members.SERVER_METRICS, {"scrapes": 2, "goroutines": 2}),
    "a scrape whose body is a list": (lambda d: _metrics(d, lambda r: r[1].update(body=["x"])),
                                      members.SERVER_METRICS, {"scrapes": 2, "goroutines": 2}),
    "a scrape that is not an object": (lambda d: _metrics(d, lambda r: r.insert(1, [1, 2])),
                                       members.SERVER_METRICS, {"scrapes": 3, "goroutines": 2}),
    "a profile request with NaN times": (
        lambda d: _index(d, lambda r: [x.update(t0=float("nan")) for x in r if "goroutine-2" in str(x.get("member"))]),
        "goroutine-2", {"scrapes": 3, "goroutines": 1}),
    "a broken mutex profile": (lambda d: _profile_file(d, "mutex-end").write_bytes(b"\x1f\x8bnot gzip"),
                               "mutex-end", {"scrapes": 3, "goroutines": 2}),
    "a goroutine dump of garbage": (lambda d: _profile_file(d, "goroutine-1.txt").write_bytes(b"\xff\xfe[\n" * 50),
                                    "goroutine-1.txt", {"scrapes": 3, "goroutines": 1}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_bad_server_record_skips_only_itself_named(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       case: str) -> None:
    edit, named, kept = CASES[case]
    d = _seed(tmp_path)
    edit(d)
    assert main(["report", str(d), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    t = doc["server_status"]["targets"][0]
    assert t["scrapes"] == kept["scrapes"] and len(t["goroutines"]) == kept["goroutines"], (t["scrapes"], t["goroutines"])
    assert [w for w in doc["warnings"] if named in w], doc["warnings"]
    assert not [w for w in doc["warnings"] if "could not be read:" in w and "server-status.jsonl" in w]
    shutil.rmtree(d)


@pytest.mark.parametrize("shape", ["one line repeated", "distinct families", "distinct series"])
def test_server_metrics_under_1_mb_take_under_500_mb(tmp_path: Path, shape: str) -> None:
    """A server-metrics.jsonl.gz under 1 MB, shaped for memory: a 32 MiB body of one line (a
    decompression bomb: reading stops at 200x), 400,000 distinct families or series."""
    from tests.cli.test_hostile_load import _rss

    d = _seed(tmp_path)
    rec = json.loads(gzip.decompress((d / members.SERVER_METRICS).read_bytes()).decode().splitlines()[0])
    if shape == "one line repeated":
        bodies = ["go_goroutines 1\n" * ((32 << 20) // 16)] * 6
    elif shape == "distinct families":
        bodies = ["".join(f"# TYPE m{i} gauge\n" for i in range(400_000))]
    else:
        bodies = ["".join(f'm{{a="{i}"}} 1\n' for i in range(400_000))]
    raw = "".join(json.dumps(dict(rec, body=b, t0=rec["t0"] + i, t1=rec["t1"] + i)) + "\n" for i, b in enumerate(bodies))
    (d / members.SERVER_METRICS).write_bytes(gzip.compress(raw.encode(), 9))
    assert (d / members.SERVER_METRICS).stat().st_size < 1 << 20
    code, rss = _rss(["report", str(d), "--format", "json"])
    assert code == 0 and rss < 500, rss
