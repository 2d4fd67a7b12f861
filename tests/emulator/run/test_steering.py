"""Steering: a knob (a control message or a timeline `set:`), the timeline's link changes, kills and
restarts, and the scheduler's ticks, as the run core's actions, each answer ending with its Note.
A value the schema would refuse is refused in one line and changes nothing; what is outside the
control plane comes back as actions, carried out here on a real WorkloadClock as the live engine
does, and the knob state every live snapshot reports follows every knob turned (issue 26)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from emulator.control.types import Affinity, NodeId, Role, RoutePolicy
from emulator.limits import MAX_INSTANCES, MAX_RATE_PER_S, MAX_TOKENS
from emulator.live.knobs import knob_state
from emulator.live.pacing import WorkloadClock
from emulator.run.feed import Interval
from emulator.run.journey import Stage
from emulator.run.protocol import (
    Action,
    KillNode,
    Note,
    PauseArrivals,
    ReshapeLink,
    RestartNode,
    SetArrivalRate,
    StartFlip,
)
from emulator.run.steering import NO_PAUSE, Steering
from emulator.scenario.parts import TimelineEvent
from emulator.telemetry.control_messages import ControlCommand, Knob, parse_control
from tests.emulator.run.core_case import (
    DECODE_A,
    DECODE_B,
    SHORT,
    advance,
    complete,
    make_steering,
    shown,
    start,
)

HUGE = 10**400
QUIET_LINK = Interval(1e6, 0.1, 0.0, 1.0, 0, 0, 0)  # a link far from its triggers, no queues


def state_of(steering: Steering) -> tuple[Any, ...]:
    """All a knob could change: the control state, the link, the nodes' roles and drains."""
    state, board = steering.core.state, steering.core.board
    return (state.router, state.auto_threshold, state.short_term_enabled, state.long_term_enabled,
            state.split_target, steering.link, list(board.names), list(board.is_draining), steering.core.fed)


def carry_out(acts: Sequence[Action], clock: WorkloadClock) -> Note:
    """The arrival clock's part of the actions, as the live engine carries it out; the last one,
    the Note, is returned."""
    for act in acts:
        if isinstance(act, SetArrivalRate):
            clock.set_rate(act.rate_per_s)
        elif isinstance(act, PauseArrivals):
            (clock.resume if act.resume else clock.pause)()
    note = acts[-1]
    assert isinstance(note, Note)
    return note


def event(**fields: Any) -> TimelineEvent:
    return TimelineEvent(at_s=1.0, **fields)


# ---- refused: nothing changes, the Note says why in one line ----


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("router.threshold_tokens", HUGE), ("router.threshold_tokens", MAX_TOKENS + 1),
        ("router.threshold_tokens", "8000"), ("router.threshold_tokens", 8000.5),
        ("router.threshold_tokens", True), ("router.threshold_tokens", -1), ("router.threshold_tokens", "Auto"),
        ("router.threshold_tokens", [[[1]]]), ("router.policy", "fastest"), ("router.affinity", "yes"),
        ("router.affinity", True), ("scheduler.short_term.enabled", 1),
        ("workload.arrival.rate_per_s", HUGE), ("workload.arrival.rate_per_s", MAX_RATE_PER_S * 2),
        ("workload.arrival.rate_per_s", "10"), ("workload.arrival.rate_per_s", 0),
        ("workload.arrival.rate_per_s", 1e-310), ("workload.arrival.rate_per_s", float("nan")),
        ("clusters.local.prefill_instances", None), ("clusters.local.prefill_instances", "2"),
        ("clusters.local.prefill_instances", HUGE), ("clusters.local.prefill_instances", 2.0),
        ("clusters.local.prefill_instances", MAX_INSTANCES + 1),
        ("link.delay_ms", HUGE), ("link.bandwidth_mbit", "fast"),
        ("link.bandwidth_mbit", 1e-310),  # issue 25: was taken, and the next snapshot was inf
        ("link.bandwidth_mbit", 0),  # a cut is loss_pct 100
        ("link.delay_ms", 5e-324),
    ],
    ids=lambda v: v if isinstance(v, str) else repr(v)[:16],
)
def test_a_timeline_setting_outside_the_schema_is_refused_and_changes_nothing(path: str, value: object) -> None:
    steering = make_steering()
    before = state_of(steering)
    [note] = steering.timeline(event(set={path: value}))
    assert isinstance(note, Note) and (note.source, note.refused) == ("timeline", True)
    assert note.words.startswith("refused: ") and path.rsplit(".", 1)[-1] in note.words
    assert "\n" not in note.words and len(note.words) < 400
    assert state_of(steering) == before


