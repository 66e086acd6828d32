"""The server-status collector and its analyzers: Prometheus text, rates and quantiles, goroutines by
wait, finding a status port; end to end on the Go workload, on etcd, and on a status port that
misbehaves (a real local HTTP server per case: hangs, HTML, a 1 GiB body, bad text, cut bodies,
bad gzip, profiles that are not pprof)."""

from __future__ import annotations

import gzip
import html
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from profiler.analyzers.server import goroutines as G
from profiler.analyzers.server import keyseries
from profiler.analyzers.server import series as S
from profiler.analyzers.server.prometheus import parse_text
from profiler.collectors.server import ports
from profiler.collectors.server import status as ss

from profiler.bundle import Bundle
from profiler.cli import main
from profiler.inputs.pprof import parse_profile
from profiler.knowledge.servers import BY_KEY
from tests.conftest import ROOT
from tests.workloads import gobuild
from tests.workloads.goservers import Etcd, GoWorkload, children

# --------------------------------------------------------------------------- Prometheus text


def test_exposition_text_values_escapes_and_bad_lines_counted() -> None:
    text = "\n".join([
        "# HELP http_requests_total Requests \\\\ with a\\nnewline.",
        "# TYPE http_requests_total counter",
        'http_requests_total{code="200",path="/a \\"q\\" \\\\ \\n"} 1027 1395066363000',
        'http_requests_total{code="500" , path="/b",} 3',
        "# TYPE lat histogram",
        'lat_bucket{le="0.1"} 2', 'lat_bucket{le="+Inf"} 4', "lat_sum 0.5", "lat_count 4",
        "temp NaN", "big +Inf", "small -Inf", "exp 1.5e+06",
        'om_metric{a="b"} 7 # {trace_id="x"} 1.0',  # OpenMetrics exemplar: cut
        "# EOF",
        'bad{a="unterminated 1', "novalue", "x{a=b} 1", "y 1 2 3", "1leadingdigit 2", 'z{="v"} 1',
        "# TYPE weird nonsense",
    ])
    snap = parse_text(text)
    assert snap.samples[("http_requests_total", (("code", "200"), ("path", '/a "q" \\ \n')))] == 1027
    assert snap.samples[("http_requests_total", (("code", "500"), ("path", "/b")))] == 3
    assert snap.families["http_requests_total"].help == "Requests \\ with a\nnewline."
    assert snap.family_type("http_requests_total") == "counter"
    assert snap.family_type("lat_bucket") == snap.family_type("lat_count") == "histogram"
    assert math.isnan(snap.samples[("temp", ())]) and snap.samples[("big", ())] == math.inf
    assert snap.samples[("small", ())] == -math.inf and snap.samples[("exp", ())] == 1.5e6
    assert snap.samples[("om_metric", (("a", "b"),))] == 7
    assert snap.errors == 7 and len(snap.examples) == 5  # the first five reasons kept
    assert snap.examples[0].startswith("line 16: a label value runs off the end")
    assert "unknown metric type" not in " ".join(snap.examples)  # the 7th, past the examples kept


def test_caps_on_series_and_label_sizes() -> None:
    from profiler.analyzers.server import prometheus as P

    lines = [f'm{{i="{i}"}} {i}' for i in range(P.MAX_SERIES + 10)]
    snap = P.parse_lines(lines)
    assert len(snap.samples) == P.MAX_SERIES and snap.dropped == 10
    long = P.parse_text('m{a="' + "x" * (P.MAX_VALUE + 1) + '"} 1')
    assert long.errors == 1 and not long.samples


# --------------------------------------------------------------------------- rates and quantiles


def _scrapes(*texts: str, step: float = 10.0) -> list[S.Scrape]:
    return [S.Scrape(100.0 + i * step, parse_text(t)) for i, t in enumerate(texts)]


