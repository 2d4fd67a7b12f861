"""`calibrate --machine` without its probes: the grid planned from a scenario, and a measurement
turned into a profile file that a scenario names and the virtual engine runs."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from emulator.errors import ScenarioError
from emulator.live.machine_profile import (
    MachineProfile,
    plan_machine,
    profile_file_of,
    step_line,
    write_machine_profile,
)
from emulator.scenario import load_scenario, parse_scenario
from emulator.virtual.engine import simulate

REPO = Path(__file__).resolve().parents[3]
QUICKSTART = REPO / "scenarios" / "live-quickstart.yaml"


def test_the_grid_spans_the_quickstart_workload_and_its_workers() -> None:
    """Uniform 256-4,096-token prompts, 16 output tokens, 1 remote + 2 local workers, BS_max 8."""
    scenario = load_scenario(QUICKSTART)
    plan = plan_machine(scenario)
    assert plan.lengths == (256, 1024, 1792, 2560, 3328, 4096)
    assert (plan.reps, plan.decode_steps, plan.busy_window_s) == (3, 5, 3.0)
    assert plan.batch_sizes == (1, 2, 4, 8)
    assert plan.decode_cache_tokens == 2176 + 8  # the median prompt and half the output
    assert (plan.num_workers, plan.max_busy, plan.busy_op_tokens) == (3, 6, 512)
    quick = plan_machine(scenario, quick=True)
    assert (quick.lengths, quick.reps, quick.max_busy) == ((256, 1536, 2816, 4096), 1, 3)


def test_a_long_tailed_workload_is_gridded_geometrically_and_capped() -> None:
    doc = yaml.safe_load(QUICKSTART.read_text())
    doc["workload"]["input_len"] = {"kind": "uniform", "min": 100, "max": 100_000}
    doc["clusters"]["local"]["decode_max_batch"] = 1
    plan = plan_machine(parse_scenario(doc, QUICKSTART.parent))
    assert plan.lengths == (100, 277, 769, 2131, 5909, 16384)  # x2.77 each, up to 16,384 (LONGEST_PROFILED)
    assert plan.batch_sizes == (1, 2)  # a table needs two sizes


def test_a_scenario_without_a_preset_cannot_be_profiled() -> None:
    with pytest.raises(ScenarioError, match="model.preset: calibrate --machine times the model the live engine runs"):
        plan_machine(load_scenario(REPO / "scenarios" / "paper-case-study.yaml"))


def test_a_measurement_becomes_a_profile_file_a_scenario_runs_on(tmp_path: Path) -> None:
    scenario = load_scenario(QUICKSTART)
    plan = plan_machine(scenario, quick=True)
    measured = MachineProfile(plan, prefill_s=(0.1, 0.5, 0.9, 1.6), kv_bytes=(1 << 20, 2 << 20, 3 << 20, 5 << 20),
                              decode_step_s=(0.0175, 0.0305, 0.0575, 0.1534), busy_slowdown=(1.0, 1.05, 1.75),
                              kv_tail_bytes=(1 << 18, 1 << 19, 3 << 18, 5 << 18), reference_prefill_s=0.15, cores=2, worker_nice=10,
                              wall_s=15.4)
    loaded = profile_file_of(measured, scenario, date="2026-01-02 03:04:05 UTC", git_sha="abc123")
    profile = loaded.model.profile
    assert profile.lengths_tokens == (256, 1536, 2816, 4096)
    assert profile.kv_mib == (1.0, 2.0, 3.0, 5.0)
    assert profile.prefill_s == {"cpu": (0.1, 0.5, 0.9, 1.6)}
    assert profile.decode_step_ms == {"cpu": 153.4}  # T_decode: the step at BS_max
    assert profile.decode_batch_sizes == (1, 2, 4, 8)
    assert profile.decode_step_ms_by_batch == {"cpu": (17.5, 30.5, 57.5, 153.4)}
    assert profile.host is not None and (profile.host.cores, profile.host.busy_slowdown) == (2, (1.0, 1.05, 1.75))
    assert profile.kv_tail_mib == (0.25, 0.5, 0.75, 1.25)
    assert loaded.measured is not None
    assert (loaded.measured.preset, loaded.measured.git_sha) == ("kimi-linear-mini", "abc123")
    assert loaded.measured.reference_prefill_s == 0.15

    path = write_machine_profile(measured, scenario, tmp_path / "profiles" / "box.yaml", git_sha="abc123")
    doc = yaml.safe_load(QUICKSTART.read_text())
    doc["model"]["profile_file"] = "profiles/box.yaml"
    twin = parse_scenario(copy.deepcopy(doc), tmp_path, trusted_dir=tmp_path)
    assert twin.model.measured_profile == profile and path.read_text().startswith("# Machine profile: kimi-linear-mini")
    result = simulate(twin.model_copy(update={"engine": "virtual"}))
    assert result.num_requests > 0 and all(r.status == "completed" for r in result.records)
    assert result.costs.busy_slowdown == (1.0, 1.05, 1.75) and result.costs.decode_batch is not None
    assert result.costs.tail_fraction(2000) == pytest.approx(0.25)  # the measured last layer, not 1 / PIPELINE_LAYERS


def test_the_decode_step_by_context_is_a_fixed_cost_plus_one_per_token() -> None:
    """An exact line comes back; noise around it is averaged out; a step that seems to get cheaper
    with context is flat instead (attention never reads fewer tokens for a longer prompt)."""
    assert step_line([128, 1096, 2048], [0.008 + 4e-6 * x for x in (128, 1096, 2048)]) == pytest.approx((0.008, 4e-6))
    fixed_s, per_token_s = step_line([100, 200, 300, 400], [0.011, 0.011, 0.013, 0.013])
    assert per_token_s == pytest.approx(8e-6) and fixed_s == pytest.approx(0.010)
    assert step_line([100, 200], [0.02, 0.01]) == (0.015, 0.0)
