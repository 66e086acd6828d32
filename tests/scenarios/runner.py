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
from tests.scenarios.sampler import Sampler, process_counters
from tests.scenarios.servers import have

# Executables each program needs besides itself.
NEEDS = {
    "mariadbd": ("mariadbd", "mariadb-install-db", "mariadb"),
    "postgres": ("pgbench",),
    "pgbench": ("pgbench",),
    "etcd": ("etcd", "etcdctl"),
    "memcached": ("memcached",),
    "memcslap": ("memcslap", "timeout"),
    "nginx": ("nginx",),
    "wrk": ("wrk", "timeout"),
    "redis-server": ("redis-server", "redis-cli"),
    "redis-benchmark": ("redis-benchmark", "timeout"),
    "sysbench": ("sysbench", "timeout"),
    "fio": ("fio",),
    "stress-ng": ("stress-ng",),
    "db_bench": ("db_bench",),
    # the TiDB binaries come from TIDB_SERVER etc. (tests/scenarios/tidb.py): Scenario.skip says
    "tidb-server": (), "tikv-server": (), "pd-server": (), "go-ycsb": (), "go-tpc": (),
}

SLACK = 20  # seconds a load outlives the window: attach start-up, stragglers
QUIET, NOISY = "quiet", "noisy"
NOISES = (QUIET, NOISY)
# The noisy neighbour, outside the target's cgroup: one core of CPU burn and a steady mixed IO load.
NOISE_CPU_WORKERS = 1
NOISE_IOPS = 1500


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
    why = s.skip() if s.skip is not None else None
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
    noise: str = QUIET  # quiet | noisy: whether the runner ran a noisy neighbour beside it
    accepted: tuple[str, ...] = ()  # categories a right verdict may name first (two causes overlap)
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
    # what the report ranks first and second, with scores, and its headline and runner-up text
    ranked: list[dict[str, Any]] = field(default_factory=list)
    why: str = ""
    loadavg: list[float] = field(default_factory=list)  # 1-minute load average at start and end

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


def run_attach(bundle: Path, pid: int | list[int], window: float, logdir: Path,
               extra: tuple[str, ...] = ()) -> tuple[int, str, float]:
    """Run `profiler attach`; returns (exit code, stderr tail, seconds). Killed if it overruns."""
    # --no-report: the verdict is read once, from `profiler report --format json`, below.
    pids = [pid] if isinstance(pid, int) else pid
    argv = [*profiler_argv(), "attach", *(a for p in pids for a in ("--pid", str(p))), "--duration", f"{window:g}s",
            "-o", str(bundle), "--no-report", *extra]
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


class GaugeSampler:
    """Reads a scenario's gauges about twice a second in a thread; ``stop`` returns their means."""

    def __init__(self, read: Any, interval: float = 0.5) -> None:
        self.read, self.interval = read, interval
        self.sums: dict[str, float] = {}
        self.n = 0
        self.errors = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> GaugeSampler:
        self._t.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                vals = self.read()
            except Exception:  # noqa: BLE001 - a failed read is counted, the mean uses the others
                self.errors += 1
                continue
            self.n += 1
            for k, v in vals.items():
                self.sums[k] = self.sums.get(k, 0.0) + float(v)

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._t.join()
        return {k: v / self.n for k, v in self.sums.items()} if self.n else {}


class AttachRunner:
    """Starts attach in the background so our sampler runs over the same window."""

    def __init__(self, bundle: Path, pid: int | list[int], window: float, logdir: Path,
                 extra: tuple[str, ...] = ()) -> None:
        self.result: tuple[int, str, float] | None = None
        self._t = threading.Thread(target=self._go, args=(bundle, pid, window, logdir, extra), daemon=True)
        self._t.start()

    def _go(self, bundle: Path, pid: int | list[int], window: float, logdir: Path, extra: tuple[str, ...]) -> None:
        try:
            self.result = run_attach(bundle, pid, window, logdir, extra)
        except Exception as exc:  # noqa: BLE001 - reported as the attach result
            self.result = (-1, f"{type(exc).__name__}: {exc}", 0.0)

    def join(self) -> tuple[int, str, float]:
        self._t.join()
        assert self.result is not None
        return self.result


def _loadavg() -> float:
    with open("/proc/loadavg") as fh:
        return float(fh.read().split()[0])


def start_noise(ctx: Ctx) -> tuple[int, int]:
    """The noisy neighbour, in its own cgroup outside the target's: a CPU burner (stress-ng, one
    core) and an IO burner (fio, mixed 4 KiB direct reads and writes at a steady rate). Returns
    the pids (stress-ng, fio); the runner stops them with the scenario."""
    g = ctx.group("noise", ("cpu", "cpuacct", "blkio"))
    cpu = ctx.procs.spawn("noise-cpu", ["stress-ng", "--cpu", str(NOISE_CPU_WORKERS), "--cpu-method", "matrixprod",
                                        "--timeout", f"{ctx.load_seconds}s"], join=g.join_self)
    f = ctx.tmp / "noise.dat"
    io = ctx.procs.spawn("noise-io", ["fio", "--name=noise", f"--filename={f}", "--size=128M", "--rw=randrw",
                                      "--bs=4k", "--direct=1", "--ioengine=psync", "--numjobs=1", "--thread",
                                      f"--rate_iops={NOISE_IOPS // 2},{NOISE_IOPS // 2}", "--time_based",
                                      f"--runtime={ctx.load_seconds}"], join=g.join_self)
    return cpu.pid, io.pid


