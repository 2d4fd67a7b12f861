"""Knob messages: built, checked with the run's own validator, and matched with the run's answer."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from app.knobs_view import (
    ACK_TIMEOUT_S,
    QUIET_S,
    THRESHOLD_MAX,
    SentKnob,
    ack_of,
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
from emulator.telemetry.schemas import ErrorEvent, MetricsSnapshot

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


def _view(*messages: tuple[float, object]):
    buffer = FeedBuffer()
    for at_s, message in messages:
        buffer.add("abc123", message, at_s)
    return buffer.view("abc123")


def test_acks_read_the_runs_answer() -> None:
    threshold = SentKnob(check_knob("abc123", Knob.THRESHOLD, threshold_payload(3072)), sent_at_s=10.0)
    before = (9.0, MetricsSnapshot(run_id="abc123", t_s=4.0, threshold_tokens=3072))  # an old one
    old_value = (10.2, MetricsSnapshot(run_id="abc123", t_s=5.0, threshold_tokens=2048))
    new_value = (10.4, MetricsSnapshot(run_id="abc123", t_s=5.1, threshold_tokens=3072))
    assert ack_of(threshold, _view(before, old_value), 10.5).state == "waiting"
    ack = ack_of(threshold, _view(before, old_value, new_value), 10.5)
    assert ack.state == "applied" and ack.text == "the run reports it at t = 5.1 s"
    refusal = (10.1, ErrorEvent(run_id="abc123", t_s=5.0, topic=threshold.message.topic, error="no"))
    assert ack_of(threshold, _view(refusal, new_value), 10.5).state == "refused"
    assert ack_of(threshold, _view(old_value), 10.0 + ACK_TIMEOUT_S).state == "silent"


def test_knobs_the_metrics_do_not_show_count_as_taken_without_a_refusal() -> None:
    policy = SentKnob(check_knob("abc123", Knob.POLICY, policy_payload("local-only")), sent_at_s=10.0)
    after = (10.2, MetricsSnapshot(run_id="abc123", t_s=5.0))
    assert ack_of(policy, _view(after), 10.5).state == "waiting"
    ack = ack_of(policy, _view(after), 10.0 + QUIET_S)
    assert ack.state == "taken" and "t = 5.0 s" in ack.text


def test_link_ack_matches_every_field() -> None:
    sent = SentKnob(check_knob("abc123", Knob.LINK, link_payload(50.0, 10, 0, 0)), sent_at_s=1.0)
    same_rate_other_delay = (1.1, MetricsSnapshot(run_id="abc123", t_s=2.0,
                                                  link=LINK | {"bandwidth_mbit": 50.0, "delay_ms": 20.0}))
    applied = (1.2, MetricsSnapshot(run_id="abc123", t_s=2.1, link=LINK | {"bandwidth_mbit": 50.0}))
    assert ack_of(sent, _view(same_rate_other_delay), 1.5).state == "waiting"
    assert ack_of(sent, _view(same_rate_other_delay, applied), 1.5).state == "applied"


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


def test_a_trace_replay_starts_its_rate_knob_at_its_own_pace() -> None:
    """For a trace the rate knob is a factor on the trace's time (run/workload_clock.py): it starts at 1."""
    assert knob_values(load_scenario(SCENARIOS / "mooncake-replay.yaml"), None)["rate_per_s"] == 1.0
