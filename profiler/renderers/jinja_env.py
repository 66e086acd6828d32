"""The one Jinja2 environment of every template renderer, and the assets it inlines (renderers layer).

Templates, stylesheets and scripts live in ``profiler.templates`` (the top-level templates/
folder) and are read through importlib.resources, so an installed wheel and a source tree
behave alike. Autoescape is on for every template: frame, thread and process names come from
the profiled program and are untrusted. Outputs are single offline files: assets are inlined,
nothing is fetched. jinja2 is imported on first use, so a verb that renders no template (a
folded-stacks dump, a JSON matrix) does not pay for it.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import TYPE_CHECKING, Any

from profiler.renderers import formatting

if TYPE_CHECKING:
    import jinja2

PACKAGE = "profiler.templates"


@functools.cache
def asset(name: str) -> str:
    """A template or asset file's text (cached: the package does not change while we run)."""
    return resources.files(PACKAGE).joinpath(name).read_text(encoding="utf-8")


@functools.cache
def cdata_script(name: str) -> str:
    """A script to inline inside an SVG's CDATA section; it must not end that section early."""
    js = asset(name)
    if "]]>" in js:
        raise ValueError(f"{name} must not contain ']]>'")
    return js


@functools.cache
def script(name: str) -> str:
    """A script to inline in an HTML <script> element; it must not end that element early."""
    js = asset(name)
    if "</script" in js.lower() or "<!--" in js:
        raise ValueError(f"{name} must not contain '</script' or '<!--'")
    return js


@functools.cache
def environment() -> jinja2.Environment:
    """Autoescaped, strict about undefined names, block tags leave no blank lines.

    Templates keep their final newline (SVG files end with one); report.html.j2 ends without.
    """
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(asset),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["value"] = formatting.value
    env.filters["pct"] = formatting.pct
    env.filters["mib"] = formatting.mib
    env.filters["plain"] = formatting.plain
    return env


def render(template: str, **context: Any) -> str:
    """Render one template of ``profiler.templates`` with the shared environment."""
    return environment().get_template(template).render(**context)
