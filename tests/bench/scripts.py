"""What the bench tests share: a bench script imported as a module without its side effects
(a plain module, not a conftest: the tests import it)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load_bench(name: str) -> ModuleType:
    """bench/<name>.py as a module; its import pins the math libraries' threads, so the
    environment is put back. bench/ goes on the path, as for a script, for its sibling modules."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    saved = dict(os.environ)
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up by name
    try:
        spec.loader.exec_module(module)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return module
