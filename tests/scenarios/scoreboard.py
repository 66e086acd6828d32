"""The scoreboard: confusion matrix (expected x got), accuracy, and the JSON record (test layer).

Only confirmed scenarios with a verdict are scored. A scenario whose label was not confirmed
by the independent checks is listed as "unconfirmed" and not counted as a verdict error;
one that never produced a verdict ("no-verdict", "error") is listed but not scored either.
"""

from __future__ import annotations

import os
import platform
import time
from typing import Any

from tests.scenarios.model import CATEGORIES
from tests.scenarios.runner import Result

OTHER = "other"


def summarize(results: list[Result], window: float) -> dict[str, Any]:
    cols = [*CATEGORIES, OTHER]
    matrix = {e: {g: 0 for g in cols} for e in CATEGORIES}
    scored = correct = sub_scored = sub_correct = 0
    for r in results:
        if r.outcome not in ("correct", "wrong"):
            continue
        scored += 1
        got = r.got if r.got in CATEGORIES else OTHER
        matrix[r.expected][got] += 1
        if r.outcome == "correct":
            correct += 1
            if r.sub_cause_ok is not None:
                sub_scored += 1
                sub_correct += int(r.sub_cause_ok)
    outcomes: dict[str, int] = {}
    for r in results:
        outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
    with open("/proc/loadavg") as fh:
        load = fh.read().split()[:3]
    return {
        "schema": "profiler.scenarios.scoreboard",
        "version": 1,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": {"hostname": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count(),
                 "loadavg_end": [float(x) for x in load]},
        "window_s": window,
        "scenarios": len(results),
        "outcomes": dict(sorted(outcomes.items())),
        "scored": scored,
        "correct": correct,
        "accuracy": round(correct / scored, 3) if scored else None,
        "sub_cause_scored": sub_scored,
        "sub_cause_correct": sub_correct,
        "confusion": matrix,
        "results": [r.to_json() for r in results],
    }


def render(board: dict[str, Any]) -> str:
    cols = [*CATEGORIES, OTHER]
    short = {"cpu": "cpu", "io_wait": "io", "memory": "mem", "lock_contention": "lock",
             "not_saturated": "idle", OTHER: "other"}
    lines = []
    lines.append(f"{'scenario':<36} {'expected':<16} {'label':<12} {'got':<16} {'sub':<5} outcome")
    for r in board["results"]:
        label = {True: "confirmed", False: "UNCONFIRMED", None: "-"}[r["confirmed"]]
        sub = {True: "ok", False: "no", None: "-"}[r["sub_cause_ok"]]
        lines.append(f"{r['name']:<36} {r['expected']:<16} {label:<12} {str(r['got'] or '-'):<16} {sub:<5} "
                     f"{r['outcome']}" + (f" ({r['error']})" if r.get("error") and r["outcome"] != "correct" else ""))
    lines.append("")
    lines.append("confusion (rows: expected, columns: got)")
    lines.append(" " * 16 + "".join(f"{short[c]:>7}" for c in cols))
    for e in CATEGORIES:
        lines.append(f"{e:<16}" + "".join(f"{board['confusion'][e][g]:>7}" for g in cols))
    lines.append("")
    acc = board["accuracy"]
    acc_text = f"{acc:.0%}" if acc is not None else "n/a"
    lines.append(f"accuracy {board['correct']}/{board['scored']} = {acc_text} of scored scenarios; "
                 f"sub-cause {board['sub_cause_correct']}/{board['sub_cause_scored']}; outcomes "
                 + ", ".join(f"{k} {v}" for k, v in board["outcomes"].items()))
    h = board["host"]
    lines.append(f"host {h['hostname']} {h['cpus']} cpus, load average at the end {h['loadavg_end']} "
                 f"(shared host: CPU numbers are noisy); window {board['window_s']:g}s")
    return "\n".join(lines) + "\n"
