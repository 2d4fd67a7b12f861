"""A sent knob's answer is read from the run: applied only when a later snapshot carries the value,
refused when the run says so (its error echo, or its `refused <knob>:` control note), never taken for
a yes without one (issue 26: a scheduler turned on where none runs showed as taken)."""

from __future__ import annotations

import pytest

from app.knob_acks import (
    ACK_TIMEOUT_S,
    ANSWER_WAIT_S,
    REPLAY_S,
    AckState,
    SentKnob,
    ack_of,
    answer_wait_s,
    is_replay,
)
from app.knobs_view import (
    arrival_rate_payload,
    check_knob,
    empty_payload,
    link_payload,
    policy_payload,
    scheduler_payload,
    threshold_payload,
)
from app.live_view import FeedBuffer
from emulator.telemetry.control_messages import Knob
from emulator.telemetry.schemas import ErrorEvent, KnobState, MetricsSnapshot, NoteEvent

LINK = {"bandwidth_mbit": 200.0, "delay_ms": 10.0, "jitter_ms": 0.0, "loss_pct": 0.0,
        "loss_correlation_pct": 0.0, "queue_packets": 1000}
KNOBS = KnobState(policy="prfaas", affinity="cost", has_scheduler=False, rate_per_s=0.5)


def _view(*messages: tuple[float, object]):
    buffer = FeedBuffer()
    for at_s, message in messages:
        buffer.add("abc123", message, at_s)
    return buffer.view("abc123")


def _sent(knob: Knob, payload: dict, at_s: float = 10.0) -> SentKnob:
    return SentKnob(check_knob("abc123", knob, payload), sent_at_s=at_s)


def _snap(at_s: float, t_s: float, **fields) -> tuple[float, MetricsSnapshot]:
    return at_s, MetricsSnapshot(run_id="abc123", t_s=t_s, **({"knobs": KNOBS, "link": LINK} | fields))


def test_a_threshold_is_applied_when_a_later_snapshot_carries_it() -> None:
    threshold = _sent(Knob.THRESHOLD, threshold_payload(3072))
    before = _snap(9.0, 4.0, threshold_tokens=3072)  # an old one, before the message was sent
    old_value = _snap(10.2, 5.0, threshold_tokens=2048)
    new_value = _snap(10.4, 5.1, threshold_tokens=3072)
    assert ack_of(threshold, _view(before, old_value), 10.5).state is AckState.WAITING
    ack = ack_of(threshold, _view(before, old_value, new_value), 10.5)
    assert ack.state is AckState.APPLIED and ack.text == "the run reports it at t = 5.1 s" and ack.is_settled
    assert ack_of(threshold, _view(old_value), 10.0 + ACK_TIMEOUT_S).state is AckState.SILENT


def test_the_bus_refusal_on_the_knobs_topic_is_shown_with_its_reason() -> None:
    threshold = _sent(Knob.THRESHOLD, threshold_payload(3072))
    other = (10.1, ErrorEvent(run_id="abc123", t_s=5.0, topic="prfaas/abc123/control/link", error="not this"))
    refusal = (10.1, ErrorEvent(run_id="abc123", t_s=5.0, topic=threshold.message.topic, error="no"))
    assert ack_of(threshold, _view(other), 10.5).state is AckState.WAITING
    ack = ack_of(threshold, _view(refusal, _snap(10.4, 5.1, threshold_tokens=3072)), 10.5)
    assert (ack.state, ack.text) == (AckState.REFUSED, "no")


def test_a_knob_the_run_parsed_but_would_not_take_is_refused_not_taken() -> None:
    """The live-quickstart case: no scheduler runs, the run notes its refusal and reports no loop on."""
    scheduler = _sent(Knob.SCHEDULER, scheduler_payload(True, False))
    why = "control/scheduler: this scenario runs no scheduler, so no loop can be turned on"
    later = _snap(10.3, 5.2)
    assert ack_of(scheduler, _view(later), 10.0 + ACK_TIMEOUT_S - 0.1).state is AckState.WAITING
    note = (10.2, NoteEvent(run_id="abc123", t_s=5.1, source="control", what=f"refused scheduler: {why}"))
    old_note = (9.0, NoteEvent(run_id="abc123", t_s=4.0, source="control", what="refused policy: earlier"))
    ack = ack_of(scheduler, _view(old_note, note, later), 10.5)
    assert (ack.state, ack.text) == (AckState.REFUSED, why)


