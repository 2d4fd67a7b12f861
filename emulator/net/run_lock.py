"""One owner per run id on this machine: an flock its owner holds for the run's whole life.

The lock file lives in a fixed folder that no environment variable moves (`/run/prfaas-locks` as
root, `/tmp/prfaas-locks-<uid>` otherwise), so a run is seen as live from any state folder; the
kernel releases the lock when its holder ends, however it ends. The holder writes its pid into the
file for the refusal line. It does not decide what a run owns: emulator/net/ledger.py does.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from dataclasses import dataclass
from pathlib import Path

from emulator.errors import TopologyError
from emulator.net.names import check_run_id
from emulator.net.state_files import make_private_dir

ROOT_LOCK_DIR = Path("/run/prfaas-locks")
MAX_HOLDER_BYTES = 64  # "<pid>\n"
_MAX_TRIES = 8  # re-opens when a releasing holder unlinked the file between our open and our flock


class RunIdInUse(TopologyError):
    """A live run holds this id; `pid` is its owner's (None while the owner is still writing it)."""

    def __init__(self, run_id: str, pid: int | None) -> None:
        who = f"pid {pid}" if pid is not None else "another process"
        super().__init__(f"run_id: {run_id} is in use by a live run ({who}); pick another run id, "
                         "or stop that run first")
        self.run_id, self.pid = run_id, pid


def lock_dir() -> Path:
    """Where run locks live: fixed per user, never taken from the environment."""
    return ROOT_LOCK_DIR if os.geteuid() == 0 else Path(f"/tmp/prfaas-locks-{os.geteuid()}")


def lock_path(run_id: str) -> Path:
    return lock_dir() / f"{check_run_id(run_id)}.lock"


@dataclass(slots=True)
class RunLock:
    """A held lock; `release()` (idempotent) gives the id back. Never inherited by child processes
    (O_CLOEXEC): only this process's life holds it."""

    run_id: str
    path: Path
    fd: int | None

    def release(self) -> None:
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        # unlink while still holding it; a claimer that opened the old file sees it was unlinked
        with contextlib.suppress(OSError):
            if _is_current(fd, self.path):
                self.path.unlink()
        os.close(fd)


def acquire(run_id: str, wait_s: float = 0.0) -> RunLock:
    """Hold `run_id`'s lock, waiting up to `wait_s`; RunIdInUse (one line) when a live run has it."""
    make_private_dir(lock_dir(), "the run-lock folder", fix="remove it (it holds only lock files)")
    path = lock_path(run_id)
    deadline = time.monotonic() + wait_s
    for _ in range(_MAX_TRIES):
        fd = _open(path, run_id)
        try:
            _flock(fd, deadline)
        except BlockingIOError:
            pid = _read_holder(fd)
            os.close(fd)
            raise RunIdInUse(run_id, pid) from None
        if not _is_current(fd, path):  # its last holder released (unlinked) it meanwhile: try again
            os.close(fd)
            continue
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return RunLock(run_id, path, fd)
    raise TopologyError(f"run_id: {run_id}: its lock {path} kept changing hands; try again")


def holder_pid(run_id: str) -> int | None:
    """The pid holding `run_id`'s lock, else None. Read from the kernel's /proc/locks, never by
    taking the lock, so probing never makes a starting run fail."""
    try:
        info = lock_path(run_id).stat(follow_symlinks=False)
        locks = Path("/proc/locks").read_text()
    except OSError:
        return None
    where = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    for line in locks.splitlines():
        fields = line.split()  # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; waiters read "1: -> FLOCK ..."
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == where and fields[4].isdigit():
            return int(fields[4])
    return None


def _open(path: Path, run_id: str) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o600)
    except OSError as err:
        raise TopologyError(f"run_id: {run_id}: cannot open its lock {path} ({err.strerror}); "
                            f"remove {path} if it is not a plain file") from None


def _flock(fd: int, deadline: float) -> None:
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def _is_current(fd: int, path: Path) -> bool:
    try:
        now = path.stat(follow_symlinks=False)
    except OSError:
        return False
    mine = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino)


def _read_holder(fd: int) -> int | None:
    try:
        text = os.pread(fd, MAX_HOLDER_BYTES, 0).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None