def test_rate_by_label_and_counter_reset() -> None:
    sc = _scrapes('q{type="Select",result="OK"} 100\nq{type="Insert",result="OK"} 10',
                  'q{type="Select",result="OK"} 300\nq{type="Insert",result="OK"} 20',
                  'q{type="Select",result="OK"} 50\nq{type="Insert",result="OK"} 30')  # Select restarted at 0
    r = S.rate(sc, "q", ("type",))
    assert r[(("type", "Select"),)] == pytest.approx((200 + 50) / 20)
    assert r[(("type", "Insert"),)] == pytest.approx(1.0)
    times, series = S.rate_series(sc, "q", ("type",))
    assert times == [105.0, 115.0] and series[(("type", "Select"),)] == [20.0, 5.0]


def test_histogram_quantile_is_prometheus_interpolation() -> None:
    inf = math.inf
    b = {0.1: 10.0, 0.2: 30.0, 0.5: 40.0, inf: 40.0}
    assert S.quantile(b, 0.5) == pytest.approx(0.15)  # rank 20 in (0.1, 0.2]: 10 below, 20 inside
    assert S.quantile(b, 0.99) == pytest.approx(0.2 + 0.3 * (39.6 - 30) / 10)
    assert S.quantile({0.1: 5.0, inf: 10.0}, 0.9) == 0.1  # in the +Inf bucket: the largest finite bound
    assert S.quantile({0.5: 10.0, inf: 10.0}, 0.5) == pytest.approx(0.25)  # the first bucket starts at 0
    assert S.quantile({0.5: 10.0}, 0.5) is None and S.quantile({inf: 0.0}, 0.5) is None
    # over a window: only the observations made inside it count
    t0 = 'd_bucket{type="kv_get",le="0.01"} 100\nd_bucket{type="kv_get",le="0.1"} 100\nd_bucket{type="kv_get",le="+Inf"} 100'
    t1 = 'd_bucket{type="kv_get",le="0.01"} 100\nd_bucket{type="kv_get",le="0.1"} 200\nd_bucket{type="kv_get",le="+Inf"} 200'
    q = S.histogram_quantile(_scrapes(t0, t1), "d", 0.99, ("type",))
    assert q[(("type", "kv_get"),)] == pytest.approx(0.01 + 0.09 * 0.99)


def test_key_values_tikv_pools_hit_ratio_and_tidb_duration() -> None:
    def tikv(n: int) -> str:
        return "\n".join([
            "# TYPE tikv_thread_cpu_seconds_total counter",
            f'tikv_thread_cpu_seconds_total{{name="grpc-server-0"}} {n * 5}',
            f'tikv_thread_cpu_seconds_total{{name="grpc-server-1"}} {n * 3}',
            f'tikv_thread_cpu_seconds_total{{name="raftstore-1-0"}} {n * 1}',
            "# TYPE tikv_engine_cache_efficiency counter",
            f'tikv_engine_cache_efficiency{{db="kv",type="block_cache_hit"}} {n * 90}',
            f'tikv_engine_cache_efficiency{{db="kv",type="block_cache_miss"}} {n * 10}',
            f'tikv_engine_cache_efficiency{{db="raft",type="block_cache_miss"}} {n * 1000}',
        ])
    sc = _scrapes(tikv(1), tikv(2), tikv(3))
    kvs = {k.info.key: k for k in keyseries.key_values("tikv", sc)}
    assert kvs["tikv.pool_cpu"].window == pytest.approx({"grpc-server": 0.8, "raftstore": 0.1})
    assert kvs["tikv.block_cache_hit"].total == pytest.approx(0.9)  # db=raft left out
    assert kvs["tikv.block_cache_hit"].series["all"] == pytest.approx([0.9, 0.9])
    tidb0 = 'tidb_server_handle_query_duration_seconds_bucket{sql_type="Select",le="0.001"} 0\n' \
            'tidb_server_handle_query_duration_seconds_bucket{sql_type="Select",le="0.01"} 0\n' \
            'tidb_server_handle_query_duration_seconds_bucket{sql_type="Select",le="+Inf"} 0\n'
    tidb1 = tidb0.replace("} 0\n", "} 50\n").replace('le="0.001"} 50', 'le="0.001"} 0')
    kv = {k.info.key: k for k in keyseries.key_values("tidb", _scrapes(tidb0, tidb1))}["tidb.query_p99"]
    assert kv.window["sql_type=Select"] == pytest.approx(0.001 + 0.009 * 0.99)


