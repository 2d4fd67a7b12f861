"""`load_run` (the dashboard's and `emulator compare`'s reader of a run directory) through run_files:
a linked file or a nested summary.json is one TelemetryError line, never followed or a RecursionError."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from emulator.errors import TelemetryError
from emulator.paths import REPO_ROOT
from emulator.telemetry.recorder import RunRecorder, load_run

SECRET = "TOPSECRET-c0ffee"


def _run(path: Path) -> Path:
    RunRecorder(path).finish({"engine": "virtual", "scenario": "files"})
    return path


@pytest.mark.parametrize("name", ["summary.json", "requests.parquet", "timeseries.parquet"])
def test_a_linked_file_is_not_followed(tmp_path: Path, name: str) -> None:
    theirs = _run(tmp_path / "theirs")
    mine = _run(tmp_path / "mine")
    (mine / name).unlink()
    (mine / name).symlink_to(theirs / name)
    with pytest.raises(TelemetryError, match="symbolic link"):
        load_run(mine)


def test_a_nested_summary_is_one_line(tmp_path: Path) -> None:
    run = _run(tmp_path / "run")
    (run / "summary.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(TelemetryError, match="deeper than 64 levels"):
        load_run(run)


@pytest.mark.live
def test_compare_names_the_bad_run_and_exits_2(tmp_path: Path) -> None:
    good = _run(tmp_path / "good")
    bad = _run(tmp_path / "bad")
    (tmp_path / "secret.json").write_text(f'{{"kind": "{SECRET}"}}')
    (bad / "summary.json").unlink()
    (bad / "summary.json").symlink_to(tmp_path / "secret.json")
    done = subprocess.run([sys.executable, "-m", "emulator", "compare", str(good), str(bad)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "summary.json is unreadable (is a symbolic link" in done.stderr
    assert SECRET not in done.stdout + done.stderr and "Traceback" not in done.stderr