@pytest.mark.parametrize(
    "command",
    [
        ControlCommand(Knob.THRESHOLD, "8000"), ControlCommand(Knob.THRESHOLD, HUGE),
        ControlCommand(Knob.THRESHOLD, True), ControlCommand(Knob.ARRIVAL_RATE, "10"),
        ControlCommand(Knob.ARRIVAL_RATE, float("inf")), ControlCommand(Knob.POLICY, 3),
        ControlCommand(Knob.AFFINITY, "no"), ControlCommand(Knob.AFFINITY, False),
        ControlCommand(Knob.SCHEDULER, True), ControlCommand(Knob.LINK, {"delay_ms": 5}),  # type: ignore[arg-type]
    ],
    ids=lambda c: f"{c.knob.value}-{type(c.value).__name__}",
)
def test_a_command_not_built_by_the_schema_is_refused_and_changes_nothing(command: ControlCommand) -> None:
    steering = make_steering()
    before = state_of(steering)
    [note] = steering.command(command)
    assert isinstance(note, Note) and (note.source, note.refused) == ("control", True)
    assert note.words.startswith(f"refused {command.knob.value}: control/{command.knob.value}: ")
    assert "\n" not in note.words
    assert state_of(steering) == before


def test_a_virtual_run_refuses_pause_and_resume_in_one_line() -> None:
    steering = make_steering(can_pause=False)
    before = state_of(steering)
    for knob in ("pause", "resume"):
        acts = steering.command(parse_control(knob, b'{"v": 1}'))
        assert list(acts) == [Note("control", f"refused {knob}: {NO_PAUSE}", True)]
    assert "\n" not in NO_PAUSE and state_of(steering) == before


def test_a_set_refused_part_way_keeps_the_entries_before_it() -> None:
    steering = make_steering()
    [note] = steering.timeline(event(set={"router.policy": "local-only", "router.threshold_tokens": -1}))
    assert isinstance(note, Note) and note.refused
    assert note.words.startswith("router policy -> local-only; refused: timeline.set.router.threshold_tokens: -1 ")
    assert steering.core.state.router.policy is RoutePolicy.LOCAL_ONLY and steering.core.state.threshold_tokens == 1000


# ---- applied ----


def test_timeline_settings_inside_the_bounds_apply() -> None:
    steering = make_steering()
    state, clock = steering.core.state, WorkloadClock(10.0)
    assert list(steering.timeline(event(set={"router.threshold_tokens": MAX_TOKENS}))) == [
        Note("timeline", f"threshold -> {MAX_TOKENS} tokens")]
    assert state.threshold_tokens == MAX_TOKENS
    assert list(steering.timeline(event(set={"router.threshold_tokens": "auto"}))) == [
        Note("timeline", f"threshold -> {state.auto_threshold} tokens")]
    assert state.threshold_tokens == state.auto_threshold
    acts = steering.timeline(event(set={"router.policy": "local-only", "router.affinity": "off"}))
    assert list(acts) == [Note("timeline", "router policy -> local-only; affinity -> off")]
    assert (state.router.policy, state.router.affinity) == (RoutePolicy.LOCAL_ONLY, Affinity.OFF)
    acts = steering.timeline(event(set={"workload.arrival.rate_per_s": 20}))
    assert list(acts) == [SetArrivalRate(20.0), Note("timeline", "arrival rate -> 20/s")]
    carry_out(acts, clock)
    assert clock.speed == 2.0