@pytest.mark.parametrize(("knob", "payload", "before", "after"), [
    (Knob.POLICY, policy_payload("local-only"), KNOBS, KNOBS.model_copy(update={"policy": "local-only"})),
    (Knob.AFFINITY, {"v": 1, "mode": "off"}, KNOBS, KNOBS.model_copy(update={"affinity": "off"})),
    (Knob.ARRIVAL_RATE, arrival_rate_payload(2.0), KNOBS, KNOBS.model_copy(update={"rate_per_s": 2.0})),
    (Knob.PAUSE, empty_payload(), KNOBS, KNOBS.model_copy(update={"is_paused": True})),
    (Knob.RESUME, empty_payload(), KNOBS.model_copy(update={"is_paused": True}), KNOBS),
    (Knob.SCHEDULER, scheduler_payload(True, None), KNOBS.model_copy(update={"has_scheduler": True}),
     KNOBS.model_copy(update={"has_scheduler": True, "short_term": True})),
])
def test_every_knob_is_applied_only_when_the_runs_knob_state_shows_it(knob: Knob, payload: dict,
                                                                        before: KnobState, after: KnobState) -> None:
    sent = _sent(knob, payload)
    assert ack_of(sent, _view(_snap(10.1, 5.0, knobs=before)), 10.0 + ACK_TIMEOUT_S - 0.1).state is AckState.WAITING
    assert ack_of(sent, _view(_snap(10.1, 5.0, knobs=before), _snap(10.2, 5.1, knobs=after)), 10.5).state \
        is AckState.APPLIED


def test_a_sender_that_does_not_report_its_knobs_never_shows_one_applied() -> None:
    sent = _sent(Knob.POLICY, policy_payload("local-only"))
    assert ack_of(sent, _view(_snap(10.2, 5.0, knobs=None)), 10.0 + ACK_TIMEOUT_S).state is AckState.SILENT


def test_link_ack_matches_every_field() -> None:
    sent = _sent(Knob.LINK, link_payload(50.0, 10, 0, 0), at_s=1.0)
    same_rate_other_delay = _snap(1.1, 2.0, link=LINK | {"bandwidth_mbit": 50.0, "delay_ms": 20.0})
    applied = _snap(1.2, 2.1, link=LINK | {"bandwidth_mbit": 50.0})
    assert ack_of(sent, _view(same_rate_other_delay), 1.5).state is AckState.WAITING
    assert ack_of(sent, _view(same_rate_other_delay, applied), 1.5).state is AckState.APPLIED
    unshaped = _sent(Knob.LINK, link_payload(None, 10, 0, 0), at_s=1.0)
    assert ack_of(unshaped, _view(applied), 1.5).state is AckState.WAITING
    assert ack_of(unshaped, _view(_snap(1.3, 2.2, link=LINK | {"bandwidth_mbit": None})), 1.5).state \
        is AckState.APPLIED


def test_the_page_holds_its_redraw_only_while_a_sent_knob_awaits_its_answer() -> None:
    first = _sent(Knob.THRESHOLD, threshold_payload(3072), at_s=10.0)
    second = _sent(Knob.LINK, link_payload(50.0, 10, 0, 0), at_s=10.4)
    quiet = _view(_snap(10.5, 5.0, threshold_tokens=2048))
    assert answer_wait_s([], quiet, 10.5) == 0.0
    assert answer_wait_s([first, second], quiet, 10.5) == pytest.approx(10.4 + ANSWER_WAIT_S - 10.5)
    assert answer_wait_s([first, second], quiet, 20.0) == 0.0  # past the wait: draw what there is
    answered = _view(_snap(10.5, 5.0, threshold_tokens=3072, link=LINK | {"bandwidth_mbit": 50.0}))
    assert answer_wait_s([first, second], answered, 10.6) == 0.0


def test_the_same_message_again_at_once_is_a_replayed_callback_not_a_new_turn() -> None:
    """Streamlit runs a callback again when its run ends in st.rerun(): the knob must go out once."""
    pause = _sent(Knob.PAUSE, empty_payload(), at_s=10.0)
    on = _sent(Knob.SCHEDULER, scheduler_payload(True, False), at_s=10.0)
    again = check_knob("abc123", Knob.PAUSE, empty_payload())
    assert is_replay([pause, on], again, 10.5)
    assert not is_replay([pause, on], again, 10.0 + REPLAY_S)  # a new press, later
    assert not is_replay([pause, on], check_knob("abc123", Knob.RESUME, empty_payload()), 10.5)
    assert not is_replay([on], check_knob("abc123", Knob.SCHEDULER, scheduler_payload(False, False)), 10.5)
