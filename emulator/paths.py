"""Where the project's files live, and every `PRFAAS_*` environment variable the code reads.

Each variable is read here and nowhere else, so the README's Environment table has one place to
match (a test checks both). The one exception is the worker's per-run secret
(PRFAAS_WORKER_SECRET): emulator/wire/auth.py takes it out of the environment itself, so that the
worker's own children never inherit it. Callers keep their checks (the state dir's privacy, the
broker URL's syntax); this module only says where, and imports nothing of the project.
"""

from __future__ import annotations

import os
import stat
from enum import StrEnum
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SCENARIOS_DIR = REPO_ROOT / "scenarios"


class Env(StrEnum):
    """The environment variables the project reads (README: Environment)."""

    SHARED_DIR = "PRFAAS_SHARED_DIR"
    DATA_DIRS = "PRFAAS_DATA_DIRS"
    RUNS_DIR = "PRFAAS_RUNS_DIR"
    STATE_DIR = "PRFAAS_STATE_DIR"
    ACCEL = "PRFAAS_ACCEL"
    ACCEL_DIR = "PRFAAS_ACCEL_DIR"
    BROKER_URL = "PRFAAS_BROKER_URL"
    RELAY_LOG = "PRFAAS_RELAY_LOG"
    WORKER_SECRET = "PRFAAS_WORKER_SECRET"  # read (and removed) by emulator/wire/auth.py only


def _get(name: Env) -> str:
    return os.environ.get(name, "").strip()


def shared_dir() -> Path:
    """The project's shared data (public traces): $PRFAAS_SHARED_DIR, else `../shared` beside the checkout."""
    return Path(_get(Env.SHARED_DIR) or REPO_ROOT.parent / "shared")


def data_dirs() -> tuple[Path, ...]:
    """Extra folders scenario files may read from: $PRFAAS_DATA_DIRS, os.pathsep-separated."""
    return tuple(Path(p) for p in _get(Env.DATA_DIRS).split(os.pathsep) if p.strip())


def runs_dir() -> Path:
    """Where runs started through the API are recorded: $PRFAAS_RUNS_DIR, else the repository's runs/."""
    given = _get(Env.RUNS_DIR)
    return Path(given).expanduser() if given else REPO_ROOT / "runs"


def state_dir() -> Path:
    """Where live runs keep their cleanup ledgers: $PRFAAS_STATE_DIR, else /run/prfaas as root, else
    /tmp/prfaas-<uid>. emulator/net/ledger.py creates it and refuses one that is not private."""
    if given := _get(Env.STATE_DIR):
        return Path(given)
    return Path("/run/prfaas") if os.geteuid() == 0 else Path(f"/tmp/prfaas-{os.geteuid()}")


def accel_dir() -> Path:
    """The compiled build of the virtual engine: $PRFAAS_ACCEL_DIR, else build/accel."""
    return Path(_get(Env.ACCEL_DIR) or REPO_ROOT / "build" / "accel")


def accel_disabled() -> bool:
    """PRFAAS_ACCEL=0 forces the interpreted modules even where a current build exists."""
    return _get(Env.ACCEL) == "0"


def broker_url() -> str:
    """$PRFAAS_BROKER_URL (the dashboard's MQTT broker instead of its embedded one); "" when unset."""
    return _get(Env.BROKER_URL)


def relay_log_level() -> str:
    """The link relays' log level: $PRFAAS_RELAY_LOG, else INFO."""
    return _get(Env.RELAY_LOG) or "INFO"


class NotARegularFile(OSError):
    """A path names a FIFO, a device, a socket or a folder where a data file was expected."""


def open_regular(path: str | Path) -> int:
    """A blocking read-only fd on `path`, refused (NotARegularFile) unless it is a regular file.

    Opened non-blocking first, so a FIFO answers at once instead of hanging the caller, and the
    type is checked on the open fd, so a path swapped after a stat cannot slip through.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotARegularFile(f"{path} is not a regular file")
    os.set_blocking(fd, True)
    return fd
