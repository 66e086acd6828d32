"""`--force` on an output directory: one meaning for attach, run, demo, sweep and cluster (issue 27).

It replaces an earlier output of the profiler and only that: the files it wrote are removed
(named by the old manifest and by the member names the profiler writes), a file it did not
write stays, a link is removed as a link, and no directory is removed with what is in it; a
non-empty directory that holds no earlier output is refused even with --force (exit 8), and a
refusal removes nothing.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from profiler.bundle import BundleWriter, Manifest
from profiler.bundle.overwrite import BUNDLE, CLUSTER, SWEEP, prepare_output_dir
from profiler.errors import OutputExists
from tests.conftest import SAMPLES

BUNDLE_SAMPLE = SAMPLES / "perf" / "fio-fsync-and-python-locks"


def _tree(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*")}


def _old_bundle(d: Path) -> Path:
    shutil.copytree(BUNDLE_SAMPLE, d)
    (d / "README.md").unlink()  # the sample's own note: no capture writes one
    (d / ".cpu.perf.txt.gz.0123456789ab.tmp").write_bytes(b"left by a killed capture")
    return d


def test_force_replaces_an_earlier_capture_and_keeps_what_it_did_not_write(tmp_path: Path) -> None:
    cap = _old_bundle(tmp_path / "cap")
    (cap / "notes.txt").write_text("mine")
    (cap / "mine").mkdir()
    (cap / "mine" / "stat.csv").write_text("a file of mine with a member's name, one level down")
    victim = tmp_path / "victim"
    victim.write_text("theirs")
    (cap / "load.log").symlink_to(victim)
    members = {p.name for p in cap.iterdir()} - {"notes.txt", "mine"}
    with pytest.raises(OutputExists, match="--force"):
        BundleWriter(cap, Manifest())
    assert members <= {p.name for p in cap.iterdir()}  # a refusal removes nothing
    BundleWriter(cap, Manifest(), force=True)
    left = _tree(cap)
    assert left == {"notes.txt", "mine", "mine/stat.csv", "manifest.json", ".space-reserve"}  # the new bundle's own
    assert not ({"cpu.perf.txt.gz", "proc.jsonl.gz", "load.log", ".cpu.perf.txt.gz.0123456789ab.tmp"} & left)
    assert victim.read_text() == "theirs"  # the link was removed, never followed


@pytest.mark.parametrize("kind", [BUNDLE, CLUSTER, SWEEP])
def test_force_never_clears_a_directory_the_profiler_did_not_write(tmp_path: Path, kind: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "report.html").write_text("my web page")
    (home / "stat.csv").write_text("my spreadsheet")
    (home / "manifest.json").write_text('{"name": "my web app"}')  # a manifest, not ours
    (home / "project").mkdir()
    (home / "project" / "main.c").write_text("int main;")
    before = _tree(home)
    with pytest.raises(OutputExists, match="holds no earlier"):
        prepare_output_dir(home, True, kind)
    assert _tree(home) == before


def test_force_on_a_cluster_bundle_removes_node_bundles_never_recursively(tmp_path: Path) -> None:
    from tests import server_status_seed

    d = server_status_seed.make_cluster(tmp_path / "cl")
    for readme in (d / "nodes").glob("*/README.md"):  # the samples' own notes: no capture writes one
        readme.unlink()
    (d / "my-notes.md").write_text("mine")
    prepare_output_dir(d, True, CLUSTER)
    assert _tree(d) == {"my-notes.md"}


def test_force_on_a_cluster_bundle_with_my_files_in_a_node_directory_is_refused_whole(tmp_path: Path) -> None:
    from tests import server_status_seed

    d = server_status_seed.make_cluster(tmp_path / "cl")
    node = next((d / "nodes").iterdir())
    (node / "analysis.ipynb").write_text("my notebook")
    before = _tree(d)
    with pytest.raises(OutputExists, match="did not write"):
        prepare_output_dir(d, True, CLUSTER)
    assert _tree(d) == before


def test_force_on_a_sweep_removes_its_steps(tmp_path: Path) -> None:
    sw = tmp_path / "sw"
    sw.mkdir()
    (sw / "sweep.json").write_text(json.dumps({"param": "threads", "steps": []}))
    (sw / "report.html").write_text("<html>")
    for v in ("1", "2"):
        _old_bundle(sw / f"step-{v}")
    (sw / "plot.py").write_text("mine")
    prepare_output_dir(sw, True, SWEEP)
    assert _tree(sw) == {"plot.py"}


def test_an_empty_or_missing_directory_needs_no_force(tmp_path: Path) -> None:
    prepare_output_dir(tmp_path / "missing", False, BUNDLE)
    (tmp_path / "empty").mkdir()
    prepare_output_dir(tmp_path / "empty", False, CLUSTER)
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputExists, match="not a directory"):
        prepare_output_dir(tmp_path / "file", True, BUNDLE)


def test_every_capturing_verb_says_the_same_about_force() -> None:
    from profiler.cli import command

    root = command()
    helps = set()
    for path in (["attach"], ["run"], ["sweep"], ["demo"], ["cluster", "attach"], ["cluster", "run"]):
        c = root
        for p in path:
            c = c.commands[p]
        helps |= {p.help for p in c.params if "--force" in getattr(p, "opts", [])}
    assert len(helps) == 1 and "only the files the profiler wrote" in next(iter(helps))


def test_a_linked_output_directory_named_by_the_user_is_followed(tmp_path: Path) -> None:
    real = _old_bundle(tmp_path / "real")
    (tmp_path / "alias").symlink_to(real)
    prepare_output_dir(tmp_path / "alias", True, BUNDLE)
    assert (tmp_path / "alias").is_symlink() and "cpu.perf.txt.gz" not in os.listdir(real)