def test_groups_at_zero_give_way_to_the_busy_ones() -> None:
    # etcd's grpc_server_handled_total holds every method, most never called: the by-method
    # value and its timeline show the methods that ran, largest first
    methods = ["Alarm", "AuthDisable", "AuthEnable", "Authenticate", "Check", "Compact", "Defragment", "Hash",
               "Put", "Range"]

    def etcd(n: int) -> str:
        counts = {"Put": 90 * n, "Range": 10 * n}
        return "# TYPE grpc_server_handled_total counter\n" + "\n".join(
            f'grpc_server_handled_total{{grpc_method="{m}",grpc_type="unary"}} {counts.get(m, 0)}' for m in methods)
    kv = {k.info.key: k for k in keyseries.key_values("etcd", _scrapes(etcd(1), etcd(2), etcd(3)))}["etcd.grpc_qps"]
    assert list(kv.window) == ["grpc_method=Put", "grpc_method=Range"] and set(kv.series) == set(kv.window)
    assert kv.total == pytest.approx(10.0)
    idle = {k.info.key: k for k in keyseries.key_values("etcd", _scrapes(etcd(0), etcd(0)))}["etcd.grpc_qps"]
    assert idle.total == 0 and len(idle.window) == keyseries.MAX_GROUPS  # all at zero: still said, not hidden


# --------------------------------------------------------------------------- finding the port


def test_flags_and_defaults_of_each_server() -> None:
    def urls(kind: str, argv: list[str]) -> list[str]:
        return [c.url for c in ports.flag_candidates(kind, argv)]

    assert urls("tidb", ["tidb-server", "-status", "10081", "-status-host", "0.0.0.0"])[0] == "http://0.0.0.0:10081"
    assert urls("tidb", ["tidb-server"]) == ["http://127.0.0.1:10080"]
    assert urls("pd", ["pd-server", "--client-urls=http://10.0.0.5:2379,http://127.0.0.1:2379"])[:2] == [
        "http://10.0.0.5:2379", "http://127.0.0.1:2379"]
    assert urls("tikv", ["tikv-server", "--status-addr", "0.0.0.0:20181"])[0] == "http://0.0.0.0:20181"
    assert urls("etcd", ["etcd", "--listen-metrics-urls", "http://127.0.0.1:2381"])[0] == "http://127.0.0.1:2381"
    assert ports.server_kind("etcd", ["/usr/bin/etcd"], None) == "etcd"
    local = ports.local_addresses()
    assert ports.reachable("http://0.0.0.0:10080", local)[0] == "http://127.0.0.1:10080"
    assert ports.reachable("http://[::]:10080", local)[0] == "http://[::1]:10080"
    url, why = ports.reachable("http://192.0.2.7:10080", local)  # TEST-NET-1: never this host's
    assert url is None and "not an address of this host" in why and "--status-url" in why
    assert ss.parse_status_urls(["http://a:1", "42=http://b:2"]) == {None: ["http://a:1"], 42: ["http://b:2"]}
    assert ports._hex_addr("0100007F:0BB8") == ("127.0.0.1", 3000)


def test_listening_sockets_are_the_processes_own() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert ("127.0.0.1", port) in ports.listening_sockets(os.getpid())
    assert ("127.0.0.1", port) not in ports.listening_sockets(os.getpid())
    assert ports.listening_sockets(1) == [] or all(isinstance(p, int) for _, p in ports.listening_sockets(1))


# --------------------------------------------------------------------------- goroutine dumps

