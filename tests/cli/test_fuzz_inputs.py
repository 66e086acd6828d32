"""Fuzzing the post-mortem readers: seeded mutations of every samples/ input through every verb.

Each case takes a real input from samples/ (perf script text, folded stacks, block traces,
HeatMap pairs, perf.data, bcc histograms, whole bundles of both backends), damages it the way
issue 18's fuzzer did (bit flips, truncations, splices, duplicated and deleted lines, huge
numbers, control characters, CRLF, JSON values of the wrong type, damaged gzip), and runs one
post-mortem verb on it in-process: analyze, report in every format, flamegraph (SVG, folded,
off-CPU), heatmap (SVG, JSON, per op, CPU), diff. A case fails on exit 70 (internal error), a
traceback, an exit code no verb documents, output that is not what the format promises, or a
hang (a per-case alarm). The JSON report is also checked against its schema (tests/conftest.py).

Seeded and bounded in time: PROFILER_FUZZ_SEED picks the seed (default fixed, so CI is
reproducible), PROFILER_FUZZ_SECONDS the budget (default 75 s); a failure names the seed, the
case and the mutation, and keeps the input under the test's tmp_path.
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import io
import json
import os
import random
import re
import shutil
import signal
import time
import traceback
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from profiler.cli import main
from tests import server_status_seed
from tests.conftest import ROOT

SAMPLES = ROOT / "samples"
SEED = int(os.environ.get("PROFILER_FUZZ_SEED", "18"))
BUDGET = float(os.environ.get("PROFILER_FUZZ_SECONDS", "75"))
CASE_TIMEOUT = 60  # seconds: a case that takes longer is a hang
EXIT_CODES = {0, 2, 4, 5, 7}  # success, usage (an option the input cannot take), bad bundle, no perf, bad input


class Hang(BaseException):
    """Raised by the per-case alarm (a BaseException: main() catches Exception only)."""


# --------------------------------------------------------------------------- mutations

Mutation = Callable[[random.Random, bytes], bytes]


def bit_flips(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 16)):
        i = rng.randrange(len(b))
        b[i] ^= 1 << rng.randrange(8)
    return bytes(b)


def truncate(rng: random.Random, data: bytes) -> bytes:
    return data[: rng.randrange(len(data))]


def splice(rng: random.Random, data: bytes) -> bytes:
    i, j = sorted(rng.randrange(len(data) + 1) for _ in range(2))
    k = rng.randrange(len(data) + 1)
    return data[:k] + data[i:j] + data[k:]


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def duplicate_lines(rng: random.Random, data: bytes) -> bytes:
    lines = _lines(data)
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(lines))
        lines.insert(rng.randrange(len(lines) + 1), lines[i] * rng.choice((1, 1, 2, 50)))
    return b"\n".join(lines)


def delete_lines(rng: random.Random, data: bytes) -> bytes:
    lines = _lines(data)
    for _ in range(rng.randint(1, max(1, len(lines) // 4))):
        if len(lines) > 1:
            del lines[rng.randrange(len(lines))]
    return b"\n".join(lines)


HUGE = (b"99999999999999999999999", b"18446744073709551616", b"1" * 5000, b"-1", b"0", b"1e308", b"nan", b"inf",
        b"-0.0", b"4294967296", b"9" * 400, b"0x7fffffff")


def huge_numbers(rng: random.Random, data: bytes) -> bytes:
    nums = list(re.finditer(rb"\d+(?:\.\d+)?", data))
    if not nums:
        return data + rng.choice(HUGE)
    out = bytearray(data)
    for m in sorted(rng.sample(nums, min(len(nums), rng.randint(1, 6))), key=lambda m: -m.start()):
        out[m.start() : m.end()] = rng.choice(HUGE)
    return bytes(out)


CONTROL = (b"\x1b]0;pwned\x07", b"\x1b[2J", b"\x00", b"\r", b"\x9b31m", b"\xff\xfe", b"\n\n", b"\t", b"\x7f",
           b"<script>alert(1)</script>", b"\xe2\x80\xae", b";", b" ", b"\\")


def control_chars(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 10)):
        i = rng.randrange(len(out) + 1)
        out[i:i] = rng.choice(CONTROL)
    return bytes(out)


def crlf(rng: random.Random, data: bytes) -> bytes:
    return data.replace(b"\n", b"\r\n")


def random_bytes(rng: random.Random, data: bytes) -> bytes:
    i = rng.randrange(len(data) + 1)
    return data[:i] + rng.randbytes(rng.randint(1, 256)) + data[i:]


def swap_lines(rng: random.Random, data: bytes) -> bytes:
    lines = _lines(data)
    for _ in range(rng.randint(1, 10)):
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    return b"\n".join(lines)


WEIRD: tuple[Any, ...] = (None, "", "two", -1, 0, 1 << 70, 1e308, True, [], {}, [[[[[[[[]]]]]]]], {"a": {"b": {}}},
                          "\x1b]0;x\x07", 2**31)


def json_values(rng: random.Random, data: bytes) -> bytes:
    """JSON documents or JSON lines: some leaf or object replaced by a value of another type."""
    lines = _lines(data)
    idx = [i for i, ln in enumerate(lines) if ln.strip()[:1] in (b"{", b"[")]
    if not idx:
        return huge_numbers(rng, data)
    whole = len(idx) == 1 and len(lines) > 1 and not lines[0].strip().endswith(b"}")
    try:
        if whole:  # one document over several lines (a manifest)
            docs = [(None, json.loads(data))]
        else:
            docs = [(i, json.loads(lines[i])) for i in rng.sample(idx, min(len(idx), rng.randint(1, 5)))]
    except (ValueError, RecursionError):
        return huge_numbers(rng, data)
    for i, doc in docs:
        for _ in range(rng.randint(1, 3)):
            _poke(rng, doc)
        text = json.dumps(doc).encode()
        if i is None:
            return text
        lines[i] = text
    return b"\n".join(lines)


def _poke(rng: random.Random, node: Any, depth: int = 0) -> None:
    keys = list(node) if isinstance(node, dict) else list(range(len(node))) if isinstance(node, list) else []
    if not keys:
        return
    k = rng.choice(keys)
    child = node[k]
    if isinstance(child, dict | list) and child and depth < 6 and rng.random() < 0.7:
        _poke(rng, child, depth + 1)
    else:
        node[k] = copy.deepcopy(rng.choice(WEIRD))  # a copy: later pokes must not reach the shared value


TEXT_MUTATIONS: tuple[Mutation, ...] = (bit_flips, truncate, splice, duplicate_lines, delete_lines, huge_numbers,
                                        control_chars, crlf, random_bytes, swap_lines)
JSON_MUTATIONS: tuple[Mutation, ...] = (json_values, json_values, truncate, huge_numbers, control_chars, bit_flips)


def mutate_file(rng: random.Random, path: Path) -> str:
    """Damage one file in place; returns what was done. gzip members are damaged either as the
    text they hold (recompressed) or as compressed bytes (a cut, bad CRC, corrupt deflate)."""
    data = path.read_bytes() or b"\n"
    is_json = path.name.endswith((".json", ".jsonl.gz", ".json.gz"))
    pool = JSON_MUTATIONS if is_json else TEXT_MUTATIONS
    if data[:2] == b"\x1f\x8b" and rng.random() < 0.7:
        try:
            raw = gzip.decompress(data)
        except (OSError, EOFError, zlib.error):
            raw = None
        if raw:
            m = rng.choice(pool)
            path.write_bytes(gzip.compress(m(rng, raw), 1))
            return f"{path.name}: {m.__name__} (inside gzip)"
    m = rng.choice(pool if data[:2] != b"\x1f\x8b" else (bit_flips, truncate, splice, random_bytes, _gzip_tail))
    path.write_bytes(m(rng, data) or b"\n")
    return f"{path.name}: {m.__name__}"


def _gzip_tail(rng: random.Random, data: bytes) -> bytes:
    """Damage at the very end of a gzip stream: its CRC, its length, garbage after it."""
    b = bytearray(data)
    what = rng.randrange(3)
    if what == 0:
        b[-8] ^= 0xFF
    elif what == 1:
        b[-1] ^= 0xFF
    else:
        b += rng.randbytes(rng.randint(1, 64))
    return bytes(b)


# --------------------------------------------------------------------------- inputs and verbs


@dataclass(frozen=True)
class Input:
    kind: str  # "bundle", "cluster", "stacks", "block", "pairs", "perfdata", "stat", "biosnoop", "pprof"
    path: Path


def inputs(seeds: Path) -> list[Input]:
    """Every seed input: the samples, and a few made here into ``seeds`` (pprof profiles)."""
    found: list[Input] = []
    for d in sorted(p.parent for p in SAMPLES.glob("**/manifest.json")):
        found.append(Input("bundle", d))
    for p in sorted((SAMPLES / "perf-script").glob("*.txt")) + sorted((SAMPLES / "perf-script-collectors").glob("*.txt")):
        found.append(Input("stacks", p))
    for p in sorted((SAMPLES / "perf-script").glob("*.folded")) + sorted((SAMPLES / "folded").glob("*.folded")):
        found.append(Input("stacks", p))
    for p in sorted((SAMPLES / "block").glob("*.txt")):
        found.append(Input("pairs" if "pairs" in p.name else "block", p))
    found.append(Input("perfdata", SAMPLES / "block" / "loop-fio.perf.data.gz"))
    for p in sorted((SAMPLES / "perf-stat").glob("*.csv")) + sorted(SAMPLES.glob("bcc/*.jsonl.gz")):
        found.append(Input("stacks", p))  # not stacks at all: every verb must say so in one line
    for p in sorted((SAMPLES / "perf-stat").glob("*")):
        if p.suffix in (".txt", ".csv"):
            found.append(Input("stat", p))
    for p in sorted((SAMPLES / "biosnoop").glob("*.txt")):
        found.append(Input("biosnoop", p))
    found.extend(Input("pprof", p) for p in _pprof_seeds(seeds))
    # every server-status member (the index, /metrics scrapes, Go profiles and a goroutine dump), twice:
    # as likely to be picked as a second kind of bundle
    ss = server_status_seed.make(seeds / "server-status")
    found.extend([Input("bundle", ss), Input("bundle", ss)])
    found.append(Input("cluster", server_status_seed.make_cluster(seeds / "cluster")))
    return found


def _pprof_seeds(d: Path) -> tuple[Path, Path]:
    """A pprof profile (the reader's own test encoder: two sample types, inlining, both repeated
    encodings), plain and gzipped as Go serves it."""
    from tests.cli.test_inputs_pprof import profile_bytes

    d.mkdir(parents=True, exist_ok=True)
    plain, gz = d / "cpu.pb", d / "cpu.pb.gz"
    plain.write_bytes(profile_bytes(padding=20))
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    return plain, gz


def verbs_for(kind: str, target: str, out: Path) -> list[list[str]]:
    if kind == "bundle":
        return [
            ["analyze", target, "-o", str(out / "r.html")],
            ["analyze", target, "--no-html"],
            ["report", target, "--format", "json"],
            ["report", target, "--format", "md"],
            ["report", target, "--format", "text"],
            ["report", target, "--format", "html", "-o", str(out / "r2.html")],
            ["flamegraph", target, "-o", str(out / "f.svg")],
            ["flamegraph", target, "--offcpu", "--folded"],
            ["heatmap", target, "--json"],
            ["heatmap", target, "--cpu", "-o", str(out / "h.svg")],
            ["diff", target, target, "--folded"],
        ]
    if kind == "cluster":
        return [["analyze", target], ["report", target, "--format", "json"], ["report", target, "--format", "md"],
                ["report", target], ["flamegraph", target + "/nodes/10.0.0.1-tikv", "--folded"]]
    if kind == "perfdata":
        return [["heatmap", target, "--json"], ["heatmap", target, "--by", "op", "-o", str(out / "h.svg")],
                ["flamegraph", target, "--folded"]]
    if kind == "stat":
        return [["stat", target], ["stat", target, "--json"]]
    if kind == "biosnoop":
        return [["heatmap", target, "--json"], ["heatmap", target, "--by", "comm", "-o", str(out / "h.svg")],
                ["heatmap", target, "--by", "device", "--log", "--json"]]
    if kind == "pprof":
        return [["flamegraph", target, "--folded"], ["flamegraph", target, "-o", str(out / "f.svg")],
                ["flamegraph", target, "--folded", "--event", "samples"], ["diff", target, target, "--folded"]]
    if kind in ("block", "pairs"):
        return [["heatmap", target, "--json"], ["heatmap", target, "--by", "op", "--log", "-o", str(out / "h.svg")],
                ["heatmap", target, "--step-lat", "1", "-o", str(out / "h2.svg")]]
    return [
        ["flamegraph", target, "-o", str(out / "f.svg")],
        ["flamegraph", target, "--folded"],
        ["flamegraph", target, "--folded", "--compat", "perl", "--by", "thread"],
        ["flamegraph", target, "--offcpu", "--folded"],
        ["heatmap", target, "--cpu", "--json"],
        ["diff", target, target, "-o", str(out / "d.svg")],
    ]


def prepare(rng: random.Random, inp: Input, case: Path) -> tuple[str, str]:
    """A damaged copy of ``inp`` under ``case``: (its path, what was done to it)."""
    if inp.kind == "bundle":
        dst = case / "bundle"
        shutil.copytree(inp.path, dst)
        members = sorted(p for p in dst.iterdir() if p.is_file() and p.name not in ("README.md", "report.html"))
        done = [mutate_file(rng, rng.choice(members)) for _ in range(rng.choice((1, 1, 2)))]
        return str(dst), "; ".join(done)
    if inp.kind == "cluster":  # its manifest, its load log, or a member of one of its nodes
        dst = case / "cluster"
        shutil.copytree(inp.path, dst)
        files = sorted(p for p in dst.rglob("*") if p.is_file() and p.name not in ("README.md", "report.html"))
        picks = [dst / "cluster.json"] * 3 + [dst / "load.log"] + files
        return str(dst), "; ".join(mutate_file(rng, rng.choice(picks)) for _ in range(rng.choice((1, 1, 2))))
    if inp.kind == "perfdata":
        dst = case / "loop.perf.data"
        dst.write_bytes(gzip.decompress(inp.path.read_bytes()))
        return str(dst), mutate_file(rng, dst)
    dst = case / inp.path.name
    shutil.copyfile(inp.path, dst)
    done = mutate_file(rng, dst)
    if rng.random() < 0.25 and dst.read_bytes()[:2] != b"\x1f\x8b":  # the same damage, gzipped (and maybe cut)
        gz = gzip.compress(dst.read_bytes())
        if rng.random() < 0.5:
            gz = gz[: rng.randrange(len(gz))]
        dst = dst.with_name(dst.name + ".gz")
        dst.write_bytes(gz)
        done += ", then gzipped" + (" and cut" if not gz.endswith(gzip.compress(b"")[-8:]) else "")
    return str(dst), done


# --------------------------------------------------------------------------- running one case


@contextlib.contextmanager
def alarm(seconds: int) -> Iterator[None]:
    def ring(signum: int, frame: FrameType | None) -> None:
        raise Hang()

    old = signal.signal(signal.SIGALRM, ring)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def run_case(args: list[str]) -> tuple[int | str, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        with alarm(CASE_TIMEOUT), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code: int | str = main(args)
    except Hang:
        code = "hang"
    except BaseException:  # noqa: BLE001 - anything escaping main() is a failure to report
        code = "escaped"
        err.write(traceback.format_exc())
    return code, out.getvalue(), err.getvalue()


def problems(args: list[str], code: int | str, out: str, err: str) -> list[str]:
    found = []
    if code not in EXIT_CODES:
        found.append(f"exit {code}")
    if "Traceback" in err or "internal error" in err:
        found.append("a traceback or internal error")
    if code not in (0, "hang", "escaped"):
        errors = [ln for ln in err.splitlines() if ln.startswith("profiler: error:")]
        if len(errors) != 1:
            found.append("not exactly one error line")
    if code == 0 and "--json" in args or (code == 0 and args[:1] == ["report"] and "json" in args):
        try:
            json.loads(out)
        except ValueError:
            found.append("--json output is not JSON")
    if code == 0 and "--folded" in args and args[0] == "flamegraph":
        bad = [ln for ln in out.split("\n")[:-1] if not re.fullmatch(r".+ \d+", ln, re.S)]
        if bad:
            found.append(f"folded output line that is not 'stack count': {bad[0][:80]!r}")
    return found


def test_fuzz_every_reader_through_every_verb(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    pool = inputs(tmp_path / "seeds")
    assert len(pool) > 40, "the samples are the fuzzer's seeds"
    deadline = time.monotonic() + BUDGET
    failures: list[str] = []
    cases = 0
    verbs_seen: set[str] = set()
    while time.monotonic() < deadline and len(failures) < 5:
        inp = rng.choice(pool)
        case = tmp_path / f"case{cases}"
        case.mkdir()
        target, done = prepare(rng, inp, case)
        args = rng.choice(verbs_for(inp.kind, target, case))
        code, out, err = run_case(args)
        found = problems(args, code, out, err)
        verbs_seen.add(args[0])
        if found:
            seed_name = inp.path.relative_to(SAMPLES) if inp.path.is_relative_to(SAMPLES) else inp.path.name
            failures.append(f"seed {SEED} case {cases}: {seed_name} [{done}] "
                            f"profiler {' '.join(args)} -> {', '.join(found)}\n    {err.strip()[-600:]}")
        else:
            shutil.rmtree(case, ignore_errors=True)
        cases += 1
    print(f"fuzzed {cases} cases in {BUDGET:.0f} s (seed {SEED}), verbs {sorted(verbs_seen)}")
    assert not failures, f"{len(failures)} failing case(s) of {cases} (inputs kept in {tmp_path}):\n" + "\n".join(failures)
    assert cases >= 50, f"only {cases} cases in {BUDGET:.0f} s: the budget is too small to fuzz anything"
    assert verbs_seen == {"analyze", "report", "flamegraph", "heatmap", "diff", "stat"}, verbs_seen


@pytest.mark.parametrize("seed", range(3))
def test_mutations_are_seeded(seed: int) -> None:
    """The same seed damages the same way (a failure can be replayed from its seed and case)."""
    data = (SAMPLES / "perf-script" / "mariadb-sysbench.txt").read_bytes()
    for m in TEXT_MUTATIONS + JSON_MUTATIONS:
        assert m(random.Random(seed), data) == m(random.Random(seed), data), m.__name__
