"""`workload.arrival.rate_per_s: auto`: the schema takes it, both engines resolve it to AUTO_LOAD of
what the workers sustain (the throughput model with each path's mean service time, the link left
out), at the tightest state the timeline sets, and the record says what it became and why."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from emulator.auto_rate import (
    AUTO_LOAD,
    RateSource,
    capacity_per_s,
    fitted_curve,
    is_auto,
    measured_inputs,
    modelled_rate,
    recorded_rate,
    resolve,
    with_rate,
)
from emulator.errors import ScenarioError
from emulator.limits import MAX_RATE_PER_S, MIN_RATE_PER_S
from emulator.plane import make_control_plane
from emulator.scenario import apply_overrides, load_scenario
from emulator.virtual.engine import run_virtual
from emulator.workload.build import build_requests
from model_stub.config import get_preset
from model_stub.flops import prefill_flops

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
SHIPPED_LIVE = sorted(p.name for p in SCENARIOS.glob("*.yaml") if "engine: live" in p.read_text())


def quickstart(*overrides: str):
    return apply_overrides(load_scenario(SCENARIOS / "live-quickstart.yaml"),
                           ["workload.arrival.rate_per_s=auto", *overrides])


def test_auto_is_a_rate_of_the_arrival_only() -> None:
    assert is_auto(quickstart()) and not is_auto(quickstart("workload.arrival.rate_per_s=0.5"))
    with pytest.raises(ScenarioError) as err:
        quickstart("workload.rate_changes=[{at_s: 5, rate_per_s: auto}]")
    assert str(err.value).startswith("workload.rate_changes.0.rate_per_s: 'auto' is invalid")
    with pytest.raises(ScenarioError) as err:
        quickstart("workload.arrival.rate_per_s=fast")
    assert str(err.value) == ("workload.arrival.rate_per_s: 'fast' is neither a rate nor auto; use a rate from "
                              "1e-06 to 100000 requests per second, or auto to size it to the machine")
    with pytest.raises(ScenarioError) as err:
        quickstart("timeline=[{at_s: 5, set: {workload.arrival.rate_per_s: auto}}]")
    assert "timeline.0.set" in str(err.value) and "\n" not in str(err.value)


def test_capacity_is_eq6_with_mean_service_times_at_a_hand_computed_point() -> None:
    """Every prompt 1,000 tokens and sent remote (t = 0): one remote instance finishes 1 / T(1000)
    requests per second, and the decode side BS_max / (T_decode x L_out)."""
    sc = quickstart("workload.input_len={kind: fixed, tokens: 1000}", "router.threshold_tokens=0")
    plane = make_control_plane(sc)
    inputs = plane.inputs
    by_hand = min(1 / inputs.prefill_remote_s(1000.0),
                  inputs.max_decode_batch / (inputs.decode_step_s * inputs.output_len))
    assert capacity_per_s(sc, plane) == pytest.approx(by_hand)


def test_the_link_is_not_the_machine() -> None:
    slow, fast = quickstart("link.bandwidth_mbit=0.001"), quickstart("link.bandwidth_mbit=400000")
    assert capacity_per_s(slow, make_control_plane(slow)) == capacity_per_s(fast, make_control_plane(fast))


def test_the_tightest_state_of_the_timeline_sets_the_capacity() -> None:
    classroom = apply_overrides(load_scenario(SCENARIOS / "classroom-basic.yaml"), ["workload.arrival.rate_per_s=auto"])
    each = [apply_overrides(classroom, ["timeline=[]", f"router.threshold_tokens={t}"]) for t in (2048, 4096)]
    alone = [capacity_per_s(sc, make_control_plane(sc)) for sc in each]
    assert alone[0] != alone[1]
    assert capacity_per_s(classroom, make_control_plane(classroom)) == pytest.approx(min(alone))


def test_resolve_offers_the_target_share_within_the_rate_bounds() -> None:
    sc = quickstart()
    resolved, rate = resolve(sc, 2.0, RateSource.MEASURED, "by hand")
    assert rate.rate_per_s == resolved.workload.arrival.rate_per_s == pytest.approx(AUTO_LOAD * 2.0)
    assert "60% of the 2/s the workers sustain (measured: by hand)" in rate.statement
    assert resolve(sc, 1e-9, RateSource.MEASURED, "x")[1].rate_per_s == MIN_RATE_PER_S
    assert resolve(sc, 1e12, RateSource.MEASURED, "x")[1].rate_per_s == MAX_RATE_PER_S
    for nothing in (0.0, float("nan")):
        with pytest.raises(ScenarioError, match=r"^workload.arrival.rate_per_s: auto found no capacity"):
            resolve(sc, nothing, RateSource.MEASURED, "x")


def test_a_fitted_prefill_curve_goes_through_the_timed_prompts() -> None:
    config = get_preset("kimi-linear-mini", "small")
    grid = (1, 256, 1024, 4096)
    flops = {n: float(prefill_flops(config, n)) for n in grid}
    curve = fitted_curve((256, 1024), (0.2, 0.5), flops, grid)
    assert curve(256.0) == pytest.approx(0.2) and curve(1024.0) == pytest.approx(0.5)
    assert curve(4096.0) > 0.5 * 4  # FLOPs grow faster than the length
    noisy = fitted_curve((256, 1024), (0.6, 0.5), flops, grid)  # the shorter took longer: proportional
    assert noisy(1024.0) == pytest.approx(0.6) and noisy(256.0) == pytest.approx(0.6 * flops[256] / flops[1024])


def test_measured_inputs_charge_a_slowed_cluster_its_held_time() -> None:
    sc = quickstart("clusters.remote.speed_factor=0.5")
    plane = make_control_plane(sc)
    inputs = measured_inputs(sc, plane, (256, 1024), (0.2, 0.5), (0.2, 0.5), 0.01)
    assert inputs.prefill_local_s(1024.0) == pytest.approx(0.5)
    assert inputs.prefill_remote_s(1024.0) == pytest.approx(1.0)
    assert inputs.decode_step_s == 0.01


def test_the_virtual_engine_runs_auto_at_its_modelled_rate(tmp_path: Path) -> None:
    sc = quickstart()
    fixed, rate = modelled_rate(sc, make_control_plane(sc))
    assert rate.source is RateSource.MODELLED
    assert rate.rate_per_s == pytest.approx(AUTO_LOAD * capacity_per_s(sc, make_control_plane(sc)))
    doc = run_virtual(sc, tmp_path / "auto")
    recorded = doc["meta"]["workload"]["arrival_rate"]
    assert recorded["rate_per_s"] == rate.rate_per_s and recorded["source"] == "modelled"
    assert recorded_rate(doc["meta"]) == rate.rate_per_s
    assert "arrival rate auto = " in doc["meta"]["workload"]["statement"]
    arrivals = pd.read_parquet(tmp_path / "auto" / "requests.parquet").sort_values("arrival_s")["arrival_s"]
    assert arrivals.tolist() == pytest.approx([r.arrival_s for r in build_requests(fixed)])
    assert with_rate(sc, rate.rate_per_s).workload.arrival.rate_per_s == fixed.workload.arrival.rate_per_s


@pytest.mark.parametrize("name", SHIPPED_LIVE)
def test_every_shipped_live_scenario_sizes_its_rate_to_the_machine(name: str) -> None:
    sc = load_scenario(SCENARIOS / name)
    assert is_auto(sc), f"{name}: use workload.arrival.rate_per_s: auto"
    virtual, rate = modelled_rate(sc, make_control_plane(sc))  # the virtual engine's meaning
    assert MIN_RATE_PER_S <= virtual.workload.arrival.rate_per_s == rate.rate_per_s <= MAX_RATE_PER_S


def test_a_calibrated_replay_keeps_the_rate_the_run_resolved(tmp_path: Path) -> None:
    """`calibrate` replays a run on the virtual engine with the same arrivals: at the rate `auto`
    became in that run, not at the virtual engine's own meaning of it."""
    from emulator.virtual.calibrate import calibrated_scenario

    sc = quickstart()
    live_like = with_rate(sc, 0.3)  # a run whose workers sustained 0.5/s
    doc = run_virtual(live_like, tmp_path / "run")
    doc["meta"]["workload"]["arrival_rate"] = {"rate_per_s": 0.3}
    (tmp_path / "run" / "summary.json").write_text(json.dumps(doc))
    replay = calibrated_scenario(sc, tmp_path / "run")
    assert replay.workload.arrival.rate_per_s == 0.3 and not is_auto(replay)
