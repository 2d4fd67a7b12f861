"""The run core's view of the nodes, by scripted events: a node lost at every step of a request's
life (which journeys it takes with it, what the board holds after their retry), prefixes dropped
with a lost or flipped prefill node, and drain-then-flip (request_flip, set_split)."""

from __future__ import annotations

import pytest

from emulator.control.types import Cluster, FailReason, NodeId, Role
from emulator.run.core import RunCore
from emulator.run.journey import Journey, Stage
from tests.emulator.run.core_case import (
    BLOCK_TOKENS,
    DECODE_A,
    DECODE_B,
    LOCAL_PREFILL,
    LONG,
    REMOTE,
    SHORT,
    held,
    loads,
    make_core,
    spec,
    start,
)

STEPS = (Stage.ROUTED, Stage.PREFILLING, Stage.TRANSFERRING, Stage.DECODING)
LOST = "worker lost (killed)"


def advance(core: RunCore, journey: Journey, stage: Stage, now: float) -> None:
    """Take a routed journey on from where it is to `stage`."""
    if journey.stage < Stage.PREFILLING <= stage:
        core.prefill_started(journey, now)
    if journey.stage < Stage.TRANSFERRING <= stage:
        core.prefill_finished(journey, now, 0.1)
    if journey.stage < Stage.DECODING <= stage:
        assert core.kv_arrived(journey, now) >= 0


def case(lost: str, stage: Stage, is_taken: bool):  # noqa: ANN201  (a pytest.param)
    return pytest.param(lost, stage, is_taken, id=f"{lost}-lost-{stage.name.lower()}")


# A remote request (prefill on slot 0, decode on slot 2, both placed when it is routed) when its
# prefill node or its decode node is lost: the prefill node's loss takes it until its KV has
# arrived; the decode node's at every step.
LOSSES = [case("prefill", stage, stage <= Stage.TRANSFERRING) for stage in STEPS]
LOSSES += [case("decode", stage, True) for stage in STEPS]


@pytest.mark.parametrize(("lost", "stage", "is_taken"), LOSSES)
def test_a_lost_node_takes_the_journeys_that_still_need_it(lost: str, stage: Stage, is_taken: bool) -> None:
    core = make_core()
    journey = start(core, "r1", LONG, 0.0)
    advance(core, journey, stage, 1.0)
    slot = REMOTE if lost == "prefill" else DECODE_A
    before = held(core)
    assert core.held_by(slot) == ([journey] if is_taken else [])
    assert core.node_down(slot) == ([journey] if is_taken else [])
    assert held(core) == before  # the engine lets go first; the retry takes the attempt off
    if not is_taken:  # it goes on, the lost node untouched
        advance(core, journey, Stage.DECODING, 2.0)
        core.first_token(journey, 2.5)
        record = core.completed(journey, 3.0, 0.1)
        assert record is not None and record.status == "completed"
        assert (record.prefill_node, record.decode_node) == ("remote-prefill-0", "local-decode-2"
                                                             if lost == "decode" else "local-decode-1")
        assert held(core) == ([0, 0, 0, 0], [0, 0, 0, 0])
        return
    decision = core.retry_or_fail(journey, FailReason.WORKER_LOST, LOST, 2.0)
    assert decision is not None and (journey.attempts, journey.stage) == (2, Stage.ROUTED)
    if lost == "prefill":  # the remote cluster is down: the long prompt falls back to local
        assert (journey.route, journey.prefill_node) == ("local", "local-prefill-0")
        assert loads(core) == [("remote-prefill-0", 0, 0, False), ("local-prefill-0", LONG, 1, True)]
    else:  # the same node, reusing the prefix it cached once its prefill was done
        reused = LONG // BLOCK_TOKENS * BLOCK_TOKENS if stage >= Stage.TRANSFERRING else 0
        assert (journey.route, journey.prefill_node, journey.cached_len) == ("prfaas", "remote-prefill-0", reused)
        assert loads(core) == [("remote-prefill-0", LONG - reused, 1, True), ("local-prefill-0", 0, 0, True)]
    assert journey.decode_slot == (DECODE_B if lost == "decode" else DECODE_A)
    assert held(core)[1] == ([0, 0, 0, 1] if lost == "decode" else [0, 0, 1, 0])
    assert (core.num_prfaas, core.num_local, core.records) == (1, 0, [])


