"""Terminal output (cli layer): colour and tables on a terminal, the same words as plain text in a pipe.

stdout is a terminal -> rich tables and colour (rich comes with typer); a pipe or a file ->
plain aligned columns, no escape codes, so scripts and tests read stable text. ``NO_COLOR``
turns colour off on a terminal, ``FORCE_COLOR`` turns it on in a pipe (rich reads both).
Progress goes to stderr and only when stderr is a terminal (profiler/cli/_progress.py).

On a terminal, lines longer than it is wide are wrapped between words, the continuation
indented under the text it continues (doctor's details under the detail column), rather than
cut mid-word by the terminal; a pipe gets each line whole. ``--help`` shows arguments by name
(``INPUT``) and options that take one of a fixed set of values as that set (``[fp|dwarf|lbr]``):
:func:`help_metavars`.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Sequence
from typing import Any

# Options that take one of a fixed set of values: (verb or "*", option) -> where the set is kept
# (module, name), the same tuple the verb checks its value against; --help shows it as [a|b|c].
CHOICES: dict[tuple[str, str], tuple[str, str]] = {
    ("*", "--call-graph"): ("profiler.cli._capture", "CALL_GRAPHS"),
    ("*", "--backend"): ("profiler.cli._capture", "BACKENDS"),
    ("flamegraph", "--by"): ("profiler.cli.flamegraph", "GROUPINGS"),
    ("flamegraph", "--compat"): ("profiler.analyzers.stacks.folding", "COMPAT_MODES"),
    ("heatmap", "--by"): ("profiler.usecases.heatmap", "BY"),
    ("heatmap", "--colour"): ("profiler.renderers.heatmap_svg", "COLOUR_SCALES"),
    ("heatmap", "--units-time"): ("profiler.inputs.pairs", "TIME_UNITS"),
    ("heatmap", "--units-latency"): ("profiler.inputs.pairs", "TIME_UNITS"),
}

STATUS_STYLES = {
    "ok": "green", "fail": "bold red", "failed": "bold red", "warn": "yellow", "partial": "yellow",
    "skipped": "red", "info": "cyan", "missing": "yellow", "running": "cyan",
    "not supported": "dim", "not counted": "yellow",
}


def rich_stdout() -> bool:
    """Draw with rich on stdout: a terminal (and NO_COLOR unset), or FORCE_COLOR set."""
    if os.environ.get("FORCE_COLOR"):
        return True
    return sys.stdout.isatty() and os.environ.get("TERM") != "dumb"


@functools.cache
def _console(width: int | None) -> Any:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False, width=width)


def console() -> Any:
    return _console(None)


def line(text: str, style: str | None = None) -> None:
    """One line on stdout, styled on a terminal (wrapped between words, continuations indented)."""
    if rich_stdout():
        from rich.text import Text

        lead = len(text) - len(text.lstrip(" "))
        _hanging(Text(" " * lead), Text(text[lead:], style=style or ""), lead + 4)
    else:
        sys.stdout.write(text + "\n")


def _hanging(prefix: Any, body: Any, indent: int) -> None:
    """``prefix`` then ``body`` (rich Texts) on the terminal: the body wrapped between words to the
    terminal's width, every line after the first indented by ``indent`` columns."""
    from rich.text import Text

    c = console()
    first = max(20, c.width - prefix.cell_len)
    rest = max(20, c.width - indent)
    lines = body.wrap(c, first)
    if len(lines) > 1 and rest != first:  # the continuation column differs from the first line's
        head = lines[0]
        tail = body[len(head.plain):]
        tail = tail[len(tail.plain) - len(tail.plain.lstrip(" ")):]
        lines = [head, *tail.wrap(c, rest)]
    for i, ln in enumerate(lines):
        ln.rstrip()
        c.print(Text.assemble(prefix if i == 0 else " " * indent, ln), soft_wrap=True)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, status_col: int | None = None,
          right: Sequence[int] = (), indent: int = 2, title: str | None = None) -> None:
    """Rows under headers: a rich table on a terminal (the status column coloured), else plain
    columns separated by two spaces (the last column not padded)."""
    if rich_stdout():
        from rich import box
        from rich.table import Table
        from rich.text import Text

        t = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left", show_edge=False, pad_edge=False,
                  padding=(0, 1))
        for i, h in enumerate(headers):
            t.add_column(h, justify="right" if i in right else "left", overflow="fold",
                         no_wrap=i != len(headers) - 1)
        for r in rows:
            cells = [Text(str(c), style=STATUS_STYLES.get(str(c), "") if i == status_col else "")
                     for i, c in enumerate(r)]
            t.add_row(*cells)
        from rich.padding import Padding

        console().print(Padding(t, (0, 0, 0, indent), expand=False))
        return
    if title:
        sys.stdout.write(title + "\n")
    sys.stdout.write(plain_table(headers, rows, right=right, indent=indent) + "\n")


