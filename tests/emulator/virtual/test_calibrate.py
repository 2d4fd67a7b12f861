"""Calibration: a profile fitted to a recorded run reproduces the profile that produced the run,
and its YAML drops into a scenario that replays the run with the same results."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import yaml

from emulator.control.profiles import PiecewiseLinear
from emulator.errors import TelemetryError
from emulator.scenario import Scenario
from emulator.virtual.calibrate import calibrated_scenario, profile_from_run, profile_yaml, write_profile
from emulator.virtual.engine import run_virtual


def test_a_virtual_runs_profile_is_recovered_from_its_records(small: Callable[..., Scenario],
                                                              tmp_path: Path) -> None:
    run_virtual(small(), tmp_path)
    tables = profile_from_run(tmp_path, remote_device="fast", local_device="slow")
    truth = {"fast": PiecewiseLinear((1000, 100000), (0.1, 2.0)),
             "slow": PiecewiseLinear((1000, 100000), (0.3, 6.0))}
    kv = PiecewiseLinear((1000, 100000), (10 * 2**20, 500 * 2**20))
    for device, table in truth.items():
        np.testing.assert_allclose(tables.prefill_s[device], table(np.array(tables.lengths)), rtol=0.01)
    np.testing.assert_allclose(tables.kv_bytes, kv(np.array(tables.lengths)), rtol=0.01)
    assert tables.decode_step_s == {"slow": pytest.approx(0.020)}
    assert "calibrated from" in tables.source


def test_the_calibrated_yaml_replays_the_run(small: Callable[..., Scenario], tmp_path: Path) -> None:
    original = run_virtual(small(), tmp_path / "original")
    tables = profile_from_run(tmp_path / "original", remote_device="fast", local_device="slow")
    path = write_profile(tables, tmp_path / "profile.yaml", name="replayed")
    model = yaml.safe_load(path.read_text())["model"]
    assert model == yaml.safe_load(profile_yaml(tables, "replayed"))["model"]
    replay = run_virtual(small(model=model), tmp_path / "replay")
    for metric in ("ttft_mean_s", "ttft_p90_s", "throughput_rps"):
        assert replay["summary"][metric] == pytest.approx(original["summary"][metric], rel=0.02)
    assert replay["meta"]["profile"] == "profile replayed"


def test_calibrated_scenario_replays_a_run_with_per_cluster_tables(small: Callable[..., Scenario],
                                                                  tmp_path: Path) -> None:
    slowed = small(clusters={"remote": {"instances": 2, "device": "fast", "speed_factor": 0.5},
                             "local": {"instances": 4, "device": "slow", "prefill_instances": 2}})
    original = run_virtual(slowed, tmp_path / "run")
    replay_scenario = calibrated_scenario(slowed, tmp_path / "run")
    assert replay_scenario.engine == "virtual" and replay_scenario.seed == slowed.seed
    assert (replay_scenario.clusters.remote.device, replay_scenario.clusters.remote.speed_factor) == ("remote", 1.0)
    replay = run_virtual(replay_scenario, tmp_path / "replay")
    for metric in ("ttft_mean_s", "ttft_p90_s"):
        assert replay["summary"][metric] == pytest.approx(original["summary"][metric], rel=0.02)


def test_a_run_without_varied_lengths_cannot_be_calibrated(small: Callable[..., Scenario],
                                                          tmp_path: Path) -> None:
    run_virtual(small(workload={"input_len": {"kind": "fixed", "tokens": 4000}}), tmp_path)
    with pytest.raises(TelemetryError, match="distinct lengths; need at least 2"):
        profile_from_run(tmp_path, "fast", "slow")


def test_the_calibrate_command_replays_a_run_and_prints_the_ttft_error(
        small: Callable[..., Scenario], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from emulator.__main__ import main

    scenario_path = tmp_path / "small.yaml"
    scenario_path.write_text(yaml.safe_dump(small().model_dump(mode="json")))
    original = run_virtual(small(), tmp_path / "run")
    assert main(["calibrate", str(scenario_path), str(tmp_path / "run")]) == 0
    printed = capsys.readouterr().out
    replay = tmp_path / "run-calibrated"
    assert (replay / "profile.yaml").exists() and (replay / "requests.parquet").exists()
    assert f"virtual replay: {replay}" in printed and "TTFT mean (s)" in printed
    summary = yaml.safe_load((replay / "summary.json").read_text())
    assert summary["summary"]["ttft_mean_s"] == pytest.approx(original["summary"]["ttft_mean_s"], rel=0.02)
