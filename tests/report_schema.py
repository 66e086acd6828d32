"""The JSON report's shipped schema (profiler/schemas/report.schema.json), for the tests.

``validate(report)`` checks one report dict; conftest's autouse fixture runs it on every report
a test makes (every ``Analysis.to_dict()``: the JSON renderer, the HTML report's embedded data),
so a field added to the report without a schema entry fails the suite; and, at the end of each
test, :func:`files_problems` on the reports left in its tmp_path (made by child processes:
``python -m profiler attach``, ``sweep``, the README's commands), out of the hook's reach.
"""

from __future__ import annotations

import functools
import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema


@functools.cache
def validator() -> jsonschema.protocols.Validator:
    text = resources.files("profiler.schemas").joinpath("report.schema.json").read_text(encoding="utf-8")
    schema = json.loads(text)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    v: jsonschema.protocols.Validator = cls(schema)
    return v


def problems(report: Any) -> list[str]:
    """Every way ``report`` breaks the schema, one line each (JSON path: message)."""
    errors = sorted(validator().iter_errors(report), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{e.json_path}: {e.message[:300]}" for e in errors]


def validate(report: Any) -> None:
    bad = problems(report)
    if bad:
        raise AssertionError("the report breaks profiler/schemas/report.schema.json:\n  " + "\n  ".join(bad[:20]))


EMBEDDED = re.compile(r'<script type="application/json" id="profiler-analysis">(.*?)</script>', re.S)
MAX_FILE = 64 * 1024 * 1024


def _report_in(path: Path) -> Any:
    """The report a file holds (an HTML report's embedded analysis, a JSON report), or None."""
    if path.stat().st_size > MAX_FILE:
        return None
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix in (".html", ".htm"):
        m = EMBEDDED.search(text)
        return json.loads(m.group(1)) if m else None  # tojson: <, > and & are \u escapes
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or a hostile input nested past Python's depth
        return None
    # a JSON report, not a manifest, a scoreboard or a speedscope file
    return data if isinstance(data, dict) and data.get("schema") == "profiler.report" else None


def files_problems(root: Path) -> list[str]:
    """Every schema problem of the reports written under ``root`` (HTML and JSON), one line each."""
    out: list[str] = []
    for path in sorted(p for ext in ("*.html", "*.htm", "*.json") for p in root.rglob(ext)):
        if path.is_symlink() or not path.is_file():
            continue
        report = _report_in(path)
        if report is not None:
            out += [f"{path}: {p}" for p in problems(report)]
    return out
