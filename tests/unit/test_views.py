"""Bundle views: one analysis opens each member of a real bundle once, perf and bcc alike, and the
views read the same evidence whichever backend wrote it."""

from __future__ import annotations

import builtins
import collections
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from profiler.analyzers import analysis
from profiler.analyzers.views import read_views

from profiler.bundle import Bundle, members
from tests.conftest import ROOT, SAMPLES

PERF = SAMPLES / "perf" / "fio-fsync-and-python-locks"  # two targets, every perf-backend member
BCC = SAMPLES / "bcc" / "io-fsync-fio"
EVIDENCE = {  # what the report reads, by backend
    "perf": {members.PROC, members.STAT, members.SYSCALLS, members.CPU_STACKS, members.OFFCPU_STACKS,
             members.OFFCPU_INTERVALS, members.BLOCK_TRACE},
    "bcc": {members.PROC, members.STAT, members.SYSCALLS, members.CPU_STACKS, members.OFFCPU_FOLDED,
            members.OFFCPU_SUMMARY, members.BLOCK_HIST, members.FUTEX_FOLDED, members.FUTEX_SUMMARY},
}


def _opens(monkeypatch: pytest.MonkeyPatch, root: Path) -> collections.Counter[str]:
    """Count every open() of a file under ``root`` (gzip members open through it too), by name."""
    counts: collections.Counter[str] = collections.Counter()
    real = builtins.open
    top = root.resolve()

    def spy(file: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, str | Path) and Path(file).resolve().parent == top:
            counts[Path(file).name] += 1
        return real(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spy)
    return counts


@pytest.mark.parametrize("backend,sample", [("perf", PERF), ("bcc", BCC)])
def test_one_analysis_opens_each_member_once(backend: str, sample: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bundle = Bundle.open(sample)  # the manifest is read before counting starts
    counts = _opens(monkeypatch, sample)
    a = analysis.analyze(bundle)
    assert dict(counts) == dict.fromkeys(sorted(EVIDENCE[backend]), 1)
    # and everything was drawn from those single reads
    assert set(a.artifacts) == {"cpu_flame", "cpu_heatmap", "offcpu_flame", "io_heatmap", "cpu_range", "offcpu_range",
                                "explore"}, a.missing_artifacts


def test_one_read_per_member_with_several_targets(monkeypatch: pytest.MonkeyPatch) -> None:
    """stat.csv and syscalls.csv used to be read once per target and once more."""
    bundle = Bundle.open(PERF)
    assert len(bundle.manifest.targets) == 2
    counts = _opens(monkeypatch, PERF)
    a = analysis.analyze(bundle)
    assert counts[members.STAT] == counts[members.SYSCALLS] == 1
    assert all(t.counters.syscall_top for t in a.metrics.targets)  # each target's rows, from the one read


def test_older_syscalls_rate_member_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "cap"
    shutil.copytree(PERF, root)
    m = json.loads((root / members.MANIFEST).read_text())
    m["targets"] = m["targets"][:1]
    (root / members.MANIFEST).write_text(json.dumps(m))
    (root / members.SYSCALLS).unlink()
    rows = "".join(f"     {i}.000000000,{1000 * i},,raw_syscalls:sys_enter,1000000,100.00,,\n" for i in (1, 2, 3))
    (root / members.SYSCALLS_RATE).write_text("# started on a day\n\n" + rows)
    bundle = Bundle.open(root)
    counts = _opens(monkeypatch, root)
    a = analysis.analyze(bundle)
    assert counts[members.SYSCALLS_RATE] == 1 and members.SYSCALLS not in counts
    assert a.metrics.targets[0].counters.syscall_rate == pytest.approx(3000 / 1.0, rel=0.5)
    assert "syscalls" in a.timeline.panels


def test_views_hide_the_backend() -> None:
    perf, bcc = read_views(Bundle.open(PERF)), read_views(Bundle.open(BCC))
    for v in (perf, bcc):
        assert v.offcpu is not None and v.offcpu.folded and v.offcpu.error is None
        # blocked microseconds under a wait-reason root, then the thread pool, whichever backend
        reasons = {stack.split(";")[0] for stack in v.offcpu.folded}
        assert reasons and all(not r.startswith(("python", "fio")) for r in reasons), reasons
        assert v.cpu is not None and v.cpu.folded and len(v.cpu.times.t) == sum(v.cpu.folded.values())
        assert v.syscalls is not None and v.syscalls.rows
        assert v.io is not None and not v.io.errors
    assert perf.io is not None and perf.io.events is not None and perf.io.hist is None
    assert bcc.io is not None and bcc.io.events is None and bcc.io.hist is not None
    assert not perf.offcpu.bcc and bcc.offcpu.bcc  # type: ignore[union-attr]
    assert perf.offcpu.futex and bcc.waits is not None  # type: ignore[union-attr]


def test_a_cut_off_member_is_read_to_the_cut_with_a_warning(tmp_path: Path) -> None:
    root = tmp_path / "cap"
    shutil.copytree(PERF, root)
    for name in (members.CPU_STACKS, members.OFFCPU_STACKS):
        data = (root / name).read_bytes()
        (root / name).write_bytes(data[: len(data) * 3 // 4])
    a = analysis.analyze(Bundle.open(root))
    assert any(w.startswith(members.OFFCPU_STACKS) and "truncated" in w for w in a.warnings), a.warnings
    assert any(w.startswith(members.CPU_STACKS) and "truncated" in w for w in a.warnings), a.warnings
    assert "offcpu_flame" in a.artifacts


def test_analysis_takes_no_bundle_as_any() -> None:
    """No ``bundle: Any`` in the analyzers, no importlib in the analysis, no member name spelled out."""
    names = {getattr(members, k) for k in dir(members) if k.isupper()}
    for path in sorted((ROOT / "analyzers").rglob("*.py")):
        text = path.read_text()
        assert not re.search(r"\bbundle: Any\b", text), path
        literals = {n for n in names if f'"{n}"' in text}
        assert not literals, (path, literals)
    assert "importlib" not in (ROOT / "analyzers" / "analysis.py").read_text()
