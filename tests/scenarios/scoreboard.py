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


def _score(results: list[Result]) -> dict[str, Any]:
    cols = [*CATEGORIES, OTHER]
    matrix = {e: {g: 0 for g in cols} for e in CATEGORIES}
    scored = correct = sub_scored = sub_correct = 0
    for r in results:
        if r.outcome not in ("correct", "wrong"):
            continue
        scored += 1
        got = r.got if r.got in CATEGORIES else OTHER
        # an overlap scenario answered with one of its accepted causes counts on the diagonal of that cause
        row = got if r.outcome == "correct" and got in (r.accepted or (r.expected,)) else r.expected
        matrix[row][got] += 1
        if r.outcome == "correct":
            correct += 1
            if r.sub_cause_ok is not None:
                sub_scored += 1
                sub_correct += int(r.sub_cause_ok)
    outcomes: dict[str, int] = {}
    for r in results:
        outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
    loads = [x for r in results for x in r.loadavg]
    return {
        "scenarios": len(results),
        "outcomes": dict(sorted(outcomes.items())),
        "scored": scored,
        "correct": correct,
        "accuracy": round(correct / scored, 3) if scored else None,
        "sub_cause_scored": sub_scored,
        "sub_cause_correct": sub_correct,
        "confusion": matrix,
        "loadavg": {"min": min(loads), "mean": round(sum(loads) / len(loads), 2), "max": max(loads)} if loads else None,
    }


def summarize(results: list[Result], window: float) -> dict[str, Any]:
    """The scoreboard: all results, and the same figures per noise dimension (quiet, noisy)."""
    with open("/proc/loadavg") as fh:
        load = fh.read().split()[:3]
    board: dict[str, Any] = {
        "schema": "profiler.scenarios.scoreboard",
        "version": 2,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": {"hostname": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count(),
                 "loadavg_end": [float(x) for x in load]},
        "window_s": window,
        **_score(results),
        "by_noise": {n: _score([r for r in results if r.noise == n]) for n in sorted({r.noise for r in results})},
        "results": [r.to_json() for r in results],
    }
    return board


def render(board: dict[str, Any]) -> str:
    cols = [*CATEGORIES, OTHER]
    short = {"cpu": "cpu", "io_wait": "io", "memory": "mem", "lock_contention": "lock",
             "not_saturated": "idle", OTHER: "other"}
    lines = []
    lines.append(f"{'scenario':<38} {'noise':<6} {'expected':<16} {'label':<12} {'got':<16} {'sub':<4} "
                 f"{'load':<11} outcome")
    for r in board["results"]:
        label = {True: "confirmed", False: "UNCONFIRMED", None: "-"}[r["confirmed"]]
        sub = {True: "ok", False: "no", None: "-"}[r["sub_cause_ok"]]
        expected = "+".join(r.get("accepted") or [r["expected"]])
        load = "-".join(f"{x:.1f}" for x in r.get("loadavg") or [])
        lines.append(f"{r['name']:<38} {r.get('noise', 'quiet'):<6} {expected:<16} {label:<12} {str(r['got'] or '-'):<16} "
                     f"{sub:<4} {load:<11} {r['outcome']}"
                     + (f" ({r['error']})" if r.get("error") and r["outcome"] != "correct" else ""))
        if len(r.get("accepted") or []) > 1 and r.get("ranked"):
            first = ", ".join(f"{x['category']} {x['score']}" for x in r["ranked"])
            lines.append(f"    ranked: {first}; why: {r.get('why', '')[:300]}")
    for name, part in [("all", board), *sorted(board.get("by_noise", {}).items())]:
        lines.append("")
        lines.append(f"[{name}] confusion (rows: expected, columns: got)")
        lines.append(" " * 16 + "".join(f"{short[c]:>7}" for c in cols))
        for e in CATEGORIES:
            lines.append(f"{e:<16}" + "".join(f"{part['confusion'][e][g]:>7}" for g in cols))
        acc = part["accuracy"]
        acc_text = f"{acc:.0%}" if acc is not None else "n/a"
        la = part.get("loadavg")
        lines.append(f"[{name}] accuracy {part['correct']}/{part['scored']} = {acc_text} of scored scenarios; "
                     f"sub-cause {part['sub_cause_correct']}/{part['sub_cause_scored']}; outcomes "
                     + ", ".join(f"{k} {v}" for k, v in part["outcomes"].items())
                     + (f"; host load average {la['min']:.1f}-{la['max']:.1f} (mean {la['mean']:.1f})" if la else ""))
    h = board["host"]
    lines.append(f"host {h['hostname']} {h['cpus']} cpus, load average at the end {h['loadavg_end']} "
                 f"(shared host: CPU numbers are noisy); window {board['window_s']:g}s")
    return "\n".join(lines) + "\n"


def render_markdown(board: dict[str, Any]) -> str:
    """The scoreboard as docs/scenarios.md shows it: one summary row per noise dimension, then one
    row per scenario with both dimensions side by side."""
    lines = ["| noise | scored | correct | accuracy | sub-cause right | unconfirmed | other outcomes | load average (min-max, mean) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for name, part in sorted(board.get("by_noise", {}).items()):
        acc = f"{part['accuracy']:.0%}" if part["accuracy"] is not None else "n/a"
        others = ", ".join(f"{k} {v}" for k, v in part["outcomes"].items() if k not in ("correct", "wrong", "unconfirmed"))
        la = part.get("loadavg") or {}
        lines.append(f"| {name} | {part['scored']} | {part['correct']} | {acc} | {part['sub_cause_correct']}/"
                     f"{part['sub_cause_scored']} | {part['outcomes'].get('unconfirmed', 0)} | {others or '-'} | "
                     f"{la.get('min', 0):.1f}-{la.get('max', 0):.1f} ({la.get('mean', 0):.1f}) |")
    short = {"cpu": "cpu", "io_wait": "io", "memory": "mem", "lock_contention": "lock",
             "not_saturated": "idle", OTHER: "other"}
    cols = [*CATEGORIES, OTHER]
    for name, part in sorted(board.get("by_noise", {}).items()):
        lines += ["", f"Confusion, {name} (rows: expected, columns: got):", "",
                  "| expected | " + " | ".join(short[c] for c in cols) + " |",
                  "| --- | " + " | ".join("---:" for _ in cols) + " |"]
        for e in CATEGORIES:
            lines.append(f"| {e} | " + " | ".join(str(part["confusion"][e][g]) for g in cols) + " |")
    lines += ["", "| scenario | expected | quiet: got (first finding, second when >= 0.35) | noisy: got (same) |",
              "| --- | --- | --- | --- |"]
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    for r in board["results"]:
        rows.setdefault(r["name"], {})[r.get("noise", "quiet")] = r

    def cell(r: dict[str, Any] | None) -> str:
        if r is None:
            return "-"
        ranked = ", ".join(f"{x['category']} {x['score']:.2f}" for i, x in enumerate(r.get("ranked") or [])
                           if x.get("score") is not None and (i == 0 or x["score"] >= 0.35))
        mark = {"correct": "", "wrong": " **WRONG**", "unconfirmed": " (label unconfirmed)"}.get(r["outcome"],
                                                                                                f" ({r['outcome']})")
        return f"{r.get('got') or '-'}{mark}" + (f" ({ranked})" if ranked else "")

    for name, by in rows.items():
        first = next(iter(by.values()))
        expected = "+".join(first.get("accepted") or [first["expected"]])
        lines.append(f"| {name} | {expected} | {cell(by.get('quiet'))} | {cell(by.get('noisy'))} |")
    return "\n".join(lines) + "\n"
