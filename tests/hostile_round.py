"""A round of hostile post-mortem inputs (issue 27), each run as the CLI would be in the field.

Every case builds its input under its own directory, runs one verb as a separate process (peak
memory read by wait4 on a grandchild: tests/cli/test_hostile_load.py says why) and is held to
the rules every verb keeps: an exit code the verb documents (docs/cli.md), no traceback and no
exit 70, at most one error line, no escape sequence on stderr, nothing written outside the
output path, memory under 500 MB for an input under 1 MB, an end within its time.

`python -m tests.hostile_round [SUBSTRING]` runs the round and prints a table;
tests/cli/test_hostile_round.py runs each case as a test.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import ROOT
from tests.measure import run_profiler

SAMPLES = ROOT / "samples"
PERF = SAMPLES / "perf" / "fio-fsync-and-python-locks"
BCC = SAMPLES / "bcc" / "io-fsync-fio"
SERVER = SAMPLES / "tidb-unistore-pessimistic-hot-rows"
LOADRUN = SAMPLES / "mariadb-sysbench-run"
SCRIPT = SAMPLES / "perf-script" / "mariadb-sysbench.txt"
MEMORY_MB = 500
REPORTS = ("report.html", "cluster-report.html")

@dataclass
class Case:
    kind: str
    name: str
    build: Callable[[Path], list[str]]  # makes the input under the directory, returns the verb's arguments
    codes: frozenset[int]
    timeout: float = 90
    check: Callable[[Path, str, str], str | None] | None = None  # (dir, stdout, stderr) -> a problem
    outputs: tuple[str, ...] = ("out",)  # paths under the case's directory the verb may write


@dataclass
class Result:
    case: Case
    code: int
    rss_mb: float
    seconds: float
    problems: list[str] = field(default_factory=list)
    err: str = ""


def _snapshot(root: Path, outputs: tuple[str, ...]) -> dict[str, tuple[int, int, int]]:
    """Every path under root but the outputs (and the reports a bundle holds): mode, size, mtime."""
    seen: dict[str, tuple[int, int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + dirnames:
            r = os.path.relpath(os.path.join(dirpath, name), root)
            if name in REPORTS or any(r == o or r.startswith(o + os.sep) for o in outputs):
                continue
            st = os.lstat(os.path.join(dirpath, name))
            seen[r] = (st.st_mode, st.st_size, st.st_mtime_ns if stat.S_ISREG(st.st_mode) else 0)
    return seen


def run_case(case: Case, tmp: Path) -> Result:
    work = tmp / "case"
    work.mkdir(parents=True)
    args = case.build(work)
    sleeper = None
    if any("{target}" in a for a in args):  # a process of the round's own, never another's
        sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
        args = [a.replace("{target}", str(sleeper.pid)) for a in args]
    victim = tmp / "victim"
    victim.mkdir(exist_ok=True)
    (victim / "keep.txt").write_text("theirs\n")
    outputs = tuple(os.path.join("case", o) for o in case.outputs)
    before = _snapshot(tmp, outputs)
    t0 = time.monotonic()
    m = run_profiler(list(args), cwd=work, timeout=case.timeout, hang_fails=False,
                     env={**os.environ, "COLUMNS": "120", "NO_COLOR": "1", "PROFILER_DEBUG": ""})
    took = time.monotonic() - t0
    if sleeper is not None:
        sleeper.kill()
        sleeper.wait()
    err, out, late = m.stderr, m.stdout, "1" if m.timed_out else "0"
    res = Result(case, m.code, m.rss_mb, took, err=err)
    p = res.problems
    if late == "1":
        p.append(f"hung: killed after {case.timeout:.0f}s")
    if res.code not in case.codes:
        p.append(f"exit {res.code}, expected {sorted(case.codes)}")
    if "Traceback" in err or "internal error" in err:
        p.append("traceback")
    errors = [ln for ln in err.splitlines() if ln.startswith("profiler: error:")]
    if len(errors) > 1:
        p.append(f"{len(errors)} error lines")
    if res.code not in (0, 130, 143, 129) and not errors and late != "1":
        p.append("no error line")
    if "\x1b" in err or "\r" in err.replace("\r\n", "\n"):
        p.append("escape or CR on stderr")
    if res.rss_mb > MEMORY_MB:
        p.append(f"peak {res.rss_mb:.0f} MB")
    after = _snapshot(tmp, outputs)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    if changed:
        p.append(f"wrote outside the output: {changed[:3]}")
    if (victim / "keep.txt").read_text() != "theirs\n" or sorted(os.listdir(victim)) != ["keep.txt"]:
        p.append("victim touched")
    if case.check is not None:
        problem = case.check(work, out, err)
        if problem:
            p.append(problem)
    return res


# --------------------------------------------------------------------------- building blocks


def copy_bundle(d: Path, src: Path = PERF, name: str = "cap") -> Path:
    dst = d / name
    shutil.copytree(src, dst)
    (dst / "report.html").unlink(missing_ok=True)
    return dst


def gz(path: Path, data: bytes) -> None:
    path.write_bytes(gzip.compress(data, 1))


def jsonl(records: list[object]) -> bytes:
    return ("\n".join(json.dumps(r) for r in records) + "\n").encode()


def manifest(cap: Path) -> dict[str, object]:
    m: dict[str, object] = json.loads((cap / "manifest.json").read_text())
    return m


def set_manifest(cap: Path, m: object) -> None:
    (cap / "manifest.json").write_text(json.dumps(m))


POST = ("analyze", "report-md", "report-json", "report-html", "flamegraph", "heatmap", "diff")


def verb(v: str, cap: Path) -> list[str]:
    """One post-mortem verb's arguments on a bundle, writing under out/ where it writes a file."""
    return {
        "analyze": ["analyze", str(cap), "-o", "out/r.html"],
        "report-md": ["report", str(cap), "--format", "md"],
        "report-json": ["report", str(cap), "--format", "json"],
        "report-html": ["report", str(cap), "-o", "out/r.html"],
        "report-text": ["report", str(cap)],
        "flamegraph": ["flamegraph", str(cap), "-o", "out/f.svg"],
        "flamegraph-offcpu": ["flamegraph", str(cap), "--offcpu", "-o", "out/f.svg"],
        "heatmap": ["heatmap", str(cap), "-o", "out/h.svg"],
        "diff": ["diff", str(cap), str(cap), "-o", "out/d.svg"],
    }[v]


