"""Imports flow one way: every package may import only what docs/architecture.md's layer table lists
for it, and any arrow not listed fails. The table is the one source of truth; this test reads it.
One way means both: the table allows no two packages to import each other, and the imports found
form no cycle between packages (issue 27: scenario and run once imported each other).

Imports are read with `ast`, so nothing is imported: top-level, nested, relative, TYPE_CHECKING,
`from pkg import submodule` and `importlib.import_module("literal")` all count.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = ("app", "emulator", "model_stub")
STDLIB = frozenset(sys.stdlib_module_names)
TABLE_BEGIN, TABLE_END = "<!-- layers:begin -->", "<!-- layers:end -->"


@dataclass(frozen=True, slots=True)
class Layer:
    """Modules under any of `scopes` may import the standard library (less `stdlib_never`), their
    own layer, and names under `allowed` (project modules and third-party packages)."""

    scopes: tuple[str, ...]
    allowed: tuple[str, ...]
    stdlib_never: tuple[str, ...] = ()


def _names(cell: str) -> tuple[str, ...]:
    return tuple(re.findall(r"`([^`]+)`", cell))


def parse_layers(text: str) -> tuple[Layer, ...]:
    """The rows of the table between the layers markers: | scopes | may import | standard library |."""
    body = text.split(TABLE_BEGIN, 1)[1].split(TABLE_END, 1)[0]
    rows = [line.strip().strip("|").split("|") for line in body.splitlines() if line.strip().startswith("|")]
    layers = []
    for cells in rows[2:]:  # after the header and the |---| line
        scopes, allowed, stdlib = (cell.strip() for cell in cells)
        layers.append(Layer(_names(scopes), _names(allowed), _names(stdlib)))
    return tuple(layers)


LAYERS = parse_layers(DOC.read_text())


def _is_under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def layer_of(module: str, layers: tuple[Layer, ...] = LAYERS) -> tuple[Layer, str] | None:
    """The layer whose scope names `module` most closely (the longest matching scope), and that scope."""
    matches = [(len(scope), scope, layer) for layer in layers for scope in layer.scopes if _is_under(module, scope)]
    if not matches:
        return None
    _, scope, layer = max(matches, key=lambda m: m[0])
    return layer, scope


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(source: str, module: str, is_package: bool) -> set[str]:
    """Absolute names a module's source imports; `from a import b` yields both a and a.b."""
    package = module if is_package else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.Call) and (literal := _literal_import(node)):
            names.add(literal)
    return names


def _literal_import(call: ast.Call) -> str | None:
    """The module of `importlib.import_module("x")` or `__import__("x")`, else None."""
    func = call.func
    func_name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if func_name not in ("import_module", "__import__") or not call.args:
        return None
    first = call.args[0]
    return first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None


def violations(module: str, names: set[str], layers: tuple[Layer, ...] = LAYERS) -> list[str]:
    """`module` is placed by its name; a package's `__init__` as `pkg.__init__`, so the table can
    give the bare `emulator` package a row of its own without naming everything under it."""
    found = layer_of(module, layers)
    if found is None:
        return [f"{module} is in no layer of {DOC.name}'s table; add it to one"]
    layer, scope = found
    bad = []
    for name in sorted(names):
        top = name.partition(".")[0]
        if top in STDLIB:
            if top in layer.stdlib_never:
                bad.append(name)
        elif not any(_is_under(name, a) or _is_under(a, name) for a in (*layer.scopes, *layer.allowed)):
            bad.append(name)  # a parent package of an allowed module is its docstring-only __init__: allowed
    return [f"{module} imports {name}: not listed for `{scope}` in {DOC.name}" for name in bad]


def _modules() -> list[tuple[str, Path]]:
    paths = sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))
    return [(module_name(p), p) for p in paths if "__pycache__" not in p.parts]


def _placed(module: str, path: Path) -> str:
    return f"{module}.__init__" if path.name == "__init__.py" else module


def test_the_table_is_read_and_covers_every_package() -> None:
    scopes = {scope for layer in LAYERS for scope in layer.scopes}
    assert {"app", "model_stub", "emulator.control", "emulator.live", "emulator.virtual"} <= scopes
    modules = dict(_modules())
    assert "model_stub.config" in modules  # guards against passing on an empty scan
    unplaced = [m for m, path in modules.items() if layer_of(_placed(m, path)) is None]
    assert not unplaced, f"modules in no layer of {DOC.name}: {unplaced}"


def test_every_import_is_listed() -> None:
    found = []
    for module, path in _modules():
        names = imported_names(path.read_text(), module, path.name == "__init__.py")
        found += violations(_placed(module, path), names)
    assert not found, "imports the layer table does not allow:\n" + "\n".join(found)


def package_of(name: str) -> str:
    """The package a module (or a name in it) belongs to for the one-way rules: `app`, `model_stub`,
    or `emulator.<first part>`, so a top-level module such as `emulator.errors` is a package of its
    own and `emulator.virtual.accel` is `emulator.virtual`; the bare `emulator` (its docstring-only
    `__init__`) is `emulator.__init__`."""
    top, _, rest = name.partition(".")
    if top != "emulator":
        return top
    return f"emulator.{rest.partition('.')[0]}" if rest else "emulator.__init__"


def _is_project(name: str) -> bool:
    return name.partition(".")[0] in PACKAGES


def allowed_arrows(layers: tuple[Layer, ...], packages: set[str]) -> set[tuple[str, str]]:
    """(importer, imported) package pairs the table allows: each row's packages to what the row lists
    and to its own other scopes (a row may import itself). The bare `emulator` is every emulator
    package in `packages`."""
    arrows = set()
    for layer in layers:
        targets: set[str] = set()
        for name in filter(_is_project, (*layer.scopes, *layer.allowed)):
            targets |= {p for p in packages if p.startswith("emulator.")} if name == "emulator" else {package_of(name)}
        arrows |= {(package_of(scope), target) for scope in layer.scopes for target in targets}
    return {(a, b) for a, b in arrows if a != b}


