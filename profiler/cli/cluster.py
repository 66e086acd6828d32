"""`profiler cluster attach|run`: capture every node of a cluster over SSH in one window (CLI layer)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import typer

from profiler.capture import signals
from profiler.cli import _capture as shared
from profiler.cli._capture import make_options
from profiler.cli._common import parse_duration, parse_size
from profiler.errors import CaptureIncomplete, Interrupted, UsageError

HELP = """Capture a whole cluster in one window over SSH: every tidb, tikv and pd host, one report.

Hosts come from a TiUP topology file (--topology) or from repeated --host with the n-th
--role and --pid going with the n-th --host (one --role or --pid given once applies to all).
Each node needs python3 and perf; profiler itself is shipped over SSH when it is not
installed there, and removed afterwards. OpenSSH's client is used with your ~/.ssh/config
(or --ssh-config): host keys must already be known (no silent accept), keys or the agent
only. The bundle is `DIR/nodes/<host>-<role>/` (normal bundles) plus `DIR/cluster.json`;
`profiler analyze DIR` compares the nodes.
"""

ATTACH_HELP = HELP + """
**Examples**

    profiler cluster attach --topology topology.yaml -d 30s -o cap

    profiler cluster attach --host tidb@10.0.1.1 --host tidb@10.0.1.2 --role tikv --pid tikv-server -o cap

    profiler cluster attach --host 10.0.1.7 --role tidb --pid tidb-server --host 10.0.1.1 --role tikv --pid tikv-server --ssh-config ./ssh_config -o cap
"""

RUN_HELP = HELP + """
The load command runs here, starting with the window; the window ends when it exits.

**Examples**

    profiler cluster run --topology topology.yaml -o cap -- sysbench oltp_point_select --mysql-host=10.0.1.7 run
