"""The built wheel installs one package, `profiler`, ships its templates, BPF sources and JSON
Schema, and builds without setuptools warnings."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT


@pytest.mark.slow
def test_wheel_holds_only_profiler(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(tmp_path), str(ROOT)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    log = proc.stdout + proc.stderr
    for warning in ("is absent from the `packages`", "Package would be ignored", "SetuptoolsDeprecationWarning",
                    "as data is deprecated"):
        assert warning not in log, f"setuptools warns while building: {warning}"
    wheel = next(tmp_path.glob("profiler-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    outside = [n for n in names if not (n.startswith("profiler/") or n.startswith("profiler-"))]
    assert not outside, f"wheel holds files outside profiler/: {outside[:10]}"
    for pkg in ("collectors", "analyzers", "templates", "cli", "renderers"):
        assert f"profiler/{pkg}/__init__.py" in names
    assert not any(n.startswith("profiler/tests") or "/samples/" in n for n in names)
    for data in ("profiler/schemas/report.schema.json", "profiler/collectors/bcc/bpf/common.h",
                 "profiler/collectors/bcc/bpf/blockio.c", "profiler/templates/report.html.j2"):
        assert data in names, f"{data} is not in the wheel"
