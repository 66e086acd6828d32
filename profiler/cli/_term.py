"""Terminal output (cli layer): colour and tables on a terminal, the same words as plain text in a pipe.

stdout is a terminal -> rich tables and colour (rich comes with typer); a pipe or a file ->
plain aligned columns, no escape codes, so scripts and tests read stable text. ``NO_COLOR``
turns colour off on a terminal, ``FORCE_COLOR`` turns it on in a pipe (rich reads both).
Progress goes to stderr and only when stderr is a terminal (profiler/cli/_progress.py).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Sequence
from typing import Any

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
    """One line on stdout, styled on a terminal."""
    if rich_stdout():
        from rich.text import Text

        console().print(Text(text, style=style or ""), soft_wrap=True)
    else:
        sys.stdout.write(text + "\n")


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

        t = Text()
        t.append(f"{status:<5}", style=STATUS_STYLES.get(status, ""))
        t.append(f" {name:<{name_width}} ", style="bold" if status in ("fail", "warn") else "")
        t.append(detail)
        if fix:
            t.append("  -> ", style="dim")
            t.append(fix, style="cyan")
        console().print(t, soft_wrap=True)
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
        console().print(Text(ln, style=style), soft_wrap=True)
