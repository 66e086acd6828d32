"""End to end: a real PD + TiKV + TiDB cluster from a TiUP topology, loaded, captured, compared (privileged).

Three namespaced hosts (tests/hosts.py, each its own sshd and PID namespace) run pd-server,
tikv-server and tidb-server as TiUP deploys them (tests/tidb.py) with the topology's
``server_configs``; sysbench loads TiDB from the root namespace; ``profiler cluster run
--topology`` captures the three in one window and ``profiler analyze`` compares them. Twice on
the same cluster, with the limit on a different tier each time (a cgroup CPU quota, so the cause
holds however busy the shared machine is): the verdict must name the tier the kernel throttled,
confirmed by the kernel's own counters (the quota's throttled periods) and not by the profiler.
Every node's server metrics are in the report, and the TiKV knobs beside the pools they size.

The binaries come from PD_SERVER, TIKV_SERVER, TIDB_SERVER (v8.5); without them the test is
skipped and says which is missing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from profiler.bundle.cluster import load_cluster
from tests import tidb
from tests.e2e.test_cluster_e2e import _cli, _ok_or_losses
from tests.hosts import HostLab, host_lab  # noqa: F401 - the fixture

pytestmark = [
    pytest.mark.privileged,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("sysbench") is None or shutil.which("mysql") is None,
                       reason="sysbench and the mysql client load and check TiDB"),
]

# seed 003's knobs, with sizes this machine can show: TiUP renders them into conf/tikv.toml
SERVER_CONFIGS = {
    "tikv": {"server.grpc-concurrency": 3, "readpool.unified.max-thread-count": 2,
             "raftdb.max-background-jobs": 2, "rocksdb.max-background-jobs": 3},
    "tidb": {"log.slow-threshold": 300},
}
TABLES, ROWS, THREADS = 4, 2000, 8


def _threads_named(pid: int, prefix: str) -> int:
    """Threads of a process whose name starts with ``prefix``, counted from /proc (not the profiler)."""
    n = 0
    for t in Path(f"/proc/{pid}/task").iterdir():
        try:
            n += (t / "comm").read_text().startswith(prefix)
        except OSError:
            pass
    return n


def _cpu_stat(cg: Path) -> dict[str, int]:
    return {k: int(v) for k, v in (ln.split() for ln in (cg / "cpu.stat").read_text().splitlines())}


class _Throttle:
    """The kernel's own account of a cgroup's CPU quota, sampled twice a second while a command runs:
    ``worst(window)`` is the largest share of its active periods throttled over any stretch of that
    length. ``cluster run`` spends tens of seconds reaching the hosts and starting their agents
    before its window, with the tier active (raft ticks, heartbeats) but unloaded: the load runs only
    in the window, so the whole command's ratio dilutes it, the window's does not."""

    def __init__(self, cg: Path) -> None:
        self.cg = cg
        self.samples: list[tuple[float, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            st = _cpu_stat(self.cg)
            self.samples.append((time.monotonic(), st["nr_periods"], st["nr_throttled"]))
            self._stop.wait(0.5)

    def __enter__(self) -> _Throttle:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def worst(self, window: float) -> float:
        best, s = 0.0, self.samples
        for i in range(len(s)):
            j = next((k for k in range(i, len(s)) if s[k][0] - s[i][0] >= window), None)
            if j is None:
                break
            periods = s[j][1] - s[i][1]
            if periods > 0:
                best = max(best, (s[j][2] - s[i][2]) / periods)
        return best


def _set_quota(cg: Path, cores: float | None) -> None:
    if (cg / "cpu.cfs_quota_us").exists():
        (cg / "cpu.cfs_quota_us").write_text("-1" if cores is None else str(int(cores * 100_000)))
    else:
        (cg / "cpu.max").write_text(f"{'max' if cores is None else int(cores * 100_000)} 100000")


def _sysbench(db: tidb.Instance, what: str, seconds: int = 600) -> list[str]:
    return ["sysbench", "oltp_point_select", f"--mysql-host={db.host.addr}", f"--mysql-port={db.port}",
            "--mysql-user=root", "--mysql-db=sbtest", f"--tables={TABLES}", f"--table-size={ROWS}",
            f"--threads={THREADS}", f"--time={seconds}", "--report-interval=1", what]


@pytest.mark.skipif(bool(tidb.missing()), reason=f"no TiDB binaries: set {', '.join(tidb.missing())}")
def test_tiup_cluster_of_real_servers_names_the_limiting_tier(host_lab: HostLab, tmp_path: Path) -> None:  # noqa: F811
    pd_h, kv_h, db_h = host_lab.add("pd1"), host_lab.add("kv1"), host_lab.add("db1")
    cluster = tidb.TidbCluster(SERVER_CONFIGS)
    pd, kv, db = cluster.add(pd_h, "pd"), cluster.add(kv_h, "tikv"), cluster.add(db_h, "tidb")
    t0 = time.monotonic()
    cluster.start()
    started = time.monotonic() - t0
    cluster.sql("create database if not exists sbtest")
    subprocess.run(_sysbench(db, "prepare"), check=True, capture_output=True, timeout=600)
    topo = tmp_path / "topology.yaml"
    topo.write_text(cluster.topology())
    assert kv.pid is not None and db.pid is not None and pd.pid is not None
    # the knob did what TiUP's config says, counted from /proc: TiKV's gRPC pool has 3 threads
    assert _threads_named(kv.pid, "grpc-server") == 3

    # each tier gets its own cgroup, unlimited; the one limited in a round gets a fifth of a core
    kv_h.limit_cpu(kv.pid, 8)
    db_h.limit_cpu(db.pid, 8)
    cgroups = {"tikv": host_lab.cgroups[-2], "tidb": host_lab.cgroups[-1]}
    figures = []
    for limited in ("tidb", "tikv"):
        for role, cg in cgroups.items():
            _set_quota(cg, 0.2 if role == limited else None)
        out = tmp_path / f"cap-{limited}"
        t1 = time.monotonic()
        with _Throttle(cgroups[limited]) as kernel:
            code, text = _cli(["cluster", "run", "--topology", str(topo), "--ssh-config", str(host_lab.ssh_config),
                               "-d", "15s", "-o", str(out), "--no-report", "--", *_sysbench(db, "run")])
        took = time.monotonic() - t1
        throttled = kernel.worst(10.0)  # most of the 15 s window: the load ran only there
        assert code in (0, 130, 143), text
        m = load_cluster(out)
        assert {n.role for n in m.nodes} == {"pd", "tikv", "tidb"}
        for n in m.nodes:
            assert _ok_or_losses(n.status, n.reason), (n.name, n.reason)
        t2 = time.monotonic()
        code, text = _cli(["analyze", str(out)])
        analyzed = time.monotonic() - t2
        assert code == 0, text
        code, js = _cli(["report", str(out), "--format", "json"])
        rep = json.loads(js)
        nodes = {n["role"]: n for n in rep["nodes"]}
        figures.append(f"{limited} limited: cluster run {took:.1f}s, analyze {analyzed:.1f}s, "
                       f"throttled {throttled:.0%} of periods; verdicts " +
                       ", ".join(f"{r}={nodes[r]['verdict']['category']}" for r in ("pd", "tikv", "tidb")))

        # the kernel's account first: the limited tier was held by its quota
        assert throttled >= 0.3, (limited, throttled)
        v = nodes[limited]["verdict"]
        assert v["category"] == "cpu" and "quota" in v["headline"], v["headline"]
        assert rep["verdict"]["limiting_tier"] == limited, rep["verdict"]
        assert nodes["pd"]["verdict"]["category"] == "not_saturated", nodes["pd"]["verdict"]["headline"]
        if limited == "tidb":  # TiKV serves what a fifth of a TiDB core sends it: far from its limits
            assert nodes["tikv"]["verdict"]["category"] == "not_saturated", nodes["tikv"]["verdict"]["headline"]
        # every node's own server metrics, from its own status port
        for role in ("pd", "tikv", "tidb"):
            servers = {r["server"] for r in nodes[role]["server"]}
            assert role in servers, (role, nodes[role]["server"][:3])
        html = (out / "report.html").read_text()
        assert 'id="server-metrics"' in html and 'id="knobs"' in html
        # the topology's knobs beside the pools they size, as the capture measured them
        knobs = {k["knob"]: k for k in nodes["tikv"]["knobs"]}
        grpc = knobs["server.grpc-concurrency"]
        assert grpc["value"] == 3 and [p["pool"] for p in grpc["pools"]] == ["grpc-server"]
        assert grpc["pools"][0]["threads"] == 3
        assert "rocksdb:low" in knobs["rocksdb.max-background-jobs"]["sizes"]
        assert knobs["raftdb.max-background-jobs"]["value"] == 2
    print(f"\ncluster of real servers started in {started:.0f}s; " + "; ".join(figures))


@pytest.mark.skipif(bool(tidb.missing(("pd", "tidb"))), reason=f"no PD/TiDB binaries: set {', '.join(tidb.missing(('pd', 'tidb')))}")
def test_real_pd_and_tidb_give_their_server_metrics_and_knobs(host_lab: HostLab, tmp_path: Path) -> None:  # noqa: F811
    """Real pd-server and tidb-server (TiDB on its embedded store: no TiKV needed) from a TiUP-style
    topology: each node's own status port answers over its host's address (a node's bare python3
    has no psutil), the loaded TiDB under a fifth of a core is the limiting tier, PD is idle, and
    TiDB's knobs from server_configs are in the report."""
    pd_h, db_h = host_lab.add("pd1"), host_lab.add("db1")
    cluster = tidb.TidbCluster({"tidb": {"performance.max-procs": 2, "log.slow-threshold": 300}})
    cluster.add(pd_h, "pd")
    db = cluster.add(db_h, "tidb")
    t0 = time.monotonic()
    cluster.start()
    started = time.monotonic() - t0
    cluster.sql("create database if not exists sbtest")
    subprocess.run(_sysbench(db, "prepare"), check=True, capture_output=True, timeout=600)
    topo = tmp_path / "topology.yaml"
    topo.write_text(cluster.topology())
    assert db.pid is not None
    db_h.limit_cpu(db.pid, 0.2)
    before = _cpu_stat(host_lab.cgroups[-1])
    out = tmp_path / "cap"
    t1 = time.monotonic()
    code, text = _cli(["cluster", "run", "--topology", str(topo), "--ssh-config", str(host_lab.ssh_config),
                       "-d", "10s", "-o", str(out), "--no-report", "--", *_sysbench(db, "run")])
    took = time.monotonic() - t1
    after = _cpu_stat(host_lab.cgroups[-1])
    assert code in (0, 130, 143), text
    for n in load_cluster(out).nodes:
        assert _ok_or_losses(n.status, n.reason), (n.name, n.reason)
    throttled = (after["nr_throttled"] - before["nr_throttled"]) / max(1, after["nr_periods"] - before["nr_periods"])
    assert throttled >= 0.3, throttled  # the kernel's account: TiDB was held by its quota
    code, js = _cli(["report", str(out), "--format", "json"])
    rep = json.loads(js)
    nodes = {n["role"]: n for n in rep["nodes"]}
    assert rep["verdict"]["limiting_tier"] == "tidb", rep["verdict"]
    assert nodes["tidb"]["verdict"]["category"] == "cpu" and "quota" in nodes["tidb"]["verdict"]["headline"]
    assert nodes["pd"]["verdict"]["category"] == "not_saturated", nodes["pd"]["verdict"]["headline"]
    for role in ("pd", "tidb"):
        assert role in {r["server"] for r in nodes[role]["server"]}, (role, nodes[role]["server"][:3])
    qps = next(r for r in nodes["tidb"]["server"] if r["key"] == "tidb.qps")
    assert qps["value"] > 0
    knobs = {k["knob"]: k for k in nodes["tidb"]["knobs"]}
    assert knobs["performance.max-procs"]["value"] == 2 and knobs["performance.max-procs"]["note"]
    timings = {n.name: n.timings for n in load_cluster(out).nodes}
    print(f"\nPD and TiDB ready in {started:.0f}s; cluster run (10 s window) {took:.1f}s; TiDB throttled "
          f"{throttled:.0%} of periods; {qps['value']:.0f} queries/s; per node: {timings}")
