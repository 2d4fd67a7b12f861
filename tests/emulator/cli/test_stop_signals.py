"""`python -m emulator run`'s signal holder (virtual engine, and while the summary prints): every
signal is counted, none raised; the first is reported as the stop, the later ones as absorbed."""

from __future__ import annotations

import logging
import os
import signal
import time

import pytest

from emulator.cli.stop_signals import StopSignals


def _deliver(sig: signal.Signals) -> None:
    os.kill(os.getpid(), sig)
    time.sleep(0.01)  # the handler runs at the next bytecode of the main thread


def test_signals_are_counted_never_raised(caplog: pytest.LogCaptureFixture) -> None:
    previous = signal.getsignal(signal.SIGINT)
    with caplog.at_level(logging.WARNING, logger="emulator.cli.stop_signals"), StopSignals() as signals:
        assert not signals.stop_requested()
        _deliver(signal.SIGINT)
        assert signals.stop_requested()
        for sig in (signal.SIGINT, signal.SIGTERM):
            _deliver(sig)
        assert signals.count == 3 and signals.names == ["SIGINT", "SIGINT", "SIGTERM"]
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("SIGINT: stopping the run; what is open fails `interrupted`")
    assert lines[1:] == ["SIGINT again (2 signals): absorbed; the record is written whole first",
                         "SIGTERM again (3 signals): absorbed; the record is written whole first"]
    assert signal.getsignal(signal.SIGINT) is previous


def test_a_signal_after_the_record_is_absorbed_too() -> None:
    with StopSignals() as signals:
        _deliver(signal.SIGTERM)  # the default SIGTERM would end this test process
    assert signals.names == ["SIGTERM"]