def test_a_lost_prefill_node_forgets_its_prefixes_and_comes_back_empty() -> None:
    core = make_core()
    journey = start(core, "r1", SHORT, 0.0)
    advance(core, journey, Stage.DECODING, 1.0)
    local = NodeId(Cluster.LOCAL, Role.PREFILL, 0)
    assert core.index.nodes() == (local,)
    assert core.node_down(LOCAL_PREFILL) == []  # its KV has arrived: the request needs it no more
    assert core.index.nodes() == ()
    core.node_up(LOCAL_PREFILL)
    assert loads(core)[1] == ("local-prefill-0", 0, 0, True)
    again = core.arrive(spec("r1", SHORT), 2.0)
    decision = core.route(again, 2.0)
    assert decision is not None and decision.cached_len == 0


# ---- drain-then-flip ----


def test_a_draining_decode_node_takes_no_new_work_and_flips_once_it_holds_nothing() -> None:
    core = make_core()
    journey = start(core, "r1", SHORT, 0.0)
    assert journey.decode_slot == DECODE_A
    assert core.request_flip(DECODE_A, Role.PREFILL)
    assert core.board.is_draining[DECODE_A] and core.board.take_flips() == []
    assert start(core, "r2", SHORT, 0.0).decode_slot == DECODE_B  # draining: placed last
    advance(core, journey, Stage.DECODING, 1.0)
    core.first_token(journey, 1.5)
    core.completed(journey, 2.0, 0.1)
    assert core.board.take_flips() == [DECODE_A]
    core.flipped(DECODE_A)
    board = core.board
    assert board.names == ["remote-prefill-0", "local-prefill-0", "local-prefill-1", "local-decode-2"]
    assert not board.is_draining[DECODE_A] and board.decode_slots == [DECODE_B]
    assert [load[0] for load in loads(core)] == ["remote-prefill-0", "local-prefill-0", "local-prefill-1"]
    assert board.num_local_prefill == 2


def test_a_draining_prefill_node_is_down_for_the_router_and_flips_without_its_prefixes() -> None:
    core = make_core()
    journey = start(core, "r1", SHORT, 0.0)
    assert core.request_flip(LOCAL_PREFILL, Role.DECODE)
    assert loads(core)[1] == ("local-prefill-0", SHORT, 1, False)
    other = core.arrive(spec("r2", SHORT), 0.5)
    decision = core.route(other, 0.5)  # the local cluster has no prefill node up: remote takes it
    assert decision is not None and (other.route, other.prefill_node) == ("prfaas", "remote-prefill-0")
    core.prefill_started(journey, 1.0)
    assert core.board.take_flips() == []
    core.prefill_finished(journey, 1.5, 0.5)  # its KV is still on the way: the node holds no prefill
    assert NodeId(Cluster.LOCAL, Role.PREFILL, 0) in core.index.nodes()
    assert core.board.take_flips() == [LOCAL_PREFILL]
    core.flipped(LOCAL_PREFILL)
    assert NodeId(Cluster.LOCAL, Role.PREFILL, 0) not in core.index.nodes()
    assert core.board.names[LOCAL_PREFILL] == "local-decode-0"
    assert [load[0] for load in loads(core)] == ["remote-prefill-0"]
    assert core.board.decode_slots == [LOCAL_PREFILL, DECODE_A, DECODE_B]
    assert core.board.slot_of(NodeId.parse("local-prefill-0")) == LOCAL_PREFILL


def test_an_idle_node_is_due_to_flip_at_once() -> None:
    core = make_core()
    assert core.request_flip(DECODE_B, Role.PREFILL)
    assert core.request_flip(DECODE_B, Role.PREFILL)  # asked twice, flipped once
    assert core.board.take_flips() == [DECODE_B] and core.board.take_flips() == []


def test_a_node_lost_while_draining_drops_its_flip_and_comes_back_in_its_role() -> None:
    core = make_core()
    journey = start(core, "r1", SHORT, 0.0)
    assert core.request_flip(DECODE_A, Role.PREFILL)
    assert core.node_down(DECODE_A) == [journey]
    assert not core.board.is_draining[DECODE_A]
    core.retry_or_fail(journey, FailReason.WORKER_LOST, LOST, 1.0)
    assert core.board.take_flips() == []
    assert journey.decode_slot == DECODE_B
    core.node_up(DECODE_A)
    assert core.board.names[DECODE_A] == "local-decode-1" and core.board.decode_slots == [DECODE_A, DECODE_B]
    assert start(core, "r2", SHORT, 1.0).decode_slot == DECODE_A


@pytest.mark.parametrize(("slot", "role", "why"), [
    (REMOTE, Role.DECODE, "remote"), (LOCAL_PREFILL, Role.PREFILL, "same role"),
    (DECODE_A, Role.DECODE, "same role"), (DECODE_B, Role.PREFILL, "down")])
