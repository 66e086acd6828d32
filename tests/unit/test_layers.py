"""The layer rule as a test: every module of the installed package imports only the layers below it.

The layers, bottom to top (imports point down; two layers on one level do not import each other):

    0  core         profiler (the package root), profiler.errors, profiler.knowledge, profiler.files (writing
                    outputs), profiler.tolerant (reading damaged inputs), profiler.untrusted (printing names)
    1  formats      profiler.formats: codecs of perf.data, block events, ELF and Go tables; may import core
    1  bundle       profiler.bundle: the capture bundle (manifest, reader, writer, member names)
    2  inputs       profiler.inputs: one reader per input format; may import formats, bundle
    2  collectors   profiler.collectors: capture-side evidence; may import formats, bundle, core
    3  analyzers    profiler.analyzers: pure analysis; may import inputs, formats, bundle, core
    3  capture      profiler.capture: session, targets, doctor; may import collectors, formats, bundle, core
    4  renderers    profiler.renderers (+ profiler.templates): may import analyzers' models and below them
    5  usecases     profiler.usecases: one function per user request; composes all of the above
    5  cluster      profiler.cluster: the cluster capture over SSH; may import capture, collectors, formats,
                    bundle, core
    6  cli          profiler.cli (+ profiler.__main__): thin typer verbs; nothing imports it
       demo         profiler.demo: a standalone workload script, imports nothing of ours

Every module is parsed (never imported), so function-level imports, imports under
``if TYPE_CHECKING:`` and ``importlib.import_module("profiler....")`` string literals (an
f-string counts by its literal prefix) are all checked. Top-level ``import collectors`` /
``analyzers`` / ``templates`` (the repository folders, not the installed names) is refused too.
A second test checks docs/style.md practice 13: each module's docstring summary (its first paragraph)
names its layer, as ``(<layer> layer)``; a third, practice 15: no use case or verb compares input
formats (a reader table's row, or the Format's own fields, says what a format gives).
"""

from __future__ import annotations

import ast
import importlib.util
import re
import tomllib
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import ROOT

# Module (dotted prefix) -> layer. The longest prefix wins; a module matching none fails the test.
LAYER_OF: dict[str, str] = {
    "profiler": "core",  # the package root only (every other module matches a longer prefix)
    "profiler.errors": "core",
    "profiler.knowledge": "core",
    "profiler.files": "core",
    "profiler.tolerant": "core",
    "profiler.untrusted": "core",
    "profiler.formats": "formats",
    "profiler.bundle": "bundle",
    "profiler.inputs": "inputs",
    "profiler.collectors": "collectors",
    "profiler.analyzers": "analyzers",
    "profiler.capture": "capture",
    "profiler.renderers": "renderers",
    "profiler.templates": "renderers",
    "profiler.usecases": "usecases",
    "profiler.cluster": "cluster",
    "profiler.cli": "cli",
    "profiler.__main__": "cli",
    "profiler.demo": "demo",
}

_BELOW_USECASES = {"core", "formats", "bundle", "inputs", "collectors", "analyzers", "capture", "renderers"}

# Layer -> the layers its modules may import (its own included).
MAY_IMPORT: dict[str, set[str]] = {
    "core": {"core"},
    "formats": {"core", "formats"},
    "bundle": {"core", "bundle"},
    "inputs": {"core", "formats", "bundle", "inputs"},
    "collectors": {"core", "formats", "bundle", "collectors"},
    "analyzers": {"core", "formats", "bundle", "inputs", "analyzers"},
    "capture": {"core", "formats", "bundle", "collectors", "capture"},
    "renderers": {"core", "formats", "bundle", "inputs", "analyzers", "renderers"},
    "usecases": _BELOW_USECASES | {"usecases"},
    "cluster": {"core", "formats", "bundle", "collectors", "capture", "cluster"},
    "cli": _BELOW_USECASES | {"usecases", "cluster", "cli"},
    "demo": {"demo"},
}

# Known violations still being removed by the renovation's other branches (issue 12). Each entry
# names the file (as in the repository) and the modules it may still import against the rule;
# anything else in that file, and every other file, must follow it. Remove an entry when its
# branch lands: a stale entry is reported as a warning. The list must end empty.
KNOWN_VIOLATIONS: dict[str, tuple[str, ...]] = {}

# Modules whose docstring does not name its layer yet, and the branch that owns them (issue 12).
KNOWN_UNNAMED: dict[str, str] = {}

_FOLDERS = {"collectors", "analyzers", "templates"}  # repository folders installed under profiler.*


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool

    @property
    def where(self) -> str:
        try:
            return str(self.path.relative_to(ROOT))
        except ValueError:
            return str(self.path)


