"""The remote side of a cluster capture (cluster layer): runs on each node under plain python3.

Shipped as a zipapp (see ``zipapp.py``) when profiler is not installed on the node, so it
imports only the standard library and the capture path (bundle, capture session, targets,
collectors): no numpy, typer or jinja2; psutil when the node has it, /proc otherwise.

``python3 profiler.pyz serve --workdir DIR`` speaks JSON lines: requests on stdin, events on
stdout (the SSH channel). ``ping`` answers with this node's clocks (the controller measures the
offset); ``capture`` resolves the targets, waits for the agreed instant on this node's wall
clock, runs the capture session into ``DIR/bundle`` and reports ``done``; ``stop`` ends the
capture early. When stdin reaches end of file (the SSH session died: the controller was
killed, the link or sshd dropped) the capture is stopped at once, the bundle finished, the
shipped code removed, and the agent exits: no perf process or tracefs instance outlives it
(the collectors' own cleanup plus a parent-death signal on every helper).

``python3 profiler.pyz pack DIR/bundle`` writes the bundle as an uncompressed tar on stdout
(regular files only) for the controller to pull back.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

PROTOCOL = 1
MAX_WAIT_BEFORE_START = 120.0  # seconds a capture may be scheduled ahead
MAX_WAIT_FOR_PULL = 1800.0  # seconds the agent waits, after the capture, for the controller to say quit


class Agent:
    def __init__(self, workdir: Path, out: Any = None, inp: Any = None) -> None:
        self.workdir = workdir
        self.out = out or sys.stdout
        self.inp = inp or sys.stdin
        self.lock = threading.Lock()
        self.session: Any = None
        self.stop_reason: str | None = None
        self.lost = threading.Event()
        self.stop_event = threading.Event()
        self.capture_req: dict[str, Any] | None = None
        self.capture_ready = threading.Event()
        self.quit = threading.Event()
        self.stop_partial = False

    # ---------------------------------------------------------------- output
    def emit(self, **event: Any) -> None:
        line = json.dumps(event, sort_keys=True) + "\n"
        with self.lock:
            try:
                self.out.write(line)
                self.out.flush()
            except (OSError, ValueError):
                self.lost.set()  # the channel is gone; stop as if stdin had closed
                self._request_stop("the SSH session was lost")

    def _request_stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
        self.stop_event.set()
        s = self.session
        if s is not None:
            s.stop_request = reason

    # ---------------------------------------------------------------- input (a thread)
    def read_requests(self) -> None:
        try:
            for line in self.inp:
                try:
                    req = json.loads(line)
                except ValueError:
                    self.emit(event="error", stage="protocol", reason=f"not JSON: {line[:80]!r}")
                    continue
                op = req.get("op") if isinstance(req, dict) else None
                if op == "ping":
                    self.emit(event="pong", n=req.get("n"), wall=time.time(), mono=time.monotonic())
                elif op == "capture" and self.capture_req is None:
                    self.capture_req = req
                    self.capture_ready.set()
                elif op == "stop":
                    # partial: the window was cut short (Ctrl-C, a deadline), not ended by design (the load exited)
                    self.stop_partial = self.stop_partial or bool(req.get("partial"))
                    self._request_stop(str(req.get("reason") or "stopped by the controller"))
                elif op == "quit":
                    self.quit.set()
                    self.capture_ready.set()
                    return
                else:
                    self.emit(event="error", stage="protocol", reason=f"unknown request {op!r}")
        except (OSError, ValueError):
            pass
        # End of file: the controller or the link is gone.
        self.lost.set()
        self._request_stop("the SSH session was lost")
        self.capture_ready.set()

    # ---------------------------------------------------------------- main thread
    def serve(self) -> int:
        for sig in (signal.SIGHUP, signal.SIGTERM):
            signal.signal(sig, lambda signum, _frame: self._request_stop(
                f"the agent got {signal.Signals(signum).name}"))
        self.emit(event="hello", protocol=PROTOCOL, version=_version(), pid=os.getpid(),
                  python=sys.version.split()[0], psutil=_has_psutil(), nested_pid_namespace=_nested_pidns(),
                  hostname=os.uname().nodename, wall=time.time(), mono=time.monotonic())
        reader = threading.Thread(target=self.read_requests, name="requests", daemon=True)
        reader.start()
        self.capture_ready.wait()
        if self.capture_req is not None and not self.lost.is_set():
            try:
                self.capture(self.capture_req)
            except Exception as exc:  # noqa: BLE001 - report it, then end cleanly
                self.emit(event="done", status="failed", reason=f"internal error: {type(exc).__name__}: {exc}")
            # wait for the controller to pull the bundle and say quit (or for the link to go)
            deadline = time.monotonic() + MAX_WAIT_FOR_PULL
            while not self.quit.is_set() and not self.lost.is_set() and time.monotonic() < deadline:
                self.quit.wait(0.5)
        if self.lost.is_set():
            self._remove_own_code()
        return 0

    def capture(self, req: dict[str, Any]) -> None:
        from profiler.bundle.members import MANIFEST
        from profiler.capture.session import Session
        from profiler.capture.targets import Target, resolve
        from profiler.collectors import registry
        from profiler.collectors.base import CaptureOptions
        from profiler.errors import OutputError, ProfilerError
        from profiler.files import write_output

        out = self.workdir / "bundle"
        try:
            targets = _resolve(req.get("targets") or [], resolve, Target)
        except ProfilerError as exc:
            self.emit(event="done", status="failed", stage="targets", reason=str(exc))
            return
        self.emit(event="targets", targets=[{"pid": t.pid, "comm": t.comm, "exe": t.exe} for t in targets])
        opts = req.get("options") or {}
        options = CaptureOptions(duration=req.get("duration"), frequency=int(opts.get("frequency", 99)),
                                 call_graph=str(opts.get("call_graph", "fp")), interval=float(opts.get("interval", 1.0)),
                                 backend=str(opts.get("backend", "perf")))
        keep = bool(opts.get("keep_perf_data", False))
        names = req.get("collectors")
        try:
            chosen = registry.by_name(options, names, keep) if names else registry.default_collectors(options, keep)
        except ProfilerError as exc:
            self.emit(event="done", status="failed", stage="collectors", reason=str(exc))
            return
        used, why = registry.backend_choice(options)
        session = Session(targets, out, options, chosen,
                          extra_options={"keep_perf_data": keep, "backend_used": used, "backend_reason": why,
                                         "cluster": {"node": req.get("node"), "role": req.get("role"),
                                                     "config": _config(req.get("config"))}})
        session.prepare()
        # Wait for the agreed instant on this node's own clock (stop or a lost link end the wait).
        start_at = float(req.get("start_at") or time.time())
        wait = min(max(0.0, start_at - time.time()), MAX_WAIT_BEFORE_START)
        if self.stop_event.wait(wait):
            self.emit(event="done", status="failed", reason=f"not started: {self.stop_reason}")
            return
        self.session = session
        if self.stop_reason:
            session.stop_request = self.stop_reason
        self.emit(event="started", wall=time.time(), mono=time.monotonic())
        result = session.run()
        m = result.manifest
        if self.stop_reason and m.options.get("stop_reason") == self.stop_reason and (self.lost.is_set() or self.stop_partial):
            # the capture was cut short (lost link, Ctrl-C at the controller): say so in the node's own bundle too
            m.reason = "; ".join(filter(None, [m.reason, self.stop_reason]))
            m.status = "partial" if m.status == "ok" else m.status
            with contextlib.suppress(OSError, OutputError):
                write_output(out / MANIFEST, m.to_json(), force=True, fsync=True, root=out)
        first = min((c.started for c in m.collectors if c.started), default=None)
        self.emit(event="done", status=m.status, reason=m.reason, stop_reason=result.stop_reason,
                  bytes=_tree_size(out), first_collector_mono=first, clock_offset=m.clock.offset,
                  ended_wall=time.time())

    def _remove_own_code(self) -> None:
        """After a lost link, take the shipped zipapp away (the bundle stays for a later pull)."""
        me = Path(sys.argv[0])
        if me.suffix == ".pyz" and me.parent == self.workdir:
            with contextlib.suppress(OSError):
                me.unlink()


def _resolve(specs: list[dict[str, Any]], resolve: Any, target_cls: Any) -> list[Any]:
    """``--pid`` values; a TiUP deploy directory narrows a name to that instance's processes."""
    from profiler.errors import TargetError

    out: dict[int, Any] = {}
    for spec in specs:
        query = str(spec.get("query") or "")
        found = resolve([query])
        deploy = spec.get("deploy_dir")
        if deploy and len(found) > 1:
            prefix = str(deploy).rstrip("/") + "/"
            mine = [t for t in found if (t.exe or "").startswith(prefix) or _cwd_under(t.pid, prefix)]
            if not mine:
                raise TargetError(f"{len(found)} processes match {query!r} but none runs from {deploy}")
            found = mine
        for t in found:
            out.setdefault(t.pid, t)
    if not out:
        raise TargetError("no target given")
    return [out[p] for p in sorted(out)]


