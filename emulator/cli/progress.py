"""Progress of a long command on stderr, one behaviour for `run` and `sweep`: on a terminal a bar
redrawn in place at most 4 times a second; elsewhere (a log, CI, the dashboard's run.log) a plain
line at the first call (it states the total), every LOG_EVERY_S of wall time and at the end, so a
log shows a long job moving. The
dashboard reads those lines back (app/run_registry.py), so their shape is a contract.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from typing import TextIO

LOG_EVERY_S = 5.0
LOG_EVERY_BOUNDS_S = (0.1, 3600.0)  # --progress-every: a log line at most 10 times a second
REDRAW_EVERY_S = 0.25
BAR_WIDTH = 30


class ProgressReporter:
    """`progress: 5/20 requests ended, run time 15.0 s, wall 5.0 s` (`noun` = "requests ended",
    detail = "run time 15.0 s"). `log_every_s`: the dashboard asks for lines more often, so a
    virtual run of a few seconds shows progress too. `clock` and `stream` are for tests."""

    def __init__(self, noun: str, is_terminal: bool, clock: Callable[[], float] = time.monotonic,
                 stream: TextIO | None = None, log_every_s: float = LOG_EVERY_S) -> None:
        self.noun, self.is_terminal, self._clock, self._stream = noun, is_terminal, clock, stream
        self.log_every_s = log_every_s
        self._started = self._last = clock()
        self._seen: tuple[int, int, str] | None = None
        self._logged: tuple[int, int, str] | None = None

    @property
    def stream(self) -> TextIO:
        return self._stream or sys.stderr

    def __call__(self, done: int, total: int, detail: str = "") -> None:
        now = self._clock()
        self._seen = (done, total, detail)
        if self.is_terminal:
            if now - self._last < REDRAW_EVERY_S and done < total:
                return
            filled = int(BAR_WIDTH * done / total) if total else BAR_WIDTH
            tail = f"  {detail}" if detail else ""
            self.stream.write(f"\r[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {done}/{total} {self.noun}{tail}")
            self.stream.flush()
            self._last = now
        elif self._logged is None or now - self._last >= self.log_every_s:  # the first at once: its total
            self._last = now
            self._log_line()

    def _log_line(self) -> None:
        assert self._seen is not None
        done, total, detail = self._logged = self._seen
        parts = [f"{done:,}/{total:,} {self.noun}", *([detail] if detail else []),
                 f"wall {self._clock() - self._started:.1f} s"]
        self.stream.write(f"progress: {', '.join(parts)}\n")
        self.stream.flush()

    def close(self) -> None:
        if self.is_terminal:
            if self._seen is not None:
                self.stream.write("\n")
        elif self._seen is not None and self._seen != self._logged:
            self._log_line()


def progress_every(text: str) -> float:
    """--progress-every's value: seconds between log lines, within LOG_EVERY_BOUNDS_S."""
    low, high = LOG_EVERY_BOUNDS_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not low <= seconds <= high:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds in {low:g}..{high:g}")
    return seconds
