"""A capture bundle holding every server-status member (tests' seed for hostile and fuzzed inputs).

Built offline from a perf sample bundle: the index (server-status.jsonl: the endpoint, metrics
and profile requests, a failed one), three /metrics scrapes (server-metrics.jsonl.gz), a Go
goroutine text dump, goroutine, mutex (start and end) and CPU pprof profiles as a Go server
serves them. The same shapes the collector writes (collectors/server/status.py).
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

from profiler.analyzers.stacks.export import StackProfile

from profiler.bundle import members
from profiler.renderers import pprof_out

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
BASE = SAMPLES / "perf" / "fsync-writer-and-lock-convoy"
PID = 12961

METRICS = """# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines {g}
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total {cpu}
# TYPE grpc_server_handling_seconds histogram
grpc_server_handling_seconds_bucket{{grpc_method="Get",le="0.005"}} {b1}
grpc_server_handling_seconds_bucket{{grpc_method="Get",le="0.1"}} {b2}
grpc_server_handling_seconds_bucket{{grpc_method="Get",le="+Inf"}} {b3}
grpc_server_handling_seconds_sum{{grpc_method="Get"}} {s}
grpc_server_handling_seconds_count{{grpc_method="Get"}} {b3}
"""

DUMP = """goroutine 1 [running]:
main.main()
\t/src/main.go:42 +0x1d

goroutine 18 [chan receive, 3 minutes]:
main.worker(0xc000010000)
\t/src/worker.go:17 +0x45
created by main.main in goroutine 1
\t/src/main.go:30 +0x66

goroutine 19 [sync.Mutex.Lock]:
sync.runtime_SemacquireMutex(0xc00001c0a8, 0x0, 0x1)
\t/usr/local/go/src/runtime/sema.go:77 +0x25
main.hot()
\t/src/hot.go:9 +0x3a
"""


def _profile(counts: dict[str, int], kind: str, unit: str) -> bytes:
    return gzip.compress(pprof_out.encode(StackProfile(counts, kind, unit)))


def make(dst: Path) -> Path:
    """``dst``: a copy of the perf sample bundle with the server-status members added."""
    shutil.copytree(BASE, dst)
    (dst / "report.html").unlink(missing_ok=True)
    manifest = json.loads((dst / "manifest.json").read_text())
    t0 = float(manifest["collectors"][0]["started"])
    index: list[dict[str, object]] = [{"kind": "endpoint", "pid": PID, "server": "go", "metrics": "http://127.0.0.1:6060",
                                       "pprof": "http://127.0.0.1:6060", "source": "flag", "tried": [], "refused": None}]
    scrapes = []
    for i in range(3):
        t = t0 + 3 * i
        body = METRICS.format(g=100 + 10 * i, cpu=1.5 + i, b1=10 * i, b2=20 * i, b3=30 * i, s=0.5 * i)
        scrapes.append({"pid": PID, "t0": t, "t1": t + 0.01, "body": body})
        index.append({"kind": "metrics", "pid": PID, "url": "http://127.0.0.1:6060/metrics", "t0": t, "t1": t + 0.01,
                      "status": 200, "bytes": len(body), "content_type": "text/plain", "member": None, "error": None,
                      "detail": None})
    files = {
        members.server_goroutine_text(PID, "1"): DUMP.encode(),
        members.server_profile(PID, "goroutine", "2"): _profile({"main.main;main.worker": 12, "main.main": 1},
                                                                 "goroutine", "count"),
        members.server_profile(PID, "mutex", "start"): _profile({"main.main;main.hot;sync.(*Mutex).Lock": 100},
                                                                 "contentions", "count"),
        members.server_profile(PID, "mutex", "end"): _profile({"main.main;main.hot;sync.(*Mutex).Lock": 900},
                                                               "contentions", "count"),
        members.server_profile(PID, "cpu", "window"): _profile({"main.main;main.hot": 50, "main.main;main.cold": 5},
                                                                "cpu", "nanoseconds"),
    }
    for n, (name, data) in enumerate(files.items()):
        (dst / name).write_bytes(data)
        kind = name.split("-")[2]
        index.append({"kind": kind, "pid": PID, "url": f"http://127.0.0.1:6060/debug/pprof/{kind}", "t0": t0 + n,
                      "t1": t0 + n + 0.1, "status": 200, "bytes": len(data), "content_type": "application/octet-stream",
                      "member": name, "error": None, "detail": None})
    index.append({"kind": "metrics", "pid": PID, "url": "http://127.0.0.1:6060/metrics", "t0": t0 + 8, "t1": t0 + 9,
                  "status": None, "bytes": 0, "content_type": None, "member": None, "error": "timeout",
                  "detail": "no answer in 1 s"})
    (dst / members.SERVER_STATUS).write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in index))
    (dst / members.SERVER_METRICS).write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in scrapes).encode()))
    c = dict(manifest["collectors"][0])
    c.update(name="server-status", files=[members.SERVER_STATUS, members.SERVER_METRICS, *files], reason=None,
             stats={"requests": len(index) - 1, "failed": 1}, status="ok")
    manifest["collectors"].append(c)
    (dst / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return dst


def make_cluster(dst: Path) -> Path:
    """A cluster bundle (DIR/cluster.json, DIR/nodes/<host>-<role>/, DIR/load.log) of two sample
    node bundles, as `profiler cluster run` leaves it."""
    from profiler.bundle.cluster import ClusterManifest, NodeRecord, Window, write_cluster_manifest

    nodes = []
    for host, role, src in (("10.0.0.1", "tikv", BASE), ("10.0.0.2", "tidb", SAMPLES / "io-fsync-fio")):
        name = f"{host}-{role}"
        shutil.copytree(src, dst / "nodes" / name)
        (dst / "nodes" / name / "report.html").unlink(missing_ok=True)
        nodes.append(NodeRecord(name=name, host=host, role=role, targets=[role], status="ok", dir=f"nodes/{name}",
                                started=1000.0, ended=1008.0, start_skew=0.01))
    (dst / "load.log").write_text("[ 1s ] thds: 4 tps: 100.00 qps: 2000.00 lat (ms,95%): 5.00 err/s: 0.00\n")
    write_cluster_manifest(dst, ClusterManifest(created="2026-01-01T00:00:00Z", status="ok", controller="ctl",
                                                window=Window(planned_start=1000.0, duration=8.0, ended=1008.0),
                                                nodes=nodes))
    return dst
