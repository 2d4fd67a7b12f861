"""The live run's signal handlers: the first signal stops the run, the second hurries the teardown,
and every later one is absorbed and counted in the log; nothing is raised into the run."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import pytest

from emulator.live.stop_signals import stop_on_signals


def test_the_first_stops_the_second_hurries_the_rest_are_absorbed(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> tuple[bool, bool]:
        hurry = asyncio.Event()
        with stop_on_signals(hurry) as stop:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGINT, signal.SIGINT):
                os.kill(os.getpid(), sig)
                await asyncio.sleep(0.05)  # the loop runs the handler's hand-off
            return stop.is_set(), hurry.is_set()

    previous = signal.getsignal(signal.SIGINT)
    with caplog.at_level(logging.INFO, logger="emulator.live.stop_signals"):
        assert asyncio.run(main()) == (True, True)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("SIGINT: stopping the run") and lines[1].startswith("SIGTERM again: hurrying")
    assert lines[2:] == ["SIGINT again (3 signals): absorbed; the record is written whole first",
                         "SIGINT again (4 signals): absorbed; the record is written whole first"]
    assert signal.getsignal(signal.SIGINT) is previous  # put back as found