def test_link_changes_reshape_the_link_and_thread_through_one_set() -> None:
    steering = make_steering()
    acts = steering.timeline(event(set={"link.delay_ms": 30, "link.loss_pct": 1}))
    first, second, note = acts
    assert isinstance(first, ReshapeLink) and isinstance(second, ReshapeLink)
    assert (first.spec.delay_ms, first.spec.loss_pct) == (30, 0)
    assert (second.spec.delay_ms, second.spec.loss_pct, second.spec.bandwidth_mbit) == (30, 1, 10000)
    assert note == Note("timeline", "link -> 10000 Mbit/s, 30 ms, 0 % loss; link -> 10000 Mbit/s, 30 ms, 1 % loss")
    assert steering.link == second.spec
    acts = steering.timeline(event(link={"bandwidth_mbit": 100}))
    assert list(acts) == [ReshapeLink(steering.link), Note("timeline", "link -> 100 Mbit/s, 30 ms, 1 % loss")]
    assert (steering.link.bandwidth_mbit, steering.link.delay_ms) == (100, 30)


def test_parsed_commands_apply() -> None:
    steering, clock = make_steering(), WorkloadClock(10.0)
    notes = []
    for knob, payload in (("threshold", b'{"v": 1, "tokens": 8000}'), ("arrival_rate", b'{"v": 1, "rate_per_s": 5}'),
                          ("link", b'{"v": 1, "delay_ms": 40}'), ("pause", b'{"v": 1}')):
        acts = steering.command(parse_control(knob, payload, steering.link))
        assert [type(a).__name__ for a in acts[:-1]] == {
            "threshold": [], "arrival_rate": ["SetArrivalRate"], "link": ["ReshapeLink"],
            "pause": ["PauseArrivals"]}[knob]
        notes.append(carry_out(acts, clock))
    assert notes == [Note("control", "threshold -> 8000 tokens"), Note("control", "arrival rate -> 5/s"),
                     Note("control", "link -> 10000 Mbit/s, 40 ms, 0 % loss"), Note("control", "arrivals paused")]
    assert steering.core.state.threshold_tokens == 8000
    assert (clock.speed, clock.is_paused, steering.link.delay_ms) == (0.5, True, 40)


def test_the_knob_state_each_snapshot_reports_follows_every_knob_turned() -> None:
    """Issue 26: the Live page's widgets follow this, whoever turned the knob; a scheduler loop in a
    run without a scheduler is refused and reported off."""
    steering, clock = make_steering(), WorkloadClock(10.0)
    before = knob_state(steering.core.state, steering.has_scheduler, clock)
    assert (before.policy, before.affinity, before.has_scheduler, before.short_term, before.rate_per_s,
            before.is_paused) == ("prfaas", "cost", False, False, 10.0, False)
    for knob, payload in ((Knob.POLICY, b'{"v": 1, "policy": "local-only"}'),
                          (Knob.AFFINITY, b'{"v": 1, "mode": "off"}'),
                          (Knob.ARRIVAL_RATE, b'{"v": 1, "rate_per_s": 2.5}'), (Knob.PAUSE, b'{"v": 1}')):
        assert not carry_out(steering.command(parse_control(knob.value, payload)), clock).refused
    note = carry_out(steering.command(parse_control("scheduler", b'{"v": 1, "short_term": true}')), clock)
    assert note.refused and "runs no scheduler" in note.words
    after = knob_state(steering.core.state, steering.has_scheduler, clock)
    assert (after.policy, after.affinity, after.short_term, after.rate_per_s, after.is_paused) == (
        "local-only", "off", False, 2.5, True)
    carry_out(steering.command(parse_control("resume", b'{"v": 1}')), clock)
    assert not knob_state(steering.core.state, steering.has_scheduler, clock).is_paused


# ---- the split, kills and restarts ----


def test_a_split_set_on_the_timeline_drains_then_flips() -> None:
    steering = make_steering()
    core = steering.core
    busy = start(core, "busy", SHORT, 0.0)  # holds a decode on local-decode-1
    acts = steering.timeline(event(set={"clusters.local.prefill_instances": 3}))
    assert list(acts) == [StartFlip(DECODE_B, Role.PREFILL),  # idle: at once; local-decode-1 once idle
                          Note("timeline", "local prefill instances 1 -> 3 (2 flips, drained first)")]
    assert core.state.split_target == 3 and core.board.is_draining[DECODE_A]
    assert complete(core, busy, 1.0, 2.0) == [("ended", "busy", "completed", None), StartFlip(DECODE_A, Role.PREFILL)]