DUMP = """goroutine 1 [chan receive, 5 minutes]:
main.main()
\t/src/main.go:10 +0x45

goroutine 7 [sync.RWMutex.RLock]:
sync.runtime_SemacquireRWMutexR(0xc000012345?, 0x0?, 0x0?)
\t/usr/lib/go/src/runtime/sema.go:82 +0x25
sync.(*RWMutex).RLock(...)
\t/usr/lib/go/src/sync/rwmutex.go:71
github.com/x/store.(*Cache).Get(0xc000100000, {0xc0000a0000, 0x5})
\t/src/store/cache.go:40 +0x3c
created by github.com/x/store.Serve in goroutine 1
\t/src/store/serve.go:22 +0x55

goroutine 9 [IO wait]:
internal/poll.runtime_pollWait(0x7f, 0x72)
\t/usr/lib/go/src/runtime/netpoll.go:343 +0x85
net.(*conn).Read(0xc000a00000, {0xc000b00000?, 0x1000, 0x1000})
\t/usr/lib/go/src/net/net.go:179 +0x45
github.com/x/rpc.(*Server).serveConn(0xc0001, {0x9e5f40, 0xc000a00000})
\t/src/rpc/server.go:91 +0x2ab

goroutine 11 [syscall]:
syscall.Syscall(0x4a, 0x3, 0x0, 0x0)
\t/usr/lib/go/src/syscall/syscall_linux.go:69 +0x25
os.(*File).Sync(0xc000010000)
\t/usr/lib/go/src/os/file_posix.go:168 +0x2f
main.flush[...](...)
\t/src/main.go:55

goroutine 12 [semacquire, 2 minutes]:
sync.runtime_Semacquire(0xc000020000?)
\t/usr/lib/go/src/runtime/sema.go:62 +0x25
sync.(*WaitGroup).Wait(0xc000020000)
\t/usr/lib/go/src/sync/waitgroup.go:116 +0x48
main.main.func2()
\t/src/main.go:80 +0x1d
...additional frames elided...
"""


def test_text_dump_states_sites_and_argument_lists() -> None:
    snap = G.from_text(DUMP.splitlines(), 5.0)
    assert snap.total == 5 and snap.source == "text"
    assert snap.by_kind == {"chan": 1, "lock": 1, "io": 1, "syscall": 1, "wait": 1}
    sites = {g.state: (g.op, g.caller) for g in snap.groups}
    assert sites["sync.RWMutex.RLock"] == ("sync.(*RWMutex).RLock", "github.com/x/store.(*Cache).Get")
    assert sites["IO wait"] == ("net.(*conn).Read", "github.com/x/rpc.(*Server).serveConn")
    assert sites["syscall"] == ("os.(*File).Sync", "main.flush[...]")
    assert sites["sync.WaitGroup.Wait"][1] == "main.main.func2"
    assert "sync.RWMutex.RLock;github.com/x/store.(*Cache).Get;sync.(*RWMutex).RLock;sync.runtime_SemacquireRWMutexR" in snap.folded
    assert not G.is_own_code("net/http.(*conn).serve") and G.is_own_code("go.etcd.io/etcd/wal.(*WAL).sync")


def test_a_goroutine_caught_without_a_stack_is_running_elsewhere() -> None:
    # a goroutine profile leaves out the stack of a goroutine running on another thread: one
    # sample with no location, which the pprof reader names [unknown]
    snap = G.summarize([(("[unknown]",), 2), (("main.main", "runtime.chanrecv1"), 1)], 0.0)
    running = next(g for g in snap.groups if g.state == "running")
    assert (running.count, running.op, running.caller) == (2, G.NO_STACK, "")
    assert snap.by_kind == {"run": 2, "chan": 1}
    assert snap.folded[f"running;{G.NO_STACK}"] == 2  # the goroutine view says it too


# --------------------------------------------------------------------------- the Go workload

needs_go = pytest.mark.skipif(gobuild.go() is None, reason="go is not installed")


