"""One node's side of a cluster capture (cluster layer), and the options every node runs with.

A ``Node`` is driven by the controller (engine.py) in phases: ``prepare`` opens the SSH master
connection, probes python3/perf/profiler, makes a private work directory, ships the agent
zipapp when profiler is not installed there (same version), starts the agent and measures the
clock offset over its channel; ``start`` tells it the agreed instant in its own clock; ``poll``
reads its events; ``finish`` stops it and pulls its bundle back (``pull.py``); ``cleanup``
removes the work directory and closes the connection. Every failure is kept in the node's
record, never raised past the controller.
"""

from __future__ import annotations

import contextlib
import json
import queue
import re
import shlex
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profiler import __version__
from profiler.bundle import Bundle
from profiler.bundle.cluster import (
    FAILED,
    LOST,
    NODES_DIR,
    OK,
    PARTIAL,
    UNREACHABLE,
    NodeRecord,
)
from profiler.cluster import clock, pull
from profiler.cluster.ssh import SshError, SshHost, SshOptions, stop_process
from profiler.cluster.topology import NodeSpec
from profiler.errors import BundleError

PINGS = 8
WORKDIR_RE = re.compile(r"^/[A-Za-z0-9._/-]*/profiler-cluster\.[A-Za-z0-9]{6,}$")
_PROBE = (
    "import json, os, shutil, sys, tempfile\n"
    "v = None\n"
    "try:\n"
    "    import profiler, profiler.cluster.agent\n"
    "    v = profiler.__version__\n"
    "except Exception:\n"
    "    pass\n"
    "try:\n"
    "    import psutil\n"
    "    ps = True\n"
    "except Exception:\n"
    "    ps = False\n"
    "print(json.dumps({'python': sys.version.split()[0], 'profiler': v, 'psutil': ps,\n"
    "                  'perf': shutil.which('perf'), 'uid': os.getuid()}))\n"
)


@dataclass
class ClusterOptions:
    duration: float | None = 30.0
    capture: dict[str, Any] = field(default_factory=dict)  # frequency, call_graph, interval, backend, keep_perf_data
    collectors: list[str] | None = None
    ssh: SshOptions = field(default_factory=SshOptions)
    python: str = "python3"
    lead: float = 1.0  # seconds from the go to the window's start, at least
    max_node_bytes: int = 4 << 30
    max_file_bytes: int = 2 << 30
    load: list[str] | None = None
    force: bool = False
    ship: str = "auto"  # auto: ship the zipapp unless the same profiler is installed; always


