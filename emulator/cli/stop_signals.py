"""SIGINT and SIGTERM for `python -m emulator run`: the first one asks the run to stop; every later one
is absorbed (counted, and logged once the record is safe), so no signal ever cuts the record short.

The handler only counts: it does no I/O, since it runs between two bytecodes of whatever the main
thread was doing (a write to stderr included). The virtual engine asks `stop_requested` once a
simulated second; the live engine installs its own handlers while it runs (emulator/live/session.py),
and these take over again once its record is written.

Once the command's work is done (`final=True`), the signals are ignored until the process exits rather
than handed back: Python's default SIGINT handler would raise KeyboardInterrupt after the record was
judged, and during interpreter shutdown Python puts back the system's default, which kills the process
(exit -2) whatever the run's outcome was.
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType, TracebackType

log = logging.getLogger(__name__)
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopSignals:
    """A context that holds SIGINT/SIGTERM for the command (main thread only; elsewhere the caller
    owns signals and nothing is installed)."""

    def __init__(self, *, final: bool = False) -> None:
        self.final = final  # on exit, ignore the signals for good instead of restoring the previous handlers
        self.names: list[str] = []  # every signal received, in order
        self._reported = 0  # of `names`, already logged
        self._previous: dict[int, object] = {}

    @property
    def count(self) -> int:
        return len(self.names)

    def stop_requested(self) -> str | None:
        """The first signal's name once one came (the run is stopped by it), else None: the virtual
        engine's StopCheck. Logs what came since the last call."""
        self.report("the record is written next")
        return self.names[0] if self.names else None

    def report(self, what_next: str) -> None:
        """Log the signals not yet logged: the first as the stop, later ones as absorbed."""
        seen, self._reported = self._reported, len(self.names)
        for i, name in enumerate(self.names[seen:self._reported], start=seen + 1):
            if i == 1:
                log.warning("%s: stopping the run; what is open fails `interrupted`, %s", name, what_next)
            else:
                log.warning("%s again (%d signals): absorbed; the record is written whole first", name, i)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.names.append(signal.Signals(signum).name)  # no I/O here (see the module's docstring)

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._handle) for sig in SIGNALS}
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.report("the record was written")
        for sig, handler in self._previous.items():
            signal.signal(sig, signal.SIG_IGN if self.final else handler)  # type: ignore[arg-type]