def test_a_timeline_kill_and_restart_name_the_node_by_its_slot() -> None:
    steering = make_steering()
    assert list(steering.timeline(event(kill="local-decode-2"))) == [KillNode(DECODE_B),
                                                                     Note("timeline", "kill local-decode-2")]
    steering.core.request_flip(DECODE_A, Role.PREFILL)
    steering.core.flipped(DECODE_A)  # local-decode-1 is local-prefill-1 now: the same slot
    assert list(steering.timeline(event(kill="local-decode-1"))) == [KillNode(DECODE_A),
                                                                     Note("timeline", "kill local-prefill-1")]
    assert list(steering.timeline(event(restart="local-prefill-1"))) == [
        RestartNode(DECODE_A), Note("timeline", "restart local-prefill-1")]


# ---- the scheduler's ticks ----


def scheduling(**sections: Any) -> Steering:
    """A run whose long-term loop wants 2 local prefill nodes: on a 100 Mbit/s link the 1:2 split
    carries 3.69 req/s, 2:1 carries 7.37 (the scheduler's own model)."""
    return make_steering(scheduler={"long_term": {"enabled": True, "interval_s": 10}},
                         link={"bandwidth_mbit": 100}, **sections)


def window_of_arrivals(steering: Steering, count: int) -> None:
    """`count` short requests over the first seconds, each ended before the next arrives."""
    for i in range(count):
        journey = start(steering.core, f"w{i}", SHORT, 0.1 * i)
        advance(steering.core, journey, Stage.DECODING, 0.1 * i)
        steering.core.first_token(journey, journey.attempt_id, 0.1 * i)
        steering.core.finished(journey, journey.attempt_id, 0.1 * i + 0.05, 0.01)


def test_a_role_change_the_scheduler_decides_drains_its_node_then_flips_it() -> None:
    steering = scheduling()
    core = steering.core
    assert core.fed is core.scheduler is not None and steering.has_scheduler
    window_of_arrivals(steering, 60)
    busy = start(core, "busy", SHORT, 7.0)
    assert busy.decode_slot == DECODE_A
    assert shown(steering.tick(5.0, QUIET_LINK)) == []  # the long-term loop is not due
    [note] = steering.tick(10.0, QUIET_LINK)
    assert isinstance(note, Note) and note.source == "scheduler" and not note.refused
    assert note.words.endswith("drain, then flip local-decode-1 to prefill (n_p 1 -> 2, target 2)")
    assert core.board.is_draining[DECODE_A] and core.board.names[DECODE_A] == "local-decode-1"
    assert shown(steering.tick(11.0, QUIET_LINK)) == []  # at the target: nothing more
    assert complete(core, busy, 11.5, 12.0) == [("ended", "busy", "completed", None), StartFlip(DECODE_A, Role.PREFILL)]
    assert shown(core.flipped(DECODE_A)) == [] and core.board.ids[DECODE_A] == NodeId.parse("local-prefill-1")


def test_a_role_change_for_an_idle_node_flips_it_at_once() -> None:
    steering = scheduling()
    window_of_arrivals(steering, 60)
    acts = steering.tick(10.0, QUIET_LINK)
    assert [type(a).__name__ for a in acts] == ["StartFlip", "Note"] and acts[0] == StartFlip(DECODE_A, Role.PREFILL)


def test_no_tick_reaches_a_scheduler_whose_loops_are_off() -> None:
    steering = scheduling()
    window_of_arrivals(steering, 60)
    acts = steering.command(parse_control("scheduler", b'{"v": 1, "long_term": false}'))
    assert list(acts) == [Note("control", "scheduler short-term off, long-term off")]
    assert steering.core.fed is None
    assert shown(steering.tick(10.0, QUIET_LINK)) == [] and not any(steering.core.board.is_draining)
    assert shown(make_steering().tick(10.0, QUIET_LINK)) == []  # a run without a scheduler