@dataclass(frozen=True)
class Import:
    line: int
    target: str  # the module imported (absolute, dotted)
    text: str  # the statement as written


def _packages() -> list[str]:
    with open(ROOT / "pyproject.toml", "rb") as fh:
        packages: list[str] = tomllib.load(fh)["tool"]["setuptools"]["packages"]
    return packages


def modules() -> list[Module]:
    """Every module of the package, found where the installed package's import system finds it."""
    out: list[Module] = []
    packages = _packages()
    for pkg in packages:
        spec = importlib.util.find_spec(pkg)
        assert spec is not None and spec.submodule_search_locations, (
            f"package {pkg} (pyproject.toml) is not importable: reinstall with pip install -e '.[dev]'")
        for where in spec.submodule_search_locations:
            unlisted = [f"{pkg}.{d.name}" for d in sorted(Path(where).iterdir())
                        if (d / "__init__.py").is_file() and f"{pkg}.{d.name}" not in packages]
            assert not unlisted, f"packages missing from pyproject.toml's packages (never installed): {unlisted}"
            for path in sorted(Path(where).glob("*.py")):
                name = pkg if path.stem == "__init__" else f"{pkg}.{path.stem}"
                out.append(Module(name, path, path.stem == "__init__"))
    return out


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        layer = LAYER_OF.get(".".join(parts[:n]))
        if layer is not None:
            return layer
    return None


def _literal_prefix(node: ast.expr) -> str | None:
    """A module name given as a string literal, or an f-string's literal start ("profiler.x.{name}")."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        first = node.values[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            return first.value.rstrip(".") or None
    return None


def _is_dynamic_import(call: ast.Call) -> bool:
    f = call.func
    if isinstance(f, ast.Attribute):
        return f.attr == "import_module"
    return isinstance(f, ast.Name) and f.id in ("import_module", "__import__")


def imports(mod: Module, known: set[str]) -> Iterator[Import]:
    """Every import in the module, wherever it is (top level, functions, TYPE_CHECKING, importlib)."""
    source = mod.path.read_text(encoding="utf-8")
    tree = ast.parse(source, str(mod.path))
    lines = source.splitlines()
    for node in ast.walk(tree):
        text = lines[node.lineno - 1].strip() if isinstance(node, (ast.Import, ast.ImportFrom, ast.Call)) else ""
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(node.lineno, alias.name, text)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = mod.name.split(".") if mod.is_package else mod.name.split(".")[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield Import(node.lineno, sub if sub in known else base, text)
        elif isinstance(node, ast.Call) and _is_dynamic_import(node) and node.args:
            name = _literal_prefix(node.args[0])
            if name:
                yield Import(node.lineno, name, text)


def violations(mods: list[Module]) -> dict[str, list[str]]:
    """File -> its imports that break the rule, one line each: where, what, and why."""
    known = {m.name for m in mods}
    out: dict[str, list[str]] = {}
    for mod in mods:
        layer = layer_of(mod.name)
        assert layer is not None, f"{mod.where}: module {mod.name} is in no layer (tests/unit/test_layers.py LAYER_OF)"
        for imp in sorted(imports(mod, known), key=lambda i: i.line):
            top = imp.target.split(".")[0]
            if top in _FOLDERS:
                why = f"the repository folder {top!r}: import profiler.{imp.target}"
            elif top != "profiler":
                continue
            else:
                target_layer = layer_of(imp.target)
                if target_layer in MAY_IMPORT[layer]:
                    continue
                why = f"{layer} may not import {target_layer} (may import: {', '.join(sorted(MAY_IMPORT[layer]))})"
            out.setdefault(mod.where, []).append(f"{mod.where}:{imp.line}: {imp.text}  <- {imp.target}: {why}")
    return out


def _tolerated(where: str, line: str) -> bool:
    return any(f"<- {t}:" in line or f"<- {t}." in line for t in KNOWN_VIOLATIONS.get(where, ()))


def test_every_import_points_down_the_layers() -> None:
    mods = modules()
    assert len(mods) > 50, f"only {len(mods)} modules found: is the package installed?"
    found = violations(mods)
    bad = [ln for where, lines in sorted(found.items()) for ln in lines if not _tolerated(where, ln)]
    stale = sorted(w for w, targets in KNOWN_VIOLATIONS.items()
                   if not any(_tolerated(w, ln) for ln in found.get(w, [])))
    if stale:
        warnings.warn(f"tests/unit/test_layers.py KNOWN_VIOLATIONS: no longer needed, remove: {', '.join(stale)}",
                      stacklevel=1)
    assert not bad, "imports against the layering (tests/unit/test_layers.py docstring):\n" + "\n".join(bad)


def test_the_rule_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The parser finds what a grep would miss: relative, function-level, TYPE_CHECKING, importlib."""
    src = tmp_path / "mod.py"
    src.write_text(
        "import importlib\n"
        "from typing import TYPE_CHECKING\n"
        "from . import sibling\n"
        "from ..analyzers import stats\n"
        "if TYPE_CHECKING:\n"
        "    from profiler.capture.session import Session\n"
        "def f():\n"
        "    import profiler.cli\n"
        "    importlib.import_module('profiler.renderers.html')\n"
        "    return importlib.import_module(f'profiler.inputs.{f}')\n"
        "import analyzers\n"
    )
    mod = Module("profiler.collectors.mod", src, False)
    known = {"profiler.collectors.sibling", "profiler.analyzers.stats"}
    got = {(i.line, i.target) for i in imports(mod, known)}
    assert {(3, "profiler.collectors.sibling"), (4, "profiler.analyzers.stats"), (6, "profiler.capture.session"),
            (8, "profiler.cli"), (9, "profiler.renderers.html"), (10, "profiler.inputs"),
            (11, "analyzers")} <= got
    found = violations([mod])[mod.where]
    assert [ln.split(":")[1] for ln in found] == ["4", "6", "8", "9", "10", "11"]
    assert "collectors may not import analyzers" in found[0]
    assert "repository folder 'analyzers'" in found[-1]


