"""The runs a dashboard server starts: validated first, recorded where asked, one live run at a time."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from app.run_registry import RunRefused, RunRegistry
from emulator.errors import ScenarioError

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _wait_ended(registry: RunRegistry, run_id: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while registry.get(run_id).handle.is_running:
        assert time.monotonic() < deadline, registry.get(run_id).handle.log_tail()
        time.sleep(0.1)


def test_bad_overrides_are_refused_before_anything_starts(tmp_path: Path) -> None:
    registry = RunRegistry()
    with pytest.raises(ScenarioError, match="router.threshold_tokens"):
        registry.start(SCENARIOS / "live-quickstart.yaml", "virtual", None,
                       ("router.threshold_tokens=-5",), out_root=tmp_path)
    with pytest.raises(RunRefused, match="engine 'analytic' is unknown"):
        registry.start(SCENARIOS / "live-quickstart.yaml", "analytic", None, (), out_root=tmp_path)
    assert registry.all() == [] and list(tmp_path.iterdir()) == []


@pytest.mark.live
def test_a_virtual_run_records_under_its_id(tmp_path: Path) -> None:
    registry = RunRegistry()
    run = registry.start(SCENARIOS / "live-quickstart.yaml", "virtual", None, ("duration_s=10",),
                         out_root=tmp_path)
    assert registry.all() == [run] and registry.get(run.run_id) is run
    assert run.handle.out_dir.parent == tmp_path and run.handle.out_dir.name.endswith(f"-{run.run_id}")
    assert run.label.startswith(f"{run.run_id} · live-quickstart (virtual) · ")
    _wait_ended(registry, run.run_id)
    doc = run.summary()
    assert doc is not None and doc["meta"]["engine"] == "virtual"
    assert run.handle.returncode in (0, 1)  # 1: an expect bound failed, the run still recorded
    assert not registry.stop(run.run_id)  # over already


@pytest.mark.slow
def test_one_live_run_at_a_time_and_stop_ends_it(tmp_path: Path) -> None:
    registry = RunRegistry()
    run = registry.start(SCENARIOS / "live-quickstart.yaml", "live", None, ("duration_s=30",),
                         out_root=tmp_path)
    try:
        with pytest.raises(RunRefused, match=f"live run {run.run_id} is still going"):
            registry.start(SCENARIOS / "classroom-basic.yaml", "live", None, (), out_root=tmp_path)
        other = registry.start(SCENARIOS / "paper-case-study.yaml", "virtual", None, ("duration_s=5",),
                               out_root=tmp_path)  # virtual runs may go alongside
        assert registry.all() == [other, run]
        deadline = time.monotonic() + 90
        while "running" not in run.handle.log_tail(50):  # set up: its namespaces and workers exist
            assert run.handle.is_running and time.monotonic() < deadline, run.handle.log_tail()
            time.sleep(0.2)
        assert registry.stop(run.run_id)  # Ctrl-C: it fails what is open, tears down, records
        _wait_ended(registry, run.run_id)
        _wait_ended(registry, other.run_id)
    finally:
        registry.stop_all()
    assert run.summary() is not None, run.handle.log_tail()
