"""The analytic engine on real scenario files: unit conversion, the optimum, the CLI's JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from emulator.analytic import optimize_scenario
from emulator.errors import ScenarioError
from emulator.plane.inputs import MIB, model_inputs, profile_tables
from emulator.scenario import apply_overrides, load_scenario

ROOT = Path(__file__).resolve().parents[2]
CASE_STUDY = ROOT / "scenarios" / "paper-case-study.yaml"
DESIGN_KEYS = ("t", "p", "l_long", "l_short", "n_prfaas", "n_p", "n_d", "theta_prfaas", "theta_pd_p",
               "theta_pd_d", "lambda_max", "egress_gbps")


def test_case_study_inputs_convert_units_once() -> None:
    inputs, tables = model_inputs(load_scenario(CASE_STUDY))
    assert inputs.kv_bytes(32768) == pytest.approx(701.3 * MIB)
    assert inputs.prefill_remote_s(8192) == pytest.approx(0.72)
    assert inputs.prefill_local_s(131072) == pytest.approx(21.0)
    assert inputs.prefill_remote_s(20480) == pytest.approx(0.72 + (1.84 - 0.72) / 2)  # midway 8K..32K
    assert inputs.decode_step_s == pytest.approx(0.025)
    assert inputs.egress_bytes_per_s == pytest.approx(100e9 / 8)
    assert (inputs.num_prfaas, inputs.num_local, inputs.num_baseline) == (4, 8, 12)
    assert inputs.output_len == 1024
    assert inputs.lengths.mean == pytest.approx(27_486, rel=0.01)  # the truncated log-normal's mean
    assert tables.source == "profile internal-1t-kimi-linear"


def test_case_study_optimum_balances_both_prefill_paths_and_beats_the_baselines() -> None:
    result = optimize_scenario(load_scenario(CASE_STUDY))
    assert all(key in result for key in DESIGN_KEYS)
    assert all(key in result[b] for b in ("homogeneous", "naive") for key in DESIGN_KEYS)
    # Eq. 7: both prefill paths saturate together (within a grid step's worth, here < 4 %)
    remote_path, local_path = result["theta_prfaas"] / result["p"], result["theta_pd_p"] / (1 - result["p"])
    assert remote_path == pytest.approx(local_path, rel=0.04)
    assert result["lambda_max"] > result["homogeneous"]["lambda_max"] > 0
    assert result["lambda_max"] > result["naive"]["lambda_max"] > 0
    assert result["n_p"] + result["n_d"] == 8
    assert result["homogeneous"]["p"] == 0 and result["naive"]["p"] == 1
    assert "configured" not in result  # threshold auto, split free


def test_a_fixed_threshold_is_reported_beside_the_optimum() -> None:
    scenario = apply_overrides(load_scenario(CASE_STUDY), ["router.threshold_tokens=1000000"])
    result = optimize_scenario(scenario)
    configured = result["configured"]
    assert configured["t"] == 1_000_000 and configured["p"] == 0  # nothing leaves the datacenter
    assert configured["lambda_max"] < result["lambda_max"]


def test_tiny_egress_makes_the_link_the_bottleneck() -> None:
    scenario = apply_overrides(load_scenario(CASE_STUDY), ["link.bandwidth_mbit=100"])
    result = optimize_scenario(scenario)
    assert result["naive"]["bottleneck"] == "egress"
    # naive sends everything: Lambda = B_out / S_kv(E[L]) exactly
    inputs, _ = model_inputs(scenario)
    assert result["naive"]["lambda_max"] == pytest.approx(
        inputs.egress_bytes_per_s / inputs.kv_bytes(inputs.lengths.mean), abs=1e-4)
    assert result["p"] < 0.05  # the optimum keeps almost everything local


def test_preset_models_get_an_estimated_profile_that_says_so() -> None:
    scenario = load_scenario(ROOT / "scenarios" / "classroom-basic.yaml")
    tables = profile_tables(scenario)
    assert tables.source.startswith("estimated for preset kimi-linear-mini")
    assert list(tables.kv_bytes) == sorted(tables.kv_bytes)  # the cache grows with the prompt
    assert optimize_scenario(scenario)["lambda_max"] > 0


def test_a_device_without_a_table_is_refused_at_the_schema_edge() -> None:
    with pytest.raises(ScenarioError, match="no table for device 'b200'"):
        apply_overrides(load_scenario(CASE_STUDY), ["clusters.remote.device=b200"])


@pytest.mark.live
def test_optimize_cli_prints_json_and_bad_files_exit_2(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "emulator", "optimize", str(CASE_STUDY)],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["n_p"] == 3
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nengine: warp\n")
    run = subprocess.run([sys.executable, "-m", "emulator", "optimize", str(bad)],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert run.returncode == 2 and "Traceback" not in run.stderr and "engine" in run.stderr
