"""`profiler report`: render a bundle's analysis as html, md, json or text (CLI layer)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from profiler.bundle import Bundle
from profiler.cli._common import check_output
from profiler.errors import UsageError

HELP = """Render the report of a capture bundle (post-mortem; needs neither perf nor root).

**Examples**

    profiler report cap/                      # terminal summary

    profiler report cap/ --format md -o cap.md

    profiler report cap/ --format json | jq .verdict.category
"""

FORMATS = ("text", "json", "md", "html")


def summary(bundle: Bundle) -> dict[str, object]:
    m = bundle.manifest
    return {
        "bundle": str(bundle.root),
        "status": m.status,
        "reason": m.reason,
        "created": m.created,
        "host": {"hostname": m.host.hostname, "kernel": m.host.kernel, "cpus": m.host.cpus},
        "targets": [{"pid": t.pid, "comm": t.comm, "kind": t.kind} for t in m.targets],
        "collectors": [
            {"name": c.name, "backend": c.backend, "status": c.status, "reason": c.reason, "files": c.files}
            for c in m.collectors
        ],
        "warnings": bundle.warnings,
    }


def render_text(data: dict[str, object]) -> str:
    lines = [f"bundle {data['bundle']}: {data['status']}" + (f" ({data['reason']})" if data["reason"] else "")]
    for t in data["targets"]:  # type: ignore[attr-defined]
        lines.append(f"  target {t['comm']} pid {t['pid']}" + (f" [{t['kind']}]" if t["kind"] else ""))
    for c in data["collectors"]:  # type: ignore[attr-defined]
        why = f": {c['reason']}" if c["reason"] else ""
        lines.append(f"  collector {c['name']:<14} {c['status']:<8}{why}")
    return "\n".join(lines) + "\n"


def command(
    bundle: Path = typer.Argument(..., help="A capture bundle directory."),
    format: str = typer.Option(None, "--format", "-f", help="html, md, json or text (default: from -o's extension, else text)."),
    output: Path = typer.Option(None, "--output", "-o", help="Write to this file instead of stdout."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing output file."),
) -> None:
    fmt = format or (output.suffix.lstrip(".") if output else "text")
    fmt = {"markdown": "md", "htm": "html", "txt": "text"}.get(fmt, fmt)
    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r}: choose one of {', '.join(FORMATS)}")
    b = Bundle.open(bundle)
    data = summary(b)
    if fmt == "json":
        text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    else:
        text = render_text(data)
    if output:
        check_output(output, force).write_text(text)
    else:
        typer.echo(text, nl=False)


def register(app: typer.Typer) -> None:
    app.command("report", help=HELP)(command)
