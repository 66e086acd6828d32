"""Build the Go workloads with the Go toolchain on the machine, once per source version (test layer).

`build()` compiles tests/workloads/goworkload/main.go (standard library only, no module
download: GOPROXY=off, GOTOOLCHAIN=local) into a cache directory keyed by the source's hash,
the Go version and the build flags, so a test session, the scenario runner and the next
session reuse one binary. The binary is built under a temporary name and renamed into place,
so concurrent builders never see half a file.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
GOWORKLOAD = HERE / "goworkload" / "main.go"


def go() -> str | None:
    """The go command: on PATH, else the upstream tarball's place."""
    return shutil.which("go") or shutil.which("go", path="/usr/local/go/bin:/usr/lib/go/bin")


def cache_dir() -> Path:
    base = os.environ.get("PROFILER_GO_CACHE") or os.path.join(tempfile.gettempdir(), "profiler-go-build")
    return Path(base)


def env(cache: Path) -> dict[str, str]:
    """go's environment: no downloads; go's own build cache (under $HOME) unless there is no HOME."""
    e = dict(os.environ, GOTOOLCHAIN="local", GOPROXY="off", GOFLAGS="", GO111MODULE="auto")
    if not e.get("HOME"):
        e.setdefault("GOCACHE", str(cache / "gocache"))
        e.setdefault("GOPATH", str(cache / "gopath"))
    return e


def version(gocmd: str) -> str:
    out = subprocess.run([gocmd, "version"], capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.strip()


def build(source: Path = GOWORKLOAD, *, flags: tuple[str, ...] = (), name: str | None = None) -> Path:
    """The built binary of ``source`` (a single main.go) with these ``go build`` flags.

    Raises RuntimeError with go's output when the build fails, FileNotFoundError without go.
    """
    gocmd = go()
    if gocmd is None:
        raise FileNotFoundError("the go command is not installed")
    cache = cache_dir()
    key = hashlib.sha256()
    key.update(source.read_bytes())
    key.update(version(gocmd).encode())
    key.update("\0".join(flags).encode())
    out = cache / key.hexdigest()[:16] / (name or source.parent.name)
    if out.is_file() and os.access(out, os.X_OK):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    p = subprocess.run([gocmd, "build", *flags, "-o", str(tmp), str(source)], cwd=source.parent, env=env(cache),
                       capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"go build {source.name} failed: {(p.stderr or p.stdout).strip()[-800:]}")
    os.replace(tmp, out)
    return out
