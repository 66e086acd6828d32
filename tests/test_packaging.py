"""The built wheel installs one package, `profiler`, and ships its templates."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_holds_only_profiler(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    wheel = next(tmp_path.glob("profiler-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    outside = [n for n in names if not (n.startswith("profiler/") or n.startswith("profiler-"))]
    assert not outside, f"wheel holds files outside profiler/: {outside[:10]}"
    for pkg in ("collectors", "analyzers", "templates", "cli", "renderers"):
        assert f"profiler/{pkg}/__init__.py" in names
    assert not any(n.startswith("profiler/tests") or "/samples/" in n for n in names)
