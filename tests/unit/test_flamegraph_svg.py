"""The flame graph model and the SVG renderer: golden SVGs (test mode), escaping, pruning."""

from __future__ import annotations

import re
import xml.dom.minidom

import pytest
from profiler.analyzers.stacks.differential import differential
from profiler.analyzers.stacks.flame import (
    FlameGraph,
    Node,
    build_tree,
    diff_color,
    frame_color,
    frame_kind,
)
from profiler.analyzers.stacks.offcpu import offcpu_folded, wait_reason

from profiler.inputs.folded import parse_folded
from profiler.inputs.perfscript import iter_samples
from profiler.renderers.flamegraph_svg import RENDERER, FlameGraphOptions
from tests.conftest import ROOT

SAMPLES = ROOT / "samples"
TINY = SAMPLES / "folded" / "tiny.folded"


def tiny() -> dict[str, int]:
    with open(TINY) as f:
        return parse_folded(f)


def test_tree_totals_and_pruned_build_agree() -> None:
    full = build_tree(tiny())
    assert full.total == 12
    assert full.children["app"].children["main"].total == 10
    assert full.children["app"].children["main"].children["run"].self_ == 0
    pruned = build_tree(tiny(), min_fraction=0.15)  # keeps frames of >= 1.8 samples
    assert pruned.total == 12
    main = pruned.children["app"].children["main"]
    assert set(main.children) == {"run", "idle"}
    assert "runtime.mallocgc" not in pruned.children["app"].children
    opts = FlameGraphOptions(test_mode=True, min_width=0.15 * 1180)
    assert RENDERER.render(FlameGraph(full), opts) == RENDERER.render(FlameGraph(pruned), opts)


def test_golden_svg_test_mode() -> None:
    svg = RENDERER.render(FlameGraph(build_tree(tiny()), title="tiny <test>", subtitle="a & b"), FlameGraphOptions(test_mode=True))
    golden = SAMPLES / "folded" / "tiny.svg"
    assert svg == golden.read_text()


def test_svg_is_valid_xml_with_script_and_escaped_names() -> None:
    counts = tiny()
    counts["app;evil</title><script>alert(1)</script>;\x01ctl\x7f"] = 4
    svg = RENDERER.render(FlameGraph(build_tree(counts), title="<b>t</b>"))
    doc = xml.dom.minidom.parseString(svg.encode())
    scripts = doc.getElementsByTagName("script")
    assert len(scripts) == 1  # ours only: the frame name stayed text
    assert "alert(1)" not in scripts[0].toxml()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in svg
    assert "\x01" not in svg and "\ufffd" in svg
    assert "http://" not in svg.replace("http://www.w3.org", "")  # nothing fetched from the network


def test_inverted_puts_root_on_top() -> None:
    g = FlameGraph(build_tree(tiny()))
    def root_y(svg: str) -> int:
        m = re.search(r'<title>all \(.*?<rect x="[\d.]+" y="(\d+)"', svg)
        assert m
        return int(m.group(1))
    assert root_y(RENDERER.render(g, FlameGraphOptions(inverted=True))) < root_y(RENDERER.render(g))


def test_kinds_and_deterministic_colours() -> None:
    assert frame_kind("do_syscall_64") == "kernel"
    assert frame_kind("foo", parent_kind="kernel") == "kernel"
    assert frame_kind("tcp_sendmsg_[k]") == "kernel"
    assert frame_kind("runtime.mallocgc") == "go-runtime"
    assert frame_kind("net/http.(*Client).Do") == "go"
    assert frame_kind("core::ptr::drop_in_place<u8>") == "rust-std"
    assert frame_kind("std::sys::backtrace::__rust_begin_short_backtrace") == "rust-std"
    assert frame_kind("std::chrono::_V2::system_clock::now") == "user"  # C++
    assert frame_kind("<main::Hasher as main::Work>::run") == "rust"
    assert frame_kind("Lcom/x/Y;::run_[j]") == "jit"
    assert frame_kind("[libz.so]") == "unknown"
    assert frame_color("x", "user") == frame_color("x", "user")
    assert frame_color("x", "user") != frame_color("y", "user")
    assert diff_color(1, 1).startswith("rgb(250,") and diff_color(-1, 1).endswith(",250)")


def test_differential_normalisation() -> None:
    before = {"a;b": 10, "a;c": 10}
    after = {"a;b": 40, "a;c": 20}
    root, scale = differential(before, after)
    assert scale == 3.0
    a = root.children["a"]
    assert a.delta == 0
    assert a.children["b"].delta == 10 and a.children["c"].delta == -10
    # same work per operation when throughput doubled and cost per op stayed: no change
    root, scale = differential({"a;b": 10}, {"a;b": 20}, before_work=100, after_work=200)
    assert root.children["a"].children["b"].delta == 0


