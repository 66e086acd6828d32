"""The code shipped to a node without profiler (cluster layer): a self-contained zipapp of the capture path.

It holds only what ``agent.py`` runs: ``profiler/__init__``, ``errors``, ``knowledge``, the
bundle (module or package, as this installation has them), the codecs (``profiler.formats``), ``profiler.capture``, ``profiler.collectors`` (with the bcc programs) and the agent,
taken from this installation, so the node runs exactly the collectors this controller has.
No analyzer, renderer, CLI or third-party package goes in: the node needs python3 and perf.
Built in memory, deterministic (sorted names, fixed timestamps).
"""

from __future__ import annotations

import importlib.util
import io
import zipfile
from pathlib import Path

# (package, recurse?) taken from the installed profiler; "profiler" itself only its top modules.
PACKAGES = (
    ("profiler", False),
    ("profiler.knowledge", True),
    ("profiler.formats", True),
    ("profiler.bundle", True),
    ("profiler.capture", True),
    ("profiler.collectors", True),
)
TOP_MODULES = ("__init__.py", "errors.py", "knowledge.py", "bundle.py", "files.py", "tolerant.py",
               "untrusted.py", "progress.py")  # whichever are modules, not packages
CLUSTER_MODULES = ("__init__.py", "agent.py")
DATA_SUFFIXES = (".py", ".c", ".h")
_MAIN = (
    "import sys\n"
    "from profiler.cluster.agent import main\n"
    "sys.exit(main())\n"
)
_EPOCH = (2020, 1, 1, 0, 0, 0)


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def files() -> list[tuple[str, Path]]:
    """(name in the archive, file on disk) for everything the agent needs."""
    out: dict[str, Path] = {}
    top = _package_dir("profiler")
    assert top is not None
    for name in TOP_MODULES:
        if (top / name).is_file():
            out[f"profiler/{name}"] = top / name
    for pkg, recurse in PACKAGES[1:]:
        d = _package_dir(pkg)
        if d is None:
            continue
        arc = pkg.replace(".", "/")
        pattern = "**/*" if recurse else "*"
        for f in sorted(d.glob(pattern)):
            if f.is_file() and f.suffix in DATA_SUFFIXES and "__pycache__" not in f.parts:
                out[f"{arc}/{f.relative_to(d).as_posix()}"] = f
    cluster = _package_dir("profiler.cluster")
    assert cluster is not None
    for name in CLUSTER_MODULES:
        out[f"profiler/cluster/{name}"] = cluster / name
    return sorted(out.items())


def build() -> bytes:
    """The zipapp's bytes (``python3 profiler.pyz serve ...`` runs the agent)."""
    buf = io.BytesIO()
    buf.write(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for arc, path in files():
            info = zipfile.ZipInfo(arc, _EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, path.read_bytes())
        info = zipfile.ZipInfo("__main__.py", _EPOCH)
        info.compress_type = zipfile.ZIP_DEFLATED
        info.external_attr = 0o644 << 16
        zf.writestr(info, _MAIN)
    return buf.getvalue()