def _config(cfg: Any) -> dict[str, Any]:
    """The node's knobs from its topology (dotted name -> scalar), as the manifest keeps them."""
    if not isinstance(cfg, dict):
        return {}
    return {str(k)[:200]: v for k, v in list(cfg.items())[:2000]
            if isinstance(v, str | int | float | bool) or v is None or isinstance(v, list)}


def _cwd_under(pid: int, prefix: str) -> bool:
    try:
        return (os.readlink(f"/proc/{pid}/cwd").rstrip("/") + "/").startswith(prefix)
    except OSError:
        return False


def _tree_size(root: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, f)).st_size
    return total


def _version() -> str:
    try:
        from profiler import __version__

        return str(__version__)
    except ImportError:  # pragma: no cover
        return "?"


def _has_psutil() -> bool:
    try:
        import psutil  # noqa: F401
    except ImportError:
        return False
    return True


def _nested_pidns() -> bool | None:
    """True when this process runs in a PID namespace below the host's (kernel threads are not visible).

    Tracepoint fields like ``prev_pid`` hold the host's thread ids, so a capture from inside a
    nested namespace cannot filter tracepoints on the ids it sees (docs/cluster.md).
    """
    try:
        with open("/proc/2/comm") as fh:
            return fh.read().strip() != "kthreadd"
    except OSError:
        return True


