"""The typer CLI (cli layer, thin): one module per verb; errors become one line and a distinct exit code.

Nothing imports this package; it imports the rest.
"""

from __future__ import annotations

import functools
import importlib
import math
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

from profiler import __version__
from profiler.errors import Interrupted, ProfilerError, UsageError
from profiler.untrusted import sanitize

if TYPE_CHECKING:
    import typer


@functools.cache
def _app() -> typer.Typer:
    """The typer app, made on first use: ``profiler --version`` never imports typer."""
    import typer

    app = typer.Typer(
    name="profiler",
    help=(
        "Linux perf profiling and bottleneck analyzer, with TiKV/TiDB knowledge.\n\n"
        "Capture evidence from live processes (perf stat, cpu-clock stacks, block IO, syscalls, "
        "off-CPU, /proc), then turn it into flame graphs, IO latency heatmaps and a verdict: "
        "CPU, IO wait, memory, lock contention, or not saturated."
    ),
    epilog=(
        "Examples:\n\n"
        "  profiler doctor                                  # what this host can capture\n\n"
        "  profiler attach --pid tikv --duration 30s -o cap  # capture every tikv-server, then report\n\n"
        "  profiler run --pid tidb -o cap -- sysbench oltp_point_select run\n\n"
        "  profiler sweep --threads 8,16,32 --pid tidb -o sw -- sysbench oltp_point_select --threads={threads} run\n\n"
        "  profiler report cap --format md                  # post-mortem on a bundle\n\n"
        "  profiler demo                                    # first run: profile a bundled workload"
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
    context_settings={"help_option_names": ["-h", "--help"]},
    )

    def _version(value: bool) -> None:
        if value:
            typer.echo(f"profiler {__version__}")
            raise typer.Exit(0)

    @app.callback()
    def _root(
        version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                     help="Print the version and exit."),
    ) -> None:
        """Linux perf profiling and bottleneck analyzer."""

    return app


def __getattr__(name: str) -> Any:
    if name == "app":
        return _app()
    raise AttributeError(name)


# The verbs, in --help's order; each module registers itself. main() imports only the verb it
# runs (a verb's module pulls in what it needs: the analysis, typer's rich help, numpy...), so
# `profiler flamegraph perf.data` does not pay for importing `attach`, `cluster` and the rest.
VERBS = ("doctor", "attach", "run", "sweep", "analyze", "report", "flamegraph", "heatmap", "diff", "stat", "demo",
         "cluster")
_registered: set[str] = set()


def _register(only: str | None = None) -> None:
    for name in VERBS:
        if name in _registered or (only is not None and name != only):
            continue
        importlib.import_module(f"profiler.cli.{name}").register(_app())
        _registered.add(name)
    rank = {n: i for i, n in enumerate(VERBS)}
    _app().registered_commands.sort(key=lambda c: rank.get(c.name or "", len(rank)))


@functools.cache
def command() -> Any:
    """The click command behind the app (every verb), with every boolean flag shown bare in --help
    (``--force``, not ``--force <bool>``: a flag takes no value; docs/cli.md)."""
    _register()
    return _build()


def _command_for(argv: list[str]) -> Any:
    """The click command main() runs: only the verb ``argv`` names when it names one (its module
    alone is imported), else every verb (--help, a typo: click lists them)."""
    verb = argv[0] if argv else None
    if verb in VERBS and _asks_help(argv):
        # the value sets --help shows ([ours|inferno|perl]) live in the modules that check them,
        # which a verb imports only when it runs
        from profiler.cli._term import CHOICES

        for module in {m for (v, _opt), (m, _name) in CHOICES.items() if v in (verb, "*")}:
            importlib.import_module(module)
    if verb not in VERBS or VERBS == tuple(n for n in VERBS if n in _registered):
        return command()
    _register(verb)
    return _build()


def _asks_help(argv: list[str]) -> bool:
    args = argv[: argv.index("--")] if "--" in argv else argv
    return "--help" in args or "-h" in args


def _build() -> Any:
    import typer.main

    cmd = typer.main.get_command(_app())
    stack: list[Any] = [cmd]
    while stack:
        c = stack.pop()
        for param in c.params:
            if getattr(param, "is_flag", False):
                param.metavar = ""
            if getattr(getattr(param, "type_descriptor", None), "annotation", None) is float:
                param.callback = _finite(param.callback)
        c.get_help_option = _bare_help(c.get_help_option)
        stack.extend(getattr(c, "commands", {}).values())
    from profiler.cli._fastparams import install
    from profiler.cli._term import help_metavars

    help_metavars(cmd)
    install(cmd)
    return cmd


