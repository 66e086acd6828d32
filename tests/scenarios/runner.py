"""Run one scenario end to end: workload, cause, confirmation, `profiler attach`, verdict (test layer).

The profiler is run exactly as a user would: the installed CLI as a subprocess
(`<sys.prefix>/bin/profiler`, else `python -m profiler`), `attach --pid PID --duration W -o
BUNDLE`, then `report BUNDLE --format json`. While attach watches the target, our own sampler
reads /proc and the cgroup counters over the same window; those decide whether the label is
confirmed. Everything started is stopped by pid in a `finally`, cgroups are emptied and
removed, the temporary directory deleted (unless bundles are kept).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.scenarios import cgroup
from tests.scenarios.model import Ctx, Scenario
from tests.scenarios.procs import Procs, alive
from tests.scenarios.sampler import Sampler
from tests.scenarios.servers import have

# Executables each program needs besides itself.
NEEDS = {
    "mariadbd": ("mariadbd", "mariadb-install-db", "mariadb"),
    "redis-server": ("redis-server", "redis-cli"),
    "redis-benchmark": ("redis-benchmark", "timeout"),
    "sysbench": ("sysbench", "timeout"),
    "fio": ("fio",),
    "stress-ng": ("stress-ng",),
    "db_bench": ("db_bench",),
}

SLACK = 20  # seconds a load outlives the window: attach start-up, stragglers


def profiler_argv() -> list[str]:
    """The installed CLI next to this interpreter, else the module."""
    exe = Path(sys.prefix) / "bin" / "profiler"
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-m", "profiler"]


def skip_reason(s: Scenario) -> str | None:
    why = cgroup.available()
    if why:
        return why
    for prog in s.programs:
        why = have(*NEEDS.get(prog, (prog,)))
        if why:
            return why
    if s.name.startswith("fio") or "fio" in s.programs:
        return have("fio")
    return None


@dataclass
class Result:
    name: str
    expected: str
    expected_sub_cause: str | None
    programs: tuple[str, ...]
    cause: str
    outcome: str = "error"  # correct | wrong | unconfirmed | no-verdict | error | skipped
    confirmed: bool | None = None
    checks: list[dict[str, Any]] = field(default_factory=list)
    observation: dict[str, Any] = field(default_factory=dict)
    target: dict[str, Any] = field(default_factory=dict)
    got: str | None = None
    got_sub_cause: Any = None
    sub_cause_ok: bool | None = None
    verdict: dict[str, Any] | None = None
    target_verdicts: list[Any] = field(default_factory=list)
    attach: dict[str, Any] = field(default_factory=dict)
    cleanup: list[str] = field(default_factory=list)  # problems; empty means clean
    error: str | None = None
    seconds: float = 0.0
    bundle: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


def _sub_cause_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value.lower()
    return json.dumps(value, sort_keys=True).lower()


def read_verdict(report: dict[str, Any], target_pid: int) -> tuple[str | None, Any, dict[str, Any] | None, list[Any]]:
    """(category, sub_cause, top verdict, per-target verdicts) from `report --format json`."""
    v = report.get("verdict")
    if not isinstance(v, dict):
        return None, None, None, []
    targets = []
    for t in report.get("targets") or []:
        if isinstance(t, dict) and "verdict" in t:
            targets.append({"pid": t.get("pid"), "comm": t.get("comm"), "verdict": t.get("verdict")})
    return v.get("category"), v.get("sub_cause"), v, targets


def run_attach(bundle: Path, pid: int, window: float, logdir: Path,
               extra: tuple[str, ...] = ()) -> tuple[int, str, float]:
    """Run `profiler attach`; returns (exit code, stderr tail, seconds). Killed if it overruns."""
    # --no-report: the verdict is read once, from `profiler report --format json`, below.
    argv = [*profiler_argv(), "attach", "--pid", str(pid), "--duration", f"{window:g}s", "-o", str(bundle),
            "--no-report", *extra]
    t0 = time.monotonic()
    with open(logdir / "attach.log", "wb") as log:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
        try:
            rc = p.wait(timeout=window + 180)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGINT)
            try:
                rc = p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                rc = p.wait()
    text = (logdir / "attach.log").read_text(errors="replace")
    return rc, "\n".join(text.strip().splitlines()[-5:]), time.monotonic() - t0


class AttachRunner:
    """Starts attach in the background so our sampler runs over the same window."""

    def __init__(self, bundle: Path, pid: int, window: float, logdir: Path, extra: tuple[str, ...] = ()) -> None:
        self.result: tuple[int, str, float] | None = None
        self._t = threading.Thread(target=self._go, args=(bundle, pid, window, logdir, extra), daemon=True)
        self._t.start()

    def _go(self, bundle: Path, pid: int, window: float, logdir: Path, extra: tuple[str, ...]) -> None:
        try:
            self.result = run_attach(bundle, pid, window, logdir, extra)
        except Exception as exc:  # noqa: BLE001 - reported as the attach result
            self.result = (-1, f"{type(exc).__name__}: {exc}", 0.0)

    def join(self) -> tuple[int, str, float]:
        self._t.join()
        assert self.result is not None
        return self.result


def run_scenario(s: Scenario, window: float = 10.0, *, attach: bool = True, keep: Path | None = None,
                 log: Any = None, attach_args: tuple[str, ...] = ()) -> Result:
    """Run one scenario; never raises for workload trouble (it becomes outcome 'error')."""
    say = log or (lambda msg: None)
    r = Result(s.name, s.category, s.sub_cause, s.programs, s.cause)
    why = skip_reason(s)
    if why:
        r.outcome, r.error = "skipped", why
        return r
    t0 = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix=f"profiler-scn-{s.name}-", dir="/var/tmp"))
    procs = Procs(tmp)
    ctx = Ctx(s.name, tmp, procs, window, int(s.warmup + window + SLACK))
    target = 0
    try:
        say(f"{s.name}: starting ({s.cause})")
        started = s.start(ctx)
        target = started.pid
        r.target = {"pid": target, "comm": _comm(target)}
        time.sleep(s.warmup)
        if not alive(target):
            raise RuntimeError(f"target pid {target} exited during warm-up: {procs.log(procs.names.get(target, ''))[-300:]}")
        before = {role: g.stats() for role, g in ctx.groups.items()}
        probe0 = started.probe() if started.probe else {}
        bundle = tmp / "bundle"
        runner = AttachRunner(bundle, target, window, tmp, attach_args) if attach else None
        sampler = Sampler(target).start()
        time.sleep(window)
        obs = sampler.stop()
        probe1 = started.probe() if started.probe else {}
        obs.extra = {k: probe1.get(k, 0.0) - v for k, v in probe0.items()}
        obs.cgroups = {role: cgroup.delta(before[role], g.stats()) for role, g in ctx.groups.items()}
        checks = s.confirm(obs, started)
        r.checks = [c.to_json() for c in checks]
        r.observation = obs.to_json()
        r.confirmed = all(c.ok for c in checks) and not obs.exited
        say(f"{s.name}: label {'confirmed' if r.confirmed else 'NOT confirmed'}: " + "; ".join(map(str, checks)))
        if runner is not None:
            say(f"{s.name}: waiting for profiler attach")
            rc, tail, secs = runner.join()
            r.attach = {"exit_code": rc, "seconds": round(secs, 1), "tail": tail}
            _verdict(r, bundle, target, tmp, keep, s)
        else:
            r.attach = {"skipped": "--no-attach"}
        if not r.confirmed:
            r.outcome = "unconfirmed"
        elif r.got is None:
            r.outcome = "no-verdict"
        else:
            r.outcome = "correct" if r.got == s.category else "wrong"
    except Exception as exc:  # noqa: BLE001 - one scenario's failure must not stop the suite
        r.outcome = "error"
        r.error = f"{type(exc).__name__}: {exc}"
        say(f"{s.name}: error: {r.error}")
        if os.environ.get("SCENARIO_DEBUG"):
            traceback.print_exc()
    finally:
        t1 = time.monotonic()
        r.cleanup = teardown(ctx)
        r.attach["teardown_seconds"] = round(time.monotonic() - t1, 1)
        shutil.rmtree(tmp, ignore_errors=True)
        if tmp.exists():
            r.cleanup.append(f"temporary directory {tmp} left behind")
        r.seconds = round(time.monotonic() - t0, 1)
    return r


def _verdict(r: Result, bundle: Path, target: int, tmp: Path, keep: Path | None, s: Scenario) -> None:
    if not (bundle / "manifest.json").exists():
        r.error = f"attach wrote no bundle (exit {r.attach.get('exit_code')}): {r.attach.get('tail', '')}"
        return
    if keep is not None:
        dest = keep / f"scn-{s.name}"
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(bundle, dest)
        r.bundle = str(dest)
    t0 = time.monotonic()
    p = subprocess.run([*profiler_argv(), "report", str(bundle), "--format", "json"], capture_output=True,
                       text=True, timeout=600)
    r.attach["report_seconds"] = round(time.monotonic() - t0, 1)
    if p.returncode != 0:
        r.error = f"report exit {p.returncode}: {p.stderr.strip()[-300:]}"
        return
    try:
        report = json.loads(p.stdout)
    except json.JSONDecodeError as exc:
        r.error = f"report --format json is not JSON: {exc}"
        return
    cat, sub, v, targets = read_verdict(report, target)
    r.got, r.got_sub_cause, r.target_verdicts = cat, sub, targets
    if v is not None:
        r.verdict = {k: v.get(k) for k in ("category", "sub_cause", "score", "confidence") if k in v}
        if "evidence" in v:
            r.verdict["evidence"] = v["evidence"]
    else:
        r.error = "report has no verdict yet"
    if s.sub_cause_words and sub is not None and cat == s.category:
        text = _sub_cause_text(sub)
        r.sub_cause_ok = any(w in text for w in s.sub_cause_words)


def teardown(ctx: Ctx) -> list[str]:
    """Stop every process group, empty and remove every cgroup; return what was left."""
    problems = ctx.procs.stop_all()
    for pid in ctx.procs.group_alive():
        problems.append(f"pid {pid} still alive in one of our process groups")
    for g in ctx.groups.values():
        problems.extend(g.destroy())
    return problems


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
