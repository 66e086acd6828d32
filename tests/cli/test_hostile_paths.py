"""Hostile bundles (issue 27): paths resolved against the bundle root at every level, links included.

A bundle comes from another machine and is analyzed as root: no link at any level inside it
(``nodes`` itself, a node's directory, a member, a report's name) may make a verb read someone
else's files or write outside the bundle. Every case here is built from the real samples.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from profiler import files
from profiler.cli import main
from profiler.errors import OutputError
from tests.cli.test_hostile import PERF_BUNDLE, bundle, one_error_line, run

VICTIM_REPORT = "<html>their own report</html>"


def _cluster(tmp_path: Path) -> Path:
    from tests import server_status_seed

    return server_status_seed.make_cluster(tmp_path / "cl")


def _victim(tmp_path: Path, like: Path) -> Path:
    """Someone else's captures: a copy of the node bundles, each with its own report."""
    theirs = tmp_path / "theirs"
    shutil.copytree(like, theirs)
    for d in theirs.iterdir():
        (d / "report.html").write_text(VICTIM_REPORT)
    return theirs


def _untouched(theirs: Path) -> None:
    for d in theirs.iterdir():
        assert (d / "report.html").read_text() == VICTIM_REPORT, d
        assert not [p.name for p in d.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("args", [["analyze"], ["report", "--format", "json"], ["report"], ["analyze", "--force"]])
def test_a_cluster_bundle_whose_nodes_links_to_other_captures_is_neither_read_nor_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    d = _cluster(tmp_path)
    theirs = _victim(tmp_path, d / "nodes")
    shutil.rmtree(d / "nodes")
    (d / "nodes").symlink_to(theirs)
    code, out, err = run(capsys, args[0], str(d), *args[1:])
    assert code == 4 and "outside the cluster bundle" in one_error_line(err)
    _untouched(theirs)
    assert "their own report" not in out


def test_a_node_directory_that_links_out_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = _cluster(tmp_path)
    theirs = _victim(tmp_path, d / "nodes")
    node = next((d / "nodes").iterdir())
    shutil.rmtree(node)
    node.symlink_to(theirs / node.name)
    code, _, err = run(capsys, "analyze", str(d))
    assert code == 4 and "outside the cluster bundle" in one_error_line(err)
    _untouched(theirs)


def test_a_node_member_linking_to_another_node_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Inside the cluster bundle but outside its own node: a node reads only its own directory;
    the other nodes are still compared."""
    d = _cluster(tmp_path)
    a, b = sorted((d / "nodes").iterdir())
    (a / "proc.jsonl.gz").unlink()
    (a / "proc.jsonl.gz").symlink_to(b / "proc.jsonl.gz")
    code, out, err = run(capsys, "report", str(d), "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert any(f"{a.name}: its bundle cannot be analyzed" in w and "outside the bundle" in w for w in doc["warnings"])


@pytest.mark.parametrize("verb", ["analyze", "report"])
def test_a_bundle_whose_manifest_links_into_another_bundle_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                      verb: str) -> None:
    other = bundle(tmp_path, PERF_BUNDLE, "other")
    cap = tmp_path / "cap"
    cap.mkdir()
    (cap / "manifest.json").symlink_to(other / "manifest.json")
    code, _, err = run(capsys, verb, str(cap))
    assert code == 4 and "outside the bundle" in one_error_line(err)
    assert not (other / "report.html").exists() and not (cap / "report.html").exists()


def test_writes_inside_an_output_directory_never_follow_a_link_at_any_level(tmp_path: Path) -> None:
    """profiler.files: ``root=`` walks from the output directory one level at a time with O_NOFOLLOW."""
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    (elsewhere / "sub").mkdir(parents=True)
    (out / "sub").symlink_to(elsewhere / "sub")
    with pytest.raises(OutputError, match="symbolic link"):
        files.write_output(out / "sub" / "report.html", "x", force=True, root=out)
    with pytest.raises(OutputError, match="symbolic link"):
        files.create_growing(out / "sub" / "load.log", out)
    with pytest.raises(OutputError, match="not inside"):
        files.write_output(tmp_path / "x.html", "x", force=True, root=out)
    assert list((elsewhere / "sub").iterdir()) == []
    (out / "real").mkdir()
    files.write_output(out / "real" / "report.html", "ok", force=True, root=out)
    assert (out / "real" / "report.html").read_text() == "ok"
    # a link at the file's own name is replaced, never followed
    (out / "real" / "report.html").unlink()
    (out / "real" / "report.html").symlink_to(elsewhere / "victim")
    files.write_output(out / "real" / "report.html", "new", force=True, root=out)
    assert not (elsewhere / "victim").exists() and not (out / "real" / "report.html").is_symlink()


def test_contained_compares_with_the_roots_own_real_location(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "in").mkdir(parents=True)
    (tmp_path / "out").mkdir()
    (root / "link-out").symlink_to(tmp_path / "out")
    (root / "link-in").symlink_to(root / "in")
    assert files.contained(root, root / "in" / "x")
    assert files.contained(root, root / "link-in" / "x")
    assert not files.contained(root, root / "link-out" / "x")
    assert files.contained(root / "link-out", root / "link-out" / "x")  # a root named through a link: inside itself
    assert not files.contained(root, tmp_path / "out")
    assert not files.contained(root, root / ".." / "out")


NO_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]  # root that permissions apply to


def _as_no_dac(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NO_DAC, sys.executable, "-m", "profiler", *args], capture_output=True, text=True,
                          timeout=300)


@pytest.fixture
def no_dac() -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv (permissions are checked with CAP_DAC_OVERRIDE dropped)")
    if subprocess.run([*NO_DAC, "true"]).returncode != 0:
        pytest.skip("setpriv cannot drop capabilities here")


@pytest.mark.usefixtures("no_dac")
@pytest.mark.parametrize("mode,what", [(0o644, "no x"), (0o000, "nothing"), (0o311, "no r: names still open")])
def test_an_unreadable_bundle_directory_is_one_line_exit_4(tmp_path: Path, mode: int, what: str) -> None:
    """A bundle directory the user cannot look into: one line, exit 4, in every verb that reads
    bundles (never a usage box with exit 2, a traceback, or a verdict built on nothing). A
    directory that can be entered but not listed is read by its members' names."""
    cap = bundle(tmp_path)
    cap.chmod(mode)
    try:
        for args in (["analyze", str(cap), "--no-html"], ["report", str(cap)], ["flamegraph", str(cap), "--folded"],
                     ["heatmap", str(cap)], ["diff", str(cap), str(cap), "--folded"]):
            r = _as_no_dac(args)
            assert "Traceback" not in r.stderr and "Usage" not in r.stderr and "internal error" not in r.stderr, r.stderr
            if mode & 0o100:
                assert r.returncode == 0, (args, r.stderr[-300:])
                continue
            assert r.returncode == 4, (args, r.returncode, r.stderr[-300:])
            assert "Permission denied" in one_error_line(r.stderr)
    finally:
        cap.chmod(0o755)


@pytest.mark.usefixtures("no_dac")
def test_a_member_that_cannot_be_opened_makes_the_bundle_unreadable(tmp_path: Path) -> None:
    """Members without read permission: exit 4 naming the member, not exit 0 with a verdict of
    'NOT SATURATED, CPU ?' made of nothing."""
    cap = bundle(tmp_path)
    for p in cap.iterdir():
        if p.name != "manifest.json":
            p.chmod(0o000)
    for args in (["analyze", str(cap), "--no-html"], ["report", str(cap), "--format", "json"]):
        r = _as_no_dac(args)
        assert r.returncode == 4, (args, r.returncode, r.stderr[-300:])
        assert "cannot read" in one_error_line(r.stderr) and "Permission denied" in r.stderr
        assert "NOT SATURATED" not in r.stdout


def test_a_symlinked_bundle_named_by_the_user_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The root itself is what the user named: a link to a bundle is followed, as any path is."""
    cap = bundle(tmp_path)
    (tmp_path / "alias").symlink_to(cap)
    assert main(["report", str(tmp_path / "alias"), "--format", "json"]) == 0
