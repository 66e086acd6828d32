"""Option values converted without pydantic where typer would get the same answer (cli layer).

typer 0.27 and later convert every option value through a pydantic TypeAdapter built on first
use: the first command line that passes any value imports pydantic and builds an adapter per
option (~0.15 CPU s on this host, a third of `profiler flamegraph small.data`). Our options are
plain types. For the values whose conversion is certain — a str, a decimal integer, a plain
decimal or exponent float, a path (then checked by typer's own path rules), lists of those — the
value is converted here; anything else (a malformed number, an empty path, a type not listed)
goes to typer's own conversion, so what is accepted and every error message stay typer's.
With a typer that has no such machinery (before 0.27), nothing is changed.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args, get_origin

_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


class _Defer(Exception):
    """Not certain: typer converts this value."""


def _scalar(annotation: Any, value: Any) -> Any:
    if annotation is bool:
        if isinstance(value, bool):
            return value
    elif annotation is str:
        if isinstance(value, str):
            return value
    elif annotation is int:
        if isinstance(value, str) and _INT.fullmatch(value):
            return int(value)
        if type(value) is int:  # a default
            return value
    elif annotation is float:
        if isinstance(value, str) and _FLOAT.fullmatch(value):
            return float(value)
        if type(value) in (int, float):  # a default
            return float(value)
    raise _Defer


def install(cmd: Any) -> None:
    """Give the plain options of a click command tree (and its subcommands) the fast conversion."""
    stack = [cmd]
    while stack:
        c = stack.pop()
        for p in getattr(c, "params", ()):
            param(p)
        stack.extend(getattr(c, "commands", {}).values())


def param(p: Any) -> None:
    """Give one option the fast conversion, when it is a plain one (see the module's doc)."""
    plain = _plain_class()
    if plain is None:
        return
    desc = getattr(p, "type_descriptor", None)
    if desc is None or getattr(p, "_runtime_param", 1) is not None:
        return
    ann = desc.annotation
    inner = get_args(ann)[0] if get_origin(ann) is list and len(get_args(ann)) == 1 else ann
    if inner not in (bool, str, int, float, Path) or desc.file_annotation is not None:
        return
    info = desc.parameter_info
    if (getattr(info, "parser", None) is not None or getattr(info, "click_type", None) is not None
            or getattr(desc, "is_ranged", True)):
        return
    p._runtime_param = plain(parameter_info=info, annotation=ann, descriptor=desc)


@functools.cache
def _plain_class() -> Any:
    try:
        from typer._coercion import RuntimeParam, build_runtime_param
        from typer._param_types import coerce_cli_path
    except ImportError:  # a typer without pydantic conversion: nothing to spare
        return None

    @dataclass(frozen=True)
    class Plain(RuntimeParam):
        descriptor: Any = None

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            try:
                return self._fast(value, param, ctx)
            except _Defer:
                return build_runtime_param(self.descriptor)._coerce_value(value, param=param, ctx=ctx)

        def _fast(self, value: Any, param: Any, ctx: Any) -> Any:
            ann = self.annotation
            if get_origin(ann) is list:  # type: ignore[comparison-overlap]
                (item,) = get_args(ann)
                if not isinstance(value, (list, tuple)):
                    raise _Defer
                return [self._one(item, v, param, ctx) for v in value]
            return self._one(ann, value, param, ctx)

        def _one(self, ann: Any, value: Any, param: Any, ctx: Any) -> Any:
            if ann is Path:
                if not isinstance(value, str) or not value:
                    raise _Defer
                path_type = self.parameter_info.path_type or Path
                if path_type is not Path:
                    raise _Defer
                return coerce_cli_path(Path(value), self.parameter_info, path_type=Path, param=param, ctx=ctx)
            return _scalar(ann, value)

    return Plain
