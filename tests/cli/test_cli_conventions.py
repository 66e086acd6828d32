"""docs/cli.md's flag conventions, checked on every verb: one meaning per flag, flags shown bare."""

from __future__ import annotations

from typing import Any

import pytest

from profiler.cli import command, main


def _leaves(cmd: Any, prefix: str = "") -> dict[str, Any]:
    """Every verb that runs something, by its full name ("cluster attach"); groups are walked."""
    out: dict[str, Any] = {}
    for name, sub in getattr(cmd, "commands", {}).items():
        full = f"{prefix}{name}"
        out.update(_leaves(sub, full + " ") if getattr(sub, "commands", None) else {full: sub})
    return out


VERBS: dict[str, Any] = _leaves(command())
# --pid names a target (a filter in flamegraph)
PID_VERBS = {"attach", "run", "sweep", "doctor", "flamegraph", "cluster attach", "cluster run"}


def _opts(verb: str) -> dict[str, Any]:
    return {o: p for p in VERBS[verb].params for o in [*p.opts, *p.secondary_opts]}


def test_every_verb_is_checked() -> None:
    assert {"doctor", "attach", "run", "analyze", "report", "flamegraph", "heatmap", "diff", "demo"} <= set(VERBS)


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_flags_mean_one_thing(verb: str) -> None:
    opts = _opts(verb)
    if "-f" in opts:
        assert "--force" in opts["-f"].opts, f"{verb}: -f must be --force"
    if "--output" in opts:
        assert "-o" in opts["--output"].opts, f"{verb}: --output needs -o"
        assert "--force" in opts and "-f" in opts["--force"].opts, f"{verb} writes: it needs -f/--force"
    if "--pid" in opts:
        p = opts["--pid"]
        assert verb in PID_VERBS, f"{verb}: --pid is only ever a target"
        assert not p.is_flag and p.multiple, f"{verb}: --pid takes a process, repeatable"
    if "--json" in opts:
        assert opts["--json"].is_flag
    if "--format" in opts:
        assert "-f" not in opts["--format"].opts


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_help_shows_flags_bare(verb: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*verb.split(), "--help"]) == 0
    out = capsys.readouterr().out
    assert "<bool>" not in out
    assert "--help" in out and "Examples" in out


def test_report_json_flag(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.conftest import SAMPLES

    assert main(["report", str(SAMPLES / "io-fsync-fio"), "--json"]) == 0
    assert '"schema": "profiler.report"' in capsys.readouterr().out
    assert main(["report", str(SAMPLES / "io-fsync-fio"), "--json", "--format", "md"]) == 2


CAPTURING = ("attach", "run", "sweep", "demo", "cluster attach", "cluster run")


def test_every_capturing_verb_declares_a_capture_option_alike() -> None:
    """The capture options are declared once (profiler/cli/_capture.py): a flag several capturing
    verbs take has the same help text and default in each (no drifted copies)."""
    seen: dict[str, tuple[str, str, object]] = {}
    for verb in CAPTURING:
        for flag, p in _opts(verb).items():
            if not flag.startswith("--") or flag in ("--output", "--help", "--pid", "--duration"):
                continue
            first = seen.setdefault(flag, (verb, p.help, p.default))
            assert (p.help, p.default) == first[1:], f"{flag}: {verb} and {first[0]} disagree"
    assert {"--force", "--frequency", "--call-graph", "--interval", "--collector", "--no-report"} <= set(seen)
