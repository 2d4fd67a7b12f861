"""Bounded reading of line-oriented input files (traces, empirical length lists).

Holds only the guard rails: regular files only (a FIFO would block, a device never end), a cap on
line length and on line count, and one-line errors that name the file and line but never quote
them (the file may be anything a path can name). Parsing the lines is left to the readers.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from emulator.errors import ScenarioError
from emulator.paths import NotARegularFile, open_regular

MAX_LINE_CHARS = 1 << 20  # 1 MiB of text: far above any real trace row
MAX_LINES = 10_000_000
MAX_SHOWN = 5  # problems (validate) and skipped rows listed one by one; the rest are counted


@dataclass(frozen=True, slots=True)
class RowCheck:
    """Every row of a file checked for `validate`: how many rows, and the first problems."""

    num_rows: int
    problems: tuple[str, ...]  # the first MAX_SHOWN, one line each, with their line numbers
    num_problems: int


def read_lines(
    path: str | Path, what: str, max_lines: int = MAX_LINES, max_line_chars: int = MAX_LINE_CHARS
) -> Iterator[tuple[int, str]]:
    """Yield (1-based line number, text without the newline) and refuse oversized input.

    A file is opened lazily, so a reader that stops early (a request cap) never reads the rest.
    """
    try:
        fd = open_regular(path)
    except NotARegularFile:
        raise ScenarioError(f"{what} {path}: not a regular file; name a text file") from None
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise ScenarioError(f"{what} {path}: cannot open ({reason}); check the path") from None
    with open(fd, encoding="utf-8", newline="") as handle:
        lineno = 0
        while True:
            lineno += 1
            try:
                line = handle.readline(max_line_chars + 2)  # room for "\r\n"
            except UnicodeDecodeError:
                raise ScenarioError(
                    f"{what} {path} line {lineno}: not UTF-8 text; convert the file to UTF-8"
                ) from None
            if not line:
                return
            text = line.rstrip("\r\n")
            if lineno == 1:
                text = text.removeprefix("\ufeff")  # a byte-order mark, as spreadsheet exports write
            if len(text) > max_line_chars:
                raise ScenarioError(
                    f"{what} {path} line {lineno}: longer than {max_line_chars} characters; "
                    "split or trim the row"
                )
            if lineno > max_lines:
                raise ScenarioError(
                    f"{what} {path}: more than {max_lines} lines; cap the rows read (max_requests)"
                )
            yield lineno, text
