"""From `profiler attach` to every collector's first events, on a busy 2-CPU host: the default backend vs perf.

    sudo .venv/bin/python bench/startup.py [--rounds 5] [--burners 2] [--backend auto --backend perf]

Starts a target (tests/bcc/workload.py contend: 4 threads on one lock, syscalls, switches, small
fsync'd writes) and ``--burners`` CPU burners (stress-ng --cpu, normal priority: both CPUs of
this host kept busy, as a saturated server keeps them), then runs ``profiler attach --pid
TARGET -d 3s --no-report`` per backend, interleaved, ``--rounds`` times. For each run it takes
the time the attach command was launched (CLOCK_MONOTONIC, just before the exec) and, for
every collector that ran, when its first events flowed:

- bcc collectors: when their programs were attached (``started`` in the manifest: from then on
  every event is counted in the kernel);
- cpu-stacks: its first sample (the first sample time in cpu.perf.txt.gz: perf is running and
  sampling);
- the others (perf-stat, procfs, syscalls and offcpu-stacks of the perf backend): ``started``.

Prints, per backend, the median over rounds of the last collector's first events (all
attached) and of each collector's, with the load average around each run.

The commands run as an installed profiler runs, with Python's compiled modules cached: a first,
untimed attach writes them where PYTHONDONTWRITEBYTECODE (set in some development shells) had
kept every start compiling each module from source, 0.3 s of CPU idle and seconds on a busy
host, in the profiler and again in its bcc helper.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT / "tests" / "bcc" / "workload.py"
_SAMPLE_TIME = re.compile(rb"^\S.*?\s(\d+\.\d+):\s", re.M)


def first_sample(path: Path) -> float | None:
    """The first sample's time in a perf script text member (CLOCK_MONOTONIC seconds)."""
    try:
        with gzip.open(path, "rb") as fh:
            head = fh.read(1 << 16)
    except OSError:
        return None
    m = _SAMPLE_TIME.search(head)
    return float(m.group(1)) if m else None


def first_events(out: Path, launched: float) -> dict[str, float]:
    m = json.loads((out / "manifest.json").read_text())
    got: dict[str, float] = {}
    for c in m["collectors"]:
        if c["status"] not in ("ok", "partial") or c.get("started") is None:
            continue
        t = float(c["started"])
        if c["name"] == "cpu-stacks":
            t = first_sample(out / "cpu.perf.txt.gz") or t
        got[c["name"]] = round(t - launched, 3)
    return got


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--burners", type=int, default=2, help="stress-ng CPU burners beside the target (0: none)")
    ap.add_argument("--backend", action="append", help="backends, interleaved (default: auto, perf)")
    args = ap.parse_args(argv)
    backends = args.backend or ["auto", "perf"]
    target = subprocess.Popen([sys.executable, str(WORKLOAD), "contend", "4", "3600"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, text=True)
    burners = None
    results: dict[str, list[dict[str, float]]] = {b: [] for b in backends}
    loads: list[float] = []
    try:
        assert target.stdout is not None
        pid = int(target.stdout.readline().split()[1])
        if args.burners:
            burners = subprocess.Popen(["stress-ng", "--cpu", str(args.burners), "--cpu-method", "matrixprod",
                                        "--timeout", "3600s"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(5)  # the load average follows
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        with tempfile.TemporaryDirectory(prefix="profiler-startup-") as tmp:
            for b in backends:  # untimed: compiled modules cached, as after an install's first run
                subprocess.run([sys.executable, "-m", "profiler", "attach", "--backend", b, "--pid", str(pid),
                                "-d", "1s", "-o", str(Path(tmp) / f"warm-{b}"), "--no-report"], capture_output=True,
                               timeout=300, env=env)
            for r in range(args.rounds):
                order = backends if r % 2 == 0 else list(reversed(backends))
                for b in order:
                    out = Path(tmp) / f"cap-{b}-{r}"
                    load = loadavg()
                    launched = time.monotonic()
                    p = subprocess.run([sys.executable, "-m", "profiler", "attach", "--backend", b, "--pid", str(pid),
                                        "-d", "3s", "-o", str(out), "--no-report"], capture_output=True, text=True,
                                       timeout=300, env=env)
                    if p.returncode not in (0, 6):
                        print(f"startup: attach --backend {b} failed ({p.returncode}): {p.stderr.strip()[-300:]}")
                        continue
                    got = first_events(out, launched)
                    loads.append(load)
                    results[b].append(got)
                    print(f"round {r} {b:5s} load {load:5.2f}: all attached {max(got.values()):.2f}s  "
                          + "  ".join(f"{k} {v:.2f}" for k, v in sorted(got.items(), key=lambda kv: kv[1])), flush=True)
                    shutil.rmtree(out, ignore_errors=True)
    finally:
        for p in (burners, target):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    print(f"\nload average (1 min) at the runs: {min(loads, default=0):.1f}-{max(loads, default=0):.1f}, "
          f"median {statistics.median(loads) if loads else 0:.1f}; {args.burners} CPU burners beside the target")
    for b, runs in results.items():
        if not runs:
            continue
        names = sorted({k for r in runs for k in r})
        alls = [max(r.values()) for r in runs]
        print(f"--backend {b}: all collectors' first events {statistics.median(alls):.2f}s after the launch "
              f"(median of {len(alls)}; {min(alls):.2f}-{max(alls):.2f})")
        for n in names:
            vals = [r[n] for r in runs if n in r]
            print(f"    {n:14s} {statistics.median(vals):.2f}s ({min(vals):.2f}-{max(vals):.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
