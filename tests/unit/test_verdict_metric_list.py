"""Every server metric the verdict's rules read is listed in docs/verdict.md and shown as evidence (issue 29).

The list cannot drift from the code: the request phases the rules read are found by the kinds the
rule modules ask for (``of_kind(kr.LOCK)``, ``rt.total``), the Go runtime metrics by the keys the
evidence code reads (``ts.key("go.gc_cpu")``, parsed, never imported); both must be exactly the
rows of docs/verdict.md#server-metrics-the-rules-read, each with its Prometheus metric and Grafana
panel. A real capture (samples/, TiDB v8.5.3 on unistore) then shows the rows as evidence with their
thresholds and panels.
"""

from __future__ import annotations

import ast
from pathlib import Path

from profiler.analyzers.analysis import analyze
from profiler.analyzers.verdict.findings import THRESHOLDS
from profiler.analyzers.verdict.server import RULE_READS

from profiler.bundle import Bundle
from profiler.knowledge import requests as kr
from profiler.knowledge import servers

ROOT = Path(__file__).resolve().parents[2]
VERDICT = ROOT / "analyzers" / "verdict"
DOCS = ROOT / "docs" / "verdict.md"


def _calls() -> tuple[set[str], set[str], bool]:
    """(kinds asked for with of_kind/reports, literal keys read with .key(...), whether rt.total is read)."""
    kinds: set[str] = set()
    keys: set[str] = set()
    total = False
    for path in VERDICT.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in ("of_kind", "reports"):
                    kinds |= {a.attr for a in node.args if isinstance(a, ast.Attribute)}
                if node.func.attr == "key" and node.args and isinstance(node.args[0], ast.Constant):
                    keys.add(str(node.args[0].value))
            if isinstance(node, ast.Attribute) and node.attr == "total" and isinstance(node.value, ast.Name) \
                    and node.value.id == "rt":
                total = True
    return kinds, keys, total


def _read_by_rules() -> dict[str, tuple[str, str]]:
    kinds, keys, total = _calls()
    by_kind = {getattr(kr, k) for k in kinds} | ({kr.TOTAL} if total else set())
    out = {p.key: (p.metric, p.panel) for p in kr.PHASES if p.kind in by_kind}
    out |= {k: (servers.BY_KEY[k].metric, servers.BY_KEY[k].panel) for k in keys}
    return out


def _doc_rows() -> dict[str, str]:
    text = DOCS.read_text().split("### Server metrics the rules read", 1)[1].split("\n#", 1)[0]
    return {line.split("|")[1].strip().strip("`"): line for line in text.splitlines() if line.startswith("| `")}


def test_the_runtime_keys_table_is_what_the_code_reads() -> None:
    _, keys, _ = _calls()
    assert keys == set(RULE_READS)


def test_docs_list_exactly_the_server_metrics_the_rules_read() -> None:
    read = _read_by_rules()
    rows = _doc_rows()
    assert set(rows) == set(read)
    for key, (metric, panel) in read.items():
        assert f"`{metric}`" in rows[key] and panel in rows[key], key
    # the kinds no rule reads yet (TiKV's pool waits) are not listed as read
    assert "tikv.propose_wait" not in rows


def test_every_p99_threshold_names_a_phase_and_is_documented() -> None:
    phases = {p.key for p in kr.PHASES}
    p99 = {k.removeprefix("req.p99.") for k in THRESHOLDS if k.startswith("req.p99.")}
    assert p99 <= phases and "tidb.lock_keys" in p99
    rows = _doc_rows()
    for k in p99:
        if k in rows:
            assert f"req.p99.{k}" in rows[k], k


def test_a_real_tidb_capture_shows_each_metric_it_read_as_evidence_with_threshold_and_panel() -> None:
    a = analyze(Bundle.open(ROOT / "samples" / "tidb-unistore-pessimistic-hot-rows"))
    (v,) = a.verdict.per_target
    rows = {e.metric: e for e in v.primary.evidence}
    for metric in ("tidb.lock_keys.waiting", "tidb.lock_keys.share", "tidb.lock_keys.p99", "tidb.statement.waiting",
                   "tidb.statement.p99"):
        assert rows[metric].panel, metric
    p99 = rows["tidb.lock_keys.p99"]
    assert p99.threshold == THRESHOLDS["req.p99.tidb.lock_keys"].value and p99.crossed is not None
    assert p99.crossed == (p99.value is not None and p99.value >= p99.threshold)
    stmt = rows["tidb.statement.p99"]
    assert stmt.threshold == 1.0 and stmt.panel == "TiDB > Query Summary > Duration"
