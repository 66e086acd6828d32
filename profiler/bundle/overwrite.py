"""``--force`` on an output directory (bundle layer): one meaning for every verb that writes one.

``--force`` replaces an earlier output of the profiler, and only that: the files it wrote there
are removed, named by that output's own manifest (a capture bundle's ``manifest.json``, a
cluster bundle's ``cluster.json`` and its node bundles, a sweep's ``sweep.json`` and its step
bundles) and by the member names the profiler ever writes. Nothing else is deleted: a file the
profiler did not write stays, a symbolic link is removed as a link (never followed), and no
directory is ever removed with what is in it: a node or step bundle is emptied of the profiler's
files, then removed only if nothing else is left in it. A non-empty directory that holds no
earlier output of the profiler is refused even with ``--force`` (exit 8): ``-o ~ --force`` must
never clear a home directory.

Every check is made before anything is removed: a refusal leaves the directory as it was.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path

from profiler.bundle import members
from profiler.bundle.manifest import MAX_MANIFEST_BYTES, SCHEMA, check_member_name
from profiler.errors import BundleError, OutputError, OutputExists

__all__ = ["BUNDLE", "CLUSTER", "SWEEP", "prepare_output_dir"]

BUNDLE, CLUSTER, SWEEP = "bundle", "cluster", "sweep"
CLUSTER_MANIFEST, SWEEP_JSON, NODES = "cluster.json", "sweep.json", "nodes"
# every name a capture bundle may hold that the profiler wrote, whatever its manifest says
_MEMBER_NAMES = {v for k, v in vars(members).items() if k.isupper() and isinstance(v, str) and "." in v}
_WRITTEN = re.compile(r"^(?:server-\d+-[A-Za-z0-9]+-[A-Za-z0-9]+\.(?:pb|pb\.gz|txt)|[a-z-]+\.perf\.data|"
                      r"\.space-reserve|\..+\.[0-9a-f]{12}\.tmp|\.[A-Za-z0-9._-]+\.(?:tmp|stderr|perf\.data))$")


def prepare_output_dir(root: str | os.PathLike[str], force: bool, kind: str = BUNDLE) -> None:
    """Make ``root`` ready to be written: missing or empty, fine; holding an earlier output of the
    same kind, its files removed with ``force`` (else OutputExists, exit 8); anything else refused."""
    out = Path(root)
    try:
        st = os.stat(out)  # the directory the user named (through a link if they named one)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise OutputError(f"cannot write {out}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise OutputExists(f"{out} exists and is not a directory")
    entries = _entries(out)
    if not entries:
        return
    if not force:
        raise OutputExists(f"{out} exists and is not empty: pass --force to replace the capture in it")
    plan = {BUNDLE: _bundle_plan, CLUSTER: _cluster_plan, SWEEP: _sweep_plan}[kind](out)
    if plan is None:
        raise OutputExists(f"{out} is not empty and holds no earlier {_WHAT[kind]}: --force replaces only the "
                           "profiler's own output, never other files (choose an empty or a new directory)")
    files, dirs, foreign = plan
    if foreign:
        raise OutputExists(f"{foreign[0]} holds files the profiler did not write, where --force would write a "
                           "bundle: move them, or choose an empty or a new directory")
    for f in files:
        with contextlib.suppress(FileNotFoundError):
            try:
                os.unlink(f)
            except OSError as exc:
                raise OutputError(f"cannot remove {f}: {exc.strerror or exc}") from None
    for d in dirs:  # deepest first; a directory still holding something not ours stays
        with contextlib.suppress(OSError):
            os.rmdir(d)


_WHAT = {BUNDLE: "capture bundle (manifest.json)", CLUSTER: "cluster bundle (cluster.json)",
         SWEEP: "sweep (sweep.json)"}
# files to unlink, directories to remove once empty, and the sub-directories the new output would
# write into that hold something the profiler did not write (then nothing is removed: refused)
Plan = tuple[list[Path], list[Path], list[Path]]


def _entries(d: Path) -> list[str]:
    try:
        return os.listdir(d)
    except OSError as exc:
        raise OutputError(f"cannot write {d}: {exc.strerror or exc}") from None


def _load_json(path: Path, schema: str | None) -> dict[str, object] | None:
    """The JSON object at ``path`` if it is a regular file holding one (of ``schema``), else None."""
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_MANIFEST_BYTES:
            return None
        data = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or (schema is not None and data.get("schema") != schema):
        return None
    return data


def _named_members(manifest: dict[str, object]) -> set[str]:
    """Member names an old manifest lists (only names that stay inside the bundle)."""
    names: set[str] = set()
    cols = manifest.get("collectors")
    for rec in cols if isinstance(cols, list) else []:
        files = rec.get("files") if isinstance(rec, dict) else None
        names.update(f for f in (files if isinstance(files, list) else []) if isinstance(f, str))
    load = manifest.get("load")
    if isinstance(load, dict):
        names.update(v for v in (load.get("log"), load.get("times")) if isinstance(v, str))
    safe = set()
    for n in names:
        with contextlib.suppress(BundleError):
            check_member_name(n)
            safe.add(n)
    return safe


def _ours(names: Iterable[str], extra: set[str]) -> set[str]:
    return {n for n in names if n in _MEMBER_NAMES or n in extra or _WRITTEN.match(n)}


def _files(d: Path, names: set[str]) -> list[Path]:
    """Of ``names`` in ``d``, those that are files or links (never a directory)."""
    out = []
    for n in sorted(names):
        with contextlib.suppress(OSError):
            if not stat.S_ISDIR(os.lstat(d / n).st_mode):
                out.append(d / n)
    return out


def _bundle_plan(d: Path) -> Plan | None:
    manifest = _load_json(d / members.MANIFEST, SCHEMA)
    if manifest is None:
        return None
    return _files(d, _ours(_entries(d), _named_members(manifest))), [], []


def _sub_bundles(d: Path, names: Iterable[str]) -> Plan:
    """Bundles the profiler wrote in sub-directories: their files, then the directories; a
    sub-directory holding anything else is foreign (a new bundle of that name would mix with it)."""
    files: list[Path] = []
    dirs: list[Path] = []
    foreign: list[Path] = []
    for n in names:
        sub = d / n
        with contextlib.suppress(OSError):
            if not stat.S_ISDIR(os.lstat(sub).st_mode):  # a link or a file by that name: not entered
                continue
            plan = _bundle_plan(sub)
            if plan is None or len(plan[0]) < len(_entries(sub)):
                foreign.append(sub)
                continue
            files += plan[0]
            dirs.append(sub)
    return files, dirs, foreign


def _cluster_plan(d: Path) -> Plan | None:
    if _load_json(d / CLUSTER_MANIFEST, "profiler.cluster") is None:
        return None
    files = _files(d, _ours(_entries(d), {CLUSTER_MANIFEST}))
    dirs: list[Path] = []
    foreign: list[Path] = []
    nodes = d / NODES
    try:
        is_dir = stat.S_ISDIR(os.lstat(nodes).st_mode)
    except FileNotFoundError:
        is_dir = None
    except OSError:
        is_dir = False
    if is_dir:
        sub_files, sub_dirs, foreign = _sub_bundles(nodes, _entries(nodes))
        files += sub_files
        dirs += [*sub_dirs, nodes]
    elif is_dir is False:  # a file or a link where the node bundles go
        foreign.append(nodes)
    return files, dirs, foreign


def _sweep_plan(d: Path) -> Plan | None:
    if _load_json(d / SWEEP_JSON, None) is None:
        return None
    names = _entries(d)
    files = _files(d, _ours(names, {SWEEP_JSON}))
    sub_files, sub_dirs, foreign = _sub_bundles(d, [n for n in names if n.startswith("step-")])
    return files + sub_files, sub_dirs, foreign
