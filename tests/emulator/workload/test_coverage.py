"""What of its workload a run plays (build_workload's coverage): a whole trace, a cap, the run's
duration as a time window, skipped rows and a capped generated workload, each stated in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emulator.scenario import apply_overrides, load_scenario, parse_scenario
from emulator.scenario.shared_data import shared_dir
from emulator.virtual.engine import simulate
from emulator.workload.build import LIVE_RATE_HEADROOM, arrival_horizon_s, build_workload, played_workload_s

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"
MOONCAKE = shared_dir() / "traces" / "mooncake_synthetic_trace.jsonl"
WHOLE = ["workload.trace.max_requests=null", "duration_s=5000"]  # the trace's last row: 3,602 s


def _replay(*items: str):
    return apply_overrides(load_scenario(SCENARIOS / "mooncake-replay.yaml"), [*WHOLE, *items])


def test_a_trace_replays_whole_by_default() -> None:
    workload = build_workload(_replay())
    coverage = workload.coverage
    assert len(workload.requests) == coverage.num_requests == coverage.num_rows == 3993
    assert coverage.limits == () and coverage.is_trace
    assert coverage.statement == "replaying all 3,993 rows of mooncake_synthetic_trace.jsonl (mooncake)"


@pytest.mark.parametrize("field", ["workload.max_requests", "workload.trace.max_requests"])
def test_a_cap_is_stated_with_the_field_that_sets_it(field: str) -> None:
    coverage = build_workload(_replay(f"{field}=250")).coverage
    assert (coverage.num_requests, coverage.num_rows) == (250, 3993)
    assert coverage.statement == (
        f"replaying 250 of 3,993 rows of mooncake_synthetic_trace.jsonl (mooncake): {field} = 250")


def test_the_smaller_of_two_caps_is_the_one_stated() -> None:
    coverage = build_workload(_replay("workload.max_requests=300", "workload.trace.max_requests=400")).coverage
    assert coverage.limits == ("workload.max_requests = 300",)


def test_the_duration_is_a_time_window_on_both_engines_horizons() -> None:
    scenario = _replay("duration_s=600")
    due = sum(1 for line in MOONCAKE.read_text().splitlines() if json.loads(line)["timestamp"] < 600_000)
    for headroom in (1.0, LIVE_RATE_HEADROOM):  # virtual, live (the list runs past the duration)
        workload = build_workload(scenario, arrival_horizon_s(scenario, headroom=headroom))
        assert workload.coverage.num_requests == due < 3993
        assert workload.coverage.num_rows == 3993
        assert workload.coverage.limits == ("duration_s = 600 ends arrivals before the trace ends",)
    assert len(build_workload(scenario).requests) == due


def test_skipped_rows_are_counted_and_the_first_named(tmp_path: Path) -> None:
    lines = MOONCAKE.read_text().splitlines()[:20]
    lines[4] = lines[4][:30]  # cut short
    lines[-1] = lines[-1][:25]
    (tmp_path / "t.jsonl").write_text("\n".join(lines) + "\n")
    doc = (SCENARIOS / "mooncake-replay.yaml").read_text().replace(
        "../../shared/traces/mooncake_synthetic_trace.jsonl", "t.jsonl")
    (tmp_path / "s.yaml").write_text(doc)
    scenario = apply_overrides(load_scenario(tmp_path / "s.yaml"), ["workload.trace.bad_rows=skip"])
    coverage = build_workload(scenario).coverage
    assert (coverage.num_requests, coverage.num_rows, coverage.num_skipped) == (18, 20, 2)
    assert coverage.statement.startswith(
        "replaying 18 of 20 rows of t.jsonl (mooncake); 2 bad rows skipped (workload.trace.bad_rows: skip), "
        f"first: trace {tmp_path / 't.jsonl'} line 5: not JSON")


def test_a_generated_workload_states_a_cap_that_ends_its_arrivals_early() -> None:
    case = load_scenario(SCENARIOS / "paper-case-study.yaml")  # Poisson 2/s for 600 s
    plain = build_workload(case).coverage
    assert plain.limits == () and plain.statement == f"generated (poisson): {plain.num_requests:,} requests"
    capped = build_workload(apply_overrides(case, ["workload.max_requests=100"]))
    last = capped.requests[-1].arrival_s
    assert capped.coverage.statement == (
        f"generated (poisson): 100 requests: workload.max_requests = 100 ends arrivals at {last:,.1f} s "
        "of duration_s = 600")
    assert last < 100


def test_coverage_round_trips_through_json() -> None:
    coverage = build_workload(_replay("workload.max_requests=10")).coverage
    doc = json.loads(json.dumps(coverage.as_json()))
    assert doc["statement"] == coverage.statement and doc["num_rows"] == 3993 and doc["limits"] == list(coverage.limits)


def test_the_timelines_rate_changes_count_in_what_is_due() -> None:
    """The classroom burst (0.5 -> 3 -> 0.5 req/s): the statement counts the requests the run plays
    at the paces its timeline sets, the number the virtual engine then admits."""
    doc = load_scenario(SCENARIOS / "paper-case-study.yaml").model_dump(mode="json")
    doc |= {"duration_s": 100, "timeline": [{"at_s": 30, "set": {"workload.arrival.rate_per_s": 12.0}},
                                            {"at_s": 60, "set": {"workload.arrival.rate_per_s": 2.0}}]}
    scenario = parse_scenario(doc, SCENARIOS)
    assert played_workload_s(scenario) == pytest.approx(30 + 6 * 30 + 40)
    result = simulate(scenario)
    assert result.coverage.num_requests == len(result.records)
    assert result.coverage.statement == f"generated (poisson): {len(result.records):,} requests"
