"""Where the project's shared data (public request traces) lives: `../shared` beside the checkout,
or wherever `PRFAAS_SHARED_DIR` points. Traces are read in place, never copied into the project."""

from __future__ import annotations

import os
from pathlib import Path

SHARED_DIR_ENV = "PRFAAS_SHARED_DIR"
REPO_ROOT = Path(__file__).resolve().parents[1]


def shared_dir() -> Path:
    return Path(os.environ.get(SHARED_DIR_ENV) or REPO_ROOT.parent / "shared")


def relocate(path: Path) -> Path | None:
    """`.../shared/traces/x.jsonl` found under `shared_dir()` instead, when the checkout sits
    somewhere else than beside `shared`; None when there is no such file either."""
    parts = path.parts
    if "shared" not in parts:
        return None
    rest = parts[len(parts) - 1 - parts[::-1].index("shared") + 1:]
    candidate = shared_dir().joinpath(*rest)
    return candidate if candidate.is_file() else None
