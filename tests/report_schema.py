"""The JSON report's shipped schema (profiler/schemas/report.schema.json), for the tests.

``validate(report)`` checks one report dict; conftest's autouse fixture runs it on every report
a test makes (every ``Analysis.to_dict()``: the JSON renderer, the HTML report's embedded data),
so a field added to the report without a schema entry fails the suite.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
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
