"""The capacity search on the paper's case study: the rate it finds against the throughput model's
Lambda_max, the SLO holding at that rate and not one tolerance step above, repeatability, and the
one-line refusals of bad inputs and of workloads with no single rate to set."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from emulator.errors import ScenarioError
from emulator.scenario import Scenario, apply_overrides, load_scenario
from emulator.sweep.capacity import CapacityResult, CapacitySlo, bisect_rate, find_capacity, initial_bracket, probe_rate

pytestmark = pytest.mark.slow  # each test bisects a rate over virtual runs: seconds

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"
TOLERANCE = 0.05


@pytest.fixture(scope="module")
def case_study() -> Scenario:
    return load_scenario(SCENARIOS / "paper-case-study.yaml")


@pytest.fixture(scope="module")
def generous(case_study: Scenario) -> CapacityResult:
    return find_capacity(case_study, CapacitySlo(ttft_p90_s=30.0), rel_tolerance=TOLERANCE)


@pytest.fixture(scope="module")
def tight(case_study: Scenario) -> CapacityResult:
    return find_capacity(case_study, CapacitySlo(ttft_p90_s=5.0), rel_tolerance=TOLERANCE)


def test_a_generous_slo_finds_about_the_models_lambda_max(generous: CapacityResult) -> None:
    assert generous.lambda_max_model == pytest.approx(3.197, abs=0.01)  # `optimize` on the case study
    assert generous.ratio_to_model is not None and 0.6 <= generous.ratio_to_model <= 1.1
    assert generous.converged and len(generous.probes) <= 12


def test_a_tighter_slo_finds_a_lower_rate(generous: CapacityResult, tight: CapacityResult) -> None:
    assert 0 < tight.rate_per_s < generous.rate_per_s


@pytest.mark.parametrize("which", ["generous", "tight"])
def test_the_rate_found_meets_the_slo_and_one_tolerance_step_above_does_not(
        which: str, case_study: Scenario, request: pytest.FixtureRequest) -> None:
    result: CapacityResult = request.getfixturevalue(which)
    slo = CapacitySlo(ttft_p90_s=30.0 if which == "generous" else 5.0)
    low, high = result.bracket
    assert low == result.rate_per_s and high - low <= TOLERANCE * low
    assert probe_rate(case_study, result.rate_per_s, slo).meets_slo
    assert not probe_rate(case_study, result.rate_per_s * (1 + TOLERANCE), slo).meets_slo
    judged = {p.rate_per_s: p.meets_slo for p in result.probes}
    assert all(met == (rate <= low) for rate, met in judged.items())  # monotone in the rate


def test_an_overloaded_run_fails_even_a_loose_slo_by_its_growing_queue(case_study: Scenario,
                                                                        generous: CapacityResult) -> None:
    over = probe_rate(case_study, 1.3 * generous.lambda_max_model, CapacitySlo(ttft_p90_s=1000.0))
    assert over.completed_fraction == 1.0 and over.ttft_p90_s is not None and over.ttft_p90_s < 1000.0
    assert over.backlog_growth > 0.15 and not over.meets_slo


def test_the_same_scenario_and_seed_give_the_same_result(case_study: Scenario, tight: CapacityResult) -> None:
    assert find_capacity(case_study, CapacitySlo(ttft_p90_s=5.0), rel_tolerance=TOLERANCE) == tight


def test_a_tpot_slo_below_the_decode_step_is_never_met(case_study: Scenario) -> None:
    # the case study decodes at 25 ms a token whatever the load: a 20 ms TPOT is out of reach
    result = find_capacity(case_study, CapacitySlo(ttft_p90_s=30.0, tpot_mean_s=0.02), max_probes=3)
    assert result.rate_per_s == 0.0 and result.bracket[0] == 0.0 and not result.converged
    assert len(result.probes) == 3 and all(p.tpot_mean_s == pytest.approx(0.025) for p in result.probes)


def case(meets_up_to: float, low: float, high: float, max_probes: int = 50) -> tuple[tuple[float, float | None],
                                                                                     list[float]]:
    calls: list[float] = []

    def meets(rate: float) -> bool:
        calls.append(rate)
        return rate <= meets_up_to

    return bisect_rate(meets, low, high, TOLERANCE, max_probes), calls


def test_search_bisects_inside_the_bracket() -> None:
    (best, worst), calls = case(3.0, 1.0, 5.0)
    assert calls[:3] == [1.0, 5.0, 3.0]
    assert worst is not None and best <= 3.0 < worst and worst - best <= TOLERANCE * best


def test_search_widens_down_then_up() -> None:
    (best, worst), calls = case(0.3, 1.0, 5.0)
    assert calls[:3] == [1.0, 0.5, 0.25] and worst is not None and best <= 0.3 < worst
    (best, worst), calls = case(30.0, 1.0, 5.0)
    assert calls[:4] == [1.0, 5.0, 10.0, 20.0] and worst is not None and best <= 30.0 < worst


def test_search_reports_the_bracket_top_when_its_budget_ends_meeting() -> None:
    assert case(30.0, 1.0, 5.0, max_probes=2) == ((5.0, None), [1.0, 5.0])
    assert case(0.01, 1.0, 5.0, max_probes=2) == ((0.0, 0.5), [1.0, 0.5])


def test_the_default_bracket_follows_lambda_max_and_the_given_ends() -> None:
    assert initial_bracket(4.0, None, None) == (1.0, 6.0)
    assert initial_bracket(4.0, 5.0, None) == (5.0, 10.0)
    assert initial_bracket(4.0, None, 0.5) == (0.25, 0.5)
    assert initial_bracket(math.nan, 1.0, 2.0) == (1.0, 2.0)


@pytest.mark.parametrize(("make", "field"), [
    (lambda: CapacitySlo(ttft_p90_s=0.0), "slo.ttft_p90_s"),
    (lambda: CapacitySlo(ttft_p90_s=math.nan), "slo.ttft_p90_s"),
    (lambda: CapacitySlo(ttft_p90_s=1e9), "slo.ttft_p90_s"),
    (lambda: CapacitySlo(ttft_p90_s=5.0, tpot_mean_s=-0.01), "slo.tpot_mean_s"),
    (lambda: CapacitySlo(ttft_p90_s=5.0, tpot_mean_s=1e5), "slo.tpot_mean_s"),
    (lambda: initial_bracket(0.0, None, None), "capacity.low_rps"),
    (lambda: initial_bracket(3.0, 2.0, 1.0), "capacity.low_rps"),
    (lambda: initial_bracket(3.0, -1.0, None), "capacity.low_rps"),
    (lambda: initial_bracket(3.0, None, 1e9), "capacity.high_rps"),
])
def test_bad_slos_and_brackets_are_refused_in_one_line(make: Callable[[], object], field: str) -> None:
    with pytest.raises(ScenarioError) as err:
        make()
    assert str(err.value).startswith(f"{field}: ") and "\n" not in str(err.value)


@pytest.mark.parametrize(("knobs", "field"), [
    ({"rel_tolerance": 0.0}, "capacity.rel_tolerance"),
    ({"rel_tolerance": 1.0}, "capacity.rel_tolerance"),
    ({"max_probes": 0}, "capacity.max_probes"),
    ({"max_probes": 51}, "capacity.max_probes"),
    ({"max_probes": True}, "capacity.max_probes"),
    ({"num_requests": 10}, "capacity.num_requests"),
    ({"duration_s": -5.0}, "capacity.duration_s"),
    ({"low_rps": math.inf}, "capacity.low_rps"),
])
def test_bad_search_settings_are_refused_in_one_line(case_study: Scenario, knobs: dict[str, Any],
                                                     field: str) -> None:
    with pytest.raises(ScenarioError) as err:
        find_capacity(case_study, CapacitySlo(ttft_p90_s=5.0), **knobs)
    assert str(err.value).startswith(f"{field}: ") and "\n" not in str(err.value)


def test_a_trace_or_rate_changes_are_refused_naming_the_field(case_study: Scenario) -> None:
    trace = load_scenario(SCENARIOS / "mooncake-replay.yaml")
    changing = apply_overrides(case_study, ["workload.rate_changes=[{at_s: 100, rate_per_s: 3.0}]"])
    for scenario, field in ((trace, "workload.arrival"), (changing, "workload.rate_changes")):
        with pytest.raises(ScenarioError) as err:
            find_capacity(scenario, CapacitySlo(ttft_p90_s=5.0))
        assert str(err.value).startswith(f"{field}: ") and "\n" not in str(err.value)


def test_the_search_does_not_halve_below_its_rate_floor() -> None:
    calls: list[float] = []

    def never(rate: float) -> bool:
        calls.append(rate)
        return False

    assert bisect_rate(never, 1.0, 5.0, TOLERANCE, 50, min_rate=0.2) == (0.0, 0.25)
    assert calls == [1.0, 0.5, 0.25]


def test_an_slo_below_the_no_queue_ttft_finds_no_capacity(case_study: Scenario) -> None:
    # homogeneous PD prefills every prompt on H20s: its no-queue TTFT P90 is 9.8 s (the model's), so
    # a 5 s P90 is out of reach at any load, and tiny rates with a handful of requests do not count
    from emulator.virtual.baselines import configuration_overrides

    homogeneous = apply_overrides(case_study, configuration_overrides(case_study, "homogeneous"))
    result = find_capacity(homogeneous, CapacitySlo(ttft_p90_s=5.0))
    assert result.rate_per_s == 0.0 and not result.converged
    assert all(not p.meets_slo and p.num_requests >= 100 for p in result.probes)
