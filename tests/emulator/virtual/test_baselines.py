"""The paper's three configurations of one scenario, run side by side on the same arrivals."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from emulator.errors import ScenarioError
from emulator.scenario import Scenario, apply_overrides, load_scenario
from emulator.virtual.baselines import CONFIGS, compare_configurations, configuration_overrides, saturation_throughput
from emulator.virtual.engine import simulate

from .conftest import SMALL

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"


def test_configurations_are_the_papers_baselines(small: Callable[..., Scenario]) -> None:
    scenario = small()
    homogeneous = simulate(apply_overrides(scenario, configuration_overrides(scenario, "homogeneous")))
    assert not homogeneous.gateway.remote and len(homogeneous.gateway.local) == 6  # remote + local
    assert {r.route for r in homogeneous.records} == {"local"}
    naive = simulate(apply_overrides(scenario, configuration_overrides(scenario, "naive")))
    assert naive.gateway.n_p == 0 and {r.route for r in naive.records} == {"prfaas"}
    with pytest.raises(ScenarioError, match="configuration 'best': unknown"):
        configuration_overrides(scenario, "best")


def test_compare_configurations_tabulates_each_and_records_runs(small: Callable[..., Scenario],
                                                               tmp_path: Path) -> None:
    rows = compare_configurations(small(duration_s=30), tmp_path)
    assert tuple(rows) == CONFIGS
    assert rows["homogeneous"]["egress_gbps_mean"] == 0.0 and rows["naive"]["egress_gbps_mean"] > 0
    for config, row in rows.items():
        assert row["completed_fraction"] == 1.0 and row["lambda_max_model"] > 0
        assert 0 < row["ttft_noqueue_mean_s"] <= row["ttft_mean_s"]
        assert (tmp_path / config / "summary.json").is_file()


def test_saturation_needs_a_generated_workload() -> None:
    with pytest.raises(ScenarioError, match="saturation needs a generated workload"):
        saturation_throughput(load_scenario(SCENARIOS / "mooncake-replay.yaml"))


def test_the_baselines_command_prints_each_configuration_and_records_its_run(tmp_path: Path, capsys) -> None:
    from emulator.__main__ import main

    scenario = tmp_path / "small.yaml"
    scenario.write_text(yaml.safe_dump({**SMALL, "duration_s": 20}))
    assert main(["baselines", str(scenario), "--out", str(tmp_path / "runs")]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert tuple(rows) == CONFIGS
    assert all(row["completed_fraction"] == 1.0 and row["lambda_max_model"] > 0 for row in rows.values())
    assert all((tmp_path / "runs" / config / "summary.json").is_file() for config in CONFIGS)
