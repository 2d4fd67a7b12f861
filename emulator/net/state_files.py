"""The state folder's files, read and written as untrusted: private folders, atomic writes, and
bounded reads that follow no link and refuse anything but a small regular file of shallow JSON.

What the files mean (ledger entries, a run's status) is for emulator/net/ledger.py to decide.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

import pydantic_core

from emulator.errors import TopologyError

MAX_STATE_FILE_BYTES = 1 << 20  # a ledger of ~10k entries; a run writes a few dozen
MAX_STATE_DEPTH = 8  # ledger: a list of flat objects; status: an object holding the link spec


class StateFileError(TopologyError):
    """A file in the state folder that cannot be trusted or read; the message is one line."""


def private_dir_problem(path: Path) -> str | None:
    """Why `path` is not a private folder of this user (a link, a file, another owner, writable by
    others), or None when it is one."""
    try:
        info = path.lstat()
    except OSError as err:
        return f"cannot read it ({err.strerror})"
    if not stat.S_ISDIR(info.st_mode):
        return "not a folder (a link or a file)"
    if info.st_uid != os.geteuid():
        return f"owned by uid {info.st_uid}, not by you (uid {os.geteuid()})"
    if info.st_mode & 0o022:
        return "writable by others"
    return None


def make_private_dir(path: Path, what: str, fix: str) -> None:
    """Create `path` 0700 if missing; TopologyError `<what> <path>: <problem>; <fix>` unless it is
    then a private folder of this user."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as err:
        raise TopologyError(f"{what} {path}: cannot create it ({err.strerror}); {fix}") from None
    if (problem := private_dir_problem(path)) is not None:
        if problem == "writable by others":
            fix = f"chmod 700 it, or {fix}"
        raise TopologyError(f"{what} {path}: {problem}; {fix}")


def read_json(path: Path, max_bytes: int = MAX_STATE_FILE_BYTES, max_depth: int = MAX_STATE_DEPTH) -> Any:
    """The JSON in `path`, or StateFileError naming the file and why: missing, a link, not a regular
    file (a FIFO never blocks the read), over `max_bytes`, not JSON, or nested past `max_depth`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        reason = "a link (refused)" if err.errno == errno.ELOOP else err.strerror  # O_NOFOLLOW met a link
        raise StateFileError(f"{path.name}: cannot open it ({reason})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise StateFileError(f"{path.name}: not a regular file")
        if info.st_size > max_bytes:
            raise StateFileError(f"{path.name}: {info.st_size} bytes is over the {max_bytes}-byte limit")
        data = os.read(fd, max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise StateFileError(f"{path.name}: over the {max_bytes}-byte limit")
    try:  # pydantic_core's parser is iterative and stops at a fixed depth: no RecursionError here
        value = pydantic_core.from_json(data, allow_inf_nan=False)
    except ValueError as err:
        raise StateFileError(f"{path.name}: not JSON ({' '.join(str(err).split())[:80]})") from None
    if _depth(value, max_depth) > max_depth:
        raise StateFileError(f"{path.name}: nests deeper than {max_depth} levels")
    return value


def write_json(path: Path, value: Any) -> None:
    """Replace `path` whole: a new file of a random name (never one planted in advance), then a rename."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(value, f, indent=1)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _depth(value: Any, stop_above: int) -> int:
    """How deep `value` nests lists and dicts, iteratively; stops counting once past `stop_above`."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            level += 1
            if level > stop_above:
                return level
            deepest = max(deepest, level)
            stack.extend((child, level) for child in (item.values() if isinstance(item, dict) else item))
    return deepest