_NAMES_LAYER = re.compile(r"(\w+) layer\b", re.I)


def test_each_module_docstring_names_its_layer() -> None:
    """docs/style.md practice 13: a one-line summary atop each module naming its layer."""
    bad: list[str] = []
    unnamed: set[str] = set()
    for mod in modules():
        layer = layer_of(mod.name)
        assert layer is not None, f"{mod.where}: module {mod.name} is in no layer (tests/unit/test_layers.py LAYER_OF)"
        doc = ast.get_docstring(ast.parse(mod.path.read_text(encoding="utf-8")))
        summary = " ".join((doc or "").strip().split("\n\n")[0].split())  # the summary, however wrapped
        named = {m.group(1).lower().rstrip("s") for m in _NAMES_LAYER.finditer(summary)}  # "analyzer layer" too
        if layer.rstrip("s") not in named:
            unnamed.add(mod.where)
            if mod.where not in KNOWN_UNNAMED:
                bad.append(f"{mod.where}: {summary[:90]!r}: the summary should say ({layer} layer)")
    stale = sorted(set(KNOWN_UNNAMED) - unnamed)
    if stale:
        warnings.warn(f"tests/unit/test_layers.py KNOWN_UNNAMED: no longer needed, remove: {', '.join(stale)}",
                      stacklevel=1)
    assert not bad, "module docstrings that do not name their layer:\n" + "\n".join(bad)


def test_tests_sit_in_their_tier() -> None:
    """docs/design.md#tests: a test module lives in tests/unit, cli, e2e or scenarios; only the
    README's own test (the README names it) stays at tests/."""
    loose = sorted(p.name for p in (ROOT / "tests").glob("test_*.py") if p.name != "test_readme.py")
    assert not loose, f"tests/{', tests/'.join(loose)}: move each to tests/unit, cli, e2e or scenarios (docs/design.md#tests)"


def _format_tests(source: str) -> list[str]:
    """The comparisons in ``source`` that test an input's format (``src.format is pprof.FORMAT``,
    ``src.format in UNTIMED``, ``x.format == ...``): what a dispatch table's row or the
    Format's own fields (``untimed``, ``labels``, ``directory``) say instead."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(
            isinstance(m, ast.Attribute) and m.attr in ("format", "FORMAT")
            for side in (node.left, *node.comparators) for m in ast.walk(side)
        ):
            out.append(f"{node.lineno}: {ast.unparse(node)}")
    return out


def test_no_use_case_or_verb_tests_an_input_format() -> None:
    """docs/style.md practice 15: a use case picks a format's reader from its table (``pick``),
    and asks the Format what it cannot give; it never compares formats."""
    assert _format_tests("if src.format is pprof.FORMAT:\n    pass\nok = src.format.untimed\n") == [
        "1: src.format is pprof.FORMAT"]
    assert _format_tests("x = fmt in (perfdata.FORMAT, perfscript.FORMAT) or s.format == 'a'\n") == [
        "1: fmt in (perfdata.FORMAT, perfscript.FORMAT)", "1: s.format == 'a'"]
    found = {str(p.relative_to(ROOT)): hits for d in ("profiler/usecases", "profiler/cli")
             for p in sorted((ROOT / d).glob("*.py")) if (hits := _format_tests(p.read_text()))}
    assert not found, f"format tests outside the reader tables (docs/style.md practice 15): {found}"
