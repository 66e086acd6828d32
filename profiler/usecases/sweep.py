"""`profiler sweep`, one capture per concurrency step, then the curve and its knee (usecases layer).

The same load at several concurrencies; each step's verdict says what the targets did there.

For each value of the placeholder (``{threads}`` by default) the load command is run under a
capture exactly as `profiler run` does, into DIR/step-<value>/ (a normal bundle with its own
report.html); each step is analyzed at once and DIR/sweep.json rewritten, so an interrupted
sweep keeps every finished step (marked partial). At the end the knee is found
(analyzers.load.knee) and DIR/report.html drawn.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profiler.analyzers.analysis import Analysis
from profiler.analyzers.load.sweep import Step, StepTarget, Sweep
from profiler.bundle import atomic_write_bytes
from profiler.bundle.overwrite import SWEEP, prepare_output_dir
from profiler.capture.session import Session
from profiler.capture.signals import describe
from profiler.capture.targets import resolve
from profiler.collectors.base import CaptureOptions
from profiler.errors import Interrupted, ProfilerError, UsageError
from profiler.progress import Progress
from profiler.renderers import sweep_html
from profiler.usecases.report import REPORT_NAME, analysis_of, render

Say = Callable[[str], None]  # one line per step (the capture's progress goes to ``progress``)
SWEEP_JSON = "sweep.json"
SWEEP_REPORT = REPORT_NAME  # the sweep's own report sits where a bundle's would
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_VALUE = re.compile(r"^[A-Za-z0-9_.:+-]+$")


@dataclass
class SweepRequest:
    pids: list[str]
    output: Path
    command: list[str]  # the load command, with {param} somewhere in it
    values: list[str]
    param: str = "threads"
    options: CaptureOptions = field(default_factory=CaptureOptions)
    collectors: list[str] | None = None
    keep_perf_data: bool = False
    force: bool = False
    pause: float = 1.0  # seconds between steps (the server settles)
    step_reports: bool = True  # write each step's report.html


def check(req: SweepRequest) -> None:
    """Refuse what cannot be swept, before anything runs."""
    if not req.command:
        raise UsageError("no load command: put it after --, e.g. profiler sweep --threads 1,2,4 --pid mariadbd "
                         "-o sweep -- sysbench oltp_point_select --threads={threads} --time=10 run")
    if not req.values:
        raise UsageError("no values to sweep: --threads 1,2,4,8")
    if len(set(req.values)) != len(req.values):
        raise UsageError(f"--threads lists a value twice: {','.join(req.values)}")
    for v in req.values:
        if not _VALUE.match(v):
            raise UsageError(f"sweep value {v!r}: use numbers or simple words (letters, digits, . _ : + -)")
    wanted = "{" + req.param + "}"
    if not any(wanted in a for a in req.command):
        found = sorted({m.group(1) for a in req.command for m in _PLACEHOLDER.finditer(a)})
        hint = f" (it has {', '.join('{' + f + '}' for f in found)}: pass --param {found[0]})" if found else ""
        raise UsageError(f"the load command has no {wanted} placeholder to fill{hint}")
    prepare_output_dir(req.output, req.force, SWEEP)  # --force: only an earlier sweep's own files go


def _argv(req: SweepRequest, value: str) -> list[str]:
    return [a.replace("{" + req.param + "}", value) for a in req.command]


def _write(req: SweepRequest, sw: Sweep) -> None:
    atomic_write_bytes(req.output / SWEEP_JSON, (json.dumps(sw.to_dict(), indent=2, sort_keys=True) + "\n").encode())


def _fill(step: Step, a: Analysis) -> None:
    """A step's figures from its capture's analysis."""
    la = a.load
    if la is not None:
        step.tps, step.tps_from = la.tps, la.tps_from
        s = la.parsed.summary
        key = la.latency_key or next((k for k in ("p95", "p99") if s is not None and k in s.latency_ms), None)
        if key is not None:
            step.latency_key = key
            if s is not None and key in s.latency_ms:
                step.latency_ms = s.latency_ms[key]
            else:
                vals = sorted(p.interval.latency_ms[key] for p in la.points if key in p.interval.latency_ms)
                step.latency_ms = vals[len(vals) // 2] if vals else None
        if la.why:
            step.status, step.why = "failed", la.why
        elif la.exit_code:
            step.status, step.why = "failed", f"the load exited with code {la.exit_code}"
        elif step.tps is None:
            step.status, step.why = "failed", "the load printed no throughput"
    v = a.verdict.overall
    step.category, step.headline = v.category, v.headline
    for tv, tm in zip(a.verdict.per_target, a.metrics.targets, strict=True):
        step.targets.append(StepTarget(label=tm.label, comm=tm.comm, category=tv.category, score=tv.score,
                                       cpu_cores=tm.process.cpu_cores, cpu_available=tm.limits.cpu_available, headline=tv.headline))


def _line(req: SweepRequest, i: int, step: Step) -> str:
    head = f"step {i}/{len(req.values)} ({req.param}={step.value})"
    if step.status != "ok":
        return f"{head}: {step.status}" + (f": {step.why}" if step.why else "")
    lat = f", {step.latency_key} {step.latency_ms:.2f} ms" if step.latency_ms is not None else ""
    return f"{head}: {step.tps:,.0f}/s{lat}; {step.headline}"


def _pause(seconds: float) -> None:
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(left, 0.1))


def sweep(req: SweepRequest, say: Say, *, extra_options: dict[str, Any] | None = None,
          progress: Progress | None = None) -> tuple[Sweep, int]:
    """Run every step, then conclude. Returns the sweep and the exit code to pass through (the
    first failing load's, else 0); raises Interrupted after writing everything on Ctrl-C."""
    from profiler.collectors import registry

    check(req)
    req.output.mkdir(parents=True, exist_ok=True)
    sw = Sweep(param=req.param, command=list(req.command), values=list(req.values))
    code = 0
    interrupted = False
    signum = 2
    for i, value in enumerate(req.values, 1):
        step = Step(value=value, bundle=f"step-{value}")
        out = req.output / step.bundle
        try:
            if i > 1 and req.pause > 0:
                _pause(req.pause)
            targets = resolve(req.pids)
            chosen = (registry.by_name(req.options, req.collectors, req.keep_perf_data) if req.collectors
                      else registry.default_collectors(req.options, req.keep_perf_data))
            say(f"step {i}/{len(req.values)} ({req.param}={value}): capturing while {req.command[0]} runs")
            t0 = time.monotonic()
            result = Session(targets, out, req.options, chosen, force=True, load=_argv(req, value),
                             progress=progress, say=say, extra_options={**(extra_options or {}), "sweep": {"param": req.param, "value": value}}
                             ).run()
            step.seconds = round(time.monotonic() - t0, 3)
            step.exit_code = result.load_exit_code
            if result.interrupted:
                signum = result.signal or 2
                step.status, step.why = "interrupted", f"{describe(signum)} during the step: its bundle is kept, partial"
                interrupted = True
            else:
                a = analysis_of(out)
                if req.step_reports:
                    atomic_write_bytes(out / REPORT_NAME, render(a, "html").encode(), req.output)
                _fill(step, a)
        except (Interrupted, KeyboardInterrupt) as exc:
            signum = getattr(exc, "signum", 2)
            step.status, step.why = "interrupted", describe(signum)
            interrupted = True
        except ProfilerError as exc:
            step.status, step.why = "failed", str(exc)
            sw.steps.append(step)
            sw.partial, sw.reason = True, f"stopped at {req.param}={value}: {exc}"
            say(_line(req, i, step))
            break
        if step.status == "failed" and not code and step.exit_code:
            code = step.exit_code
        sw.steps.append(step)
        say(_line(req, i, step))
        if interrupted:
            sw.partial, sw.reason = True, f"interrupted ({describe(signum)}) at {req.param}={value}"
            break
        _write(req, sw)
    sw.conclude()
    _write(req, sw)
    atomic_write_bytes(req.output / SWEEP_REPORT, sweep_html.RENDERER.render(sw).encode())
    if interrupted:
        raise Interrupted(f"interrupted: {len([s for s in sw.steps if s.status == 'ok'])} finished steps kept in "
                          f"{req.output}/ ({SWEEP_JSON} marked partial)", signum)
    return sw, code