@pytest.fixture
def kids(tmp_path: Path) -> Iterator[object]:
    with children(tmp_path) as c:
        yield c


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as r:  # noqa: S310 - our own server on 127.0.0.1
        return bytes(r.read())


@needs_go
@pytest.mark.parametrize(("mode", "args", "kind", "at_least"), [
    ("mutex", ("-workers", "8", "-hold", "2ms"), "lock", 6),
    ("idle", ("-workers", "16", "-rate", "5"), "chan", 15),
    ("fsync", ("-workers", "3", "-size", "4096"), "syscall", 1),
])
def test_goroutine_profile_and_text_dump_agree_per_mode(mode: str, args: tuple[str, ...], kind: str, at_least: int,
                                                        kids: object, tmp_path: Path) -> None:
    if mode == "fsync":
        args = (*args, "-dir", str(tmp_path))
    w = GoWorkload(mode, *args)
    w.start(kids.spawn)  # type: ignore[attr-defined]
    time.sleep(1.0)
    prof = G.from_profile(parse_profile(gzip.decompress(_get(f"{w.url}/debug/pprof/goroutine"))), 0.0)
    text = G.from_text(_get(f"{w.url}/debug/pprof/goroutine?debug=2").decode().splitlines(), 0.0)
    for snap in (prof, text):
        assert snap.count(kind) >= at_least, (snap.source, snap.by_kind)
    if kind != "syscall":  # a goroutine leaves its fsync between the two requests
        assert prof.count(kind) == pytest.approx(text.count(kind), abs=1)
    top = prof.groups[0]
    caller = {"mutex": "main.lockedWork", "idle": "main.worker", "fsync": "main.fsyncLoop"}[mode]
    assert any(g.caller == caller and g.kind == kind for g in prof.groups), prof.groups[:3]
    if mode == "mutex":
        assert (top.state, top.op, top.caller) == ("sync.Mutex.Lock", "sync.(*Mutex).Lock", "main.lockedWork")


