"""A virtual run always ends (issue 25): within the run's drain (duration + max(duration, 120 s),
emulator.run.ending, as the live engine) and its event budget, with the reason in summary.json and every request still
open failed `unfinished`; and a cut link (100 % loss) carries nothing until it is restored."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest

from emulator.run.ending import MIN_DRAIN_S
from emulator.scenario import Scenario
from emulator.telemetry.recorder import load_run
from emulator.virtual.budget import EndBudget, SimEnd
from emulator.virtual.engine import record_run, simulate

Small = Callable[..., Scenario]
CUT = {"bandwidth_mbit": 10000, "delay_ms": 5, "loss_pct": 100}


def test_the_budgets_follow_the_duration_and_the_requests() -> None:
    short, long = EndBudget.of(10.0, 100), EndBudget.of(7200.0, 100)
    assert (short.end_s, short.drain_s) == (10.0 + MIN_DRAIN_S, MIN_DRAIN_S)
    assert (long.end_s, long.drain_s) == (14_400.0, 7200.0)
    assert short.max_events == 1_000_000 + 1_000 * 100 + 10 * 130
    assert EndBudget.of(10.0, 200).max_events == short.max_events + 100_000


def test_a_link_at_1_kbit_per_s_ends_at_the_drain(small: Small, tmp_path: Path) -> None:
    """Was: the run went on until its last 10 MiB transfer crossed, a day of simulated time later."""
    scenario = small(duration_s=10, link={"bandwidth_mbit": 0.001})
    result = simulate(scenario)
    budget = EndBudget.of(10.0, result.num_requests)
    assert result.end is SimEnd.TIME_BUDGET and result.end_s <= budget.end_s
    remote = [r for r in result.records if r.route == "prfaas"]
    local = [r for r in result.records if r.route == "local"]
    assert remote and local and len(result.records) == result.gateway.core.num_arrived
    assert {(r.status, r.fail_reason) for r in remote} == {("failed", "unfinished")}
    assert {r.fail_detail for r in remote} == {"still open 120 s after the scenario's 10 s (the run's drain)"}
    assert {r.status for r in local} == {"completed"}
    doc = record_run(scenario, result, tmp_path)
    _, timeseries, loaded = load_run(tmp_path)
    sim = loaded["meta"]["engine_details"]["sim"]
    assert (sim["end"], sim["time_budget_s"], sim["event_budget"]) == ("time_budget", 130.0, budget.max_events)
    assert loaded["meta"]["end_reason"] == (
        f"run ended: {len(remote)} requests still open 120 s after the scenario's 10 s failed unfinished")
    assert doc["summary"]["failed_by_reason"] == {"unfinished": len(remote)}
    assert math.isfinite(sim["end_s"]) and not loaded.get("record_notes")
    assert timeseries["link_utilization"].dropna().between(0, 1 + 1e-9).all()  # a busy link: 1, up to float crumbs


def test_a_cut_link_carries_nothing_until_it_is_restored(small: Small) -> None:
    """100 % loss is a cut on the virtual link too: no Mathis trickle through it."""
    restore = {"at_s": 20.0, "link": {"loss_pct": 0}}
    result = simulate(small(duration_s=30, link=CUT, timeline=[restore]))
    remote = [r for r in result.records if r.route == "prfaas"]
    assert remote and all(r.status == "completed" for r in result.records)
    assert any(r.arrival_s < 10.0 for r in remote) and all(r.transfer_end_s >= 20.0 for r in remote)
    assert result.end is SimEnd.ALL_ENDED


def test_a_link_cut_for_good_fails_its_transfers_unfinished_at_the_budget(small: Small) -> None:
    result = simulate(small(duration_s=10, link=CUT))
    remote = [r for r in result.records if r.route == "prfaas"]
    assert result.end is SimEnd.TIME_BUDGET and remote
    assert {r.fail_reason for r in remote} == {"unfinished"}
    assert result.gateway.link.bytes_sent == 0.0
    assert all(row["link_utilization"] == 0.0 for row in result.samples[1:])


def test_the_event_budget_ends_a_run_and_fails_what_is_open(small: Small) -> None:
    result = simulate(small(duration_s=10), budget=EndBudget(1e9, 60))
    assert result.end is SimEnd.EVENT_BUDGET and result.num_events == 60
    assert not result.gateway.core.open and len(result.records) == result.gateway.core.num_arrived
    failed = [r for r in result.records if r.status == "failed"]
    assert failed and all(r.fail_reason == "unfinished" and "event budget (60 events)" in r.fail_detail
                          for r in failed)


def test_a_run_that_ends_by_itself_says_so(small: Small) -> None:
    result = simulate(small(duration_s=10))
    assert result.end is SimEnd.ALL_ENDED and result.end_s < 10 + MIN_DRAIN_S
    assert all(r.status == "completed" for r in result.records)


@pytest.mark.parametrize("until", [5.0, 50.0])
def test_until_leaves_the_rest_open(small: Small, until: float) -> None:
    result = simulate(small(duration_s=60), until=until)
    assert result.end is SimEnd.UNTIL and result.end_s == until and result.gateway.core.open
