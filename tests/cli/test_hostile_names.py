"""Names from another machine's bundle (issue 27): a disk named with a dot, a cluster role of HTML.

Names are data: whatever a disk, a node's role, host or reason is called, every report renders
(no exit 70), and the Markdown report shows it as text, never as markup.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tests.cli.test_hostile import bundle, run

HOSTILE = "<img src=x onerror=alert(1)>"


@pytest.mark.parametrize("disk", ["a.b", "nvme0n1.p1", ".", "..", "a..b", "x."])
def test_a_disk_named_with_a_dot_is_drawn_in_every_format(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          disk: str) -> None:
    cap = bundle(tmp_path)
    p = cap / "proc.jsonl.gz"
    out = []
    for line in gzip.decompress(p.read_bytes()).decode().splitlines():
        r = json.loads(line)
        if r.get("kind") == "system" and r.get("disks"):
            first = next(iter(r["disks"]))
            r["disks"] = {(disk if k == first else k): v for k, v in r["disks"].items()}
        out.append(json.dumps(r))
    p.write_bytes(gzip.compress(("\n".join(out) + "\n").encode()))
    for fmt in ("text", "md", "json", "html"):
        code, text, err = run(capsys, "report", str(cap), "--format", fmt)
        assert code == 0, (fmt, err)
    doc = json.loads(run(capsys, "report", str(cap), "--format", "json")[1])
    panels = json.dumps(doc["timeline"])
    assert disk in panels or json.dumps(disk)[1:-1] in panels


def test_a_cluster_role_host_and_reason_of_html_reach_markdown_as_text(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from tests import server_status_seed

    d = server_status_seed.make_cluster(tmp_path / "cl")
    m = json.loads((d / "cluster.json").read_text())
    m["nodes"][0]["role"] = HOSTILE
    m["nodes"][0]["host"] = "h<script>x</script>"
    m["nodes"][1]["reason"] = "r <i>x</i> | [link](javascript:x) \x1b]0;pwn\x07"
    (d / "cluster.json").write_text(json.dumps(m))
    code, md, err = run(capsys, "report", str(d), "--format", "md")
    assert code == 0, err
    assert "<img" not in md and "<script" not in md and "<i>" not in md and "\x1b" not in md
    assert "&lt;img src=x onerror=alert(1)&gt;" in md
    code, text, err = run(capsys, "report", str(d))
    assert code == 0 and "\x1b" not in text
