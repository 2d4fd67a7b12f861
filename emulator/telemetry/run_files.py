"""The one reader of run and sweep folders (summary.json, run.log, report.html, parquet files, sweep.json),
for the dashboard and the command line alike.

A folder's files may have been planted by another local user, so a read stays inside the folder,
follows no symbolic link below the folder the caller named (each component is opened with O_NOFOLLOW
relative to its parent), opens only regular files with one link (non-blocking, so a FIFO answers at
once), caps each kind of file before reading it (emulator/limits.py), reads a log's tail only and
decodes JSON with bounded depth. Every refusal is one RunFileError line naming the file and the
reason, never the file's content. Writing is the recorder's job, not this module's.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emulator.errors import RunFileError, TelemetryError
from emulator.limits import (
    MAX_LOG_TAIL_BYTES,
    MAX_PARQUET_BYTES,
    MAX_PARQUET_COLUMNS,
    MAX_PARQUET_DATA_BYTES,
    MAX_PARQUET_ROWS,
    MAX_REPORT_BYTES,
    MAX_RUN_JSON_BYTES,
    MAX_RUN_JSON_DEPTH,
)
from emulator.telemetry.bounded_json import loads_bounded

if TYPE_CHECKING:  # pyarrow is imported when a parquet file is read: the API's log reads stay light
    import pyarrow as pa
    import pyarrow.parquet as pq

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_LINK = "is a symbolic link, which a run folder's reader never follows"
_NOT_REGULAR = "is not a regular file (a FIFO, device, socket or folder)"
_ROOT_FIX = "point at a folder of recorded runs"


class FileKind(StrEnum):
    """What a run or sweep folder holds, by suffix; anything else is not read."""

    JSON = ".json"
    LOG = ".log"
    HTML = ".html"
    PARQUET = ".parquet"


MAX_BYTES = {  # a whole read's cap; a log is only ever tailed, so its cap is the tail's
    FileKind.JSON: MAX_RUN_JSON_BYTES,
    FileKind.LOG: MAX_LOG_TAIL_BYTES,
    FileKind.HTML: MAX_REPORT_BYTES,
    FileKind.PARQUET: MAX_PARQUET_BYTES,
}


@dataclass(frozen=True, slots=True)
class RunFolder:
    """A folder of run (or sweep) files. `root` is the directory a caller named: a link there is the
    caller's own choice and is followed. `sub` is a folder inside it ("" for `root` itself), read
    like the files: never through a link."""

    root: Path
    sub: str = ""

    @property
    def path(self) -> Path:
        return self.root / self.sub if self.sub else self.root

    @property
    def name(self) -> str:
        return self.path.name

    def read_bytes(self, name: str) -> bytes:
        """The whole file, at most its kind's cap."""
        _parts(self, name)  # a name that leaves the folder is named as such, whatever its suffix
        cap = MAX_BYTES[_kind(self, name)]
        with self._open(name, cap) as (fd, _):
            data = _read_up_to(fd, cap + 1)
        if len(data) > cap:  # it grew after the check
            raise self._error(name, f"is over the {cap:,}-byte cap for a {_kind(self, name)} file")
        return data

    def read_json(self, name: str) -> Any:
        """The decoded document, at most MAX_RUN_JSON_DEPTH levels deep."""
        if _kind(self, name) is not FileKind.JSON:
            raise self._error(name, "is not a .json file")
        data = self.read_bytes(name)
        where, fix = str(self.path / name), "record the run again"
        try:
            return loads_bounded(data, where, max_bytes=MAX_RUN_JSON_BYTES, max_depth=MAX_RUN_JSON_DEPTH, fix=fix)
        except TelemetryError as err:  # `<where>: <reason>; <fix>`: the reason alone, in this file's words
            reason = str(err).removeprefix(f"{where}: ").removesuffix(f"; {fix}").replace("payload", "the document")
            raise self._error(name, reason) from None

    def read_tail(self, name: str, max_bytes: int = MAX_LOG_TAIL_BYTES) -> str:
        """The last `max_bytes` (at most MAX_LOG_TAIL_BYTES) of a log as text, from a line start
        when the tail begins mid-line; the file may be any size."""
        if _kind(self, name) is not FileKind.LOG:
            raise self._error(name, "is not a .log file")
        max_bytes = max(0, min(max_bytes, MAX_LOG_TAIL_BYTES))
        with self._open(name, None) as (fd, info):
            start = max(0, info.st_size - max_bytes)
            data = os.pread(fd, max_bytes, start)
        if start > 0 and b"\n" in data:
            data = data[data.index(b"\n") + 1:]
        return data.decode("utf-8", errors="replace")

    def read_parquet(self, name: str) -> pa.Table:
        """The table, read through the open file once its footer's rows, columns and uncompressed
        size are within the caps."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        if _kind(self, name) is not FileKind.PARQUET:
            raise self._error(name, "is not a .parquet file")
        with self._open(name, MAX_PARQUET_BYTES) as (fd, _), open(os.dup(fd), "rb") as handle:
            try:
                parquet = pq.ParquetFile(handle)
                self._check_footer(name, parquet.metadata)
                return parquet.read()
            except (pa.ArrowException, OSError, ValueError) as err:
                raise self._error(name, f"is not a readable parquet file ({type(err).__name__})") from None

    def info(self, name: str) -> os.stat_result | None:
        """The file's own status (a link's, not its target's); None when it is absent. For listing
        and modification times; reading still refuses what is not a regular file."""
        parts = _parts(self, name)
        try:
            with self._folder(parts[:-1]) as dir_fd:
                return os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
        except OSError as err:
            if err.errno in (errno.ENOENT, errno.ENOTDIR):
                return None
            raise self._error(name, _reason(err)) from None

    def mtime(self, name: str) -> float | None:
        info = self.info(name)
        return None if info is None else info.st_mtime

    @contextlib.contextmanager
    def _open(self, name: str, cap: int | None) -> Iterator[tuple[int, os.stat_result]]:
        """(fd, its status) of regular file `name`, at most `cap` bytes; closed on exit."""
        parts = _parts(self, name)
        with self._folder(parts[:-1]) as dir_fd:
            try:
                before = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
            except OSError as err:
                raise self._error(name, _reason(err)) from None
            self._check_type(name, before)  # before opening: a device is never opened at all
            try:
                fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=dir_fd)
            except OSError as err:
                raise self._error(name, _reason(err)) from None
        try:
            info = os.fstat(fd)
            if (info.st_dev, info.st_ino) != (before.st_dev, before.st_ino):
                raise self._error(name, "was replaced while it was opened")
            self._check_type(name, info)
            if cap is not None and info.st_size > cap:
                raise self._error(name, f"is {info.st_size:,} bytes, over the {cap:,}-byte cap for a "
                                        f"{_kind(self, name)} file")
            yield fd, info
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def _folder(self, parts: tuple[str, ...]) -> Iterator[int]:
        """An fd on the folder `parts` below `root`, each component opened without following a link."""
        try:
            dir_fd = os.open(self.root, _DIR_FLAGS)
        except OSError as err:
            raise RunFileError(str(self.root), _reason(err), _ROOT_FIX) from None
        try:
            for depth, part in enumerate(parts):
                try:
                    next_fd = os.open(part, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=dir_fd)
                except OSError as err:
                    where = "/".join(parts[:depth + 1])
                    raise self._error(where, _folder_reason(err, part, dir_fd), relative_to_root=True) from None
                os.close(dir_fd)
                dir_fd = next_fd
            yield dir_fd
        finally:
            os.close(dir_fd)

    def _check_type(self, name: str, info: os.stat_result) -> None:
        if stat.S_ISLNK(info.st_mode):
            raise self._error(name, _LINK)
        if not stat.S_ISREG(info.st_mode):
            raise self._error(name, _NOT_REGULAR)
        if info.st_nlink > 1:  # another name for a file elsewhere, perhaps one this user cannot read
            raise self._error(name, f"has {info.st_nlink} hard links; a run's files have one")

    def _check_footer(self, name: str, meta: pq.FileMetaData) -> None:
        data_bytes = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
        for what, value, cap in (("rows", meta.num_rows, MAX_PARQUET_ROWS),
                                 ("columns", meta.num_columns, MAX_PARQUET_COLUMNS),
                                 ("uncompressed bytes", data_bytes, MAX_PARQUET_DATA_BYTES)):
            if value > cap:
                raise self._error(name, f"states {value:,} {what}, over the cap of {cap:,}")

    def _error(self, name: str, reason: str, *, relative_to_root: bool = False) -> RunFileError:
        return RunFileError(str(self.root / name if relative_to_root else self.path / name), reason)


def list_folders(root: Path) -> tuple[list[str], list[str]]:
    """(folders, links to folders) directly in `root`, by name; links are named, never entered."""
    folders, links = [], []
    try:
        entries = list(os.scandir(root))
    except OSError as err:
        raise RunFileError(str(root), _reason(err), _ROOT_FIX) from None
    for entry in sorted(entries, key=lambda e: e.name):
        with contextlib.suppress(OSError):
            if entry.is_dir(follow_symlinks=False):
                folders.append(entry.name)
            elif entry.is_symlink() and entry.is_dir(follow_symlinks=True):
                links.append(entry.name)
    return folders, links


def _parts(folder: RunFolder, name: str) -> tuple[str, ...]:
    """`folder.sub` and `name` as path components, each a plain name: no `..`, `.`, empty part,
    absolute path or NUL, so nothing can name a file outside the folder."""
    parts = []
    for text, is_sub in ((folder.sub, True), (name, False)):
        if is_sub and text == "":
            continue
        pieces = text.split("/")
        if "\0" in text or any(piece in ("", ".", "..") for piece in pieces):
            shown = text.replace("\0", "\\0")[:120]
            raise RunFileError(str(folder.root), f"the name {shown!r} is not a plain name inside the folder",
                               "name a file of the run folder itself")
        parts += pieces
    return tuple(parts)


def _kind(folder: RunFolder, name: str) -> FileKind:
    suffix = Path(name).suffix
    try:
        return FileKind(suffix)
    except ValueError:
        raise RunFileError(str(folder.path / name), f"is not a kind of file a run folder holds ({', '.join(FileKind)})",
                           "nothing else is read") from None


def _read_up_to(fd: int, limit: int) -> bytes:
    chunks, left = [], limit
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _reason(err: OSError) -> str:
    if err.errno == errno.ENOENT:
        return "does not exist"
    if err.errno == errno.ELOOP:
        return _LINK
    if err.errno in (errno.ENXIO, errno.ENODEV):
        return _NOT_REGULAR
    return f"cannot be read ({err.strerror or type(err).__name__})"


def _folder_reason(err: OSError, part: str, dir_fd: int) -> str:
    """Why a folder component did not open: a link (ELOOP, or ENOTDIR for a link to a file), not a
    folder, absent."""
    if err.errno in (errno.ELOOP, errno.ENOTDIR):
        with contextlib.suppress(OSError):
            if stat.S_ISLNK(os.stat(part, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                return _LINK
        return "is not a folder"
    return _reason(err)
