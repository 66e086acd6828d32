"""The round's bundle members (tests/hostile_round.py): each member of both backends cut, corrupt,
of the wrong type, a FIFO, a device, a terabyte of holes, with names of HTML and escapes."""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Callable
from pathlib import Path

from tests.hostile_round import (
    ANSI,
    BCC,
    HTML,
    LOADRUN,
    MD,
    NL,
    PERF,
    SERVER,
    Case,
    _device,
    _dir,
    _fifo,
    _gz,
    _m,
    _many_tids,
    _proc,
    _raw,
    _rename_threads,
    _sparse,
    gz,
    jsonl,
    member_case,
    no_raw,
    no_raw_in_file,
)

DEEP_STACK = b"t 1/1 [000] 931.0: 1 cpu-clock:\n" + b"\t 1 f (/x)\n" * 200_000 + b"\n"
LONG_LINE = b"x" * (40 << 20)
PERF_HOSTILE = ("{c} 14556/14607 [000] 930.974326: 10101010 cpu-clock:\n\t 24a330 {f}+0x3 (/lib/{f}.so)\n\n" * 50)
GZIP_TRUNC = gzip.compress(b"spinner 1/1 [000] 930.9: 1 cpu-clock:\n\t 1 f (/x)\n\n" * 2000)[:300]


