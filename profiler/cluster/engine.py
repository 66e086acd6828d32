"""The cluster capture (cluster layer): every node in one window over SSH, pulled back into one cluster bundle.

For each node, in parallel, its ``Node`` (node.py) is prepared: SSH master connection, probe,
private work directory, the agent (shipped as a zipapp when needed), its clock offset. Then one
instant is agreed (controller clock + a lead) and each node is told it in its own clock;
every agent waits for it and runs a normal capture session. The window ends by duration,
when the load command exits (``cluster run``), or on Ctrl-C (every node is told to stop).
Then each node's bundle is pulled back (``pull.py``), its work directory removed and its
connection closed. A node that cannot be reached, fails, or drops its connection does not
stop the others: the cluster bundle says, per node, what happened.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TextIO

from profiler.bundle.cluster import (
    FAILED,
    LOAD_LOG,
    NODES_DIR,
    OK,
    PARTIAL,
    ClusterLoad,
    ClusterManifest,
    NodeRecord,
    Window,
    write_cluster_manifest,
)
from profiler.bundle.overwrite import CLUSTER, prepare_output_dir
from profiler.capture import signals
from profiler.cluster import zipapp
from profiler.cluster.node import ClusterOptions, Node
from profiler.cluster.topology import NodeSpec
from profiler.errors import ProfilerError
from profiler.files import create_growing


class ClusterCapture:
    """One cluster capture; ``run()`` returns the finished cluster manifest (even on Ctrl-C)."""

    def __init__(self, nodes: list[NodeSpec], out: Path, opts: ClusterOptions, *,
                 progress: TextIO | None = None, topology: str | None = None) -> None:
        if not nodes:
            raise ProfilerError("no node to capture")
        self.specs = nodes
        self.out = Path(out)
        self.opts = opts
        self.progress = progress if progress is not None else sys.stderr
        self.topology = topology
        self._sigint = False  # Ctrl-C, SIGTERM or SIGHUP arrived (profiler/capture/signals.py) ...
        self._signum: int = signal.SIGINT  # ... this one
        self._pyz: bytes | None = None
        self._pyz_lock = threading.Lock()
        self.nodes: list[Node] = []
        self.manifest = ClusterManifest()

    def log(self, line: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.progress.write(f"profiler cluster: {line}\n")
            self.progress.flush()

    def pyz(self) -> bytes:
        with self._pyz_lock:
            if self._pyz is None:
                self._pyz = zipapp.build()
            return self._pyz

    def _on_sigint(self, signum: int) -> None:
        if not self._sigint:
            self._sigint, self._signum = True, signum

    def _interrupted(self) -> str:
        return f"interrupted ({signals.describe(self._signum)})"

    def _open_output(self) -> None:
        out = self.out
        prepare_output_dir(out, self.opts.force, CLUSTER)  # --force: only an earlier capture's own files go
        out.mkdir(parents=True, exist_ok=True)
        (out / NODES_DIR).mkdir(exist_ok=True)

    def save(self) -> None:
        with contextlib.suppress(OSError):
            write_cluster_manifest(self.out, self.manifest)

    def run(self) -> ClusterManifest:
        self._open_output()
        m = self.manifest
        m.created = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        m.controller = socket.gethostname()
        m.topology = self.topology
        m.window = Window(duration=self.opts.duration)
        m.options = {"capture": dict(self.opts.capture), "collectors": self.opts.collectors,
                     "lead": self.opts.lead, "ship": self.opts.ship}
        control = Path(tempfile.mkdtemp(prefix="pcl-", dir="/tmp"))
        for spec in self.specs:
            rec = NodeRecord(name=spec.name, host=spec.host, role=spec.role, port=spec.port, user=spec.user,
                             targets=[t.query for t in spec.targets])
            m.nodes.append(rec)
            self.nodes.append(Node(spec, rec, self.opts, control, self.log, self.pyz))
        self.save()
        try:
            with signals.catch(self._on_sigint):
                self._run_phases()
        finally:
            with contextlib.suppress(OSError):
                for p in control.iterdir():
                    p.unlink()
                control.rmdir()
        return m

    def _run_phases(self) -> None:
        m = self.manifest
        load_proc: subprocess.Popen[bytes] | None = None
        # One long-lived thread per node runs every step of that node: the ssh processes it starts
        # carry a parent-death signal, which the kernel sends when the *thread* that made them ends.
        workers = {n.rec.name: ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"node-{n.rec.name}")
                   for n in self.nodes}
        try:
            for f in [workers[n.rec.name].submit(n.prepare) for n in self.nodes]:
                f.result()
            self.save()
            ready = [n for n in self.nodes if n.ready]
            if ready and not self._sigint:
                worst = max((n.rec.clock.rtt or 0.0) for n in ready)
                planned = time.time() + max(self.opts.lead, 5 * worst)
                m.window.planned_start = planned
                # a window bounded by the load: the nodes capture until told to stop
                duration = None if self.opts.load else self.opts.duration
                for n in ready:
                    n.start(planned, duration)
                self.log(f"{len(ready)} of {len(self.nodes)} nodes ready; the window opens in "
                         f"{planned - time.time():.2f}s" + (f" for {self.opts.duration:g}s" if duration else ""))
                if self.opts.load:
                    load_proc = self._start_load(planned)
                m.window.stop_reason = self._wait(ready, planned, load_proc)
            elif self._sigint:
                m.window.stop_reason = self._interrupted()
            else:
                m.window.stop_reason = "no node could be prepared"
        finally:
            if load_proc is not None:
                self._stop_load(load_proc)
            m.window.ended = time.time()
            futures = [workers[n.rec.name].submit(self._finish_node, n) for n in self.nodes]
            for f in futures:
                with contextlib.suppress(Exception):
                    f.result()
            for w in workers.values():
                w.shutdown(wait=True)
            self._conclude()
            self.save()

    def _finish_node(self, n: Node) -> None:
        try:
            if n.ready:
                n.finish(self.out)
            else:
                n.cleanup()
        except Exception as exc:  # noqa: BLE001 - one node's failure must not lose the others
            n.rec.status = FAILED
            n.rec.reason = f"internal error while finishing: {type(exc).__name__}: {exc}"
            with contextlib.suppress(Exception):
                n.teardown_agent()
                n.ssh.close()

    def _wait(self, ready: list[Node], planned: float, load: subprocess.Popen[bytes] | None) -> str:
        dur = self.opts.duration
        # a node that neither finishes nor drops by then is told to stop, then given up
        hard = planned + (dur if dur is not None else 10**9) + 60.0
        stopped_at: float | None = None
        reason = ""
        while True:
            for n in ready:
                n.poll()
            now = time.time()
            if all(n.finished for n in ready):
                return reason or ("duration reached" if dur is not None else "every node ended")
            if self._sigint and stopped_at is None:
                reason = self._interrupted()
                stopped_at = self._stop_all(ready, f"interrupted: {signals.describe(self._signum)} at the controller",
                                            partial=True)
            if load is not None and stopped_at is None and load.poll() is not None:
                reason = "the load command exited"
                stopped_at = self._stop_all(ready, "the load command exited")
            if load is not None and stopped_at is None and dur is not None and now >= planned + dur:
                reason = "duration reached"
                stopped_at = self._stop_all(ready, "duration reached")
            if stopped_at is None and now >= hard:
                reason = "some nodes did not finish in time"
                stopped_at = self._stop_all(ready, "the controller's deadline passed", partial=True)
            if stopped_at is not None and now - stopped_at > 60:
                return reason + "; some nodes did not answer the stop"
            time.sleep(0.1)

    def _stop_all(self, ready: list[Node], why: str, partial: bool = False) -> float:
        self.log(f"stopping every node: {why}")
        for n in ready:
            if not n.finished:
                n.send(op="stop", reason=why, partial=partial)
        return time.time()

    # ------------------------------------------------------------------ load
    def _start_load(self, planned: float) -> subprocess.Popen[bytes] | None:
        assert self.opts.load
        m = self.manifest
        m.load = ClusterLoad(argv=list(self.opts.load), log=LOAD_LOG)
        while time.time() < planned and not self._sigint:
            time.sleep(min(0.05, max(0.0, planned - time.time())))
        log = create_growing(self.out / LOAD_LOG, self.out)  # handed to the child
        try:
            proc = subprocess.Popen(list(self.opts.load), stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
        except OSError as exc:
            log.write(f"profiler: cannot start {self.opts.load[0]}: {exc.strerror or exc}\n".encode())
            m.load.exit_code = 127
            return None
        finally:
            log.close()
        m.load.started = time.time()
        return proc

    def _stop_load(self, proc: subprocess.Popen[bytes]) -> None:
        assert self.manifest.load is not None
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        rc = proc.returncode
        self.manifest.load.exit_code = rc if rc >= 0 else 128 - rc
        self.manifest.load.ended = time.time()

    # ------------------------------------------------------------------ the verdict on the capture
    def _conclude(self) -> None:
        m = self.manifest
        planned = m.window.planned_start
        for rec in m.nodes:
            if planned is not None and rec.started is not None:
                rec.start_skew = round(rec.started - planned, 6)
        with_bundle = [r for r in m.nodes if r.dir is not None]
        bad = [r for r in m.nodes if r.status != OK]
        if not with_bundle:
            m.status = FAILED
        elif bad or self._sigint:
            m.status = PARTIAL
        else:
            m.status = OK
        reasons = [f"{r.name}: {r.status}" + (f" ({r.reason})" if r.reason else "") for r in bad]
        if self._sigint:
            reasons.insert(0, self._interrupted())
        m.reason = "; ".join(reasons) or None


def capture(nodes: list[NodeSpec], out: Path, opts: ClusterOptions, *, progress: TextIO | None = None,
            topology: str | None = None) -> ClusterManifest:
    return ClusterCapture(nodes, out, opts, progress=progress, topology=topology).run()
