"""The progress lines of `run` and `sweep`: a line every few seconds in a log (the dashboard reads
them back), a bar redrawn in place on a terminal."""

from __future__ import annotations

import argparse
import io

import pytest

from emulator.cli.progress import LOG_EVERY_S, ProgressReporter, progress_every


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_headless_progress_is_a_line_at_once_then_every_five_seconds_and_one_at_the_end() -> None:
    clock, stream = FakeClock(), io.StringIO()
    bar = ProgressReporter("requests ended", False, clock=clock, stream=stream)
    for done in range(1, 11):
        clock.now += 1.0
        bar(done, 20, f"run time {done * 3.0:.1f} s")
    assert stream.getvalue().splitlines() == [
        "progress: 1/20 requests ended, run time 3.0 s, wall 1.0 s",  # the first call states the total
        f"progress: 6/20 requests ended, run time 18.0 s, wall {1 + LOG_EVERY_S:.1f} s"]
    clock.now += 0.5
    bar(11, 20, "run time 33.0 s")
    bar.close()
    assert stream.getvalue().splitlines()[-1] == "progress: 11/20 requests ended, run time 33.0 s, wall 10.5 s"


def test_the_terminal_bar_is_redrawn_in_place() -> None:
    clock, stream = FakeClock(), io.StringIO()
    bar = ProgressReporter("points", True, clock=clock, stream=stream)
    clock.now += 1.0
    bar(10, 20, "2 failed")
    bar.close()
    assert stream.getvalue() == f"\r[{'#' * 15}{'.' * 15}] 10/20 points  2 failed\n"


def test_a_shorter_cadence_logs_more_often() -> None:
    clock, stream = FakeClock(), io.StringIO()
    bar = ProgressReporter("requests ended", False, clock=clock, stream=stream, log_every_s=0.5)
    for done in range(1, 5):
        clock.now += 0.5
        bar(done, 4, f"run time {done * 150.0:.1f} s")
    assert [line.split(",")[0] for line in stream.getvalue().splitlines()] == [
        f"progress: {done}/4 requests ended" for done in range(1, 5)]


@pytest.mark.parametrize("text", ["0", "-1", "nan", "inf", "1e9", "soon"])
def test_progress_every_is_bounded(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"seconds in 0\.1\.\.3600"):
        progress_every(text)
    assert progress_every("0.5") == 0.5