def _finite(then: Any) -> Any:
    """Every float option refuses NaN and infinities at the parser (one line, exit 2): a number
    no size, time or width can be never reaches a verb."""

    def check(ctx: Any, param: Any, value: Any) -> Any:
        values = value if isinstance(value, (list, tuple)) else [value]
        for v in values:
            if isinstance(v, float) and not math.isfinite(v):
                flag = max(getattr(param, "opts", None) or [param.name], key=len)
                raise UsageError(f"{flag} {v!r}: a finite number is needed")
        return then(ctx, param, value) if then is not None else value

    return check


def _bare_help(get: Any) -> Any:
    """-h/--help is made per context by click: show it bare too."""

    def wrapped(ctx: Any) -> Any:
        opt = get(ctx)
        if opt is not None:
            from profiler.cli._fastparams import param

            opt.metavar = ""
            param(opt)
        return opt

    return wrapped


class _Stopped(KeyboardInterrupt):
    """Ctrl-C, SIGTERM or SIGHUP outside a capture. A KeyboardInterrupt, as Python's own Ctrl-C:
    no ``except Exception`` on the way (an analysis step that tolerates a broken member, a
    library's retry) can take it for an error and carry on."""

    def __init__(self, signum: int) -> None:
        super().__init__("interrupted" if signum == signal.SIGINT else f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum


_heard: list[int] = []  # the stop signals _on_stop_signal raised in this run of main()


def _on_stop_signal(signum: int, frame: Any) -> None:
    """Ctrl-C, SIGTERM, SIGHUP outside a capture (a capture takes them itself: profiler/capture/signals.py)."""
    _heard.append(signum)
    raise _Stopped(signum)


def _interrupt_in(exc: BaseException) -> BaseException | None:
    """The interrupt behind an error, if any: a signal that lands in an import or a class body is
    wrapped by Python (RuntimeError: Error calling __set_name__ ...) and is still the signal."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, (KeyboardInterrupt, Interrupted)) and not isinstance(cur, SystemExit):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


def _interrupted(exc: BaseException) -> int:
    signum = getattr(exc, "signum", signal.SIGINT)
    said = isinstance(exc, (_Stopped, Interrupted)) and str(exc)
    _error_line(f"profiler: error: {sanitize(str(exc), newlines=False)}" if said else "profiler: interrupted")
    return 128 + int(signum)


def _error_line(line: str) -> None:
    """The one error line; a terminal that is gone (SIGHUP) does not turn it into a traceback."""
    import typer

    try:
        typer.echo(line, err=True)
    except OSError:
        pass


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; every failure is one line on stderr and a distinct exit code. A stop signal
    that some code on the way swallowed (wrapped in another error, or inside tolerant code) still
    ends the run with its exit code."""
    from profiler.cli import _stdout

    _heard.clear()
    plain = sys.stdout
    sys.stdout = _stdout.guard(plain)
    try:
        code = _main(argv)
        failed = _stdout.flush()  # what is still buffered fails here, not in the interpreter's exit
    finally:
        if isinstance(sys.stdout, _stdout.GuardedStdout):
            sys.stdout = plain
    if failed is not None and code == 0:
        _error_line(f"profiler: error: {failed}")
        code = failed.exit_code
    if code == 0 and _heard:
        return _interrupted(_Stopped(_heard[0]))
    return code


def _main(argv: list[str] | None) -> int:
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, _on_stop_signal)
    try:
        args = sys.argv[1:] if argv is None else argv
        if args == ["--version"]:  # the one answer that needs no command line parser
            sys.stdout.write(f"profiler {__version__}\n")
            sys.stdout.flush()
            return 0
        _command_for(args)(args=args, prog_name="profiler", standalone_mode=True)
    except SystemExit as exc:
        stop = _interrupt_in(exc) if exc.code == 130 else None  # typer's exit for any KeyboardInterrupt
        if stop is not None:
            return _interrupted(stop)
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except ProfilerError as exc:
        _error_line(f"profiler: error: {sanitize(str(exc), newlines=False)}")
        return exc.exit_code
    except KeyboardInterrupt as exc:
        return _interrupted(exc)
    except BrokenPipeError:
        # Output piped into head(1) and the like: not an error worth a message.
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        except OSError:
            pass
        return 0
    except Exception as exc:  # noqa: BLE001 - the one place unexpected errors become one line
        stop = _interrupt_in(exc)
        if stop is not None:
            return _interrupted(stop)
        if os.environ.get("PROFILER_DEBUG"):
            raise
        import typer

        typer.echo(
            f"profiler: internal error: {type(exc).__name__}: {sanitize(str(exc), newlines=False)} "
            "(set PROFILER_DEBUG=1 for a traceback)",
            err=True,
        )
        return 70
    return 0
