"""Reading a small text file a user named (a scenario, a profile file) as untrusted input: a regular
file, at most a given size, UTF-8, checked before anything is read. One ScenarioError line names the
path and the fix. Parsing the text is yaml_reader.py's job.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from emulator.errors import ScenarioError
from emulator.paths import NotARegularFile, open_regular


def read_bounded_text(path: Path, max_bytes: int, *, what: str, too_large_fix: str) -> str:
    """The UTF-8 text of the regular file `path`, at most `max_bytes`. A device (/dev/zero) or a
    FIFO is refused rather than read forever or waited on, and a huge file is never loaded.
    `what` names the kind of file in the fix (`a scenario YAML file`); `too_large_fix` ends the
    too-large line."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise ScenarioError(f"{path}: file not found; check the path") from None
    except (OSError, ValueError) as err:
        reason = getattr(err, "strerror", None) or "invalid name"
        raise ScenarioError(f"{path}: cannot read it ({reason}); check the path") from None
    if not stat.S_ISREG(info.st_mode):
        raise ScenarioError(f"{path}: not a regular file; name {what}")
    if info.st_size > max_bytes:
        raise ScenarioError(f"{path}: larger than {max_bytes:,} bytes; {too_large_fix}")
    try:
        with os.fdopen(open_regular(path), "rb") as handle:  # never blocks, even if swapped for a FIFO
            raw = handle.read(max_bytes + 1)
    except NotARegularFile:
        raise ScenarioError(f"{path}: not a regular file; name {what}") from None
    except OSError as err:
        raise ScenarioError(f"{path}: cannot read it ({err.strerror}); check the path") from None
    if len(raw) > max_bytes:
        raise ScenarioError(f"{path}: larger than {max_bytes:,} bytes; {too_large_fix}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ScenarioError(f"{path}: not UTF-8 text; save the file as UTF-8") from None
