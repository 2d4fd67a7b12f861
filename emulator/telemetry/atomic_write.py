"""A file written whole or not at all: a temporary name in the same folder, fsync, rename over the
final name, fsync of the folder. A reader (the dashboard, `compare`) never sees half a file, and a
crash or a full disk leaves the previous version or nothing under the final name.

A failure (disk full, permission denied, read-only) removes the temporary file and raises
RecordError: one line naming the file, the cause and the fix. Deciding what to write is the caller's.
"""

from __future__ import annotations

import errno
import os
import uuid
from collections.abc import Callable
from pathlib import Path

from emulator.errors import RecordError

_NO_SPACE = ("no space left on device", "free space there or pass --out a folder on another disk")
_NO_PERMISSION = ("permission denied", "pass --out a folder you can write")
CAUSES: dict[int, tuple[str, str]] = {  # errno -> (the cause, the fix), in words
    errno.ENOSPC: _NO_SPACE,
    errno.EDQUOT: ("disk quota exceeded", _NO_SPACE[1]),
    errno.EFBIG: ("file too large for this file system", _NO_SPACE[1]),
    errno.EACCES: _NO_PERMISSION,
    errno.EPERM: _NO_PERMISSION,
    errno.EROFS: ("read-only file system", "pass --out a folder on a writable disk"),
}


def write_atomic(path: Path, write: Callable[[str], object]) -> None:
    """Write through `write(tmp_path)`, then make it `path`; RecordError (one line) when the disk refuses."""
    # A fresh name rather than mkstemp: the writer creates the file, so it gets the umask's
    # permissions (mkstemp's 0600 would hide results from other users).
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        write(str(tmp))
        _fsync(tmp, os.O_RDONLY)  # a full disk can first show here, after every write() went through
        os.replace(tmp, path)
    except BaseException as err:
        _remove(tmp)
        if isinstance(err, OSError):
            raise record_error(path, err) from None
        raise
    try:
        _fsync(path.parent, os.O_RDONLY | os.O_DIRECTORY)  # the rename itself, durable
    except OSError as err:
        raise record_error(path, err) from None


def make_dir(path: Path) -> None:
    """`path` and its parents, writable, or RecordError naming it (an --out on a read-only disk)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise record_error(path, err, "not created") from None
    if not os.access(path, os.W_OK | os.X_OK):  # an existing folder: mkdir said nothing
        code = errno.EROFS if os.statvfs(path).f_flag & os.ST_RDONLY else errno.EACCES
        raise record_error(path, OSError(code, os.strerror(code)), "not writable")


def record_error(path: Path, err: OSError, what: str = "not written") -> RecordError:
    """`<path>: not written: no space left on device (ENOSPC); <fix>`, whatever the OSError's words."""
    code = err.errno if isinstance(err.errno, int) else 0
    cause, fix = CAUSES.get(code, ((err.strerror or type(err).__name__).lower(),
                                   "check the folder, or pass --out another one"))
    name = f" ({errno.errorcode[code]})" if code in errno.errorcode else ""
    return RecordError(f"record: {str(path)!r} {what}: {cause}{name}; {fix}")


def _fsync(path: Path, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(tmp: Path) -> None:
    try:
        tmp.unlink(missing_ok=True)
    except OSError:  # the folder itself went away or became read-only: nothing is left to clean
        pass