def _proc_amplified(cap: Path) -> None:
    """Thread records that compress 75 to 1: 50 threads, 6,000 samples each, under 1 MB gzipped
    (a parsed dict kept per record: 565 MB)."""
    recs = [json.loads(ln) for ln in gzip.decompress((cap / "proc.jsonl.gz").read_bytes()).splitlines() if ln]
    t = next(r for r in recs if r.get("kind") == "thread")
    out = [json.dumps(recs[0])]
    out += [json.dumps({**t, "t": round(930.5 + (i // 50) * 0.05, 3), "tid": 100000 + i % 50, "comm": f"w{i % 50}"})
            for i in range(300_000)]
    data = gzip.compress(("\n".join(out) + "\n").encode(), 9)
    assert len(data) < 1 << 20
    (cap / "proc.jsonl.gz").write_bytes(data)


def member_cases() -> list[Case]:
    c: list[Case] = []
    M = "manifest"
    c += member_case(M, "manifest truncated in half", PERF,
                     lambda cap: (cap / "manifest.json").write_bytes((cap / "manifest.json").read_bytes()[:3000]),
                     ("analyze", "flamegraph"))
    c += member_case(M, "manifest empty", PERF, _raw("manifest.json", b""), ("report-md",))
    c += member_case(M, "manifest a list", PERF, _raw("manifest.json", b"[]"), ("heatmap",))
    c += member_case(M, "manifest nested 200k deep", PERF, _raw("manifest.json", b"[" * 200_000 + b"]" * 200_000),
                     ("analyze", "diff"))
    c += member_case(M, "manifest not UTF-8", PERF, _raw("manifest.json", b'{"version": 1, "x": "\xff\xfe"}'),
                     ("report-json",))
    c += member_case(M, "manifest version 1e400", PERF, _m(lambda m: m.update(version=1e400)), ("analyze",))
    c += member_case(M, "manifest version '1'", PERF, _m(lambda m: m.update(version="1")), ("report-md",))
    c += member_case(M, "manifest duration NaN", PERF, lambda cap: (cap / "manifest.json").write_text(
        (cap / "manifest.json").read_text().replace('"duration": 2.0', '"duration": NaN')), ("analyze", "flamegraph"))
    c += member_case(M, "manifest duration -1e308", PERF, _m(lambda m: m.update(duration=-1e308)), ("report-json",))
    c += member_case(M, "manifest clock offset Infinity", PERF, lambda cap: (cap / "manifest.json").write_text(
        (cap / "manifest.json").read_text().replace('"offset": 1795486107.801817', '"offset": Infinity')),
        ("analyze", "report-json"))
    c += member_case(M, "manifest monotonic_start 1e300", PERF,
                     _m(lambda m: m["clock"].update(monotonic_start=1e300)),  # type: ignore[attr-defined]
                     ("analyze", "heatmap", "flamegraph"))
    c += member_case(M, "manifest 3,000 targets", PERF, _m(lambda m: m.update(
        targets=[{**m["targets"][0], "pid": i} for i in range(1, 3000)])),  # type: ignore[index]
        ("analyze",))
    c += member_case(M, "manifest 100k threads", PERF, _m(lambda m: m["targets"][0].update(  # type: ignore[index]
        threads=[{"comm": f"t{i}", "tid": 100 + i} for i in range(100_000)])), ("analyze", "report-html"))
    c += member_case(M, "manifest files name ../victim", PERF, _m(lambda m: m["collectors"][0].update(  # type: ignore[index]
        files=["../../victim/keep.txt"])), ("analyze",), codes=frozenset({4}))
    c += member_case(M, "manifest files name /etc/passwd", PERF, _m(lambda m: m["collectors"][0].update(  # type: ignore[index]
        files=["/etc/passwd"])), ("report-md",), codes=frozenset({4}))
    c += member_case(M, "manifest member name with newline", PERF, _m(lambda m: m["collectors"][0].update(  # type: ignore[index]
        files=["stat.csv\nprofiler: error: forged"])), ("analyze",))
    c += member_case(M, "manifest reason and status hostile", PERF, _m(lambda m: m.update(
        status="partial", reason=ANSI + NL + HTML)), ("report-md", "report-text", "analyze"),
        check=no_raw("\x1b", "<script"))
    c += member_case(M, "manifest target comm/cmdline hostile", PERF, _m(lambda m: m["targets"][0].update(  # type: ignore[index]
        comm=HTML + ANSI, cmdline=[MD, NL], exe="/x\x1b[2J")), ("report-md", "report-text"),
        check=no_raw("\x1b", "<script", "[a](javascript"))
    c += member_case(M, "manifest host hostname hostile", PERF, _m(lambda m: m["host"].update(  # type: ignore[attr-defined]
        hostname=HTML + ANSI + NL, kernel=MD)), ("report-md", "report-text"), check=no_raw("\x1b", "<script"))
    c += member_case(M, "manifest a FIFO", PERF, _fifo("manifest.json"), ("analyze",), timeout=30)
    c += member_case(M, "manifest a device", PERF, _device("manifest.json"), ("report-md",), timeout=30)
    c += member_case(M, "manifest sparse 1 TB", PERF, _sparse("manifest.json"), ("analyze",), timeout=30)
    c += member_case(M, "manifest a directory", PERF, _dir("manifest.json"), ("flamegraph",))

    P = "perf text"
    c += member_case(P, "cpu stacks gzip cut at 300 bytes", PERF, _raw("cpu.perf.txt.gz", GZIP_TRUNC),
                     ("analyze", "flamegraph"))
    c += member_case(P, "cpu stacks not gzip", PERF, _raw("cpu.perf.txt.gz", b"hello\n" * 100), ("flamegraph",))
    c += member_case(P, "cpu stacks one 40 MB line (gzip bomb)", PERF, _gz("cpu.perf.txt.gz", LONG_LINE),
                     ("analyze", "flamegraph", "heatmap"))
    c += member_case(P, "cpu stacks 200k frames deep", PERF, _gz("cpu.perf.txt.gz", DEEP_STACK),
                     ("analyze", "flamegraph", "report-html"))
    c += member_case(P, "cpu stacks times NaN/-1/1e300", PERF, _gz("cpu.perf.txt.gz", b"".join(
        f"spinner 14556/14607 [000] {t}: 10101010 cpu-clock:\n\t 1 f (/x)\n\n".encode()
        for t in ("nan", "-1.0", "1e300", "inf", "930.97") * 50)), ("analyze", "flamegraph"))
    c += member_case(P, "cpu stacks periods 1e30", PERF, _gz("cpu.perf.txt.gz", b"".join(
        f"spinner 14556/14607 [000] 930.9{i:02d}: {p} cpu-clock:\n\t 1 f (/x)\n\n".encode()
        for i, p in enumerate(["1" + "0" * 30, "18446744073709551615", "-5", "99999999999999999999999"] * 20))),
        ("analyze", "flamegraph", "report-json"))
    c += member_case(P, "cpu stacks names hostile", PERF, _gz("cpu.perf.txt.gz", PERF_HOSTILE.format(
        c="sp\x1b[2Jin", f="f<script>alert(1)</script>").encode()), ("report-md", "report-text", "analyze"),
        check=no_raw("\x1b", "<script"))
    c += member_case(P, "cpu stacks a FIFO", PERF, _fifo("cpu.perf.txt.gz"), ("analyze", "flamegraph"), timeout=30)
    c += member_case(P, "cpu stacks a device", PERF, _device("cpu.perf.txt.gz"), ("analyze",), timeout=30)
    c += member_case(P, "cpu stacks sparse 1 TB", PERF, _sparse("cpu.perf.txt.gz"), ("flamegraph",), timeout=60)
    c += member_case(P, "offcpu intervals negative and NaN", PERF, _gz("offcpu.csv.gz", b"tid,comm,off,on,state\n" + b"".join(
        f"14590,fio,{a},{b},D\n".encode() for a, b in (("931", "930"), ("nan", "931"), ("931", "inf"), ("-1e308", "1e308")) * 30)),
        ("analyze", "flamegraph-offcpu"))
    c += member_case(P, "offcpu stacks 200k deep", PERF, _gz("offcpu.perf.txt.gz", DEEP_STACK.replace(
        b"cpu-clock", b"sched:sched_switch")), ("flamegraph-offcpu", "analyze"))

    R = "procfs"
    c += member_case(R, "proc NaN and huge numbers", PERF, _proc(lambda recs: [
        {**r, "t": float("nan")} if i % 7 == 0 else {**r, "utime": 10 ** 400 if i % 5 else -1} for i, r in enumerate(recs)]),
        ("analyze", "report-json"))
    c += member_case(R, "proc records of the wrong type", PERF, _proc(lambda recs: [
        *recs[:50], [1, 2], "x", None, 5, {"kind": ["thread"]}, {"kind": "thread", "tid": "x", "t": "y"}, *recs[50:]]),
        ("analyze",))
    c += member_case(R, "proc 60k distinct threads", PERF, _proc(_many_tids), ("analyze", "report-html"), timeout=180)
    c += member_case(R, "proc 300k thread records in 0.9 MB", PERF, _proc_amplified, ("analyze",), timeout=180)
    c += member_case(R, "proc thread names HTML", PERF, _proc(_rename_threads(HTML)), ("report-md",),
                     check=no_raw("<script"))
    c += member_case(R, "proc thread names escape sequences", PERF, _proc(_rename_threads(ANSI)),
                     ("report-text", "report-md"), check=no_raw("\x1b"))
    c += member_case(R, "proc thread names markdown and newline", PERF, _proc(_rename_threads(MD + NL)),
                     ("report-md",), check=no_raw("[a](javascript", "\nprofiler: error: forged"))
    c += member_case(R, "proc thread names in the HTML report", PERF, _proc(_rename_threads(HTML)),
                     ("report-html",), check=no_raw_in_file("out/r.html", HTML))
    c += member_case(R, "proc deep nesting in a record", PERF, _proc(lambda recs: [*recs, json.loads(
        "[" * 900 + "]" * 900)]), ("analyze",))
    c += member_case(R, "proc a FIFO", PERF, _fifo("proc.jsonl.gz"), ("analyze",), timeout=30)
    c += member_case(R, "proc a sparse 1 TB gzip", PERF, _sparse("proc.jsonl.gz"), ("report-json",), timeout=60)

    S = "stat/syscalls csv"
    c += member_case(S, "stat.csv numbers NaN/inf/1e400", PERF, _raw("stat.csv", b"".join(
        f"{t},{v},msec,task-clock,1000,100.00,,\n".encode() for t, v in
        (("1.0", "nan"), ("inf", "5"), ("2.0", "1e400"), ("-3", "-9"), ("3.0", "9" * 400)) * 20)), ("analyze", "report-json"))
    c += member_case(S, "stat.csv binary", PERF, _raw("stat.csv", os.urandom(0) + bytes(range(256)) * 400),
                     ("analyze",))
    c += member_case(S, "syscalls.csv hostile names and numbers", PERF, _raw("syscalls.csv",
        b"time,tid,comm,syscall,count,total_ns\n" + b"".join(
            f"930.8,{tid},{comm},{sc},{n},{ns}\n".encode() for tid, comm, sc, n, ns in
            (("14555", HTML, "read", "1e400", "nan"), ("-1", ANSI, "<b>", "-5", "9" * 50),
             ("99999999999999999999", "x", MD, "3", "inf")) * 30)), ("report-md", "analyze"),
        check=no_raw("<script", "\x1b", "<b>"))
    c += member_case(S, "syscalls.csv a device", PERF, _device("syscalls.csv"), ("analyze",), timeout=30)

    B = "block"
    c += member_case(B, "block trace gzip of random bytes", PERF, _gz("block.trace.gz", os.urandom(200_000)),
                     ("analyze", "heatmap"))
    c += member_case(B, "block trace 200k fields on one line", PERF, _gz("block.trace.gz", b"fio 1 [000] 1.0: block:block_rq_issue: " + b"8,0 W " * 200_000 + b"\n"), ("heatmap",))
    c += member_case(B, "block events bin random", PERF, _raw("block.events.bin", os.urandom(300_000)),
                     ("analyze", "heatmap"))
    c += member_case(B, "block events bin header only claiming much", PERF,
                     _raw("block.events.bin", b"PRFBLK\x00\x01" + b"\xff" * 56), ("heatmap",))

    C = "bcc members"
    c += member_case(C, "block hist slots huge and negative", BCC, _gz("block.hist.jsonl.gz", jsonl([
        {"t": 1.0, "dev": "sda", "op": "W", "slots": {str(10 ** 9): 5, "-3": 1, "nan": 2, "63": 10 ** 30}},
        {"t": float("inf"), "dev": HTML, "op": ANSI, "slots": [1, 2, 3]},
        {"t": 2.0, "dev": "sda", "op": "R", "hist": {"1": 1e400}}])), ("analyze", "heatmap", "report-md"),
        check=no_raw("<script", "\x1b"))
    c += member_case(C, "offcpu folded counts 1e400, frames hostile", BCC, _gz("offcpu.folded.gz",
        f"fio;a;b 1{'0' * 400}\nfio;{HTML};{ANSI} 5\nfio;x -3\nfio;y nan\n".encode()),
        ("analyze", "flamegraph-offcpu", "report-md"), check=no_raw("<script", "\x1b"))
    c += member_case(C, "offcpu summary nested and wrong types", BCC, _raw("offcpu.summary.json",
        b"[" * 100_000 + b"]" * 100_000), ("analyze",))
    c += member_case(C, "futex summary of wrong types", BCC, _raw("futex.summary.json", json.dumps(
        {"lost": "x", "intervals": [None, {"t": "nan"}], "threads": {"1": [1e308, -1]}}).encode()), ("analyze",))

    V = "server status"
    c += member_case(V, "server metrics: one bad record among good", SERVER, lambda cap: gz(
        cap / "server-metrics.jsonl.gz", gzip.decompress((cap / "server-metrics.jsonl.gz").read_bytes()).replace(
            b"\n", b"\n{\"t\": NaN, \"body\": 5}\n[1]\n", 1)), ("analyze", "report-json"),
        check=lambda d, out, err: None if "skipped" in out + err else "no warning for the bad records")
    c += member_case(V, "server metrics 100k label sets", SERVER, lambda cap: gz(cap / "server-metrics.jsonl.gz", jsonl([
        {**json.loads(gzip.decompress((cap / "server-metrics.jsonl.gz").read_bytes()).splitlines()[0]),
         "body": "".join(f'x_total{{a="{i}"}} {i}\n' for i in range(100_000))}])), ("analyze",), timeout=180)
    c += member_case(V, "server status records hostile", SERVER, _raw("server-status.jsonl", jsonl([
        {"pid": "x", "url": HTML, "kind": ANSI}, {"pid": 10 ** 30, "port": -1}, [1], None])),
        ("analyze", "report-md"), check=no_raw("<script", "\x1b"))
    c += member_case(V, "server pprof of random bytes", SERVER, lambda cap: [
        (p.write_bytes(gzip.compress(os.urandom(5000))) if p.name.endswith(".pb.gz") else None)
        for p in cap.iterdir()] and None, ("analyze", "report-json"))
    c += member_case(V, "server pprof a FIFO", SERVER, _fifo("server-18550-cpu-window.pb.gz"), ("analyze",),
                     timeout=30)

    L = "load log"
    c += member_case(L, "load log 20 MB line and binary", LOADRUN, _raw("load.log", b"\x00\xff" * (10 << 20) + b"\n"),
                     ("analyze", "report-json"))
    c += member_case(L, "load log report lines NaN/inf", LOADRUN, _raw("load.log", b"".join(
        f"[ {t}s ] thds: 4 tps: {v} qps: nan lat (ms,95%): inf err/s: 0.00\n".encode()
        for t, v in (("1", "nan"), ("nan", "5"), ("inf", "inf"), ("-3", "1e400"), ("2", "100.0")) * 20)),
        ("analyze", "report-json"))
    c += member_case(L, "load times of another log", LOADRUN, _gz("load.times.csv.gz", b"line,t\n" + b"".join(
        f"{i},{t}\n".encode() for i, t in enumerate(["nan", "-1", "1e300", "x"] * 1000))), ("analyze",))
    c += member_case(L, "load log a FIFO", LOADRUN, _fifo("load.log"), ("analyze",), timeout=30)
    return c


# --------------------------------------------------------------------------- amplification
# Members that inflate as far as the reader lets them (under its 200:1 bomb ratio) while staying
# under 1 MB on disk: valid records with small variations, so each one is kept.


def _amplified(name: str, head: bytes, line: Callable[[int], bytes]) -> Callable[[Path], None]:
    def mutate(cap: Path) -> None:
        probe = gzip.compress(head + b"".join(line(i) for i in range(20_000)), 9)
        n = int(20_000 * 900_000 / len(probe))
        data = gzip.compress(head + b"".join(line(i) for i in range(n)), 9)
        assert len(data) < 1 << 20
        (cap / name).write_bytes(data)
    return mutate


def _perf_sample(i: int) -> bytes:
    return (f"fio 14555/{14590 + i % 8} [000] {930.5 + i * 1e-4:.6f}: 10101010 cpu-clock:\n"
            f"\t 2af4f fio_gettime+0x9f (/usr/bin/fio)\n\t 2b240 f{i % 64}+0x0 (/usr/bin/fio)\n\n").encode()


def _switch(i: int) -> bytes:
    return (f"fio 14555/{14590 + i % 8} [001] {930.5 + i * 1e-4:.6f}: 1 sched:sched_switch: prev_comm=fio "
            f"prev_pid={14590 + i % 8} prev_prio=120 prev_state=S ==> next_comm=x next_pid=0 next_prio=120\n"
            "\tffffffff821f8298 __schedule+0x618 ([kernel.kallsyms])\n\n").encode()


def _block(i: int) -> bytes:
    t = 930.5 + i * 1e-5
    op = "block_rq_issue: 254,0 WS 4096 ()" if i % 2 == 0 else "block_rq_complete: 254,0 WS ()"
    return f"fio-14590 [001] ..... {t:.6f}: {op} {29252848 + (i // 2) * 8} + 8 be,0,4 [fio]\n".encode()


def _interval(i: int) -> bytes:
    return f"{14590 + i % 8},fio,{930.5 + i * 1e-4:.6f},{930.5 + i * 1e-4 + 5e-5:.6f},D\n".encode()


def _hist(i: int) -> bytes:
    return json.dumps({"bytes": 4096, "count": 1, "dev": f"254:{i % 16}", "end": 6819.710449473 + i,
                       "hist": [[170 + i % 40, 1]], "kind": "slot", "max_ns": 1171864, "op": "RW"[i % 2],
                       "slot": i, "sum_ns": 120185, "t": 6818.710449473 + i}).encode() + b"\n"


def _metric(i: int) -> bytes:
    body = "".join(f'm_total{{a="{j}"}} {i * j}\n' for j in range(200))
    return json.dumps({"pid": 18550, "t0": 4728.8 + i, "t1": 4729.0 + i, "url": "http://127.0.0.1:1/metrics",
                       "body": body}).encode() + b"\n"


def amplified_cases() -> list[Case]:
    A = "amplified member"
    c: list[Case] = []
    c += member_case(A, "cpu stacks", PERF, _amplified("cpu.perf.txt.gz", b"", _perf_sample),
                     ("analyze", "flamegraph", "report-html"), timeout=300)
    c += member_case(A, "offcpu stacks", PERF, _amplified("offcpu.perf.txt.gz", b"", _switch),
                     ("analyze", "flamegraph-offcpu"), timeout=300)
    c += member_case(A, "offcpu intervals", PERF, _amplified("offcpu.csv.gz", b"tid,comm,off,on,state\n", _interval),
                     ("analyze",), timeout=300)
    c += member_case(A, "block trace", PERF, _amplified("block.trace.gz", b"", _block), ("analyze", "heatmap"),
                     timeout=300)
    c += member_case(A, "bcc block histograms", BCC, lambda cap: _amplified(
        "block.hist.jsonl.gz", gzip.decompress((cap / "block.hist.jsonl.gz").read_bytes()).splitlines(True)[0],
        _hist)(cap), ("analyze", "heatmap"), timeout=300)
    c += member_case(A, "server metrics", SERVER, _amplified("server-metrics.jsonl.gz", b"", _metric), ("analyze",),
                     timeout=300)
    return c