class Node:
    """One node's side of the capture, driven by the controller in phases."""

    def __init__(self, spec: NodeSpec, rec: NodeRecord, opts: ClusterOptions, control_dir: Path,
                 log: Callable[[str], None], pyz: Callable[[], bytes]) -> None:
        self.spec = spec
        self.rec = rec
        self.opts = opts
        self.log = log
        self.pyz = pyz
        self.ssh = SshHost(spec.host, user=spec.user, port=spec.port, options=opts.ssh,
                           control_dir=control_dir, key=spec.name)
        self.workdir: str | None = None
        self.agent_cmd: list[str] = []
        self.chan: subprocess.Popen[bytes] | None = None
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.chan_err = b""
        self.ready = False
        self.done: dict[str, Any] | None = None
        self.started_event: dict[str, Any] | None = None
        self.eof = False
        self.eof_at: float | None = None
        self.capture_sent: float | None = None

    # ------------------------------------------------------------------ phase 1
    def prepare(self) -> None:
        rec = self.rec
        try:
            rec.timings["connect"] = round(self.ssh.connect(), 4)
        except SshError as exc:
            rec.status, rec.reason = UNREACHABLE, f"no SSH connection: {exc}"
            self.log(f"{rec.name}: {rec.reason}")
            return
        try:
            self._probe()
            self._stage()
            self._open_agent()
            self._measure_clock()
        except (SshError, _NodeFailure) as exc:
            rec.status, rec.reason = FAILED, str(exc)
            self.log(f"{rec.name}: {rec.reason}")
            self.teardown_agent()
            self.cleanup()
            return
        self.ready = True
        rec.status = "running"

    def _probe(self) -> None:
        t0 = time.monotonic()
        py = shlex.quote(self.opts.python)
        r = self.ssh.run(f"command -v {py} >/dev/null 2>&1 || exit 127; exec {py} -c {shlex.quote(_PROBE)}",
                         timeout=30)
        if r.returncode == 127:
            raise _NodeFailure(f"{self.opts.python} is not installed on {self.spec.host} (the node needs python3 and perf)")
        if r.returncode != 0:
            raise _NodeFailure(f"probing the node failed: {_last(r.stderr) or f'exit status {r.returncode}'}")
        try:
            facts = json.loads(r.stdout.decode(errors="replace").strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise _NodeFailure("probing the node failed: its python3 printed no answer") from None
        remote = self.rec.remote
        remote.python = facts.get("python")
        remote.perf = facts.get("perf")
        remote.profiler = facts.get("profiler")
        remote.psutil = facts.get("psutil")
        self.rec.timings["probe"] = round(time.monotonic() - t0, 4)

    def _stage(self) -> None:
        t0 = time.monotonic()
        r = self.ssh.run('umask 077 && mktemp -d "${TMPDIR:-/tmp}/profiler-cluster.XXXXXXXX"', timeout=30)
        wd = r.stdout.decode(errors="replace").strip()
        if r.returncode != 0 or not WORKDIR_RE.match(wd):
            raise _NodeFailure(f"cannot make a work directory on the node: {_last(r.stderr) or wd[:100]!r}")
        self.workdir = wd
        self.rec.remote.workdir = wd
        py = shlex.quote(self.opts.python)
        same = self.rec.remote.profiler == __version__ and self.opts.ship != "always"
        if same:
            self.agent_cmd = [f"exec {py} -u -m profiler.cluster.agent serve --workdir {shlex.quote(wd)}"]
        else:
            data = self.pyz()
            dest = f"{wd}/profiler.pyz"
            r = self.ssh.run(f"cat > {shlex.quote(dest)}", input=data, timeout=120)
            if r.returncode != 0:
                raise _NodeFailure(f"cannot copy the agent to the node: {_last(r.stderr)}")
            self.rec.remote.shipped, self.rec.remote.shipped_bytes = True, len(data)
            self.agent_cmd = [f"exec {py} -u {shlex.quote(dest)} serve --workdir {shlex.quote(wd)}"]
        self.rec.timings["stage"] = round(time.monotonic() - t0, 4)

    def _open_agent(self) -> None:
        self.chan = self.ssh.popen(self.agent_cmd[0])
        threading.Thread(target=self._read_events, name=f"events-{self.rec.name}", daemon=True).start()
        threading.Thread(target=self._read_err, name=f"stderr-{self.rec.name}", daemon=True).start()
        hello = self._next_event(30.0, "hello")
        if hello is None:
            raise _NodeFailure(f"the agent did not start: {_last(self.chan_err) or 'no answer'}")
        self.rec.remote.nested_pid_namespace = hello.get("nested_pid_namespace")
        if self.rec.remote.psutil is None:
            self.rec.remote.psutil = hello.get("psutil")

    def _read_events(self) -> None:
        assert self.chan is not None and self.chan.stdout is not None
        for raw in self.chan.stdout:
            try:
                ev = json.loads(raw)
            except ValueError:
                continue
            if isinstance(ev, dict):
                self.events.put(ev)
        self.eof = True
        self.eof_at = time.time()
        self.events.put(None)

    def _read_err(self) -> None:
        assert self.chan is not None and self.chan.stderr is not None
        for raw in self.chan.stderr:
            self.chan_err = (self.chan_err + raw)[-4000:]

    def _next_event(self, timeout: float, want: str | None = None) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                ev = self.events.get(timeout=left)
            except queue.Empty:
                return None
            if ev is None:
                self.events.put(None)  # keep the end marker for later readers
                return None
            if want is None or ev.get("event") == want:
                return ev
            self._note(ev)

    def _note(self, ev: dict[str, Any]) -> None:
        kind = ev.get("event")
        if kind == "targets":
            self.rec.resolved = [{"pid": t.get("pid"), "comm": t.get("comm")} for t in ev.get("targets") or []]
        elif kind == "started":
            self.started_event = ev
        elif kind == "done":
            self.done = ev

    def send(self, **req: Any) -> bool:
        if self.chan is None or self.chan.stdin is None or self.chan.poll() is not None:
            return False
        try:
            self.chan.stdin.write((json.dumps(req) + "\n").encode())
            self.chan.stdin.flush()
            return True
        except (OSError, ValueError):
            return False

    def _measure_clock(self) -> None:
        t0 = time.monotonic()
        samples = []
        for i in range(PINGS):
            sent = time.time()
            if not self.send(op="ping", n=i):
                break
            ev = self._next_event(10.0, "pong")
            received = time.time()
            if ev is None:
                break
            samples.append(clock.Sample(sent=sent, remote=float(ev["wall"]), received=received))
        est = clock.estimate(samples)
        if est is None:
            raise _NodeFailure(f"the agent did not answer pings: {_last(self.chan_err) or 'no answer'}")
        c = self.rec.clock
        c.offset, c.uncertainty, c.rtt, c.samples = est.offset, est.uncertainty, est.rtt, est.samples
        self.rec.timings["clock"] = round(time.monotonic() - t0, 4)

    # ------------------------------------------------------------------ phase 2
    def start(self, planned: float, duration: float | None) -> None:
        assert self.rec.clock.offset is not None
        targets = [t.to_dict() for t in self.spec.targets]
        ok = self.send(op="capture", node=self.rec.name, role=self.rec.role, targets=targets,
                       start_at=planned + self.rec.clock.offset, duration=duration,
                       options=self.opts.capture, collectors=self.opts.collectors, config=self.spec.config)
        self.capture_sent = time.time()
        if not ok:
            self.eof = True

    def poll(self) -> None:
        """Take every event that arrived (non-blocking)."""
        while True:
            try:
                ev = self.events.get_nowait()
            except queue.Empty:
                return
            if ev is None:
                self.events.put(None)
                self.eof = True
                return
            self._note(ev)

    @property
    def finished(self) -> bool:
        return self.done is not None or self.eof

    # ------------------------------------------------------------------ phase 3
    def finish(self, out: Path) -> None:
        rec = self.rec
        self.poll()
        lost = self.done is None
        if lost:
            when = self.eof_at or time.time()
            since = f" {when - self.capture_sent:.1f}s after the capture was sent" if self.capture_sent else ""
            why = _last(self.chan_err) or self.ssh.last_error() or ("ssh exited" if self.chan is not None else "no channel")
            rec.status, rec.reason = LOST, f"the SSH connection dropped{since} ({why})"
            self.log(f"{rec.name}: {rec.reason}")
        else:
            self._record_done()
        self.teardown_agent(quit_first=not lost)
        if lost and not self.ssh.alive:
            # the master went with the link; one new connection may still fetch what the node saved
            self.ssh.close()
            try:
                self.ssh.connect()
            except SshError as exc:
                rec.remote.left = self.workdir
                rec.reason = f"{rec.reason}; reconnecting failed ({exc}): {self.workdir} was left on the node"
                return
        if self.done is None or self.done.get("stage") != "targets":
            self._pull(out)
        self.cleanup()

    def _record_done(self) -> None:
        rec, d = self.rec, self.done or {}
        status = d.get("status")
        rec.status = status if status in (OK, PARTIAL, FAILED) else FAILED
        rec.reason = d.get("reason")
        off = rec.clock.offset or 0.0
        mono, coff = d.get("first_collector_mono"), d.get("clock_offset")
        if mono is not None and coff is not None:
            rec.started = float(mono) + float(coff) - off
        elif self.started_event is not None:
            rec.started = float(self.started_event["wall"]) - off
        if d.get("ended_wall") is not None:
            rec.ended = float(d["ended_wall"]) - off

    def _pull(self, out: Path) -> None:
        rec = self.rec
        if self.workdir is None or not self.ssh.alive:
            return
        t0 = time.monotonic()
        bundle = f"{self.workdir}/bundle"
        py = shlex.quote(self.opts.python)
        cmd = (f"exec {py} -u {shlex.quote(self.workdir + '/profiler.pyz')} pack {shlex.quote(bundle)}"
               if rec.remote.shipped else f"exec {py} -u -m profiler.cluster.agent pack {shlex.quote(bundle)}")
        if rec.remote.shipped and not _exists_pyz(self):
            # after a lost link the agent removed its own code: ship it again just to pack
            r = self.ssh.run(f"cat > {shlex.quote(self.workdir + '/profiler.pyz')}", input=self.pyz(), timeout=120)
            if r.returncode != 0:
                return
        dest = out / NODES_DIR / rec.name
        with tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(self.ssh.argv(command=cmd), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=err, start_new_session=True)
            assert proc.stdout is not None
            try:
                res = pull.extract(proc.stdout, dest, max_total=self.opts.max_node_bytes, max_file=self.opts.max_file_bytes)
            finally:
                stop_process(proc, timeout=10)
            err.seek(0)
            errtext = err.read()
        rec.pulled_bytes = res.bytes
        rec.pull_seconds = round(time.monotonic() - t0, 4)
        rec.timings["pull"] = rec.pull_seconds
        problems = list(res.refused[:5])
        if res.error:
            problems.append(f"the transfer broke: {res.error}")
        if proc.returncode not in (0, None) and res.files == 0:
            problems.append(_last(errtext) or f"pack exited with status {proc.returncode}")
        if res.files == 0:
            pull.remove_tree(dest)
            if rec.status not in (LOST, UNREACHABLE):
                rec.status = FAILED
            rec.reason = "; ".join(filter(None, [rec.reason, "no bundle could be pulled back: " + ("; ".join(problems) or "empty")]))
            return
        try:
            Bundle.open(dest)
        except BundleError as exc:
            rec.status = FAILED
            rec.reason = "; ".join(filter(None, [rec.reason, f"the pulled bundle is unreadable: {exc}"]))
        rec.dir = f"{NODES_DIR}/{rec.name}"
        if problems:
            if rec.status == OK:
                rec.status = PARTIAL
            rec.reason = "; ".join(filter(None, [rec.reason, "pulling back: " + "; ".join(problems)]))
        if rec.status == LOST:
            # the node finished its bundle on its own after the link dropped: keep it, marked as such
            try:
                st = Bundle.open(dest).manifest.status
            except BundleError:
                st = FAILED
            rec.status = PARTIAL if st in (OK, PARTIAL) else FAILED
            rec.reason = f"{rec.reason}; its bundle was pulled back over a new connection"
        self.log(f"{rec.name}: pulled {res.files} files, {res.bytes / 1e6:.1f} MB in {rec.pull_seconds:.2f}s")

    def teardown_agent(self, quit_first: bool = False) -> None:
        ch = self.chan
        if ch is None:
            return
        if quit_first:
            self.send(op="quit")
            with contextlib.suppress(subprocess.TimeoutExpired):
                ch.wait(10)
        stop_process(ch, timeout=3)
        self.chan = None

    def cleanup(self) -> None:
        """Remove the node's work directory (only the one we made) and close the connection."""
        t0 = time.monotonic()
        if self.workdir and self.ssh.alive and WORKDIR_RE.match(self.workdir):
            try:
                r = self.ssh.run(f"rm -rf -- {shlex.quote(self.workdir)}", timeout=60)
                if r.returncode != 0:
                    self.rec.remote.left = self.workdir
            except SshError:
                self.rec.remote.left = self.workdir
            else:
                if r.returncode == 0:
                    self.rec.remote.left = None
        elif self.workdir and not self.ssh.alive:
            self.rec.remote.left = self.workdir
        self.ssh.close()
        self.rec.timings["cleanup"] = round(time.monotonic() - t0, 4)


class _NodeFailure(Exception):
    pass


def _exists_pyz(node: Node) -> bool:
    try:
        r = node.ssh.run(f"test -f {shlex.quote(str(node.workdir) + '/profiler.pyz')}", timeout=20)
    except SshError:
        return False
    return r.returncode == 0


def _last(text: bytes | str) -> str:
    s = text.decode(errors="replace") if isinstance(text, bytes) else text
    lines = [ln.strip() for ln in s.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""
