"""Where the project's shared data (public request traces) lives: `../shared` beside the checkout,
or wherever `PRFAAS_SHARED_DIR` points. Traces are read in place, never copied into the project.

Also which files a scenario may name (length lists, traces). A scenario can reach this process
from the dashboard's free-text override box, so a path in it is not trusted as the user's own: it
must resolve (symlinks followed) under the repository, the shared traces folder, a folder listed in
PRFAAS_DATA_DIRS (os.pathsep-separated), or the folder of a scenario file the user named.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

SHARED_DIR_ENV = "PRFAAS_SHARED_DIR"
DATA_DIRS_ENV = "PRFAAS_DATA_DIRS"
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


def readable_roots(extra: Iterable[Path] = ()) -> tuple[Path, ...]:
    """The folders scenario files may read from (resolved), `extra` included."""
    listed = [Path(p) for p in os.environ.get(DATA_DIRS_ENV, "").split(os.pathsep) if p.strip()]
    roots = (REPO_ROOT, shared_dir() / "traces", *listed, *extra)
    return tuple(_resolved(root) for root in roots)


# Files once allowed through a trusted folder stay allowed in this process, so the same scenario
# revalidated after `--set`, a timeline change or calibration keeps its own files.
_approved: set[Path] = set()


def may_read(path: Path, trusted_dir: Path | None = None) -> bool:
    """Whether a scenario may read `path`: its real location lies under readable_roots(), or under
    `trusted_dir` (the folder of the scenario file the user named)."""
    real = _resolved(path)
    if real in _approved or any(real.is_relative_to(root) for root in readable_roots()):
        return True
    if trusted_dir is not None and real.is_relative_to(_resolved(trusted_dir)):
        _approved.add(real)
        return True
    return False


def _resolved(path: Path) -> Path:
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError, ValueError):  # a symlink loop, an embedded NUL byte
        return Path(os.path.abspath(path))