def two_way(arrows: set[tuple[str, str]]) -> list[str]:
    return [f"{a} <-> {b}" for a, b in sorted(arrows) if a < b and (b, a) in arrows]


def import_graph() -> dict[tuple[str, str], str]:
    """{(importer package, imported package): one import that makes the arrow, in words}."""
    edges: dict[tuple[str, str], str] = {}
    for module, path in _modules():
        for name in sorted(imported_names(path.read_text(), module, path.name == "__init__.py")):
            edge = (package_of(module), package_of(name))
            if _is_project(name) and edge[0] != edge[1]:
                edges.setdefault(edge, f"{module} imports {name}")
    return edges


def cycles(edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one package (Tarjan), each sorted."""
    graph: dict[str, list[str]] = {}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while (member := stack.pop()) != node:
                component.append(member)
            if component:
                found.append(sorted([node, *component]))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_table_allows_no_two_packages_to_import_each_other() -> None:
    packages = {package_of(module) for module, _ in _modules()}
    both = two_way(allowed_arrows(LAYERS, packages))
    assert not both, f"{DOC.name}'s table lets these packages import each other:\n" + "\n".join(both)


def test_the_imports_form_no_cycle_between_packages() -> None:
    edges = import_graph()
    assert ("emulator.live", "emulator.run") in edges  # guards against passing on an empty graph
    found = cycles(edges)
    witnesses = ["; ".join(edges[(a, b)] for a in cycle for b in cycle if (a, b) in edges) for cycle in found]
    assert not found, "import cycles between packages:\n" + "\n".join(
        f"{' / '.join(cycle)}: {why}" for cycle, why in zip(found, witnesses, strict=True))


# A small table for the checker's own cases, in the doc's format.
SAMPLE = f"""{TABLE_BEGIN}
| package | may import | standard library |
|---|---|---|
| `model_stub` | `torch` | any |
| `emulator.control` | `numpy`, `emulator.errors` | any but `asyncio`, `socket`, `time` |
| `emulator.control.special` | `emulator.live` | any |
| `emulator.workload` | `emulator.control.types` | any |
| `app` | `emulator.api`, `emulator.telemetry`, `emulator.scenario` | any |
{TABLE_END}"""


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("model_stub.model", "import numpy", ["numpy"]),
        ("model_stub.model", "import torch, math\nfrom . import config", []),
        ("emulator.control.router", "def f():\n    import time", ["time"]),
        ("emulator.control.router", "from ..live import worker", ["emulator.live", "emulator.live.worker"]),
        ("emulator.control.router", "from emulator import live", ["emulator.live"]),
        ("emulator.control.router", "import timeit, random\nfrom emulator.errors import PrfaasError", []),
        ("emulator.control.special.x", "from emulator.live import worker", []),  # the longest scope wins
        ("emulator.workload.trace", "from app import Home", ["app", "app.Home"]),
        ("emulator.workload.trace", "from emulator.control.types import Route\nfrom emulator.control import router",
         ["emulator.control.router"]),
        ("app.pages.runs", "import importlib\nimportlib.import_module('emulator.virtual.engine')",
         ["emulator.virtual.engine"]),
        ("app.Home", "from emulator import telemetry, scenario", []),
        ("app.Home", "import pandas", ["pandas"]),  # a third-party package not listed is an arrow too
    ],
)
def test_checker_catches_unlisted_arrows(module: str, source: str, expected: list[str]) -> None:
    names = imported_names(source, module, is_package=False)
    found = violations(module, names, parse_layers(SAMPLE))
    assert [v.split(" imports ")[1].split(":")[0] for v in found] == expected


def test_a_module_in_no_layer_fails() -> None:
    assert violations("emulator.sweep.ray", {"math"}, parse_layers(SAMPLE)) == [
        f"emulator.sweep.ray is in no layer of {DOC.name}'s table; add it to one"]


def test_a_table_that_lets_two_packages_import_each_other_is_caught() -> None:
    def table(*rows: str) -> tuple[Layer, ...]:
        return parse_layers("\n".join([TABLE_BEGIN, "| package | may import | standard library |", "|---|---|---|",
                                        *rows, TABLE_END]))

    packages = {"emulator.control", "emulator.live", "emulator.errors", "emulator.api", "emulator.cli"}
    control, live = "| `emulator.control` | `emulator.errors` | any |", "| `emulator.live` | `emulator.control` | any |"
    special = "| `emulator.control.special` | `emulator.live` | any |"  # a sub-row counts for its package
    assert two_way(allowed_arrows(table(control, live), packages)) == []
    assert two_way(allowed_arrows(table(control, special, live), packages)) == ["emulator.control <-> emulator.live"]
    shared = "| `emulator.cli`, `emulator.api` | `emulator.errors` | any |"  # one row: each may import the other
    assert two_way(allowed_arrows(table(shared), packages)) == ["emulator.api <-> emulator.cli"]
    everything = "| `emulator.cli` | `emulator` | any |"  # the bare `emulator` is every emulator package
    back = "| `emulator.live` | `emulator.cli.run` | any |"
    assert two_way(allowed_arrows(table(everything, back), packages)) == ["emulator.cli <-> emulator.live"]


def test_an_import_cycle_between_packages_is_caught() -> None:
    assert package_of("emulator.virtual.accel") == "emulator.virtual" and package_of("emulator") == "emulator.__init__"
    assert cycles([("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "e")]) == [["a", "b", "c"]]
    assert cycles([("a", "b"), ("b", "c"), ("a", "c")]) == []
