"""The JSON report's shipped schema: every sample bundle's report validates, and the schema is
strict enough to catch a field nobody documented (conftest validates every report tests make)."""

from __future__ import annotations

import copy
import json
from importlib import resources
from pathlib import Path

import pytest
from profiler.analyzers.analysis import analyze

from profiler.bundle import Bundle
from profiler.cli import main
from tests.conftest import SAMPLES
from tests.report_schema import problems, validator

BUNDLES = sorted(p.parent for p in SAMPLES.rglob("manifest.json"))


def test_schema_is_shipped_and_valid() -> None:
    text = resources.files("profiler.schemas").joinpath("report.schema.json").read_text(encoding="utf-8")
    schema = json.loads(text)
    assert schema["properties"]["schema"] == {"const": "profiler.report"}
    validator()  # check_schema raises on a malformed schema


@pytest.mark.parametrize("bundle", BUNDLES, ids=lambda p: str(p.relative_to(SAMPLES)))
def test_every_sample_report_validates(bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    assert main(["report", str(bundle), "--format", "json", "-o", str(out)]) == 0
    report = json.loads(out.read_text())
    assert problems(report) == []


@pytest.fixture(scope="module")
def report() -> dict[str, object]:
    return analyze(Bundle.open(SAMPLES / "perf" / "fio-fsync-and-python-locks")).to_dict()


def test_an_undocumented_field_fails(report: dict[str, object]) -> None:
    r = copy.deepcopy(report)
    r["new_field"] = 1
    assert any("new_field" in p for p in problems(r))
    r = copy.deepcopy(report)
    r["targets"][0]["metrics"]["cpu_secret"] = 0.5  # type: ignore[index]
    assert any("cpu_secret" in p for p in problems(r))
    r = copy.deepcopy(report)
    r["verdict"]["evidence"][0]["extra"] = "x"  # type: ignore[index]
    assert any("extra" in p for p in problems(r))


def test_a_missing_or_mistyped_field_fails(report: dict[str, object]) -> None:
    r = copy.deepcopy(report)
    del r["verdict"]["category"]  # type: ignore[attr-defined]
    assert any("category" in p for p in problems(r))
    r = copy.deepcopy(report)
    r["verdict"]["category"] = "slow"  # type: ignore[index]
    assert problems(r)
    r = copy.deepcopy(report)
    r["timeline"]["panels"]["cpu"]["series"] = {"x": ["1"]}  # type: ignore[index]
    assert problems(r)


def test_reports_child_processes_write_are_read_back(tmp_path: Path) -> None:
    """conftest also checks the reports left in a test's tmp_path (written by `python -m profiler`
    children, out of the to_dict hook's reach): both forms are found, and a bad field in either fails."""
    import subprocess
    import sys

    from tests.report_schema import files_problems

    bundle = SAMPLES / "perf" / "fio-fsync-and-python-locks"
    for fmt in ("json", "html"):
        subprocess.run([sys.executable, "-m", "profiler", "report", str(bundle), "--format", fmt,
                        "-o", str(tmp_path / f"r.{fmt}")], check=True, capture_output=True, timeout=300)
    assert files_problems(tmp_path) == []
    bad = tmp_path / "bad"
    bad.mkdir()
    data = json.loads((tmp_path / "r.json").read_text())
    data["new_field"] = 1
    (bad / "r.json").write_text(json.dumps(data))
    page = (tmp_path / "r.html").read_text()
    (bad / "r.html").write_text(page.replace('"verdict": {', '"verdict": {"extra": 1, ', 1))
    found = files_problems(bad)
    assert any(p.startswith(f"{bad / 'r.json'}:") and "new_field" in p for p in found), found
    assert any(p.startswith(f"{bad / 'r.html'}:") and "extra" in p for p in found), found
    (bad / "r.json").unlink()
    (bad / "r.html").unlink()  # what conftest reads at the end of this test must be sound
