"""A run's or sweep's log as the dashboard reads it back through the API (`log_tail`): its tail only,
and never through a link, whatever the child process or another user left at its path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from emulator.api import RunHandle, SweepHandle

pytestmark = pytest.mark.live  # every test here starts a process

SECRET = "TOPSECRET-5d0e77"


def _handle(log_path: Path) -> RunHandle:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return RunHandle("abc123", "virtual", log_path.parent, log_path, None, done)


def test_the_last_lines_of_a_log(tmp_path: Path) -> None:
    (tmp_path / "run.log").write_text("".join(f"line {i}\n" for i in range(50)))
    assert _handle(tmp_path / "run.log").log_tail(3).splitlines() == ["line 47", "line 48", "line 49"]


def test_a_log_linked_to_a_secret_is_not_read(tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text(f"{SECRET}\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.log").symlink_to(tmp_path / "secret.txt")
    tail = _handle(tmp_path / "run" / "run.log").log_tail()
    assert SECRET not in tail
    assert "symbolic link" in tail  # the page says why there is no log


def test_a_fifo_log_does_not_block(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "sweep.log")
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    handle = SweepHandle("s", tmp_path, tmp_path / "sweep.log", done)
    assert "not a regular file" in handle.log_tail()

