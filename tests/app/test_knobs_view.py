"""Knob messages: built, checked with the run's own validator, and matched with the run's answer."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from app.knobs_view import (
    THRESHOLD_MAX,
    affinity_payload,
    arrival_rate_payload,
    check_knob,
    empty_payload,
    knob_values,
    link_base,
    link_payload,
    policy_payload,
    scheduler_payload,
    threshold_payload,
)
from app.live_view import FeedBuffer
from emulator.errors import TelemetryError
from emulator.scenario import load_scenario
from emulator.telemetry.control_messages import Knob, parse_control
from emulator.telemetry.schemas import KnobState, MetricsSnapshot

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
LINK = {"bandwidth_mbit": 200.0, "delay_ms": 10.0, "jitter_ms": 0.0, "loss_pct": 0.0,
        "loss_correlation_pct": 0.0, "queue_packets": 1000}


@pytest.mark.parametrize(("knob", "payload", "what"), [
    (Knob.THRESHOLD, threshold_payload(4096), "threshold -> 4096 tokens"),
    (Knob.POLICY, policy_payload("local-only"), "router policy -> local-only"),
    (Knob.AFFINITY, affinity_payload("off"), "affinity -> off"),
    (Knob.SCHEDULER, scheduler_payload(True, None), "scheduler short-term on"),
    (Knob.SCHEDULER, scheduler_payload(False, True), "scheduler short-term off, long-term on"),
    (Knob.LINK, link_payload(None, 5, 1, 0.5), "link -> unshaped, 5 ms ± 1 ms, 0.5 % loss"),
    (Knob.ARRIVAL_RATE, arrival_rate_payload(2.5), "arrival rate -> 2.5/s"),
    (Knob.PAUSE, empty_payload(), "arrivals paused"),
    (Knob.RESUME, empty_payload(), "arrivals resumed"),
])
def test_every_knob_builds_a_message_the_run_accepts(knob: Knob, payload: dict, what: str) -> None:
    message = check_knob("abc123", knob, payload)
    assert message.topic == f"prfaas/abc123/control/{knob.value}" and message.what == what
    assert parse_control(knob.value, message.data).knob is knob  # the gateway's own check


@pytest.mark.parametrize(("knob", "payload", "message"), [
    (Knob.THRESHOLD, threshold_payload(-1), "control/threshold: tokens = -1 is invalid"),
    (Knob.THRESHOLD, threshold_payload(10.5), "control/threshold: tokens = 10.5 is invalid"),
    (Knob.ARRIVAL_RATE, arrival_rate_payload(0), "control/arrival_rate: rate_per_s = 0.0 is invalid"),
    (Knob.ARRIVAL_RATE, arrival_rate_payload(math.nan), "control/arrival_rate.rate_per_s: nan is not a finite"),
    (Knob.LINK, link_payload(0.0, 10, 0, 0), "control/link.bandwidth_mbit: 0.0 is invalid"),
    (Knob.LINK, link_payload(100.0, 10, 0, 101), "control/link.loss_pct: 101.0 is invalid"),
    (Knob.SCHEDULER, scheduler_payload(None, None), "control/scheduler: payload names no scheduler"),
])
def test_invalid_values_are_refused_with_the_runs_reason(knob: Knob, payload: dict, message: str) -> None:
    with pytest.raises(TelemetryError) as err:
        check_knob("abc123", knob, payload)
    assert str(err.value).startswith(message), str(err.value)


def test_link_changes_are_checked_against_the_current_link() -> None:
    buffer = FeedBuffer()
    buffer.add("abc123", MetricsSnapshot(run_id="abc123", t_s=1.0, link=LINK | {"loss_pct": 1.0,
                                                                           "loss_correlation_pct": 50.0}), 0.0)
    base = link_base(buffer.view("abc123"))
    assert base is not None and base.loss_correlation_pct == 50.0
    with pytest.raises(TelemetryError, match="loss_correlation_pct"):  # correlation needs some loss
        check_knob("abc123", Knob.LINK, link_payload(100.0, 10, 0, 0), base)
    assert link_base(FeedBuffer().view("abc123")) is None


def test_knob_values_start_from_the_scenario_then_the_runs_snapshot() -> None:
    scenario = load_scenario(SCENARIOS / "live-bandwidth-drop.yaml")  # threshold: auto
    values = knob_values(scenario, None)
    assert values | {"threshold": 0} == {
        "threshold": 0, "policy": "prfaas", "affinity": "cost", "short_term": True, "long_term": False,
        "bandwidth_mbit": 100.0, "delay_ms": 10.0, "jitter_ms": 0.0, "loss_pct": 0.0, "rate_per_s": 0.5}
    latest = MetricsSnapshot(run_id="abc123", t_s=1.0, threshold_tokens=2965,
                             link=LINK | {"bandwidth_mbit": None})
    values = knob_values(scenario, latest)
    assert values["threshold"] == 2965 and values["bandwidth_mbit"] is None  # unshaped
    high = MetricsSnapshot(run_id="abc123", t_s=1.0, threshold_tokens=10 * THRESHOLD_MAX)
    assert knob_values(None, high)["threshold"] == THRESHOLD_MAX
    assert isinstance(knob_values(None, None)["delay_ms"], float)


def test_knob_values_follow_the_knobs_the_run_reports() -> None:
    """The run's own knob state wins over its scenario: whoever turned them, the widgets show it."""
    scenario = load_scenario(SCENARIOS / "live-bandwidth-drop.yaml")
    latest = MetricsSnapshot(run_id="abc123", t_s=1.0, threshold_tokens=4096, link=LINK | {"bandwidth_mbit": 50.0},
                             knobs=KnobState(policy="local-only", affinity="off", has_scheduler=True,
                                             short_term=False, long_term=True, rate_per_s=1.25))
    values = knob_values(scenario, latest)
    assert {name: values[name] for name in ("threshold", "bandwidth_mbit", "policy", "affinity", "short_term",
                                            "long_term", "rate_per_s")} == {
        "threshold": 4096, "bandwidth_mbit": 50.0, "policy": "local-only", "affinity": "off",
        "short_term": False, "long_term": True, "rate_per_s": 1.25}


def test_a_trace_replay_starts_its_rate_knob_at_its_own_pace() -> None:
    """For a trace the rate knob is a factor on the trace's time (run/workload_clock.py): it starts at 1."""
    assert knob_values(load_scenario(SCENARIOS / "mooncake-replay.yaml"), None)["rate_per_s"] == 1.0
