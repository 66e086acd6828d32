"""SSH transport (cluster layer): OpenSSH's client, one shared connection per host (ControlMaster).

Why OpenSSH's ``ssh`` and not a library: it is what TiUP and every operator already use, it
reads the user's ``~/.ssh/config`` (jump hosts, per-host users and keys, agents, certificates,
``ProxyCommand``) exactly as their own ``ssh`` does, and it needs nothing installed on either
side. One master connection per host (``ssh -M -N``, kept as our own child process) carries
every command of the capture; each command is a new channel on it, opened in a few
milliseconds without a new handshake.

Security: ``StrictHostKeyChecking=yes`` and ``BatchMode=yes`` are given on the command line,
which OpenSSH ranks above any config file: an unknown or changed host key fails the host
("Host key verification failed"), nothing is accepted silently, and no password or passphrase
is ever asked for: keys and the agent only. ``--ssh-config`` and ``--known-hosts`` let the
user point at their own files. Nothing secret is put in argv; the commands sent are paths,
durations and process names.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import shlex
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from profiler.errors import UsageError

_PR_SET_PDEATHSIG = 1
_SEQ = itertools.count(1)


@dataclass(frozen=True)
class SshOptions:
    config: Path | None = None  # -F FILE
    known_hosts: Path | None = None  # UserKnownHostsFile
    identity: Path | None = None  # -i FILE (a key file; its passphrase, if any, comes from the agent)
    connect_timeout: float = 10.0
    alive_interval: int = 5  # ServerAliveInterval: a dead link is noticed in interval * count
    alive_count: int = 3
    ssh: str = "ssh"


class SshError(Exception):
    """A connection or command failed; ``str()`` is the one line ssh printed, or what happened."""


def _pdeathsig() -> None:  # pragma: no cover - runs in the child between fork and exec
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("Warning: Permanently")]
    return lines[-1] if lines else ""


class SshHost:
    """One host reached through one master connection; every command is a channel on it."""

    def __init__(self, host: str, *, user: str | None = None, port: int | None = None,
                 options: SshOptions | None = None, control_dir: Path | None = None, key: str = "") -> None:
        if not host or host.startswith("-") or (user is not None and (not user or user.startswith("-"))):
            raise UsageError(f"not a host to connect to: {user + '@' if user else ''}{host!r}")
        self.host = host
        self.user = user
        self.port = port
        self.opts = options or SshOptions()
        self._own_dir = control_dir is None
        self.control_dir = Path(control_dir or tempfile.mkdtemp(prefix="pcl-", dir="/tmp"))
        self.control_path = self.control_dir / f"{next(_SEQ)}.sock"
        self.master: subprocess.Popen[bytes] | None = None
        self._master_err = self.control_dir / f"{self.control_path.stem}.err"

    # ------------------------------------------------------------------ argv
    def argv(self, *extra: str, master: bool = False, command: str | None = None) -> list[str]:
        """ssh's argv: our options, ``extra`` options, the host, then the remote command if any."""
        o = self.opts
        argv = [o.ssh]
        if o.config is not None:
            argv += ["-F", str(o.config)]
        argv += [
            "-o", "BatchMode=yes",
            "-o", "StrictHostKeyChecking=yes",
            "-o", "PreferredAuthentications=publickey",
            "-o", "PasswordAuthentication=no",
            "-o", "KbdInteractiveAuthentication=no",
            "-o", f"ConnectTimeout={max(1, round(o.connect_timeout))}",
            "-o", f"ServerAliveInterval={o.alive_interval}",
            "-o", f"ServerAliveCountMax={o.alive_count}",
            "-o", f"ControlPath={self.control_path}",
            "-o", "ControlMaster=yes" if master else "ControlMaster=no",
            "-o", "ControlPersist=no",
            "-o", "ForwardAgent=no",
            "-o", "ForwardX11=no",
            "-o", "ClearAllForwardings=yes",
            "-o", "LogLevel=ERROR",
            "-T",
        ]
        if o.known_hosts is not None:
            argv += ["-o", f"UserKnownHostsFile={o.known_hosts}"]
        if o.identity is not None:
            argv += ["-i", str(o.identity), "-o", "IdentitiesOnly=yes"]
        if self.port is not None:
            argv += ["-p", str(self.port)]
        if self.user is not None:
            argv += ["-l", self.user]
        return argv + list(extra) + [self.host] + ([command] if command is not None else [])

    # ------------------------------------------------------------------ master
    def connect(self) -> float:
        """Open the master connection; returns how long it took. Raises SshError with ssh's reason."""
        t0 = time.monotonic()
        err = open(self._master_err, "wb")  # noqa: SIM115 - the master writes here while it lives
        try:
            self.master = subprocess.Popen(self.argv("-N", master=True), stdin=subprocess.DEVNULL,
                                           stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
                                           preexec_fn=_pdeathsig)
        except OSError as exc:
            raise SshError(f"cannot run {self.opts.ssh}: {exc.strerror or exc}") from None
        finally:
            err.close()
        deadline = t0 + self.opts.connect_timeout + 20
        while time.monotonic() < deadline:
            if self.master.poll() is not None:
                reason = _last_line(self._master_err.read_text(errors="replace"))
                self.master = None
                raise SshError(reason or f"ssh exited with status {self.master_rc()}")
            if self.control_path.exists() and self._check():
                return time.monotonic() - t0
            time.sleep(0.05)
        self.close()
        raise SshError(f"no SSH connection to {self.host} after {deadline - t0:.0f}s")

    def last_error(self) -> str:
        """The last line the master connection printed (why it ended), if any."""
        try:
            return _last_line(self._master_err.read_text(errors="replace"))
        except OSError:
            return ""

    def master_rc(self) -> int | None:
        return self.master.returncode if self.master is not None else None

    def _check(self) -> bool:
        r = subprocess.run(self.argv("-O", "check"), capture_output=True, timeout=10, stdin=subprocess.DEVNULL)
        return r.returncode == 0

    @property
    def alive(self) -> bool:
        return self.master is not None and self.master.poll() is None

    def close(self) -> None:
        """Stop the master (ssh -O exit, then by pid); safe to call twice."""
        m = self.master
        self.master = None
        if m is not None:
            if m.poll() is None:
                with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                    subprocess.run(self.argv("-O", "exit"), capture_output=True, timeout=5, stdin=subprocess.DEVNULL)
            try:
                m.wait(3)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    m.kill()
                m.wait(5)
        with contextlib.suppress(OSError):
            self.control_path.unlink()
        with contextlib.suppress(OSError):
            self._master_err.unlink()
        if self._own_dir:
            with contextlib.suppress(OSError):
                self.control_dir.rmdir()

    # ------------------------------------------------------------------ commands
    def run(self, command: str, *, input: bytes | None = None, timeout: float = 60.0) -> subprocess.CompletedProcess[bytes]:
        """Run a shell command on the host over the master connection; never raises on exit status."""
        if not self.alive:
            raise SshError(f"no connection to {self.host}")
        try:
            return subprocess.run(self.argv(command=command), input=input, capture_output=True, timeout=timeout,
                                  stdin=None if input is not None else subprocess.DEVNULL,
                                  start_new_session=True, preexec_fn=_pdeathsig)
        except subprocess.TimeoutExpired:
            raise SshError(f"{command.split()[0]!r} on {self.host} did not finish in {timeout:.0f}s") from None

    def popen(self, command: str, *, stderr: int | None = None) -> subprocess.Popen[bytes]:
        """A long-lived command with pipes (stdin, stdout); ``stderr`` defaults to a pipe too."""
        if not self.alive:
            raise SshError(f"no connection to {self.host}")
        return subprocess.Popen(self.argv(command=command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE if stderr is None else stderr,
                                start_new_session=True, preexec_fn=_pdeathsig)


def sh_quote(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 3.0) -> None:
    """Terminate a local ssh client process and reap it (by pid)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(5)
    for fh in (proc.stdin, proc.stdout, proc.stderr):
        if fh is not None:
            with contextlib.suppress(OSError):
                fh.close()
