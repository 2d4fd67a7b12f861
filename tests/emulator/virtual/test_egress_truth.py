"""The virtual sampler never records egress above the link capacity in force over its second, with
link and threshold changes at any phase of the sampling interval (issue 26).

The sampler's meter refuses such a sample itself (the run would raise); the test also checks every
recorded row against the capacities the scenario's own timeline put in force, independently.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from emulator.errors import TelemetryError
from emulator.scenario import parse_scenario
from emulator.virtual.engine import simulate
from emulator.virtual.loops import SAMPLE_PERIOD_S

from .conftest import ROOT, SMALL

DURATION_S = 20
bandwidths = st.sampled_from([50, 200, 800, 2_000, 10_000, 40_000])  # Mbit/s: busy to idle for SMALL's KV
phases = st.one_of(st.just(0.0), st.floats(0.0, 1.0, exclude_max=True))  # 0: the sample's own instant
changes = st.tuples(st.integers(0, DURATION_S - 1), phases, st.one_of(
    bandwidths.map(lambda mbit: {"link": {"bandwidth_mbit": mbit}}),
    st.integers(0, 40_000).map(lambda t: {"set": {"router.threshold_tokens": t}}),
    st.sampled_from([1, 20, 80]).map(lambda ms: {"link": {"delay_ms": ms}})))


def scenario_with(first_mbit: int, events: list[dict[str, Any]]) -> Any:
    doc = copy.deepcopy(SMALL)
    doc |= {"duration_s": DURATION_S, "timeline": events, "link": {"bandwidth_mbit": first_mbit, "delay_ms": 5}}
    return parse_scenario(doc, ROOT)


def capacity_schedule(first_mbit: int, events: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(from t, bit/s) as the timeline sets it, independent of the engine."""
    schedule = [(float("-inf"), first_mbit * 1e6)]
    for event in sorted(events, key=lambda e: e["at_s"]):
        if "bandwidth_mbit" in event.get("link", {}):
            schedule.append((event["at_s"], event["link"]["bandwidth_mbit"] * 1e6))
    return schedule


def peak(schedule: list[tuple[float, float]], since: float, until: float) -> float:
    """The highest capacity in force over [since, until] (a change at `since` counts either way)."""
    return max(c for i, (t, c) in enumerate(schedule)
               if t <= until and (i + 1 == len(schedule) or schedule[i + 1][0] >= since))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first_mbit=bandwidths, timeline=st.lists(changes, min_size=1, max_size=8))
def test_no_sample_above_the_capacity_in_force_over_its_interval(first_mbit: int, timeline: list) -> None:
    events = sorted(({"at_s": second + phase, **action} for second, phase, action in timeline),
                    key=lambda event: event["at_s"])
    result = simulate(scenario_with(first_mbit, events))  # a refused sample would raise here
    schedule = capacity_schedule(first_mbit, events)
    rows = result.samples
    assert rows[-1]["t_s"] >= DURATION_S
    for before, row in zip(rows, rows[1:], strict=False):
        assert row["t_s"] - before["t_s"] == pytest.approx(SAMPLE_PERIOD_S)
        assert row["egress_bit_per_s"] <= peak(schedule, before["t_s"], row["t_s"]) * (1 + 1e-9), row


def test_the_busy_link_is_measured_at_its_capacity_and_a_drop_at_both() -> None:
    """A saturated 50 Mbit/s link that drops to 10 at t = 6.3: the sample of [6, 7] carries 0.3 s at
    50 and 0.7 s at 10 (22 Mbit/s), above the new capacity and allowed; the next is at 10."""
    result = simulate(scenario_with(50, [{"at_s": 6.3, "link": {"bandwidth_mbit": 10}}]))
    by_t = {row["t_s"]: row for row in result.samples}
    assert by_t[6.0]["egress_bit_per_s"] == pytest.approx(50e6, rel=1e-6)
    assert by_t[7.0]["egress_bit_per_s"] == pytest.approx(22e6, rel=1e-6)
    assert by_t[7.0]["link_capacity_bit_per_s"] == 10e6
    assert by_t[8.0]["egress_bit_per_s"] == pytest.approx(10e6, rel=1e-6)


def test_the_sampler_refuses_a_link_change_it_was_not_told_of() -> None:
    """The invariant is live in the sampler: a link that speeds up behind the meter's back is caught."""
    result = simulate(scenario_with(50, []), until=5.0)  # samples up to t = 5 included
    result.loops.egress.set_capacity(5.0, 5e6)  # the meter believes 5 Mbit/s; the link still runs at 50
    with pytest.raises(TelemetryError, match=r"^egress sample at t=6.000s: .* the link's 5e\+06 bit/s"):
        result.loops.sim.run(6.0)