def plain_table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, right: Sequence[int] = (),
                indent: int = 2) -> str:
    allrows = [list(map(str, headers))] + [list(map(str, r)) for r in rows]
    n = len(headers)
    widths = [max(len(r[i]) for r in allrows) for i in range(n)]
    out = []
    for r in allrows:
        cells = []
        for i in range(n):
            if i == n - 1:
                cells.append(r[i].rjust(widths[i]) if i in right else r[i])
            else:
                cells.append(r[i].rjust(widths[i]) if i in right else r[i].ljust(widths[i]))
        out.append((" " * indent + "  ".join(cells)).rstrip())
    return "\n".join(out)


def status_line(status: str, name: str, detail: str, fix: str | None = None, name_width: int = 28) -> None:
    """doctor's line: status word, check name, what was found, the fix."""
    tail = f"  -> {fix}" if fix else ""
    if rich_stdout():
        from rich.text import Text

        head = Text()
        head.append(f"{status:<5}", style=STATUS_STYLES.get(status, ""))
        head.append(f" {name:<{name_width}} ", style="bold" if status in ("fail", "warn") else "")
        body = Text(detail)
        if fix:
            body.append("  -> ", style="dim")
            body.append(fix, style="cyan")
        _hanging(head, body, head.cell_len)
    else:
        sys.stdout.write(f"{status:<5} {name:<{name_width}} {detail}{tail}\n")


_VERDICT_STYLES = {"CPU-BOUND": "bold red", "IO WAIT": "bold dark_orange", "MEMORY PRESSURE": "bold magenta",
                   "LOCK CONTENTION": "bold magenta", "NOT SATURATED": "bold green"}


def report_text(text: str) -> None:
    """The terminal report (verdict, evidence, what to do): the verdict line coloured on a terminal."""
    if not rich_stdout():
        sys.stdout.write(text)
        return
    from rich.text import Text

    for ln in text.rstrip("\n").split("\n"):
        style = ""
        stripped = ln.strip()
        if stripped.startswith("verdict:"):
            style = next((v for k, v in _VERDICT_STYLES.items() if k in stripped), "bold")
        elif stripped.startswith(("what to do:", "report:")):
            style = "cyan"
        elif stripped.startswith(("evidence:", "contributing:")):
            style = "bold"
        lead = len(ln) - len(ln.lstrip(" "))
        _hanging(Text(" " * lead), Text(stripped, style=style), lead + 4)


def help_metavars(cmd: Any, verb: str = "") -> None:
    """--help's names for values, on a click command and its subcommands: an argument by its name
    in capitals (``INPUT``, ``LOAD...``; typer 0.29 printed ``{input}``), an option that takes one
    of a fixed set of values as the set (``[fp|dwarf|lbr]``, not ``<str>``). The sets are the
    tuples the verbs check their values against (CHOICES), read only from modules already
    imported (the verb's own, when its help is shown)."""
    for param in getattr(cmd, "params", ()):
        if getattr(param, "param_type_name", "") == "argument":
            name = (param.name or "arg").upper() + ("..." if getattr(param, "nargs", 1) != 1 else "")
            shown = name if param.required else f"[{name}]"
            param.metavar = name
            param._usage_display_name = lambda shown=shown: shown  # typer's own: "{input}", "[load]..."
            continue
        for opt in getattr(param, "opts", ()):
            where = CHOICES.get((verb, opt)) or CHOICES.get(("*", opt))
            module = sys.modules.get(where[0]) if where else None
            values = getattr(module, where[1], None) if where and module else None
            if values:
                param.metavar = "[" + "|".join(values) + "]"
                break
    for name, sub in (getattr(cmd, "commands", None) or {}).items():
        help_metavars(sub, name)