def pre(d: Path) -> None:
    (d / "out").mkdir(exist_ok=True)


BUNDLE_CODES = frozenset({0, 4, 7})  # read what is left, or one line: a bad bundle, nothing usable


def member_case(kind: str, name: str, src: Path, mutate: Callable[[Path], None], verbs: tuple[str, ...] = POST,
                codes: frozenset[int] = BUNDLE_CODES, check: Callable[[Path, str, str], str | None] | None = None,
                timeout: float = 90) -> list[Case]:
    cases = []
    for v in verbs:
        def build(d: Path, v: str = v) -> list[str]:
            pre(d)
            cap = copy_bundle(d, src)
            mutate(cap)
            return verb(v, cap)
        text = v in ("report-text", "analyze")  # a terminal's text: markup is only text there
        cases.append(Case(kind, f"{name} [{v}]", build, codes, timeout, no_raw("\x1b") if check and text else check))
    return cases


# --------------------------------------------------------------------------- the cases

HTML = "<script>alert(1)</script>"
ANSI = "\x1b]0;pwned\x07\x1b[2J\x1b[31mred"
MD = "x | [a](javascript:alert(1)) **b** `c`"
NL = "line1\nprofiler: error: forged"


def no_raw(*needles: str) -> Callable[[Path, str, str], str | None]:
    def check(_d: Path, out: str, _err: str) -> str | None:
        found = [n for n in needles if n in out]
        return f"raw {found[0]!r} in the output" if found else None
    return check


