"""A run id given to the run API is checked before anything is created: a path in it can never
put a run outside the runs folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from emulator.api import SCENARIOS_DIR, start_run
from emulator.errors import RunIdError
from emulator.paths import Env

HOSTILE = ["x/../../../escaped", "../escaped", "..", ".", "abc123/../../escaped", "abcdef\n", "/tmp/escaped", ""]


def _files_under(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*"))


@pytest.mark.parametrize("run_id", HOSTILE)
def test_start_run_refuses_a_run_id_that_is_not_a_name_and_creates_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_id: str) -> None:
    runs = tmp_path / "a" / "b" / "c" / "runs"
    runs.mkdir(parents=True)
    monkeypatch.setenv(Env.RUNS_DIR, str(runs))
    with pytest.raises(RunIdError) as caught:
        handle = start_run(SCENARIOS_DIR / "paper-case-study.yaml", engine="virtual", run_id=run_id)
        handle.stop()  # only reached on today's code: do not leave the child running
    assert str(caught.value).startswith("run_id: ") and "\n" not in str(caught.value)
    assert _files_under(tmp_path) == [tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "c", runs]


def test_start_run_refuses_a_hostile_run_id_even_with_an_out_dir(tmp_path: Path) -> None:
    with pytest.raises(RunIdError):
        start_run(SCENARIOS_DIR / "paper-case-study.yaml", engine="virtual", out_dir=tmp_path / "run",
                  run_id="abc123 --out /tmp/elsewhere")
    assert not (tmp_path / "run").exists()
