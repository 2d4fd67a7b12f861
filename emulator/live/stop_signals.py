"""SIGINT and SIGTERM during a live run: the first stops it, the second hurries its teardown (after the
record: teardown.UNHURRIED), every later one is absorbed (counted and logged), so no number of
signals costs the run its record. The handlers stay until the record is complete.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
from collections.abc import Iterator

log = logging.getLogger(__name__)


class StopEvent(asyncio.Event):
    """The run's stop, set once: `by` names the first signal (`SIGINT`, `SIGTERM`) for the record."""

    def __init__(self) -> None:
        super().__init__()
        self.by: str | None = None

    def stop(self, by: str) -> None:
        if not self.is_set():
            self.by = by
            self.set()


@contextlib.contextmanager
def stop_on_signals(hurry: asyncio.Event) -> Iterator[StopEvent]:
    """The first SIGINT or SIGTERM sets the event the run loops watch (yielded); a second one sets
    `hurry`, which cuts the teardown's remaining budgets but the record's; later ones are absorbed.

    Plain `signal.signal` handlers, not the loop's `add_signal_handler`: pyroute2 forks helper
    processes (namespaces, netem changes) that inherit asyncio's signal wake-up fd, so a helper's
    SIGTERM would read as ours. In the main thread only; elsewhere the caller owns signals. The
    handler itself does no I/O: it hands the signal to the loop, which logs it.
    """
    stop, loop = StopEvent(), asyncio.get_running_loop()
    pid, absorbed = os.getpid(), []

    def on_signal(signum: int) -> None:
        name = signal.Signals(signum).name
        if not stop.is_set():
            log.info("%s: stopping the run (teardown in order; a second signal hurries it)", name)
            stop.stop(name)
        elif not hurry.is_set():
            log.warning("%s again: hurrying the teardown once the record is written; parts that do not "
                        "answer at once are killed", name)
            hurry.set()
        else:  # nothing, not even a third signal, cuts the record short
            absorbed.append(signum)
            log.warning("%s again (%d signals): absorbed; the record is written whole first", name, len(absorbed) + 2)

    def handle(signum: int, frame: object) -> None:
        if os.getpid() == pid:  # a forked helper runs this too, on its own copy
            loop.call_soon_threadsafe(on_signal, signum)

    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