def pack(bundle: Path, out: Any) -> int:
    """Write the bundle's regular files (no links, no special files) as a tar stream."""
    root = bundle.resolve()
    if not (root / "manifest.json").is_file():
        print(f"profiler-agent: {bundle} is not a bundle", file=sys.stderr)
        return 2
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirs, files in os.walk(root):
            dirs.sort()
            for f in sorted(files):
                p = Path(dirpath) / f
                rel = p.relative_to(root).as_posix()
                if f.startswith(".") and f.endswith(".tmp"):
                    continue  # a member a killed collector never renamed into place
                st = os.lstat(p)
                if not _is_regular(st.st_mode):
                    continue
                info = tarfile.TarInfo(rel)
                info.size, info.mtime, info.mode = st.st_size, int(st.st_mtime), 0o644
                with open(p, "rb") as fh:
                    tar.addfile(info, fh)
    return 0


def _is_regular(mode: int) -> bool:
    import stat

    return stat.S_ISREG(mode)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) >= 3 and args[0] == "serve" and args[1] == "--workdir":
        workdir = Path(args[2])
        if not workdir.is_dir():
            print(f"profiler-agent: no directory {workdir}", file=sys.stderr)
            return 2
        _import_everything()
        return Agent(workdir).serve()
    if len(args) == 2 and args[0] == "pack":
        return pack(Path(args[1]), sys.stdout.buffer)
    print("usage: profiler-agent serve --workdir DIR | pack BUNDLE", file=sys.stderr)
    return 2


def _import_everything() -> None:
    """Import the whole capture path now: the shipped zipapp may be deleted while we run."""
    import importlib

    for mod in ("profiler.bundle", "profiler.errors", "profiler.knowledge", "profiler.capture.session",
                "profiler.capture.targets", "profiler.collectors.registry"):
        importlib.import_module(mod)
    import pkgutil

    import profiler.collectors as pc

    for info in pkgutil.walk_packages(pc.__path__, "profiler.collectors."):
        with contextlib.suppress(Exception):
            importlib.import_module(info.name)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