def no_raw_in_file(rel: str, *needles: str) -> Callable[[Path, str, str], str | None]:
    def check(d: Path, _out: str, _err: str) -> str | None:
        p = d / rel
        if not p.exists():
            return None
        text = p.read_text(errors="replace")
        found = [n for n in needles if n in text]
        return f"raw {found[0]!r} in {rel}" if found else None
    return check


def _m(fn: Callable[[dict[str, object]], object]) -> Callable[[Path], None]:
    def mutate(cap: Path) -> None:
        m = manifest(cap)
        out = fn(m)
        set_manifest(cap, m if out is None else out)
    return mutate


def _raw(name: str, data: bytes) -> Callable[[Path], None]:
    def mutate(cap: Path) -> None:
        (cap / name).write_bytes(data)
    return mutate


def _gz(name: str, data: bytes) -> Callable[[Path], None]:
    def mutate(cap: Path) -> None:
        gz(cap / name, data)
    return mutate


def _proc(fn: Callable[[list[dict[str, object]]], list[object]]) -> Callable[[Path], None]:
    def mutate(cap: Path) -> None:
        recs = [json.loads(ln) for ln in gzip.decompress((cap / "proc.jsonl.gz").read_bytes()).splitlines() if ln]
        gz(cap / "proc.jsonl.gz", jsonl(fn(recs)))
    return mutate


def _rename_threads(name: str) -> Callable[[list[dict[str, object]]], list[object]]:
    def fn(recs: list[dict[str, object]]) -> list[object]:
        for r in recs:
            if r.get("kind") == "thread":
                r["comm"] = name
        return list(recs)
    return fn


def _many_tids(recs: list[dict[str, object]]) -> list[object]:
    t = next(r for r in recs if r.get("kind") == "thread")
    return [*recs, *({**t, "tid": 100000 + i, "comm": f"w{i}"} for i in range(60000))]


def _fifo(name: str) -> Callable[[Path], None]:
    def mutate(cap: Path) -> None:
        (cap / name).unlink(missing_ok=True)
        os.mkfifo(cap / name)
    return mutate


def _device(name: str) -> Callable[[Path], None]:
    def mutate(cap: Path) -> None:
        (cap / name).unlink(missing_ok=True)
        os.mknod(cap / name, 0o644 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero's numbers
    return mutate


def _sparse(name: str, size: int = 1 << 40) -> Callable[[Path], None]:
    def mutate(cap: Path) -> None:
        with open(cap / name, "ab") as f:
            f.truncate(size)
    return mutate


def _dir(name: str) -> Callable[[Path], None]:
    def mutate(cap: Path) -> None:
        (cap / name).unlink(missing_ok=True)
        (cap / name).mkdir()
        (cap / name / "x").write_text("x")
    return mutate


def cases() -> list[Case]:
    """Every case of the round, in the table's order."""
    from tests.hostile_cases_members import amplified_cases, member_cases
    from tests.hostile_cases_more import cluster_cases, input_cases, option_cases

    return member_cases() + amplified_cases() + cluster_cases() + input_cases() + option_cases()


def main(argv: list[str]) -> int:
    import tempfile

    want = argv[1] if len(argv) > 1 else ""
    todo = [c for c in cases() if want in f"{c.kind}: {c.name}"]
    bad = 0
    print(f"{'kind':<18} {'case':<58} {'exit':>4} {'MB':>5} {'s':>5}  problems")
    for case in todo:
        with tempfile.TemporaryDirectory(prefix="hostile-") as t:
            r = run_case(case, Path(t))
        bad += bool(r.problems)
        last = (r.err.strip().splitlines() or [""])[-1][:100]
        print(f"{case.kind:<18} {case.name[:58]:<58} {r.code:>4} {r.rss_mb:>5.0f} {r.seconds:>5.1f}  "
              f"{'; '.join(r.problems) or 'ok'}" + (f"  | {last}" if r.problems else ""), flush=True)
    print(f"{len(todo)} cases, {bad} with problems")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