def _report(bundle: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    capsys.readouterr()
    assert main(["report", str(bundle), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert isinstance(data, dict)
    return data


@needs_go
def test_attach_reads_the_go_workloads_status_port(kids: object, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    w = GoWorkload("mutex", "-workers", "8", "-hold", "2ms")
    pid = w.start(kids.spawn)  # type: ignore[attr-defined]
    bundle = tmp_path / "cap"
    assert main(["attach", "--pid", str(pid), "--duration", "4s", "-o", str(bundle), "--no-report",
                 "--collector", "server-status", "--collector", "procfs", "--status-interval", "1s"]) == 0
    out = capsys.readouterr().out
    assert "server-status  ok" in out
    m = Bundle.open(bundle).manifest
    rec = m.collector("server-status")
    assert rec is not None and rec.status == "ok" and rec.stats["endpoints"][0]["metrics"] == w.url
    assert rec.stats["endpoints"][0]["source"] == "listening socket"
    kinds = {f.split("-")[2] for f in rec.files if f.startswith(f"server-{pid}-")}
    assert kinds == {"goroutine", "mutex", "block", "cpu"}
    d = _report(bundle, capsys)
    st = d["server_status"]["targets"][0]  # type: ignore[index]
    assert len(st["goroutines"]) == 3 and st["scrapes"] >= 4 and st["bad_metric_lines"] == 0
    assert st["wait_sites"][0]["caller"] == "main.lockedWork" and st["wait_sites"][0]["goroutines"] >= 6
    assert st["block"]["delay_per_s"] > 3 and st["mutex"]["top"][0]["site"] == "main.lockedWork"
    assert {mm["key"] for mm in st["metrics"]} >= {"go.goroutines", "go.mutex_wait", "go.heap_inuse"}
    assert f"server_goroutines_{pid}" in d["timeline"]["panels"]  # type: ignore[index]
    v = d["verdict"]
    assert v["category"] == "lock_contention" and "main.lockedWork" in v["sub_cause"]  # type: ignore[index]
    out_html = tmp_path / "r.html"
    assert main(["report", str(bundle), "-o", str(out_html)]) == 0
    page = out_html.read_text()
    assert "What the servers say about themselves" in page and 'id="flame-goroutine"' in page
    capsys.readouterr()
    assert main(["report", str(bundle), "--format", "md"]) == 0
    md = capsys.readouterr().out
    assert "## Server status" in md and "| sync.Mutex.Lock | sync.(*Mutex).Lock | main.lockedWork |" in md


def test_a_target_without_a_port_is_skipped_with_the_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert main(["attach", "--pid", str(proc.pid), "--duration", "1s", "-o", str(tmp_path / "cap"), "--no-report",
                     "--collector", "server-status", "--collector", "procfs"]) == 0
    finally:
        proc.kill()
        proc.wait()
    rec = Bundle.open(tmp_path / "cap").manifest.collector("server-status")
    assert rec is not None and rec.status == "skipped"
    assert "listens on no TCP port" in (rec.reason or "") and "--status-url" in (rec.reason or "")


# --------------------------------------------------------------------------- a status port that misbehaves

BAD = {
    "hang": "timeout", "html": "html", "huge": "too-large", "cut": "closed-mid-body", "badgzip": "bad-gzip",
    "badpprof": "could not be read and were left out", "badtext": "lines could not be read",
}


@pytest.mark.parametrize("mode", sorted(BAD))
def test_a_misbehaving_status_port_is_a_named_counted_warning(mode: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "tests.workloads.badstatus", "--mode", mode], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        addr = proc.stdout.readline().decode().strip()
        bundle = tmp_path / "cap"
        t0 = time.monotonic()
        # a Python server: its sockets are asked only when named (no Go HTTP server, collectors/server/ports.py)
        rc = main(["attach", "--pid", str(proc.pid), "--duration", "3s", "-o", str(bundle), "--no-report",
                   "--collector", "server-status", "--collector", "procfs", "--status-interval", "1s",
                   "--status-url", f"http://{addr}"])
        took = time.monotonic() - t0
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert rc == 0
    m = Bundle.open(bundle).manifest
    # the capture is not held hostage: the end requests have END_BUDGET in all (plus a loaded host's slack)
    assert m.ended is not None and m.ended - m.clock.monotonic_start < 3 + ss.END_BUDGET + 8, took
    procfs = m.collector("procfs")
    rec = m.collector("server-status")
    assert procfs is not None and procfs.status == "ok"
    assert rec is not None and rec.status in ("ok", "failed")
    d = _report(bundle, capsys)
    warnings = " | ".join(d["warnings"])  # type: ignore[arg-type]
    assert BAD[mode] in warnings, warnings
    assert "Traceback" not in warnings and "\x1b" not in warnings
    assert d["verdict"]["category"] in ("not_saturated", "cpu")  # type: ignore[index]
    failures = d["server_status"]["failures"]  # type: ignore[index]
    counted = {"badtext": None, "badpprof": "bad-profile"}.get(mode, BAD[mode])
    if counted is not None:
        assert failures.get(counted, 0) >= 1, failures
    for fmt in ("md", "html"):
        out = tmp_path / f"r.{fmt}"
        assert main(["report", str(bundle), "-o", str(out), "-f"]) == 0


# --------------------------------------------------------------------------- etcd


@pytest.mark.privileged
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("perf") is None, reason="needs root and perf")
def test_etcd_under_load_status_goroutines_and_metrics(kids: object, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    if Etcd.missing():
        pytest.skip(Etcd.missing() or "")
    if gobuild.go() is None:
        pytest.skip("go is not installed (the load client is ours)")
    etcd = Etcd(tmp_path / "etcd")
    pid = etcd.start(kids.spawn)  # type: ignore[attr-defined]
    GoWorkload("etcdload", "-endpoint", etcd.url, "-workers", "8", "-rate", "0").start(kids.spawn)  # type: ignore[attr-defined]
    bundle = tmp_path / "cap"
    assert main(["attach", "--pid", str(pid), "--duration", "6s", "-o", str(bundle), "--status-interval", "2s"]) == 0
    out = capsys.readouterr().out
    assert "server-status  ok" in out
    rec = Bundle.open(bundle).manifest.collector("server-status")
    assert rec is not None and rec.stats["endpoints"][0]["source"] == "flag --listen-client-urls"
    d = _report(bundle, capsys)
    st = next(t for t in d["server_status"]["targets"] if t["pid"] == pid)  # type: ignore[index]
    assert st["server"] == "etcd" and st["bad_metric_lines"] == 0 and len(st["goroutines"]) == 3
    keys = {mm["key"]: mm for mm in st["metrics"]}
    assert keys["etcd.proposals"]["value"] > 10 and keys["etcd.wal_fsync_p99"]["value"] > 0
    assert keys["etcd.grpc_qps"]["value"] > 10
    assert any(w["caller"].startswith("go.etcd.io/") for w in st["wait_sites"])
    panels = d["timeline"]["panels"]  # type: ignore[index]
    assert f"server_etcd_wal_fsync_p99_{pid}" in panels and f"server_goroutines_{pid}" in panels
    page = (bundle / "report.html").read_text()
    assert 'id="flame-goroutine"' in page and "WAL fsync p99" in page
    assert html.escape(BY_KEY["etcd.wal_fsync_p99"].panel) in page  # autoescaped: "etcd &gt; Disk &gt; ..."


@needs_go
@pytest.mark.privileged
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("perf") is None, reason="needs root and perf")
def test_attach_on_the_cpu_bound_go_workload_agrees_with_its_own_profile(kids: object, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Every collector on a CPU-bound Go server: server-status ok beside perf, the goroutines
    running in main.burnCPU, the Go runtime's metric series on the timeline, and the server's
    own CPU profile's top function the same as perf's, by the same name (perf names Go assembly
    from .symtab with its ABI suffix, ``.abi0``, Go's profiles without: folding drops it)."""
    w = GoWorkload("cpu", "-workers", "2")
    pid = w.start(kids.spawn)  # type: ignore[attr-defined]
    bundle = tmp_path / "cap"
    assert main(["attach", "--pid", str(pid), "--duration", "5s", "-o", str(bundle), "--status-interval", "1s"]) == 0
    out = capsys.readouterr().out
    assert "server-status  ok" in out and "cpu-stacks     ok" in out
    d = _report(bundle, capsys)
    st = next(t for t in d["server_status"]["targets"] if t["pid"] == pid)  # type: ignore[index]
    assert any(w["caller"] == "main.burnCPU" and w["kind"] == "run" and w["goroutines"] >= 1 for w in st["wait_sites"])
    panels = d["timeline"]["panels"]  # type: ignore[index]
    assert {f"server_goroutines_{pid}", f"server_go_heap_inuse_{pid}"} <= set(panels)
    assert any(v is not None and v > 0 for s in panels[f"server_go_goroutines_{pid}"]["series"].values() for v in s)
    own = st["cpu"]["top"][0]["function"]
    assert "sha256" in own, st["cpu"]
    self_: dict[str, int] = {}
    capsys.readouterr()
    assert main(["flamegraph", str(bundle), "--pid", str(pid), "--folded"]) == 0
    for line in capsys.readouterr().out.splitlines():
        stack, _, n = line.rpartition(" ")
        leaf = stack.rsplit(";", 1)[-1]
        self_[leaf] = self_.get(leaf, 0) + int(n)
    assert max(self_, key=lambda f: self_[f]) == own, sorted(self_.items(), key=lambda kv: -kv[1])[:5]
    page = (bundle / "report.html").read_text()
    assert 'id="flame-goroutine"' in page and "main.burnCPU" in page
