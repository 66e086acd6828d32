"""Request time in the verdict (issue 29): the servers' own histograms and goroutines, beside the OS view.

Recorded bundles of real servers (samples/, each README line says what ran and how the label was
confirmed) check the rules end to end; the goroutine table is checked on the frames the servers'
own code has at the versions users run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from profiler.analyzers.analysis import analyze
from profiler.analyzers.server import goroutines as G
from profiler.analyzers.server.requests import request_time
from profiler.analyzers.verdict.findings import PRIMARY

from profiler.bundle import Bundle
from profiler.knowledge import goroutines as kg
from profiler.knowledge import requests as kr

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


def _verdict(name: str):  # type: ignore[no-untyped-def]
    a = analyze(Bundle.open(SAMPLES / name))
    (v,) = a.verdict.per_target
    (t,) = a.metrics.targets
    return a, v, t


def test_a_wal_syncing_most_of_the_window_is_io_wait_by_the_servers_own_histogram() -> None:
    a, v, t = _verdict("etcd-wal-fsync-busy-server-metrics")
    assert v.category == "io_wait"
    f = next(f for f in v.findings if f.rule == "request_io_wait")
    assert f.score >= PRIMARY and "WAL fsync in progress" in f.sub_cause
    row = next(e for e in f.evidence if e.metric == "etcd.wal_fsync.busy")
    assert row.crossed and row.threshold == 0.5 and row.panel == "etcd > Disk > WAL fsync duration"
    assert row.value is not None and 0.6 < row.value <= 1.0
    p99 = next(e for e in f.evidence if e.metric == "etcd.wal_fsync.p99")
    assert p99.value is not None and p99.value > 0.05 and p99.unit == "s"


def test_a_cpu_starved_servers_timings_are_not_read_as_slow_disk() -> None:
    # etcd under a 0.2-core quota: its histogram says the WAL syncs 60% of the window (CPU waits timed in)
    a, v, t = _verdict("etcd-cpu-quota-inflated-wal-timings")
    rt = t.server.requests
    assert rt is not None and rt.server == "etcd"
    wal = rt.phase("etcd.wal_fsync")
    assert wal is not None and wal.serial and wal.waiting > 0.4
    assert v.category == "cpu" and "quota" in v.primary.sub_cause
    assert v.runner_up is None
    assert all(f.rule != "request_io_wait" or f.score < 0.1 for f in v.findings)


def test_etcd_writes_waiting_for_raft_are_named_by_their_own_frames() -> None:
    a, v, t = _verdict("etcd-cpu-quota-inflated-wal-timings")
    ev = t.server
    assert ev.by_kind.get(G.COMMIT, 0) >= 1
    site = next(s for k, s, n in ev.top_sites if k == G.COMMIT)
    assert "processInternalRaftRequestOnce" in site and site.startswith("select: ")  # the runtime state, a detail


def test_request_time_needs_two_scrapes_and_a_known_server() -> None:
    assert request_time(None, []) is None
    assert request_time("etcd", []) is None
    assert {p.server for p in kr.for_server("pd")} == {"etcd"}  # PD embeds etcd: its WAL and backend


# ----------------------------------------------------------------------------- goroutines by their own frames

# Stacks as the servers' goroutine profiles show them (leaf first), from TiDB v8.5.3, client-go and PD's client.
UNISTORE_LOCK = ["runtime.gopark", "runtime.selectgo",
                 "github.com/pingcap/tidb/pkg/store/mockstore/unistore/util/lockwaiter.(*Waiter).Wait",
                 "github.com/pingcap/tidb/pkg/store/mockstore/unistore/tikv.(*Server).KvPessimisticLock",
                 "github.com/pingcap/tidb/pkg/store/mockstore/unistore.(*RPCClient).SendRequest"]
TIKV_RPC = ["runtime.gopark", "runtime.selectgo", "github.com/tikv/client-go/v2/internal/client.sendBatchRequest",
            "github.com/tikv/client-go/v2/internal/client.(*RPCClient).sendRequest",
            "github.com/tikv/client-go/v2/internal/client.(*RPCClient).SendRequest"]
TOKEN = ["runtime.gopark", "runtime.chanrecv", "runtime.chanrecv1", "github.com/pingcap/tidb/pkg/util.(*TokenLimiter).Get",
         "github.com/pingcap/tidb/pkg/server.(*Server).getToken", "github.com/pingcap/tidb/pkg/server.(*clientConn).Run"]
LATCH = ["runtime.gopark", "runtime.semacquire1", "sync.runtime_SemacquireWaitGroup", "sync.(*WaitGroup).Wait",
         "github.com/pingcap/tidb/pkg/store/mockstore/unistore/tikv.(*latches).acquireOne"]
IDLE_WORKER = ["runtime.gopark", "runtime.selectgo", "github.com/pingcap/tidb/pkg/ddl.(*ddl).workerLoop"]


@pytest.mark.parametrize(("frames", "kind", "op_tail"), [
    (UNISTORE_LOCK, G.LOCK, "lockwaiter.(*Waiter).Wait"),
    (TIKV_RPC, G.RPC, "client.sendBatchRequest"),
    (TOKEN, G.QUEUE, "util.(*TokenLimiter).Get"),
    (LATCH, G.LOCK, "tikv.(*latches).acquireOne"),
    (IDLE_WORKER, G.SELECT, "runtime.selectgo"),
])
def test_a_goroutine_is_classified_by_the_programs_frames_above_the_runtime(frames: list[str], kind: str,
                                                                           op_tail: str) -> None:
    state, got, op, caller = G.classify(frames)
    assert got == kind and op.endswith(op_tail)
    # the runtime's state stays what the runtime says (a detail of the report)
    assert state in ("select", "chan receive", "sync.WaitGroup.Wait")


def test_a_running_goroutine_is_not_named_by_the_wait_table() -> None:
    # a session encoding its request (on CPU) under sendRequest is running, not waiting for TiKV
    state, kind, _op, _caller = G.classify(["github.com/gogo/protobuf/proto.Marshal", *TIKV_RPC[3:]])
    assert kind == G.RUN


def test_frame_patterns_hold_across_import_path_changes() -> None:
    old = "github.com/pingcap/tidb/store/mockstore/unistore/util/lockwaiter.(*Waiter).Wait"  # before pkg/
    assert kg.match_frame(old) is kg.BY_KEY["unistore-lock-waiter"]
    assert kg.match_frame("go.etcd.io/etcd/server/v3/etcdserver.(*EtcdServer).processInternalRaftRequestOnce") \
        is kg.BY_KEY["etcd-raft-commit"]
    assert kg.match_frame("github.com/tikv/client-go/v2/config/retry.newBackoffFn.func1") is kg.BY_KEY["client-go-backoff"]
    assert kg.match_frame("example.com/x/lockwaiterx.(*Waiter).Wait") is None


# ----------------------------------------------------------------------------- container limits


def test_an_affinity_pin_of_a_cpu_bound_process_is_its_sub_cause() -> None:
    # two stress-ng workers pinned with taskset -c 0 on the shared 2-CPU host (samples/README.md)
    a = analyze(Bundle.open(SAMPLES / "cpuset-pinned-stress-ng"))
    for t, v in zip(a.metrics.targets, a.verdict.per_target, strict=True):
        assert (t.limits.cpuset_cpus, t.limits.host_cpus, t.limits.pinned_by) == (1, 2, "affinity")
        assert v.category == "cpu"
        assert v.primary.sub_cause.startswith("pinned to CPU 0 by affinity: wants 1.00 core of the 1 it may use")


# ----------------------------------------------------------------------------- the docs render the tables

DOCS = Path(__file__).resolve().parents[2] / "docs" / "verdict.md"


def _rows(section: str) -> dict[str, str]:
    text = DOCS.read_text().split(section, 1)[1].split("\n## ", 1)[0]
    return {line.split("|")[1].strip().strip("`"): line for line in text.splitlines() if line.startswith("| `")}


def test_docs_list_every_request_phase_and_goroutine_wait() -> None:
    rows = _rows("## Request time")
    for p in kr.PHASES:
        assert p.key in rows and f"`{p.metric}`" in rows[p.key] and p.panel in rows[p.key], p.key
    for w in kg.GO_WAITS:
        assert w.key in rows and f"`{w.frames[0]}`" in rows[w.key], w.key
    thresholds = _rows("## Thresholds")
    from profiler.analyzers.verdict.findings import THRESHOLDS

    assert {k for k in THRESHOLDS if k.startswith(("req.", "cpu.host", "cpu.capture"))} <= set(thresholds)


# ----------------------------------------------------------------------------- real TiDB (v8.5.3, unistore)


def test_tidb_hot_rows_are_lock_contention_naming_the_waiter_and_citing_lock_keys() -> None:
    a, v, t = _verdict("tidb-unistore-pessimistic-hot-rows")
    assert v.category == "lock_contention" and v.primary.rule == "request_lock_wait"
    assert "lockwaiter.(*Waiter).Wait" in v.primary.sub_cause and "lock_keys" in v.primary.sub_cause
    rows = {e.metric: e for e in v.primary.evidence}
    assert rows["tidb.lock_keys.waiting"].crossed and rows["tidb.lock_keys.share"].crossed
    p99 = rows["tidb.lock_keys.p99"]
    assert p99.value is not None and p99.value > 0.1 and p99.panel == "TiDB > KV Duration > KV Cmd Duration 99 (lock_keys)"
    assert t.server.app_lock_waits >= 16 and not t.server.rpc_by_tier  # the waits are unistore's own
    assert v.primary.tier is None


def test_tidb_sessions_queueing_for_tokens_are_named_as_such() -> None:
    a, v, t = _verdict("tidb-unistore-token-limit-queue")
    assert v.category == "lock_contention" and v.primary.rule == "request_queue_wait"
    assert "token" in v.primary.sub_cause.lower() and "(*TokenLimiter).Get" in v.primary.sub_cause
    assert "token-limit" in v.primary.recommendation


def test_tidb_idle_with_its_background_work_is_not_saturated() -> None:
    a, v, t = _verdict("tidb-unistore-idle")
    assert v.category == "not_saturated"
    assert all(f.score < 0.35 for f in v.findings if f.category != "not_saturated")


# ----------------------------------------------------------------------------- across tiers


def _v(label: str, category: str, score: float, tier: str | None = None):  # type: ignore[no-untyped-def]
    from profiler.analyzers.verdict.findings import Finding, Verdict

    f = Finding(category, "r", score, category, f"{label}: {category}", [], "", label, tier=tier)
    return Verdict(category, score, f"{label} headline", f, [], [f], 0.9, "high", [], label)


def test_a_symptom_at_tidb_gives_the_capture_to_the_tikv_target_it_points_at() -> None:
    from profiler.analyzers.verdict import ranking
    from profiler.analyzers.verdict.model import Metrics, TargetMetrics

    tidb = TargetMetrics.from_flat(pid=1, comm="tidb-server", kind="tidb")
    tikv = TargetMetrics.from_flat(pid=2, comm="tikv-server", kind="tikv")
    m = Metrics(window=10, t0=0, targets=[tidb, tikv], system=None, io=None, sources={}, missing=[],
                unsupported_counters=[], warnings=[])
    at_tidb = _v(tidb.label, "lock_contention", 1.0, tier="tikv")
    at_tikv = _v(tikv.label, "lock_contention", 0.8)
    v = ranking.served_by_peer(at_tidb, [at_tidb, at_tikv], m)
    assert v is not None and v.target == tikv.label and "what tidb-server (pid 1) waits on" in v.headline
    # no peer of that tier with the same cause: the symptom's own verdict stands
    assert ranking.served_by_peer(at_tidb, [at_tidb, _v(tikv.label, "cpu", 0.9)], m) is None
    assert ranking.served_by_peer(at_tikv, [at_tidb, at_tikv], m) is None


def test_the_cluster_verdict_follows_a_tier_pointer_to_the_tier_it_names() -> None:
    from profiler.analyzers.verdict import cluster as C

    def node(name: str, role: str, v):  # type: ignore[no-untyped-def]
        return C.NodeResult(name, "h", role, "ok", None, [], v, {}, None, None, None, None)

    nodes = [node("tidb-1", "tidb", _v("tidb-server (pid 1)", "lock_contention", 1.0, tier="tikv")),
             node("tikv-1", "tikv", _v("tikv-server (pid 2)", "lock_contention", 0.8))]
    roles = [C.RoleResult("tidb", ["tidb-1"], ["tidb-1"], ["tidb-1"], 1.0, "lock_contention", None),
             C.RoleResult("tikv", ["tikv-1"], ["tikv-1"], ["tikv-1"], 0.8, "lock_contention", None)]
    cv = C._cluster_verdict(nodes, roles, [])
    assert cv.limiting_tier == "tikv" and cv.limiting_node == "tikv-1" and cv.category == "lock_contention"
    assert any(r.startswith("tidb-1 (tidb) points at the tikv tier") for r in cv.reasons)


def test_the_clients_own_latency_and_threads_join_the_servers_request_time() -> None:
    a, v, t = _verdict("tidb-unistore-client-rate-limited-run")
    c = a.metrics.client
    assert c is not None and c.tool == "sysbench" and c.threads == 8 and c.latency_key == "p95"
    assert c.latency_ms is not None and c.latency_ms > 0
    assert v.category == "not_saturated"
    rows = {e.metric: e for e in v.primary.evidence}
    inside = rows["client_threads_inside"].value
    assert inside is not None and inside < 0.2  # the rate limiter, not the server, holds the client's threads
    assert "of sysbench's 8 threads" in v.primary.sub_cause


def test_a_tidb_on_tikv_gives_its_lock_waits_to_the_tikv_tier_by_its_command_line() -> None:
    from dataclasses import replace

    from profiler.analyzers.verdict.rules_requests import rule_request_locks

    from profiler.knowledge import tidb_store

    # the command lines our scenarios and the TiDB notes start tidb-server with
    assert tidb_store(["tidb-server", "-store", "tikv", "-path", "127.0.0.1:2379"]) == "tikv"
    assert tidb_store(["tidb-server", "--store=tikv", "--path=127.0.0.1:2379"]) == "tikv"
    assert tidb_store(["tidb-server", "-store", "unistore", "-path", "/tmp/u"]) == "unistore"
    assert tidb_store(["tidb-server", "-config", "tidb.toml"]) is None and tidb_store([]) is None
    # the real unistore capture: read from its manifest, its lock waits are its own
    a, v, t = _verdict("tidb-unistore-pessimistic-hot-rows")
    assert t.server.storage == "unistore" and v.primary.tier is None
    # the same evidence from a tidb-server on TiKV: the locks are held in the tikv tier, whatever
    # the goroutine snapshots show (here unistore's waiters)
    on_tikv = replace(t, server=replace(t.server, storage="tikv"))
    f = rule_request_locks(on_tikv, a.metrics)
    assert f is not None and f.tier == "tikv" and "the locks are held in the tikv tier" in f.sub_cause


def test_the_runtimes_gc_cpu_stretched_by_a_starved_pause_is_not_read_as_the_gc_using_the_cpu() -> None:
    # real capture beside a CPU burner (samples/bcc/tidb-idle-gc-pause-starved/README.md): one GC
    # whose stop-the-world pause lasted 1.36 s; the runtime's GC "CPU" is that pause x GOMAXPROCS
    import gzip
    import json

    from tests.workloads.goservers import prometheus_sums

    bundle = SAMPLES / "bcc" / "tidb-idle-gc-pause-starved"
    names = ("go_cpu_classes_gc_total_cpu_seconds_total", "process_cpu_seconds_total", "go_gc_duration_seconds_sum")
    with gzip.open(bundle / "server-metrics.jsonl.gz", "rt") as f:
        scrapes = [prometheus_sums(json.loads(line)["body"], names) for line in f]
    gc, cpu, pause = (scrapes[-1][n] - scrapes[0][n] for n in names)
    assert pause > 1.0 and gc > 5 * cpu  # the server's own figures, read here without the profiler
    a = analyze(Bundle.open(bundle))
    (v,) = a.verdict.per_target
    (t,) = a.metrics.targets
    assert v.category == "not_saturated"
    assert t.server.gc_cpu_share is None or t.server.gc_cpu_share < 0.25
    assert "runtime metrics discarded" in t.server.gc_cpu_source
    mem = next(f for f in v.findings if f.category == "memory")
    assert mem.score < 0.35
