"""Imports flow one way (design.md, style.md section 2): every arrow not allowed here fails.

Imports are read with `ast`, so nothing is imported: top-level, nested, relative,
`from pkg import submodule` and `importlib.import_module("literal")` all count.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("app", "emulator", "model_stub")
STDLIB = frozenset(sys.stdlib_module_names)


@dataclass(frozen=True, slots=True)
class Rule:
    """Modules under `scope` may import only `only` (when set) and never `forbidden`."""

    scope: str
    forbidden: tuple[str, ...] = ()
    only: tuple[str, ...] | None = None  # allow-list; "stdlib" stands for the standard library
    why: str = ""


# fmt: off
RULES = (
    Rule("model_stub", only=("stdlib", "torch", "model_stub"),
         why="model_stub imports only torch and the standard library"),
    Rule("emulator", forbidden=("app",), why="imports flow app -> emulator, never back"),
    Rule("emulator.control",
         forbidden=("asyncio", "socket", "time", "torch", "pydantic", "threading", "subprocess",
                    "emulator.live", "emulator.virtual", "emulator.net", "emulator.transport"),
         why="control is pure: injected clock, no I/O, no engine of its own"),
    Rule("emulator.virtual", forbidden=("emulator.live", "emulator.net", "emulator.transport"),
         why="the virtual engine simulates; it opens no links or sockets"),
    Rule("app", forbidden=("emulator.live", "emulator.virtual"),
         why="the app uses the run API and telemetry, never engine internals"),
)
# fmt: on


def _is_under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


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


def violations(module: str, names: set[str], rules: tuple[Rule, ...] = RULES) -> list[str]:
    found = []
    for rule in rules:
        if not _is_under(module, rule.scope):
            continue
        for name in sorted(names):
            top = name.partition(".")[0]
            allowed = rule.only is None or any(
                (a == "stdlib" and top in STDLIB) or _is_under(name, a) for a in rule.only
            )
            if not allowed or any(_is_under(name, f) for f in rule.forbidden):
                found.append(f"{module} imports {name}: {rule.why}")
    return found


def _modules() -> list[tuple[str, Path]]:
    paths = sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))
    return [(module_name(p), p) for p in paths if "__pycache__" not in p.parts]


def test_tree_has_modules_to_check() -> None:
    assert "model_stub.config" in dict(_modules())  # guards against passing on an empty scan


def test_no_forbidden_imports() -> None:
    found = []
    for module, path in _modules():
        names = imported_names(path.read_text(), module, path.name == "__init__.py")
        found += violations(module, names)
    assert not found, "forbidden imports:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("model_stub.model", "import numpy", ["numpy"]),
        ("model_stub.model", "import torch, math\nfrom . import config", []),
        ("emulator.control.router", "def f():\n    import time", ["time"]),
        ("emulator.control.router", "from ..live import worker",
         ["emulator.live", "emulator.live.worker"]),
        ("emulator.control.router", "from emulator import live", ["emulator.live"]),
        ("emulator.control.router", "import timeit, random", []),
        ("emulator.workload.trace", "from app import Home", ["app", "app.Home"]),
        ("app.pages.runs", "import importlib\nimportlib.import_module('emulator.virtual.engine')",
         ["emulator.virtual.engine"]),
        ("app.Home", "from emulator import telemetry, scenario", []),
    ],
)
def test_checker_catches_forbidden_arrows(module: str, source: str, expected: list[str]) -> None:
    names = imported_names(source, module, is_package=False)
    assert [v.split(" imports ")[1].split(":")[0] for v in violations(module, names)] == expected