def test_a_flip_of_a_remote_down_or_same_role_node_is_refused(slot: int, role: Role, why: str) -> None:
    core = make_core()
    core.node_down(DECODE_B)
    names = list(core.board.names)
    assert not core.request_flip(slot, role), why
    assert not any(core.board.is_draining) and core.board.take_flips() == [] and core.board.names == names


def test_set_split_drains_the_lowest_decode_nodes_or_the_highest_prefill_nodes() -> None:
    core = make_core()
    assert core.set_split(2) == "local prefill instances 1 -> 2 (1 flips, drained first)"
    assert core.board.take_flips() == [DECODE_A]
    core.flipped(DECODE_A)
    assert core.set_split(2) == "local prefill instances 2 -> 2 (0 flips, drained first)"
    assert core.set_split(0) == "local prefill instances 2 -> 0 (2 flips, drained first)"
    assert core.board.take_flips() == [DECODE_A, LOCAL_PREFILL]  # the highest prefill index first
    for slot in (DECODE_A, LOCAL_PREFILL):
        core.flipped(slot)
    assert core.board.num_local_prefill == 0 and core.board.loads[0].node == NodeId.parse("remote-prefill-0")
    assert len(core.board.loads) == 1


def test_the_latest_split_wins_over_a_flip_still_draining() -> None:
    """set_split(2) drains local-decode-1 toward prefill; set_split(1) before it is idle must call
    that flip off, or the split ends at 2 prefill nodes where the operator last asked for 1."""
    core = make_core()
    journey = start(core, "r1", SHORT, 0.0)  # holds a decode on local-decode-1
    assert core.set_split(2) == "local prefill instances 1 -> 2 (1 flips, drained first)"
    assert core.board.is_draining[DECODE_A]
    assert core.set_split(2) == "local prefill instances 2 -> 2 (0 flips, drained first)"  # counts the drain
    assert core.set_split(1) == "local prefill instances 2 -> 1 (1 flips, drained first)"
    assert not core.board.is_draining[DECODE_A] and core.board.take_flips() == []
    advance(core, journey, Stage.DECODING, 1.0)
    core.first_token(journey, 1.5)
    core.completed(journey, 2.0, 0.1)
    for slot in core.board.take_flips():
        core.flipped(slot)
    assert core.board.num_local_prefill == 1


def test_a_flip_is_not_carried_out_while_a_retry_placed_work_on_the_node() -> None:
    """With local-decode-2 down and local-decode-1 draining: a lost
    prefill node's retry lets go of local-decode-1 (its flip falls due), then places the retried
    attempt back on it, the only decode node up. The flip taken after the retries must wait."""
    core = make_core()
    journey = start(core, "r1", LONG, 0.0)
    core.node_down(DECODE_B)
    assert core.request_flip(DECODE_A, Role.PREFILL)
    assert core.node_down(REMOTE) == [journey]
    assert core.retry_or_fail(journey, FailReason.WORKER_LOST, LOST, 1.0) is not None
    assert journey.decode_slot == DECODE_A
    assert core.board.take_flips() == []  # it holds the retried attempt's decode


def test_a_node_flipped_to_decode_still_holds_the_kv_it_is_sending() -> None:
    """local-prefill-0 prefills a request, drains and flips to decode while the request's KV is
    still on its way; losing the node then must take that request with it (its KV is lost)."""
    core = make_core()
    journey = start(core, "r1", SHORT, 0.0)
    assert journey.prefill_slot == LOCAL_PREFILL
    core.prefill_started(journey, 0.1)
    core.prefill_finished(journey, 0.5, 0.4)
    assert core.request_flip(LOCAL_PREFILL, Role.DECODE)
    assert core.board.take_flips() == [LOCAL_PREFILL]
    core.flipped(LOCAL_PREFILL)
    assert not core.board.is_prefill[LOCAL_PREFILL] and journey.stage == Stage.TRANSFERRING
    assert core.node_down(LOCAL_PREFILL) == [journey]


def test_a_completion_counts_as_completed_even_without_a_first_token_report() -> None:
    core = make_core()
    journey = start(core, "r1", SHORT, 0.0)
    core.prefill_started(journey, 0.1)
    core.prefill_finished(journey, 0.5, 0.4)
    core.kv_arrived(journey, 0.6)
    record = core.completed(journey, 1.0, 0.1)
    assert record is not None and record.status == "completed"
    assert (core.num_completed, core.num_failed, len(core.ttft)) == (1, 0, 0)
