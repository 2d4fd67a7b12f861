"""Imports flow one way: every package may import only what docs/architecture.md's layer table lists
for it, and any arrow not listed fails. The table is the one source of truth; this test reads it.

Imports are read with `ast`, so nothing is imported: top-level, nested, relative, TYPE_CHECKING,
`from pkg import submodule` and `importlib.import_module("literal")` all count.
"""

from __future__ import annotations

import ast
import re
import sys
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