"""

app = typer.Typer(name="cluster", help=HELP, no_args_is_help=True, rich_markup_mode="markdown")

SHIP = ("auto", "always")


def _capture(topology: Path | None, hosts: list[str], roles: list[str], pids: list[str], duration: float | None,
             output: Path | None, force: bool, frequency: int, call_graph: str, interval: str,
             collectors: list[str] | None, ssh_config: Path | None, known_hosts: Path | None, identity: Path | None,
             connect_timeout: str, python: str, ship: str, max_node_size: str, no_report: bool,
             load: list[str] | None) -> int | None:
    from profiler.cluster import engine
    from profiler.cluster import topology as topo
    from profiler.cluster.node import ClusterOptions
    from profiler.cluster.ssh import SshOptions
    from profiler.usecases import cluster as cluster_report

    notes: list[str] = []
    if topology is not None:
        if hosts:
            raise UsageError("give --topology or --host, not both")
        nodes, notes = topo.load_topology(topology)
    else:
        nodes = topo.from_flags(list(hosts or []), list(roles or []), list(pids or []))
    for path, what in ((ssh_config, "--ssh-config"), (known_hosts, "--known-hosts"), (identity, "--identity")):
        if path is not None and not path.is_file():
            raise UsageError(f"{what} {path}: no such file")
    if ship not in SHIP:
        raise UsageError(f"--ship {ship!r}: use one of {', '.join(SHIP)}")
    options = make_options(duration, frequency, call_graph, interval, "perf")
    out = output or Path(time.strftime("profiler-cluster-%Y%m%d-%H%M%S"))
    opts = ClusterOptions(
        duration=duration,
        capture={"frequency": options.frequency, "call_graph": options.call_graph, "interval": options.interval,
                 "backend": "perf"},
        collectors=collectors or None,
        ssh=SshOptions(config=ssh_config, known_hosts=known_hosts, identity=identity,
                       connect_timeout=parse_duration(connect_timeout)),
        python=python, ship=ship, max_node_bytes=parse_size(max_node_size), load=load, force=force)
    for n in notes:
        typer.echo(f"profiler cluster: {n}", err=True)
    what = f"until {load[0]} exits" if load else (f"for {duration:g}s" if duration else "until Ctrl-C")
    typer.echo(f"profiler cluster: capturing {len(nodes)} nodes {what} into {out}/", err=True)
    m = engine.capture(nodes, out, opts, topology=str(topology) if topology else None)
    for rec in m.nodes:
        line = f"  {rec.name:<28} {rec.status:<11}"
        if rec.clock.offset is not None and rec.clock.uncertainty is not None:
            line += f" clock {rec.clock.offset * 1000:+.2f}±{rec.clock.uncertainty * 1000:.2f} ms"
        if rec.start_skew is not None:
            line += f" skew {rec.start_skew * 1000:.0f} ms"
        if rec.reason:
            line += f"  {rec.reason}"
        typer.echo(line)
    typer.echo(f"cluster bundle {out}/: {m.status}")
    if not no_report and any(r.dir for r in m.nodes):
        try:
            typer.echo(cluster_report.default_report(out), nl=False)
        except Exception as exc:  # noqa: BLE001 - the capture is kept; the report can be redone
            print(f"profiler: the report could not be written ({type(exc).__name__}: {exc}); "
                  f"the bundle is intact: run `profiler analyze {out}`", file=sys.stderr)
    if m.window.stop_reason.startswith("interrupted"):
        signum = next((int(s) for s in signals.STOP_SIGNALS if f"({signals.describe(s)})" in m.window.stop_reason), 2)
        raise Interrupted(f"{m.window.stop_reason}: the cluster bundle in {out}/ was kept, marked {m.status}", signum)
    if m.status == "failed":
        raise CaptureIncomplete(f"cluster capture failed: {m.reason}")
    code = m.load.exit_code if m.load is not None else None
    gone = [f"{r.name} {r.status}" for r in m.nodes if r.status not in ("ok", "partial")]
    if not code and gone:  # a node unreachable, lost or failed is a fault (the load's own failure comes first)
        raise CaptureIncomplete(f"the cluster capture is partial ({', '.join(gone)}): {out}/ keeps every node's "
                                "bundle that came back, and cluster.json says why")
    return code


_TOPOLOGY = typer.Option(None, "--topology", "-t", readable=False, help="A TiUP topology file (global user/ssh_port/deploy_dir, pd_servers, tidb_servers, tikv_servers, server_configs), or a TidbCluster with its pods (docs/kubernetes.md).")
_HOST = typer.Option(None, "--host", help="[USER@]HOST[:PORT] of one node; repeat for each.")
_ROLE = typer.Option(None, "--role", help="The node's role (tikv, tidb, pd, ...): one per --host, or one for all.")
_PID = typer.Option(None, "--pid", "-p", help="What to capture on the node (name or pid; comma-separated for several): one per --host, or one for all.")
_OUTPUT = typer.Option(None, "--output", "-o", help="Cluster bundle directory (default: profiler-cluster-YYYYmmdd-HHMMSS).")
_FORCE = shared.FORCE
_FREQ = shared.FREQUENCY
_CG = shared.CALL_GRAPH
_IV = shared.INTERVAL
_COLL = shared.COLLECTOR
_SSHCFG = typer.Option(None, "--ssh-config", help="An ssh_config file to use instead of ~/.ssh/config (ssh -F).")
_KNOWN = typer.Option(None, "--known-hosts", help="A known_hosts file with the nodes' host keys (UserKnownHostsFile).")
_IDENT = typer.Option(None, "--identity", "-i", help="A private key file (ssh -i); its passphrase, if any, must be in your agent.")
_CTO = typer.Option("10s", "--connect-timeout", help="How long to wait for each SSH connection.")
_PY = typer.Option("python3", "--python", help="The Python interpreter on the nodes.")
_SHIP = typer.Option("auto", "--ship", help="auto: ship the capture code unless the same profiler is installed on the node; always.")
_MAXN = typer.Option("4G", "--max-node-size", help="Refuse to pull back more than this from one node.")
_NOREP = shared.NO_REPORT


@app.command("attach", help=ATTACH_HELP, short_help="Capture every node for a duration (or until Ctrl-C).")
def attach(
    topology: Path = _TOPOLOGY, host: list[str] = _HOST, role: list[str] = _ROLE, pid: list[str] = _PID,
    duration: str = shared.DURATION,
    output: Path = _OUTPUT, force: bool = _FORCE, frequency: int = _FREQ, call_graph: str = _CG, interval: str = _IV,
    collector: list[str] = _COLL, ssh_config: Path = _SSHCFG, known_hosts: Path = _KNOWN, identity: Path = _IDENT,
    connect_timeout: str = _CTO, python: str = _PY, ship: str = _SHIP, max_node_size: str = _MAXN, no_report: bool = _NOREP,
) -> None:
    if topology is None and (not role or not pid):
        raise UsageError("with --host, give --role and --pid too (or use --topology)")
    _capture(topology, host, role or [], pid or [], parse_duration(duration), output, force, frequency, call_graph,
             interval, collector, ssh_config, known_hosts, identity, connect_timeout, python, ship, max_node_size,
             no_report, None)


@app.command("run", help=RUN_HELP, short_help="Capture every node while a load command runs here.", context_settings={"allow_interspersed_args": False})
def run(
    load: list[str] = typer.Argument(None, help="The load command, after --."),
    topology: Path = _TOPOLOGY, host: list[str] = _HOST, role: list[str] = _ROLE, pid: list[str] = _PID,
    duration: str = shared.DURATION_AT_MOST,
    output: Path = _OUTPUT, force: bool = _FORCE, frequency: int = _FREQ, call_graph: str = _CG, interval: str = _IV,
    collector: list[str] = _COLL, ssh_config: Path = _SSHCFG, known_hosts: Path = _KNOWN, identity: Path = _IDENT,
    connect_timeout: str = _CTO, python: str = _PY, ship: str = _SHIP, max_node_size: str = _MAXN, no_report: bool = _NOREP,
) -> None:
    if not load:
        raise UsageError("no load command: put it after --, e.g. profiler cluster run --topology t.yaml -o cap -- sysbench ... run")
    if topology is None and (not role or not pid):
        raise UsageError("with --host, give --role and --pid too (or use --topology)")
    code = _capture(topology, host, role or [], pid or [], parse_duration(duration) if duration else None, output,
                    force, frequency, call_graph, interval, collector, ssh_config, known_hosts, identity,
                    connect_timeout, python, ship, max_node_size, no_report, list(load))
    if code:
        raise typer.Exit(code)


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="cluster")
