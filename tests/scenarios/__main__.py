"""`python -m tests.scenarios list|run`: the known-cause scenario suite and its scoreboard (test layer).

    python -m tests.scenarios list
    python -m tests.scenarios run                         # all scenarios, quiet and noisy, 10 s windows
    python -m tests.scenarios run --noise quiet           # only on a quiet host (no noisy neighbour)
    python -m tests.scenarios run fio-mmap-thrash --window 5s
    python -m tests.scenarios run --fast --json board.json
    python -m tests.scenarios run --keep-bundles samples/  # copy each bundle to samples/scn-<name>/
    python -m tests.scenarios show board.json --markdown   # a saved scoreboard, as docs/scenarios.md shows it
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import signal
import sys
from pathlib import Path

from tests.scenarios.catalog import BY_NAME, SCENARIOS
from tests.scenarios.runner import NOISES, run_scenario, skip_reason
from tests.scenarios.scoreboard import render, render_markdown, summarize


def _seconds(text: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(s|m)?", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"cannot read {text!r}: use e.g. 10s")
    return float(m.group(1)) * (60 if m.group(2) == "m" else 1)


def _terminate(signum: int, frame: object) -> None:
    # SIGTERM behaves like Ctrl-C so every `finally` (process groups, cgroups) runs.
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.scenarios", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="list the scenarios")
    show = sub.add_parser("show", help="print a saved scoreboard (--json of a run) again")
    show.add_argument("board", type=Path, help="the scoreboard JSON (or gzipped, as docs/scoreboards/ keeps them)")
    show.add_argument("--markdown", action="store_true", help="as the tables of docs/scenarios.md")
    run = sub.add_parser("run", help="run scenarios and print the scoreboard")
    run.add_argument("names", nargs="*", help="scenario names (default: all)")
    run.add_argument("--window", type=_seconds, default=10.0, help="attach window per scenario (default 10s)")
    run.add_argument("--fast", action="store_true", help="only the CI subset")
    run.add_argument("--category", action="append", help="only scenarios of this expected category")
    run.add_argument("--noise", choices=[*NOISES, "both"], default="both",
                     help="run each scenario on a quiet host, beside a noisy neighbour (a CPU burner and an IO "
                          "burner outside its cgroup), or both (default)")
    run.add_argument("--json", type=Path, help="write the scoreboard as JSON here")
    run.add_argument("--no-attach", action="store_true", help="workloads and confirmation only")
    run.add_argument("--keep-bundles", type=Path, help="copy each bundle to DIR/scn-<name>/")
    run.add_argument("--attach-arg", action="append", default=[], metavar="ARG",
                     help="extra argument for profiler attach (repeatable), e.g. --attach-arg=-F49")
    args = ap.parse_args(argv)

    if args.cmd == "show":
        try:
            raw = args.board.read_bytes()
            board = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
        except (OSError, EOFError, ValueError) as exc:
            print(f"cannot read {args.board}: {exc}", file=sys.stderr)
            return 2
        sys.stdout.write(render_markdown(board) if args.markdown else render(board))
        return 0

    if args.cmd == "list":
        for s in SCENARIOS:
            why = skip_reason(s)
            flag = "fast" if s.fast else "    "
            print(f"{s.name:<36} {s.category:<16} {flag} {s.cause}" + (f"  [cannot run: {why}]" if why else ""))
        return 0

    unknown = [n for n in args.names if n not in BY_NAME]
    if unknown:
        print(f"unknown scenario(s): {', '.join(unknown)}; see `python -m tests.scenarios list`", file=sys.stderr)
        return 2
    chosen = [BY_NAME[n] for n in args.names] if args.names else list(SCENARIOS)
    if args.fast:
        chosen = [s for s in chosen if s.fast]
    if args.category:
        chosen = [s for s in chosen if s.category in args.category]
    if args.keep_bundles:
        args.keep_bundles.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _terminate)
    results = []
    try:
        noises = NOISES if args.noise == "both" else (args.noise,)
        for s, noise in [(s, n) for s in chosen for n in noises]:
            r = run_scenario(s, args.window, attach=not args.no_attach, keep=args.keep_bundles,
                             log=lambda m: print(m, file=sys.stderr, flush=True),
                             attach_args=tuple(args.attach_arg), noise=noise)
            results.append(r)
            print(f"{r.name} [{noise}]: {r.outcome} (expected {'+'.join(r.accepted)}, got {r.got}, "
                  f"label {'confirmed' if r.confirmed else 'unconfirmed'}, {r.seconds:.0f}s)"
                  + (f" cleanup problems: {r.cleanup}" if r.cleanup else ""), file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        print("interrupted: scoring what ran", file=sys.stderr)
    board = summarize(results, args.window)
    sys.stdout.write(render(board))
    if args.json:
        args.json.write_text(json.dumps(board, indent=2, sort_keys=True, default=str) + "\n")
    problems = [p for r in results for p in r.cleanup]
    return 1 if problems else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # piped into head(1)
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        sys.exit(0)
