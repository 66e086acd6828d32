"""The flame graph SVG renderer (renderers layer): one self-contained, interactive SVG.

Frames narrower than `min_width` pixels are left out (as flamegraph.pl does), so the size of
the file follows what can be seen, not the number of unique stacks. Every frame name is
untrusted text from the profiled program: it is XML-escaped, and characters XML cannot hold
become U+FFFD. `test_mode` leaves out the style and script and rounds coordinates, for small
diffable golden files.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from markupsafe import Markup, escape

from profiler.analyzers.stacks.flame import (
    KINDS,
    MAX_NODES,
    FlameGraph,
    Node,
    diff_color,
    frame_color,
    frame_kind,
)
from profiler.errors import UsageError
from profiler.renderers import jinja_env

__all__ = ["RENDERER", "FlameGraphOptions", "FlameGraphSvg"]

GENERATOR = "profiler flamegraph"


@dataclass(frozen=True)
class FlameGraphOptions:
    width: int = 1200
    frame_height: int = 16
    font_size: int = 12
    min_width: float = 0.1  # pixels
    inverted: bool = False
    test_mode: bool = False
    background: str = "rgb(248,248,248)"

    def __post_init__(self) -> None:
        # NaN passes every comparison as false: `--min-width nan` drew the root alone
        for name, v, lo in (("width", self.width, 1), ("frame height", self.frame_height, 1),
                            ("font size", self.font_size, 1), ("min width", self.min_width, 0)):
            if not (math.isfinite(v) and v >= lo):
                raise UsageError(f"flame graph {name} must be a finite number of at least {lo}, not {v}")


_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")


def clean(text: str) -> str:
    """Characters XML 1.0 cannot carry become U+FFFD (escaping is done separately)."""
    return _XML_BAD.sub("\ufffd", text)


def format_amount(value: float, unit: str) -> str:
    """12,345,678 ns -> "12.35 ms"; samples and events as counts."""
    if unit == "ns":
        for div, name in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")):
            if value >= div:
                return f"{value / div:,.2f} {name}"
        return f"{value:,.0f} ns"
    if unit == "us":
        for div, name in ((1e6, "s"), (1e3, "ms")):
            if value >= div:
                return f"{value / div:,.2f} {name}"
        return f"{value:,.0f} µs"
    if unit == "samples" and value == 1:
        return "1 sample"
    return f"{value:,.0f} {unit}"


def _fit(text: str, width: float, font_size: int) -> str:
    room = int(width / (font_size * 0.59))
    return text if len(text) <= room else text[: room - 1] + "\u2026"


def _fmt(x: float) -> str:
    s = f"{x:.2f}".rstrip("0").rstrip(".")
    return s if s else "0"


def _draw(graph: FlameGraph, opts: FlameGraphOptions) -> str:
    """Draw `graph` as one SVG document (a str)."""
    pad = 10
    fh = opts.frame_height
    root = graph.root
    total = root.total
    usable = opts.width - 2 * pad
    per_count = usable / total if total else 0.0
    min_count = opts.min_width / per_count if per_count else float("inf")

    # Lay out the visible frames: (depth, x in px, width in px, node, kind).
    laid: list[tuple[int, float, float, Node, str]] = []
    max_depth = 0
    scale = 0.0
    if graph.differential:
        scale = max((abs(n.delta) for _, n in root.walk()), default=0.0)
    stack: list[tuple[Node, int, float, str | None]] = [(root, 0, 0.0, None)]
    kernel = graph.kernel_names
    while stack:
        node, depth, x, parent_kind = stack.pop()
        kind = "root" if depth == 0 else frame_kind(node.name, parent_kind if parent_kind != "root" else None, kernel)
        laid.append((depth, x, node.total * per_count, node, kind))
        if depth > max_depth:
            max_depth = depth
        cx = x
        for child in node.sorted_children():
            if child.offset >= 0:
                cx = x + child.offset * per_count
            if child.total >= min_count:
                stack.append((child, depth + 1, cx, kind))
            cx += child.total * per_count

    subtitle = graph.subtitle
    if root.pruned:  # the tree was too large to hold every frame (analyzers.stacks.flame.MAX_NODES)
        subtitle = (subtitle + " · " if subtitle else "") + (
            f"frames under {100 * root.pruned:.2g}% of the total left out ({MAX_NODES:,} frames at most)")
    top = opts.font_size * 5 if subtitle else opts.font_size * 3 + 6
    legend_h = 18
    bottom = opts.font_size * 2 + 8 + legend_h
    height = top + (max_depth + 1) * fh + bottom

    kinds_seen: dict[str, str] = {}
    parts: list[str] = []
    append = parts.append
    font_w = opts.font_size * 0.59
    laid.sort(key=lambda t: (t[0], t[1]))
    for i, (depth, x, w, node, kind) in enumerate(laid):
        if opts.inverted:
            y = top + depth * fh
        else:
            y = top + (max_depth - depth) * fh
        name = "all" if depth == 0 else clean(node.name)
        if graph.differential:
            fill = diff_color(node.delta, scale)
            change = node.delta / total * 100 if total else 0.0
            tip = f"{name} ({format_amount(node.total, graph.unit)}, {node.total / total * 100 if total else 0:.2f}%; {change:+.2f}% of all)"
        else:
            if kind not in kinds_seen and depth > 0:
                kinds_seen[kind] = frame_color(kind, kind)
            fill = frame_color(name, kind)
            tip = f"{name} ({format_amount(node.total, graph.unit)}, {node.total / total * 100 if total else 0:.2f}%)"
        fit = int((w - 6) // font_w)
        if fit < 3:
            label = ""
        elif len(name) <= fit:
            label = name
        else:
            label = name[: fit - 2] + ".."
        px = pad + x
        append(
            f'<g data-i="{i}" data-k="{kind}"><title>{escape(tip)}</title>'
            f'<rect x="{_fmt(px)}" y="{y}" width="{_fmt(w)}" height="{fh - 1}" fill="{fill}" rx="2" ry="2"/>'
            f'<text x="{_fmt(px + 3)}" y="{y + fh - 4.5}">{escape(label)}</text></g>\n'
        )

    legend = []
    if not graph.differential:
        lx = pad
        for kind in KINDS:
            if kind in kinds_seen:
                legend.append({"x": lx, "color": kinds_seen[kind], "label": kind})
                lx += round(14 + len(kind) * opts.font_size * 0.6 + 12)
    else:
        legend = [
            {"x": pad, "color": diff_color(1, 1), "label": "grew"},
            {"x": pad + 70, "color": diff_color(-1, 1), "label": "shrank"},
        ]

    return jinja_env.render(
        "flamegraph.svg.j2",
        width=opts.width,
        height=height,
        pad=pad,
        font_size=opts.font_size,
        total=total,
        unit=graph.unit,
        inverted=opts.inverted,
        test_mode=opts.test_mode,
        script=Markup("" if opts.test_mode else jinja_env.cdata_script("flamegraph.js")),
        background=opts.background,
        title=clean(graph.title),
        subtitle=_fit(clean(subtitle), opts.width - 2 * pad, opts.font_size) if subtitle else None,
        subtitle_full=clean(subtitle) if subtitle else None,
        generator=GENERATOR,
        nframes=len(laid),
        min_width=opts.min_width,
        legend=legend,
        legend_y=height - bottom + 8,
        frames=Markup("".join(parts)),
    )


class FlameGraphSvg:
    """On-CPU, off-CPU and differential flame graphs as one interactive SVG."""

    model = FlameGraph
    formats = ("svg",)
    extensions = (".svg",)

    def render(self, model: FlameGraph, options: FlameGraphOptions | None = None) -> str:
        return _draw(model, options or FlameGraphOptions())


RENDERER = FlameGraphSvg()