def run_scenario(s: Scenario, window: float = 10.0, *, attach: bool = True, keep: Path | None = None,
                 log: Any = None, attach_args: tuple[str, ...] = (), noise: str = QUIET) -> Result:
    """Run one scenario; never raises for workload trouble (it becomes outcome 'error').

    ``noise``: ``noisy`` starts the noisy neighbour (``start_noise``) once the workload is up,
    before the warm-up, and stops it with everything else."""
    say = log or (lambda msg: None)
    r = Result(s.name, s.category, s.sub_cause, s.programs, s.cause, noise=noise, accepted=s.accepted)
    why = skip_reason(s)
    if why:
        r.outcome, r.error = "skipped", why
        return r
    t0 = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix=f"profiler-scn-{s.name}-", dir="/var/tmp"))
    procs = Procs(tmp)
    ctx = Ctx(s.name, tmp, procs, window, int(s.warmup + window + SLACK))
    target = 0
    r.loadavg = [_loadavg()]
    try:
        say(f"{s.name} [{noise}]: starting ({s.cause})")
        started = s.start(ctx)
        target = started.pid
        r.target = {"pid": target, "comm": _comm(target), "pids": started.pids}
        noise_pids = start_noise(ctx) if noise == NOISY else ()
        time.sleep(s.warmup)
        for pid in started.pids:
            if not alive(pid):
                raise RuntimeError(f"target pid {pid} exited during warm-up: {procs.log(procs.names.get(pid, ''))[-300:]}")
        before = {role: g.stats() for role, g in ctx.groups.items()}
        noise0 = {p: process_counters(p) for p in noise_pids}
        probe0 = started.probe() if started.probe else {}
        bundle = tmp / "bundle"
        runner = AttachRunner(bundle, started.pids, window, tmp, attach_args) if attach else None
        sampler = Sampler(started.pids).start()
        gauges = GaugeSampler(started.gauge).start() if started.gauge else None
        time.sleep(window)
        obs = sampler.stop()
        means = gauges.stop() if gauges else {}
        probe1 = started.probe() if started.probe else {}
        obs.extra = {k: probe1.get(k, 0.0) - v for k, v in probe0.items()}
        obs.extra.update({f"mean:{k}": v for k, v in means.items()})
        obs.cgroups = {role: cgroup.delta(before[role], g.stats()) for role, g in ctx.groups.items()}
        if noise == NOISY:
            obs.noise = _noise_observed(obs, noise0)
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
            r.outcome = "correct" if r.got in s.accepted else "wrong"
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
        r.loadavg.append(_loadavg())
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
        dest = keep / (f"scn-{s.name}" + ("-noisy" if r.noise == NOISY else ""))
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
        r.verdict = {k: v.get(k) for k in ("category", "sub_cause", "score", "confidence", "confidence_label",
                                           "confidence_reasons", "runner_up", "headline") if k in v}
        if "evidence" in v:
            r.verdict["evidence"] = v["evidence"]
        r.ranked, r.why = ranked(v)
    else:
        r.error = "report has no verdict yet"
    if s.sub_cause_words and sub is not None and cat == s.category:
        text = _sub_cause_text(sub)
        r.sub_cause_ok = any(w in text for w in s.sub_cause_words)


def ranked(v: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """The report's first and second findings (category, score) and why the first leads: its
    headline, and the runner-up with what tells them apart when the evidence is mixed."""
    findings = [f for f in v.get("findings") or [] if isinstance(f, dict)]
    best = [{"category": f.get("category"), "score": f.get("score"), "sub_cause": f.get("sub_cause")}
            for f in findings[:2]]
    why = str(v.get("headline") or "")
    ru = v.get("runner_up")
    if isinstance(ru, dict):
        why += f" | runner-up {ru.get('category')} {ru.get('score')}: {ru.get('tell_apart')}"
    return best, why


def _noise_observed(obs: Any, before: dict[int, dict[str, float] | None]) -> dict[str, float]:
    """What the noisy neighbour did over the window (its cgroup's CPU, fio's IO): proof it ran."""
    secs = max(obs.seconds, 1e-6)
    out = {"cpu_cores": obs.cgroups.get("noise", {}).get("cpuacct.usage_ns", 0) / 1e9 / secs}
    for pid, c0 in before.items():
        c1 = process_counters(pid)
        if c0 and c1 and "read_bytes" in c1:
            done = (c1.get("read_bytes", 0) + c1.get("write_bytes", 0) - c0.get("read_bytes", 0)
                    - c0.get("write_bytes", 0))
            out["io_per_s"] = out.get("io_per_s", 0.0) + done / 4096 / secs
    return out


def teardown(ctx: Ctx) -> list[str]:
    """Stop every process group, empty and remove every cgroup; return what was left."""
    problems = ctx.procs.stop_all()
    for pid in ctx.procs.group_alive():
        problems.append(f"pid {pid} still alive in one of our process groups")
    for g in ctx.groups.values():
        problems.extend(g.destroy())
    for d in ctx.dirs:
        shutil.rmtree(d, ignore_errors=True)
        if d.exists():
            problems.append(f"directory {d} left behind")
    return problems


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
