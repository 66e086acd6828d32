"""Defects seen in screenshots of the HTML report (issue 28), each checked at its cause: the
figures behind the page (the timeline's series, the renderer's text), read from real sample
bundles or built by hand where a case needs it."""

from __future__ import annotations

import re

import numpy as np
import pytest
from profiler.analyzers.analysis import analyze
from profiler.analyzers.series import timeline
from profiler.analyzers.server.view import ServerStatusView

from profiler.bundle import Bundle
from profiler.renderers import formatting, report_charts
from profiler.renderers.report_html import RENDERER as html
from tests.conftest import SAMPLES

CONVOY = SAMPLES / "perf" / "fsync-writer-and-lock-convoy"


def test_a_late_perf_stat_row_leaves_no_gap() -> None:
    """Rows every second, one of them 20 ms late: each bucket still gets its rate."""
    edges = np.arange(0.0, 6.0)
    ends = np.array([1.0, 2.0, 3.02, 4.0, 5.0])
    rates = np.array([10.0, 20.0, 30.0, 40.0, 50.0])
    got = timeline._interval_rate(ends, rates, 0.0, edges)
    assert np.isfinite(got).all()
    assert got[2] == pytest.approx(30.0) and got[3] == pytest.approx((0.02 * 30 + 0.98 * 40) / 1.0, rel=1e-3)
    # the old way put two rows in one bucket and none in the next
    old = timeline._level_per_bucket(ends, rates, edges)
    assert np.isnan(old).any()


def test_psi_is_a_share_of_time_and_stays_under_100() -> None:
    a = analyze(Bundle.open(SAMPLES / "tikv-shaped-raftstore-hot"))
    psi = a.timeline.panels["psi"].series
    assert all(v is None or 0 <= v <= 100 for s in psi.values() for v in s)


def test_a_device_number_ending_a_sentence_is_named() -> None:
    devs = {"254:0": "vda"}
    assert formatting.plain("reads on 254:0.", devs) == "reads on vda."
    assert formatting.plain("at 12:30:01, v1.2:3 and 254:01.5", devs) == "at 12:30:01, v1.2:3 and 254:01.5"


def test_the_marker_line_does_not_run_through_a_bar_label() -> None:
    svg = report_charts.bars([("raftstore", 0.75, "#2f6fb0"), ("apply", 0.2, "#2f6fb0")], "of size", max_value=1.0,
                             marker=0.8)
    mx = float(re.search(r'<line x1="([\d.]+)"', svg).group(1))  # type: ignore[union-attr]
    for x, text in re.findall(r'<text x="([\d.]+)" y="[\d.]+" class="tick">([^<]+)</text>', svg):
        if "of size" in text and not text.startswith("0.8"):
            width = 7 * len(text)
            assert not float(x) - 4 <= mx <= float(x) + width, (x, text, mx)


def test_runtime_names_and_the_io_counts_are_said() -> None:
    out = html.render(analyze(Bundle.open(CONVOY)))
    assert "runtime: C" in out and 'muted">c<' not in out
    # the block-IO table's paired IOs against the collector's completions, explained
    assert re.search(r"5,171 IOs paired with their issue, of the 6,461 completions the collector traced", out)


def test_no_server_section_when_nothing_was_collected() -> None:
    a = analyze(Bundle.open(SAMPLES / "io-fsync-fio"))
    a.server = ServerStatusView(status="skipped", reason="no status port found: pass --status-url")
    a.warnings.append("server-status: no status port found: pass --status-url")
    out = html.render(a)
    visible = re.sub(r"<script.*?</script>", "", out, flags=re.S)  # the page's text, not its data
    assert "What the servers say" not in visible
    assert visible.count("no status port found") == 1  # said once, in capture health