def test_offcpu_widths_and_reasons() -> None:
    with open(SAMPLES / "perf-script" / "sched-switch-callchain.txt") as f:
        counts, stats = offcpu_folded(iter_samples(f))
    assert counts and stats.switches > 0
    assert stats.upper_bound > 0 and stats.notes  # recorded with -p: no switch-ins
    roots = {k.split(";")[0] for k in counts}
    assert "idle (epoll/poll)" in roots
    assert wait_reason("D", ["io_schedule"]) == "io (read/page cache)"
    assert wait_reason("S", ["futex_wait_queue", "futex_wait"]) == "lock (futex)"
    assert wait_reason("R+", []) == "preempted (runnable)"
    # switch-in events close intervals exactly
    text = (
        "a 10 [000] 1.000000: sched:sched_switch: prev_comm=a prev_pid=10 prev_prio=120 prev_state=S ==> next_comm=b next_pid=11 next_prio=120\n"
        "\tffffffff1 futex_wait ([kernel.kallsyms])\n\n"
        "b 11 [000] 1.250000: sched:sched_switch: prev_comm=b prev_pid=11 prev_prio=120 prev_state=R ==> next_comm=a next_pid=10 next_prio=120\n"
        "\tffffffff2 schedule ([kernel.kallsyms])\n\n"
    )
    counts, stats = offcpu_folded(iter_samples(text.splitlines(True)))
    assert counts == {"lock (futex);a;futex_wait": 250000}
    assert stats.with_switch_in == 1


def test_node_repr_and_walk() -> None:
    n = Node("x")
    n.child("y").child("z")
    assert [d for d, _ in n.walk()] == [0, 1, 2]
    assert "Node('x'" in repr(n)


@pytest.mark.parametrize("inverted", [False, True])
def test_many_unique_stacks_render(inverted: bool) -> None:
    counts = {f"p;f{i % 97};g{i % 1013};h{i}": 1 + i % 5 for i in range(20000)}
    svg = RENDERER.render(FlameGraph(build_tree(counts, min_fraction=0.1 / 1180)), FlameGraphOptions(inverted=inverted))
    xml.dom.minidom.parseString(svg.encode())
    assert svg.count("<g data-i=") < 2000  # pruned to what can be seen


def test_offcpu_switch_events_and_interval_csv() -> None:
    from profiler.analyzers.stacks.offcpu import offcpu_by_reason

    from profiler.inputs.bundles import read_intervals

    with open(SAMPLES / "perf-script-collectors" / "switch-events-offcpu.txt") as f:
        counts, stats = offcpu_folded(iter_samples(f))
    assert stats.with_switch_in == 6 and stats.upper_bound == 0 and not stats.notes
    assert sum(counts.values()) > 0
    # the collectors' offcpu.csv.gz gives each switch-out its switch-in
    with open(SAMPLES / "perf-script" / "sched-switch-callchain.txt") as f:
        samples = list(iter_samples(f))
    first = samples[0]
    assert first.time is not None and first.tid is not None
    csv_lines = ["tid,comm,off,on,state\n", f"{first.tid},redis-server,{first.time:.6f},{first.time + 0.5:.6f},S\n"]
    counts, stats = offcpu_folded(samples, intervals=read_intervals(csv_lines))
    assert stats.with_switch_in >= 1
    assert max(counts.values()) >= 500000  # that interval: 0.5 s in µs
    bcc = offcpu_by_reason({"t;main;futex_wait_[k]": 5, "t;main;irqentry_exit_to_user_mode_[k]": 2, "t;x": 1})
    assert bcc == {"lock (futex);t;main;futex_wait_[k]": 5, "preempted (runnable);t;main;irqentry_exit_to_user_mode_[k]": 2, "other;t;x": 1}


def test_pruned_build_with_odd_names_matches_full_build() -> None:
    counts = {"a;b": 5, "a;b\x00x;c": 3, "a;;c": 2, "a": 1, "a;b;c": 4, "a;bb": 1}
    opts = FlameGraphOptions(test_mode=True, min_width=1)
    assert RENDERER.render(FlameGraph(build_tree(counts, min_fraction=1 / 1180)), opts) == RENDERER.render(FlameGraph(build_tree(counts)), opts)
    counts.pop("a;b\x00x;c")
    assert RENDERER.render(FlameGraph(build_tree(counts, min_fraction=1 / 1180)), opts) == RENDERER.render(FlameGraph(build_tree(counts)), opts)
