"""What became of a knob the page sent, read from the run's own answers on the bus.

A knob is "applied" only when a snapshot the run sent after it carries the value (threshold and link
in their own fields, every other knob in `knobs`); "refused" when the run said so: the bus's error
echo on the knob's topic (a payload it would not parse) or the run's control note
`refused <knob>: <why>` (a value it parsed but would not take, e.g. a scheduler loop in a scenario
that runs none). No answer is ever taken for a yes. Pure: views in, answers out.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from app.knobs_view import LINK_FIELDS, KnobMessage
from app.live_view import RunView
from emulator.telemetry.control_messages import Knob
from emulator.telemetry.schemas import MetricsSnapshot

ACK_TIMEOUT_S = 10.0  # no answer by then: say so instead of waiting forever
ANSWER_WAIT_S = 1.0  # how long after sending a knob the page may hold a redraw for the run's answer
REPLAY_S = 2.0  # the same message again within this long is Streamlit replaying a callback, not a new turn


class AckState(StrEnum):
    WAITING = "waiting"  # sent; no answer yet
    APPLIED = "applied"  # a later snapshot carries the value
    REFUSED = "refused"  # the run said no, and why
    SILENT = "silent"  # no answer within ACK_TIMEOUT_S


@dataclass(frozen=True, slots=True)
class SentKnob:
    """A knob message published at `sent_at_s` (the page's monotonic clock, as the feed stamps
    what it receives)."""

    message: KnobMessage
    sent_at_s: float


@dataclass(frozen=True, slots=True)
class Ack:
    state: AckState
    text: str

    @property
    def is_settled(self) -> bool:
        """The run has answered (or will not): the knob's widget can show the run's value again."""
        return self.state is not AckState.WAITING


def ack_of(sent: SentKnob, view: RunView, now_s: float) -> Ack:
    """The run's answer to `sent`, out of what arrived after it was sent."""
    message = sent.message
    for at_s, error in view.errors:
        if at_s >= sent.sent_at_s and error.topic == message.topic:
            return Ack(AckState.REFUSED, error.error)
    refused = f"refused {message.knob.value}: "
    for at_s, note in zip(view.notes_at_s, view.notes, strict=True):
        if at_s >= sent.sent_at_s and note.source == "control" and note.what.startswith(refused):
            return Ack(AckState.REFUSED, note.what.removeprefix(refused))
    for snapshot in view.metrics[bisect_left(view.metrics_at_s, sent.sent_at_s):]:  # those after it
        if shows(message, snapshot):
            return Ack(AckState.APPLIED, f"the run reports it at t = {snapshot.t_s:.1f} s")
    if now_s - sent.sent_at_s >= ACK_TIMEOUT_S:
        return Ack(AckState.SILENT, f"no answer within {ACK_TIMEOUT_S:g} s; is the run still going?")
    return Ack(AckState.WAITING, "sent; waiting for the run's answer")


def answer_wait_s(sent: Sequence[SentKnob], view: RunView, now_s: float, wait_s: float = ANSWER_WAIT_S) -> float:
    """How long the page may still hold its redraw for the run's answer: up to `wait_s` after the
    newest sent knob that has none yet; 0 when every one is answered. Holding the redraw (on the
    feed's news, not a timer) puts the answer on screen as it arrives, instead of at the next tick
    after whatever else the page is drawing."""
    waiting = [s.sent_at_s for s in sent if ack_of(s, view, now_s).state is AckState.WAITING]
    return max(0.0, max(waiting) + wait_s - now_s) if waiting else 0.0


def is_replay(sent: Sequence[SentKnob], message: KnobMessage, now_s: float, within_s: float = REPLAY_S) -> bool:
    """Whether `message` repeats the last one sent for its knob within `within_s`: Streamlit runs an
    interaction's callbacks again when the run that handled them ends in `st.rerun()` (the page's
    own rerun after an answer), which would send the knob twice. Sending the same value again so
    soon changes nothing on the run either (every knob is a set, not a step)."""
    last = next((s for s in reversed(sent) if s.message.knob is message.knob), None)
    return last is not None and last.message.payload == message.payload and now_s - last.sent_at_s < within_s


def shows(message: KnobMessage, snapshot: MetricsSnapshot) -> bool:
    """Whether `snapshot` carries the value `message` set."""
    payload, knobs = message.payload, snapshot.knobs
    if message.knob is Knob.THRESHOLD:
        return snapshot.threshold_tokens == payload["tokens"]
    if message.knob is Knob.LINK:
        return bool(snapshot.link) and all(_same(payload.get(name), snapshot.link.get(name)) for name in LINK_FIELDS)
    if knobs is None:
        return False  # a sender that does not report its knobs cannot show one applied
    if message.knob is Knob.POLICY:
        return knobs.policy == payload["policy"]
    if message.knob is Knob.AFFINITY:
        return knobs.affinity == payload["mode"]
    if message.knob is Knob.SCHEDULER:
        wanted = {name: payload[name] for name in ("short_term", "long_term") if name in payload}
        return knobs.has_scheduler and all(getattr(knobs, name) == on for name, on in wanted.items())
    if message.knob is Knob.ARRIVAL_RATE:
        return _same(payload["rate_per_s"], knobs.rate_per_s)
    return knobs.is_paused is (message.knob is Knob.PAUSE)


def _same(want: float | None, have: float | None) -> bool:
    if want is None or have is None:
        return want is have
    return math.isclose(float(want), float(have), rel_tol=1e-6, abs_tol=1e-9)
