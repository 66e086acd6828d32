"""The round's cluster bundles, standalone inputs and options (tests/hostile_round.py)."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import stat
import threading
from collections.abc import Callable
from pathlib import Path

from tests.hostile_round import (
    ANSI,
    HTML,
    MD,
    NL,
    PERF,
    SAMPLES,
    SCRIPT,
    Case,
    _fifo,
    _sparse,
    no_raw,
    no_raw_in_file,
    pre,
)


def _cluster(d: Path) -> Path:
    from tests import server_status_seed
    return server_status_seed.make_cluster(d / "cl")


def _cm(fn: Callable[[Path, dict[str, object]], object]) -> Callable[[Path], list[str]]:
    """A cluster bundle whose cluster.json (and nodes) `fn` changes; analyze -o out/r.html."""
    def build(d: Path) -> list[str]:
        pre(d)
        cl = _cluster(d)
        m = json.loads((cl / "cluster.json").read_text())
        out = fn(cl, m)
        (cl / "cluster.json").write_text(json.dumps(m if out is None else out))
        return ["analyze", str(cl), "-o", "out/r.html"]
    return build


def _node(i: int, **kw: object) -> Callable[[Path, dict[str, object]], None]:
    def fn(_cl: Path, m: dict[str, object]) -> None:
        m["nodes"][i].update(kw)  # type: ignore[index]
    return fn


def _node_dir(fn: Callable[[Path], None]) -> Callable[[Path, dict[str, object]], None]:
    def inner(cl: Path, m: dict[str, object]) -> None:
        fn(cl / "nodes" / m["nodes"][0]["name"])  # type: ignore[index]
    return inner


def _replace_node(cl: Path, what: str) -> None:
    nd = cl / "nodes" / "10.0.0.1-tikv"
    shutil.rmtree(nd)
    if what == "fifo":
        os.mkfifo(nd)
    elif what == "device":
        os.mknod(nd, 0o644 | stat.S_IFCHR, os.makedev(1, 5))
    elif what == "file":
        nd.write_text("x")
    elif what == "sibling":
        nd.symlink_to("10.0.0.2-tidb")
    elif what == "loop":
        nd.symlink_to("10.0.0.1-tikv")


def _many_nodes(cl: Path, m: dict[str, object]) -> None:
    first = m["nodes"][0]  # type: ignore[index]
    m["nodes"] = [{**first, "name": f"n{i}", "dir": f"nodes/n{i}"} for i in range(20_000)]  # type: ignore[dict-item]


def cluster_cases() -> list[Case]:
    K = "cluster"
    md = ("<script", "\x1b", "<img")
    out = [
        Case(K, "node dir ../../victim", _cm(_node(0, dir="../../victim")), frozenset({4})),
        Case(K, "node dir /etc", _cm(_node(0, dir="/etc")), frozenset({4})),
        Case(K, "node dir nodes/../nodes/10.0.0.2-tidb (twice)", _cm(_node(0, dir="nodes/../nodes/10.0.0.2-tidb")),
             frozenset({0, 4})),
        Case(K, "node dir empty string", _cm(_node(0, dir="")), frozenset({0, 4})),
        Case(K, "node dir with NUL", _cm(_node(0, dir="nodes/a\x00b")), frozenset({0, 4})),
        Case(K, "node name newline and escapes", _cm(_node(0, name="n\n\x1b[2Jprofiler: error: forged", role=ANSI,
                                                        host=HTML)), frozenset({0, 4})),
        Case(K, "node dir a FIFO", _cm(lambda cl, m: _replace_node(cl, "fifo")), frozenset({0, 4}), timeout=30),
        Case(K, "node dir a device", _cm(lambda cl, m: _replace_node(cl, "device")), frozenset({0, 4}), timeout=30),
        Case(K, "node dir a file", _cm(lambda cl, m: _replace_node(cl, "file")), frozenset({0, 4})),
        Case(K, "node dir links to its sibling", _cm(lambda cl, m: _replace_node(cl, "sibling")), frozenset({0, 4})),
        Case(K, "node dir links to itself", _cm(lambda cl, m: _replace_node(cl, "loop")), frozenset({0, 4}),
             timeout=30),
        Case(K, "node manifest a FIFO", _cm(_node_dir(lambda nd: _fifo("manifest.json")(nd))), frozenset({0, 4}),
             timeout=30),
        Case(K, "node member sparse 1 TB", _cm(_node_dir(lambda nd: _sparse("proc.jsonl.gz")(nd))),
             frozenset({0, 4}), timeout=60),
        Case(K, "20k nodes", _cm(_many_nodes), frozenset({0, 4}), timeout=120),
        Case(K, "cluster.json nested 200k deep", _cm(lambda cl, m: json.loads("[" * 50 + "]" * 50)), frozenset({4})),
        Case(K, "cluster.json window NaN/inf", _cm(lambda cl, m: m.update(window={
            "planned_start": 1e400, "duration": -1, "ended": None})), frozenset({0, 4})),
        Case(K, "cluster node times NaN", _cm(_node(0, started=None, ended="x", start_skew=1e400)),
             frozenset({0, 4})),
        Case(K, "cluster load.log a FIFO", _cm(lambda cl, m: ((cl / "load.log").unlink(), os.mkfifo(cl / "load.log"))
                                               and None), frozenset({0, 4}), timeout=30),
    ]
    for fmt in ("md", "text"):
        def build(d: Path, fmt: str = fmt) -> list[str]:
            args = _cm(_node(0, role=HTML + ANSI, host="<img src=x onerror=alert(1)>", reason=MD + NL,
                             name="n" + ANSI))(d)
            return ["report", args[1], "--format", fmt]
        out.append(Case(K, f"node role/host HTML and escapes [report {fmt}]", build, frozenset({0, 4}),
                        check=no_raw(*md) if fmt == "md" else no_raw("\x1b")))
    return out


def _input(name: str, data: bytes | Callable[[Path], None], args: Callable[[str], list[str]],
           kind: str = "inputs", codes: frozenset[int] = frozenset({0, 7}), timeout: float = 60,
           check: Callable[[Path, str, str], str | None] | None = None) -> Case:
    def build(d: Path) -> list[str]:
        pre(d)
        f = d / "input"
        if callable(data):
            data(f)
        else:
            f.write_bytes(data)
        return args(str(f))
    return Case(kind, name, build, codes, timeout, check)


def _fed_fifo(data: bytes) -> Callable[[Path], None]:
    """A named pipe a writer fills once and closes, as `<(perf script)` gives: an input read once,
    in one pass (a second open would wait for a writer that never comes)."""
    def make(p: Path) -> None:
        os.mkfifo(p)

        def feed() -> None:
            with contextlib.suppress(OSError), open(p, "wb") as w:
                w.write(data)
        threading.Thread(target=feed, daemon=True).start()
    return make


def _link(target: str) -> Callable[[Path], None]:
    return lambda p: p.symlink_to(target)


def fg(*extra: str) -> Callable[[str], list[str]]:
    return lambda f: ["flamegraph", f, "-o", "out/f.svg", *extra]


def _amplified_file(head: bytes, line: Callable[[int], bytes]) -> Callable[[Path], None]:
    """A gzip input under 1 MB of valid lines that inflates as far as the reader allows."""
    def make(p: Path) -> None:
        from tests.hostile_cases_members import _amplified

        _amplified(p.name, head, line)(p.parent)
    return make


def _distinct_stack(i: int) -> bytes:
    return f"app;main;h{i % 977};g{i % 7919};f{i} 1\n".encode()


def input_cases() -> list[Case]:
    tiny = (SAMPLES / "folded" / "tiny.folded").read_bytes()
    script = SCRIPT.read_bytes()
    folded_codes = frozenset({0, 7})
    from tests.hostile_cases_members import _block as _blk
    from tests.hostile_cases_members import _perf_sample as _ps

    return [
        _input("flamegraph of a pipe of perf script", _fed_fifo(script), fg(), codes=frozenset({0}), timeout=60),
        _input("flamegraph of a pipe of perf.data", _fed_fifo(gzip.decompress(
            (SAMPLES / "block" / "loop-fio.perf.data.gz").read_bytes())), fg(), codes=frozenset({0, 7}), timeout=60),
        _input("flamegraph of a pipe of hostile folded", _fed_fifo(f"a;{HTML};{ANSI} 3\n".encode() + tiny), fg(),
               codes=frozenset({0}), timeout=60, check=no_raw_in_file("out/f.svg", HTML)),
        _input("flamegraph of /dev/zero", _link("/dev/zero"), fg(), timeout=60),
        _input("flamegraph of /dev/urandom", _link("/dev/urandom"), fg(), timeout=60),
        _input("heatmap of /dev/zero", _link("/dev/zero"), lambda f: ["heatmap", f, "-o", "out/h.svg"], timeout=60),
        _input("stat of /dev/zero", _link("/dev/zero"), lambda f: ["stat", f], timeout=60),
        _input("stat of a pipe", _fed_fifo((SAMPLES / "perf-stat" / "table-perf61.txt").read_bytes()),
               lambda f: ["stat", f], codes=frozenset({0}), timeout=60),
        _input("heatmap of a pipe of a block trace", _fed_fifo((SAMPLES / "block" / "merges.txt").read_bytes()),
               lambda f: ["heatmap", f, "-o", "out/h.svg"], codes=frozenset({0}), timeout=60),
        _input("diff of a pipe and a file", _fed_fifo(tiny), lambda f: ["diff", f, str(SAMPLES / "folded" / "tiny.folded"),
                                                                 "-o", "out/d.svg"], timeout=30),
        _input("flamegraph of a sparse 1 TB file", lambda p: _sparse(p.name)(p.parent), fg(), timeout=60),
        _input("flamegraph of a directory without manifest", lambda p: p.mkdir(), fg(), codes=frozenset({4, 7})),
        _input("flamegraph of an empty file", b"", fg()),
        _input("folded counts 1e400, -3, nan, 0x10", b"a;b 1" + b"0" * 400 + b"\na;c -3\na;d nan\na;e 0x10\na;f 5\n",
               fg(), codes=folded_codes),
        _input("folded one stack 300k frames", b";".join([b"f"] * 300_000) + b" 1\n", fg(), timeout=120),
        _input("folded 300k frames to pprof", b";".join([b"f%d" % i for i in range(100_000)]) + b" 1\n",
               fg("--format", "pprof"), timeout=120, check=None),
        _input("folded 100k frames to speedscope", b";".join([b"f%d" % i for i in range(100_000)]) + b" 1\n",
               lambda f: ["flamegraph", f, "-o", "out/x.speedscope.json"], timeout=120),
        _input("folded names with escapes to the terminal (stdout pipe)", b"a\x1b[2J;b\x1b]0;x\x07 3\n" + tiny,
               lambda f: ["flamegraph", f, "--folded"]),
        _input("folded names HTML into the SVG", f"a;{HTML};b 3\n".encode() + tiny, fg(),
               check=no_raw_in_file("out/f.svg", HTML)),
        _input("perf script comm newline-ish and escapes", script.replace(b"mysqld", b"my\x1b[31m\rsq", 40),
               lambda f: ["flamegraph", f, "--folded"], check=None),
        _input("perf script 1M-char symbol", script[:2000].replace(b"\n\n", b"\n\t 1 " + b"s" * 1_000_000 + b" (/x)\n\n", 1)
               + script[2000:], fg()),
        _input("perf script gzip bomb", lambda p: p.write_bytes(gzip.compress(b"\n" * (300 << 20), 9)), fg(),
               timeout=120),
        _input("pprof varint length 2^63", b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\x7f",
               fg(), codes=frozenset({0, 7})),
        _input("pprof gzip of 1M 0xff", lambda p: p.write_bytes(gzip.compress(b"\x1a" + b"\xff" * (1 << 20))), fg(),
               codes=frozenset({0, 7})),
        _input("perf.data header only claiming huge sections", b"PERFILE2" + b"\xff" * 96, fg(),
               codes=frozenset({0, 5, 7})),
        _input("perf.data cut in half", lambda p: p.write_bytes(gzip.decompress(
            (SAMPLES / "block" / "loop-fio.perf.data.gz").read_bytes())[:300_000]), fg(), codes=frozenset({0, 5, 7})),
        _input("perf script gzip amplified", lambda p: _amplified_file(b"", _ps)(p), fg(), timeout=300),
        _input("perf script gzip amplified, CPU heatmap", lambda p: _amplified_file(b"", _ps)(p),
               lambda f: ["heatmap", f, "--cpu", "-o", "out/h.svg"], timeout=300),
        _input("folded gzip of distinct stacks", lambda p: _amplified_file(b"", _distinct_stack)(p), fg(), timeout=300),
        _input("folded gzip of distinct stacks to pprof", lambda p: _amplified_file(b"", _distinct_stack)(p),
               fg("--format", "pprof"), timeout=300),
        _input("block trace gzip amplified", lambda p: _amplified_file(b"", _blk)(p),
               lambda f: ["heatmap", f, "-o", "out/h.svg"], timeout=300),
        _input("heatmap pairs NaN/inf/negative", b"".join(f"{a} {b}\n".encode() for a, b in
                                                          (("nan", "1"), ("1", "inf"), ("-5", "-1"), ("1e400", "3"),
                                                           ("2", "3")) * 100),
               lambda f: ["heatmap", f, "-o", "out/h.svg"]),
        _input("biosnoop with 1e400 latencies", (SAMPLES / "biosnoop" / "biosnoop.txt").read_bytes().replace(
            b"0.17", b"1" + b"0" * 400).replace(b"0.05", b"nan"), lambda f: ["heatmap", f, "-o", "out/h.svg"]),
        _input("stat with 1e400 and ANSI event names",
               (SAMPLES / "perf-stat" / "table-perf61.txt").read_bytes().replace(b"task-clock", b"task\x1b[2J-clock")
               + b"   1" + b"0" * 400 + b"      cycles\n", lambda f: ["stat", f], check=no_raw("\x1b")),
    ]


def option_cases() -> list[Case]:
    tiny = str(SAMPLES / "folded" / "tiny.folded")
    script = str(SCRIPT)
    usage = frozenset({2})
    def opt(name: str, args: list[str], codes: frozenset[int] = usage) -> Case:
        return Case("options", name, lambda d: (pre(d), args)[1], codes, 60)
    return [
        opt("--width 0", ["flamegraph", tiny, "--width", "0", "-o", "out/f.svg"]),
        opt("--width 10^9", ["flamegraph", tiny, "--width", "1000000000", "-o", "out/f.svg"], frozenset({0, 2})),
        opt("--width -5", ["flamegraph", tiny, "--width", "-5", "-o", "out/f.svg"]),
        opt("--min-width -1", ["flamegraph", tiny, "--min-width", "-1", "-o", "out/f.svg"]),
        opt("--min-width 1e308", ["flamegraph", tiny, "--min-width", "1e308", "-o", "out/f.svg"], frozenset({0, 2})),
        opt("--from 5s --to 1s", ["flamegraph", script, "--from", "5s", "--to", "1s", "-o", "out/f.svg"],
            frozenset({2, 7})),
        opt("--from 1e400s", ["flamegraph", script, "--from", "1e400s", "-o", "out/f.svg"]),
        opt("--from -5s", ["flamegraph", script, "--from", "-5s", "-o", "out/f.svg"], frozenset({0, 2})),
        opt("--pid 99999999999999999999", ["flamegraph", script, "--pid", "99999999999999999999", "-o", "out/f.svg"],
            frozenset({2, 7})),
        opt("--tid -1", ["flamegraph", script, "--tid", "-1", "-o", "out/f.svg"], frozenset({2, 7})),
        opt("--title with escapes", ["flamegraph", tiny, "--title", "\x1b]0;x\x07" + HTML, "-o", "out/f.svg"],
            frozenset({0})),
        opt("--rows 0", ["heatmap", str(SAMPLES / "block" / "merges.txt"), "--rows", "0", "-o", "out/h.svg"]),
        opt("--rows 10^8", ["heatmap", str(SAMPLES / "block" / "merges.txt"), "--rows", "100000000", "-o", "out/h.svg"],
            frozenset({0, 2})),
        opt("--step-sec 1e-300", ["heatmap", str(SAMPLES / "block" / "merges.txt"), "--step-sec", "1e-300", "-o",
                                  "out/h.svg"], frozenset({0, 2})),
        opt("--max-col 10^12", ["heatmap", str(SAMPLES / "block" / "merges.txt"), "--max-col", "1000000000000", "-o",
                                "out/h.svg"], frozenset({0, 2})),
        opt("--step-lat 1e-300 --linear", ["heatmap", str(SAMPLES / "block" / "merges.txt"), "--linear",
                                           "--step-lat", "1e-300", "-o", "out/h.svg"], frozenset({0, 2})),
        opt("--min-lat 5 --max-lat 1", ["heatmap", str(SAMPLES / "block" / "merges.txt"), "--min-lat", "5",
                                        "--max-lat", "1", "-o", "out/h.svg"], frozenset({0, 2})),
        opt("diff --throughput nan,1", ["diff", tiny, tiny, "--throughput", "nan,1", "-o", "out/d.svg"]),
        opt("diff --throughput 0,0", ["diff", tiny, tiny, "--throughput", "0,0", "-o", "out/d.svg"]),
        opt("diff --throughput 1e400,1", ["diff", tiny, tiny, "--throughput", "1e400,1", "-o", "out/d.svg"]),
        opt("diff --throughput -1,1", ["diff", tiny, tiny, "--throughput", "-1,1", "-o", "out/d.svg"]),
        opt("flamegraph -o /dev/full", ["flamegraph", tiny, "-o", "/dev/full"], frozenset({9})),
        opt("flamegraph -o a directory", ["flamegraph", tiny, "-o", "out"], frozenset({8, 9})),
        opt("flamegraph -o under a missing directory", ["flamegraph", tiny, "-o", "out/no/such/f.svg"],
            frozenset({9})),
        opt("flamegraph -o name with newline and escape", ["flamegraph", tiny, "-o", "out/a\nb\x1b[2J.svg"],
            frozenset({0})),
        opt("flamegraph -o under /proc", ["flamegraph", tiny, "-o", "/proc/self/f.svg"], frozenset({9})),
        opt("attach -o /dev/null", ["attach", "--pid", "{target}", "-d", "1s", "-o", "/dev/null"], frozenset({8, 9})),
        opt("attach -o a file", ["attach", "--pid", "{target}", "-d", "1s", "-o", tiny], frozenset({8})),
        opt("attach -o under /proc", ["attach", "--pid", "{target}", "-d", "1s", "-o", "/proc/self/b"], frozenset({9})),
        opt("report --format xml", ["report", str(PERF), "--format", "xml"]),
        opt("attach -d nan", ["attach", "--pid", "{target}", "-d", "nan", "-o", "out/b"]),
        opt("attach -d 1e400s", ["attach", "--pid", "{target}", "-d", "1e400s", "-o", "out/b"]),
        opt("attach -d -5s", ["attach", "--pid", "{target}", "-d", "-5s", "-o", "out/b"]),
        opt("attach -d 0s", ["attach", "--pid", "{target}", "-d", "0s", "-o", "out/b"]),
        opt("attach -F 0", ["attach", "--pid", "{target}", "-F", "0", "-o", "out/b"]),
        opt("attach -F 10^20", ["attach", "--pid", "{target}", "-F", "100000000000000000000", "-o", "out/b"]),
        opt("attach --interval 1ns", ["attach", "--pid", "{target}", "--interval", "1ns", "-o", "out/b"]),
        opt("attach --pid empty", ["attach", "--pid", "", "-d", "1s", "-o", "out/b"], frozenset({2, 3})),
        opt("attach --pid 0", ["attach", "--pid", "0", "-d", "1s", "-o", "out/b"], frozenset({2, 3})),
        opt("attach --pid -1", ["attach", "--pid", "-1", "-d", "1s", "-o", "out/b"], frozenset({2, 3})),
        opt("attach --pid 2^70", ["attach", "--pid", str(2 ** 70), "-d", "1s", "-o", "out/b"], frozenset({2, 3})),
        opt("attach --pid with newline and escapes", ["attach", "--pid", "x\n\x1b[2Jprofiler: error: forged", "-d",
                                                      "1s", "-o", "out/b"], frozenset({2, 3})),
        opt("attach --container ../../etc", ["attach", "--container", "../../etc", "-d", "1s", "-o", "out/b"],
            frozenset({2, 3})),
        opt("attach --container with NUL-ish", ["attach", "--container", "a/../../\x7f", "-d", "1s", "-o", "out/b"],
            frozenset({2, 3})),
        opt("attach --status-url file:///etc/passwd", ["attach", "--pid", "{target}", "--status-url", "file:///etc/passwd",
                                                       "-d", "1s", "-o", "out/b"]),
        opt("attach --status-url http://[::1", ["attach", "--pid", "{target}", "--status-url", "http://[::1", "-d", "1s",
                                                "-o", "out/b"]),
        opt("attach --status-url port 99999", ["attach", "--pid", "{target}", "--status-url", "http://127.0.0.1:99999",
                                               "-d", "1s", "-o", "out/b"]),
        opt("attach --load-log a directory", ["attach", "--pid", "{target}", "--load-log", "/", "-d", "1s", "-o", "out/b"],
            frozenset({2, 7})),
        opt("attach --load-start mono:-1e300", ["attach", "--pid", "{target}", "--load-start", "mono:-1e300", "-d", "1s",
                                                "-o", "out/b"]),
        opt("attach --collector nonsense", ["attach", "--pid", "{target}", "--collector", "x\x1b[2J", "-d", "1s", "-o",
                                            "out/b"]),
        opt("run without a command", ["run", "--pid", "{target}", "-o", "out/b"]),
        opt("sweep value climbing out", ["sweep", "--pid", "{target}", "--threads", "1,x/../../../escaped", "-o",
                                         "out/s", "--", "true", "{threads}"]),
        opt("sweep value with escapes", ["sweep", "--pid", "{target}", "--threads", "1,\x1b[2J\nx", "-o", "out/s",
                                         "--", "true", "{threads}"]),
        opt("doctor --pid with escapes", ["doctor", "--pid", "x\x1b]0;t\x07\nprofiler: error: forged"],
            frozenset({0, 3, 5})),
        opt("cluster --max-node-size -1", ["cluster", "attach", "--host", "127.0.0.1", "--role", "tikv", "--pid",
                                           "x", "--max-node-size", "-1", "-o", "out/c"]),
        opt("cluster --connect-timeout nan", ["cluster", "attach", "--host", "127.0.0.1", "--role", "tikv", "--pid",
                                              "x", "--connect-timeout", "nan", "-o", "out/c"]),
        opt("cluster --host with newline", ["cluster", "attach", "--host", "a\nb", "--role", "tikv", "--pid", "x",
                                            "-o", "out/c"]),
        opt("cluster --role ../../x", ["cluster", "attach", "--host", "127.0.0.1", "--role", "../../x", "--pid", "x",
                                       "-o", "out/c"], frozenset({2, 6})),
    ]
