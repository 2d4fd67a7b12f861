"""Which files of the project's shared data (public request traces; emulator.paths.shared_dir says
where it lives) a scenario finds, read in place, never copied into the project.

Also which files a scenario may name (length lists, traces). A scenario can reach this process
from the dashboard's free-text override box, so a path in it is not trusted as the user's own: it
must resolve (symlinks followed) under the repository, the shared traces folder, a folder listed in
PRFAAS_DATA_DIRS (os.pathsep-separated), or the folder of a scenario file the user named.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from emulator.paths import REPO_ROOT, Env, data_dirs, shared_dir

DATA_DIRS_ENV = Env.DATA_DIRS.value


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
    roots = (REPO_ROOT, shared_dir() / "traces", *data_dirs(), *extra)
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
