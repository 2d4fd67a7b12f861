"""`python -m emulator run --run-id`: a value that is not a run id ends the command at once with
one line naming the flag and the fix (exit 2), before any file is written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.live  # every test here starts a process

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("engine", ["virtual", "live"])
@pytest.mark.parametrize("run_id", ["x/../../../escaped", "..", "abcdef\n", "ABC123", "abc1234"])
def test_run_refuses_a_bad_run_id_in_one_line(tmp_path: Path, engine: str, run_id: str) -> None:
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "emulator", "run", "scenarios/paper-case-study.yaml", "--engine", engine,
         "--out", str(out), "--run-id", run_id, "--no-broker"],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --run-id: "), done.stderr
    assert "6 lowercase hex digits" in lines[0]
    assert not out.exists() and list(tmp_path.iterdir()) == []
