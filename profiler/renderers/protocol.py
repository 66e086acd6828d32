"""What a renderer is, and a registry that picks one by --format or by file extension (renderers layer).

A renderer turns one kind of model (an Analysis, a FlameGraph, a LatencyHeatmap, ...) into one
output format: ``render(model, options) -> str``. It never reads a bundle or runs an analyzer;
the use case builds the model first. Each renderer module exposes its renderer(s) as module
constants, and profiler/renderers/registry.py lists them all, explicitly (no import-time
self-registration, no importlib lookups).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from profiler.errors import UsageError

ModelT = TypeVar("ModelT", contravariant=True)
OptionsT = TypeVar("OptionsT", contravariant=True)


class Renderer(Protocol[ModelT, OptionsT]):
    """One output format of one kind of model."""

    @property
    def model(self) -> type:
        """The model class it draws (instances of subclasses too)."""

    @property
    def formats(self) -> tuple[str, ...]:
        """Names --format accepts; the first is the canonical one (``("md", "markdown")``)."""

    @property
    def extensions(self) -> tuple[str, ...]:
        """Output file suffixes that choose it, lower case with the dot (``(".md", ".markdown")``)."""

    def render(self, model: ModelT, options: OptionsT | None = None) -> str:
        """The whole document; ``options=None`` means the renderer's defaults."""


class BinaryRenderer(Protocol[ModelT, OptionsT]):
    """One binary output format of one kind of model (a gzipped pprof profile): ``render`` gives bytes."""

    @property
    def model(self) -> type: ...

    @property
    def formats(self) -> tuple[str, ...]: ...

    @property
    def extensions(self) -> tuple[str, ...]: ...

    def render(self, model: ModelT, options: OptionsT | None = None) -> bytes:
        """The whole file; ``options=None`` means the renderer's defaults."""


class _Listed(Protocol):
    """What a registry needs of a renderer to pick it."""

    @property
    def model(self) -> type: ...

    @property
    def formats(self) -> tuple[str, ...]: ...

    @property
    def extensions(self) -> tuple[str, ...]: ...


R = TypeVar("R", bound=_Listed)


@dataclass(frozen=True)
class ReportOptions:
    """What every report renderer (an Analysis in html, md, json, text) may be told."""

    report_path: str | None = None  # where the HTML report was written, for the terminal summary to say


class Registry(Generic[R]):
    """Renderers by the model they draw and the format they write; first registered wins a tie.

    Text renderers (:class:`Renderer`) and binary ones (:class:`BinaryRenderer`) live in separate
    registries (``Registry[R]``, ``Registry[BinaryR]``)."""

    def __init__(self, *renderers: R) -> None:
        self._renderers: tuple[R, ...] = renderers

    def __iter__(self) -> Iterator[R]:
        return iter(self._renderers)

    def __add__(self, other: Registry[R]) -> Registry[R]:
        return Registry(*self._renderers, *other._renderers)

    def of(self, model: type) -> list[R]:
        """The renderers of a model class, in registration order."""
        return [r for r in self._renderers if issubclass(model, r.model)]

    def formats(self, model: type) -> tuple[str, ...]:
        """The canonical format names for a model class (what an error message lists)."""
        return tuple(r.formats[0] for r in self.of(model))

    def by_format(self, model: type, fmt: str) -> R | None:
        return next((r for r in self.of(model) if fmt in r.formats), None)

    def by_extension(self, model: type, suffix: str) -> R | None:
        """A suffix (".markdown") chooses the renderer listing it, else the one with that format name."""
        suffix = suffix.lower()
        found = next((r for r in self.of(model) if suffix in r.extensions), None)
        return found or self.by_format(model, suffix.lstrip("."))

    def pick(self, model: type, fmt: str | None = None, output: str | Path | None = None,
             default: str | None = None) -> R:
        """--format wins, else the output file's extension, else ``default`` (else the first registered).

        An unknown choice is a UsageError naming the formats there are.
        """
        if fmt:
            chosen, found = fmt, self.by_format(model, fmt)
        elif output is not None and Path(output).suffix:
            suffix = Path(output).suffix.lower()
            double = "".join(Path(output).suffixes[-2:]).lower()  # .pb.gz, .speedscope.json
            chosen, found = suffix.lstrip("."), (self.by_extension(model, double) if double != suffix else None)
            found = found or self.by_extension(model, suffix)
        elif default is not None:
            chosen, found = default, self.by_format(model, default)
        else:
            renderers = self.of(model)
            chosen, found = model.__name__, renderers[0] if renderers else None
        if found is None:
            raise UsageError(f"unknown format {chosen!r}: choose one of {', '.join(self.formats(model))}")
        return found

    def find(self, model: object, fmt: str) -> R | None:
        """The renderer that writes this model instance in ``fmt``, or None."""
        return self.by_format(type(model), fmt)
