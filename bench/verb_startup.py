#!/usr/bin/env python3
"""Start-up of the verbs: what a user pays before any work (bench, not a test; bench/startup.py is the capture's).

Runs, interleaved (A B C ... A B C ...), and prints medians of wall and CPU seconds (user +
system, children included) with ratios to the reference of each group:

  python3 -c pass                        the interpreter alone: the floor of any Python tool
  perf --version     | profiler --version
  perf script -i T   | profiler flamegraph T --folded, profiler flamegraph T -o x.svg
                                         T: a tiny perf.data recorded here (perf record of a
                                         shell loop with call chains), so the work is nothing
                                         and what is measured is start-up
  profiler --help, profiler flamegraph --help
  profiler VERB --help, for every verb: what each verb's module and its options import, against
                                         the interpreter alone (a verb imports only what it uses:
                                         numpy, the analysis and the renderers where it needs them)

and the modules the tiny flame graph imports, slowest first (python -X importtime), so a
regression names its cause.

    sudo .venv/bin/python bench/verb_startup.py [--reps 15]

Wall time on a shared host follows its load; read the CPU columns and the ratios.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PY = sys.executable
PROFILER = [PY, "-m", "profiler"] if os.environ.get("BENCH_MODULE") else [str(Path(PY).parent / "profiler")]


def run(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system of the process and its children) of one run."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # noqa: S603
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(argv)}\n{err[-400:]}")
    return wall, ru.ru_utime + ru.ru_stime


def tiny_perf_data(where: Path) -> Path:
    data = where / "tiny.perf.data"
    # a fifth of a second of work (sleep alone may leave no sample at all)
    subprocess.run(["perf", "record", "-q", "-N", "-g", "-F", "999", "-o", str(data), "--", "sh", "-c",
                    "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return data


def imports(argv: list[str], top: int = 12) -> list[tuple[float, str]]:
    """(cumulative ms, module) of the slowest top-level imports of one run."""
    err = subprocess.run([PY, "-X", "importtime", "-m", "profiler", *argv[1:]], capture_output=True, text=True).stderr
    rows = []
    for line in err.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cum, name = line.split("|", 2)
        if name.startswith("  ") or not cum.strip().isdigit():
            continue  # only the modules the program itself imports (depth 0)
        rows.append((int(cum) / 1000, name.strip()))
    return sorted(rows, reverse=True)[:top]


def loaded(argv: list[str]) -> set[str]:
    """The modules one run imports."""
    err = subprocess.run([PY, "-X", "importtime", "-m", "profiler", *argv[1:]], capture_output=True, text=True).stderr
    return {ln.rsplit("|", 1)[1].strip() for ln in err.splitlines() if ln.startswith("import time:") and "|" in ln}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    if shutil.which("perf") is None:
        raise SystemExit("bench: perf is not installed")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from flamegraph import ensure_bytecode

    ensure_bytecode()  # as an installed copy has it: no module compiled at each start
    with tempfile.TemporaryDirectory(prefix="profiler-bench-startup-") as tmp:
        work = Path(tmp)
        tiny = tiny_perf_data(work)
        svg = work / "x.svg"
        groups: list[tuple[str, dict[str, list[str]]]] = [
            ("interpreter", {"python3 -c pass": [PY, "-c", "pass"]}),
            ("version", {"perf --version": ["perf", "--version"],
                         "profiler --version": [*PROFILER, "--version"]}),
            ("help", {"python3 -c pass": [PY, "-c", "pass"],
                      "profiler --help": [*PROFILER, "--help"],
                      "profiler flamegraph --help": [*PROFILER, "flamegraph", "--help"]}),
            ("tiny perf.data", {"perf script -i tiny": ["perf", "script", "-i", str(tiny)],
                                "profiler flamegraph tiny --folded": [*PROFILER, "flamegraph", str(tiny), "--folded"],
                                "profiler flamegraph tiny -o x.svg": [*PROFILER, "flamegraph", str(tiny), "-o",
                                                                      str(svg), "--force"]}),
        ]
        from profiler.cli import VERBS

        groups.append(("each verb's --help", {"profiler --version": [*PROFILER, "--version"]}
                       | {f"profiler {v} --help": [*PROFILER, v, "--help"] for v in VERBS}))
        cases = {name: argv for _, g in groups for name, argv in g.items()}
        walls: dict[str, list[float]] = {k: [] for k in cases}
        cpus: dict[str, list[float]] = {k: [] for k in cases}
        for argv in cases.values():  # warm the page cache and the .pyc files once
            run(argv)
        load0 = os.getloadavg()[0]
        for _ in range(args.reps):
            for name, argv in cases.items():
                w, c = run(argv)
                walls[name].append(w)
                cpus[name].append(c)
        load1 = os.getloadavg()[0]
        print(f"# start-up: medians of {args.reps} interleaved runs; {os.cpu_count()} CPUs, "
              f"load average {load0:.1f} -> {load1:.1f}")
        print(f"{'':38} {'wall s':>8} {'x ref':>7} {'CPU s':>8} {'x ref':>7}")
        for title, g in groups:
            print(f"## {title}")
            ref = next(iter(g))
            rw, rc = statistics.median(walls[ref]), statistics.median(cpus[ref])
            for name in g:
                w, c = statistics.median(walls[name]), statistics.median(cpus[name])
                print(f"{name:38} {w:8.3f} {w / rw:7.2f} {c:8.3f} {c / max(rc, 1e-3):7.2f}")
        print("\n## modules each verb's --help imports (python -X importtime), and whether numpy is among them")
        for v in VERBS:
            mods = loaded([*PROFILER, v, "--help"])
            print(f"{v:12s} {len(mods):4d} modules{'  (numpy)' if 'numpy' in mods else ''}")
        print("\n## slowest imports of `profiler flamegraph tiny --folded` (cumulative ms, python -X importtime)")
        for ms, mod in imports([*PROFILER, "flamegraph", str(tiny), "--folded"]):
            print(f"{ms:8.1f}  {mod}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
