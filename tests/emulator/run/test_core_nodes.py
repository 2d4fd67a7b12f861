"""The run core's view of the nodes, by protocol events and the actions they answer with: a node
lost at every step of a request's life (Release, then Dispatch of a retry or Ended), prefixes
dropped with a lost or flipped prefill node, and drain-then-flip (request_flip, set_split: a
StartFlip once the node holds nothing)."""

from __future__ import annotations

import pytest

from emulator.control.types import Cluster, NodeId, Role
from emulator.run.core import MAX_ATTEMPTS
from emulator.run.journey import Stage
from emulator.run.protocol import Dispatch, IllegalEvent, StartFlip
from tests.emulator.run.core_case import (
    BLOCK_TOKENS,
    DECODE_A,
    DECODE_B,
    LOCAL_PREFILL,
    LONG,
    REMOTE,
    SHORT,
    advance,
    complete,
    held,
    loads,
    make_core,
    shown,
    spec,
    start,
)

STEPS = (Stage.ROUTED, Stage.PREFILLING, Stage.TRANSFERRING, Stage.DECODING)


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
    assert core.held_by(slot) == ([journey] if is_taken else [])
    acts = core.node_lost(slot, 2.0, "killed")
    if not is_taken:  # it goes on, the lost node untouched
        assert shown(acts) == []
        assert complete(core, journey, 2.5, 3.0) == [("ended", "r1", "completed", None)]
        assert (core.records[0].prefill_node, core.records[0].decode_node) == ("remote-prefill-0", "local-decode-1")
        assert held(core) == ([0, 0, 0, 0], [0, 0, 0, 0])
        return
    if lost == "prefill":  # the remote cluster is down: the long prompt falls back to local
        retry = ("dispatch", "r1", 2, LOCAL_PREFILL, DECODE_A)
    else:  # the same prefill node (reusing the prefix it cached once its prefill was done)
        retry = ("dispatch", "r1", 2, REMOTE, DECODE_B)
    assert shown(acts) == [("release", "r1", 1, stage, REMOTE, DECODE_A), retry]
    assert (journey.attempts, journey.stage) == (2, Stage.ROUTED)
    if lost == "prefill":
        assert (journey.route, journey.prefill_node) == ("local", "local-prefill-0")
        assert loads(core) == [("remote-prefill-0", 0, 0, False), ("local-prefill-0", LONG, 1, True)]
    else:
        reused = LONG // BLOCK_TOKENS * BLOCK_TOKENS if stage >= Stage.TRANSFERRING else 0
        assert (journey.route, journey.prefill_node, journey.cached_len) == ("prfaas", "remote-prefill-0", reused)
        assert loads(core) == [("remote-prefill-0", LONG - reused, 1, True), ("local-prefill-0", 0, 0, True)]
    assert held(core)[1] == ([0, 0, 0, 1] if lost == "decode" else [0, 0, 1, 0])
    assert (core.num_prfaas, core.num_local, core.records) == (1, 0, [])


def test_a_node_lost_on_the_last_attempt_ends_the_request_worker_lost() -> None:
    core = make_core()
    journey = start(core, "r1", SHORT, 0.0)
    for attempt in range(1, MAX_ATTEMPTS):  # fail on the decode nodes in turn, each back up after
        decode = journey.decode_slot
        acts = core.node_lost(decode, float(attempt), "killed")
        assert [type(a).__name__ for a in acts] == ["Release", "Dispatch"]
        assert shown(core.node_back(decode)) == []
    assert journey.attempts == MAX_ATTEMPTS
    acts = core.node_lost(journey.prefill_slot, 5.0, "killed")
    assert shown(acts) == [("release", "r1", MAX_ATTEMPTS, Stage.ROUTED, LOCAL_PREFILL, journey.decode_slot),
                           ("ended", "r1", "failed", "worker_lost")]
    [record] = core.records
    assert record.fail_detail == "worker lost: local-prefill-0 (killed)" and record.finish_s == 5.0
    assert held(core) == ([0, 0, 0, 0], [0, 0, 0, 0])
    assert shown(core.node_lost(LOCAL_PREFILL, 6.0, "killed again")) == []  # already down: nothing


def test_a_lost_prefill_node_forgets_its_prefixes_and_comes_back_empty() -> None:
    core = make_core()
    journey = start(core, "r1", SHORT, 0.0, prompt=7)
    advance(core, journey, Stage.DECODING, 1.0)
    assert core.index.nodes() == (NodeId(Cluster.LOCAL, Role.PREFILL, 0),)
    assert shown(core.node_lost(LOCAL_PREFILL, 1.5, "killed")) == []  # its KV has arrived: not needed
    assert core.index.nodes() == ()
    assert shown(core.node_back(LOCAL_PREFILL)) == []
    assert loads(core)[1] == ("local-prefill-0", 0, 0, True)
    [dispatch] = core.arrive(spec("r2", SHORT, prompt=7), 2.0)
    assert isinstance(dispatch, Dispatch) and dispatch.decision.cached_len == 0


# ---- drain-then-flip ----


def test_a_draining_decode_node_takes_no_new_work_and_flips_once_it_holds_nothing() -> None:
    core = make_core()
    journey = start(core, "r1", SHORT, 0.0)
    assert journey.decode_slot == DECODE_A
    assert shown(core.request_flip(DECODE_A, Role.PREFILL)) == []
    assert core.board.is_draining[DECODE_A]
    assert start(core, "r2", SHORT, 0.0).decode_slot == DECODE_B  # draining: placed last
    assert complete(core, journey, 1.0, 2.0) == [("ended", "r1", "completed", None),
                                                 StartFlip(DECODE_A, Role.PREFILL)]
    assert shown(core.flipped(DECODE_A)) == []
    board = core.board
    assert board.names == ["remote-prefill-0", "local-prefill-0", "local-prefill-1", "local-decode-2"]
    assert not board.is_draining[DECODE_A] and board.decode_slots == [DECODE_B]
    assert [load[0] for load in loads(core)] == ["remote-prefill-0", "local-prefill-0", "local-prefill-1"]
    assert board.num_local_prefill == 2


def test_a_draining_prefill_node_is_down_for_the_router_and_flips_without_its_prefixes() -> None:
    core = make_core()
    journey = start(core, "r1", SHORT, 0.0)
    assert shown(core.request_flip(LOCAL_PREFILL, Role.DECODE)) == []
    assert loads(core)[1] == ("local-prefill-0", SHORT, 1, False)
    other = start(core, "r2", SHORT, 0.5)  # the local cluster has no prefill node up: remote takes it
    assert (other.route, other.prefill_node) == ("prfaas", "remote-prefill-0")
    assert shown(core.prefill_started(journey, 1, 1.0)) == []
    acts = core.prefill_done(journey, 1, 1.5, 0.5, 0, 1024)  # its KV is still on the way: no prefill held
    assert shown(acts) == [("send_decode", "r1", 1), StartFlip(LOCAL_PREFILL, Role.DECODE)]
    assert NodeId(Cluster.LOCAL, Role.PREFILL, 0) in core.index.nodes()
    assert shown(core.flipped(LOCAL_PREFILL)) == []
    assert NodeId(Cluster.LOCAL, Role.PREFILL, 0) not in core.index.nodes()
    assert core.board.names[LOCAL_PREFILL] == "local-decode-0"
    assert [load[0] for load in loads(core)] == ["remote-prefill-0"]
    assert core.board.decode_slots == [LOCAL_PREFILL, DECODE_A, DECODE_B]
    assert core.board.slot_of(NodeId.parse("local-prefill-0")) == LOCAL_PREFILL


def test_an_idle_node_flips_at_once_and_once() -> None:
    core = make_core()
    assert shown(core.request_flip(DECODE_B, Role.PREFILL)) == [StartFlip(DECODE_B, Role.PREFILL)]
    assert shown(core.request_flip(DECODE_B, Role.PREFILL)) == []  # asked twice, flipped once


def test_a_flipped_report_for_a_node_not_asked_to_flip_is_refused() -> None:
    core = make_core()
    names = list(core.board.names)
    with pytest.raises(IllegalEvent, match="local-decode-1 was not asked to flip"):
        core.flipped(DECODE_A)
    assert core.board.names == names and not any(core.board.is_draining)


def test_a_node_lost_while_draining_drops_its_flip_and_comes_back_in_its_role() -> None:
    core = make_core()
    journey = start(core, "r1", SHORT, 0.0)
    assert shown(core.request_flip(DECODE_A, Role.PREFILL)) == []
    acts = core.node_lost(DECODE_A, 1.0, "killed")
    assert shown(acts) == [("release", "r1", 1, Stage.ROUTED, LOCAL_PREFILL, DECODE_A),
                           ("dispatch", "r1", 2, LOCAL_PREFILL, DECODE_B)]  # and no StartFlip
    assert not core.board.is_draining[DECODE_A]
    assert shown(core.node_back(DECODE_A)) == []
    assert core.board.names[DECODE_A] == "local-decode-1" and core.board.decode_slots == [DECODE_A, DECODE_B]
    assert journey.decode_slot == DECODE_B and start(core, "r2", SHORT, 1.0).decode_slot == DECODE_A


@pytest.mark.parametrize(("slot", "role", "why"), [
    (REMOTE, Role.DECODE, "remote"), (LOCAL_PREFILL, Role.PREFILL, "same role"),
    (DECODE_A, Role.DECODE, "same role"), (DECODE_B, Role.PREFILL, "down")])
def test_a_flip_of_a_remote_down_or_same_role_node_is_refused(slot: int, role: Role, why: str) -> None:
    core = make_core()
    core.node_lost(DECODE_B, 0.0, "killed")
    names = list(core.board.names)
    assert shown(core.request_flip(slot, role)) == [], why
    assert not any(core.board.is_draining) and core.board.flips_due == [] and core.board.names == names


def test_set_split_drains_the_lowest_decode_nodes_or_the_highest_prefill_nodes() -> None:
    core = make_core()
    words, acts = core.set_split(2)
    assert (words, list(acts)) == ("local prefill instances 1 -> 2 (1 flips, drained first)",
                                   [StartFlip(DECODE_A, Role.PREFILL)])
    core.flipped(DECODE_A)
    assert core.set_split(2) == ("local prefill instances 2 -> 2 (0 flips, drained first)", [])
    words, acts = core.set_split(0)
    assert (words, list(acts)) == ("local prefill instances 2 -> 0 (2 flips, drained first)",  # highest first
                                   [StartFlip(DECODE_A, Role.DECODE), StartFlip(LOCAL_PREFILL, Role.DECODE)])
    for slot in (DECODE_A, LOCAL_PREFILL):
        core.flipped(slot)
    assert core.board.num_local_prefill == 0 and [load[0] for load in loads(core)] == ["remote-prefill-0"]


def test_the_latest_split_wins_over_a_flip_still_draining() -> None:
    """set_split(2) drains local-decode-1 toward prefill; set_split(1) before it is idle must call
    that flip off, or the split ends at 2 prefill nodes where the operator last asked for 1."""
    core = make_core()
    journey = start(core, "r1", SHORT, 0.0)  # holds a decode on local-decode-1
    assert core.set_split(2) == ("local prefill instances 1 -> 2 (1 flips, drained first)", [])
    assert core.board.is_draining[DECODE_A]
    assert core.set_split(2) == ("local prefill instances 2 -> 2 (0 flips, drained first)", [])  # counts the drain
    assert core.set_split(1) == ("local prefill instances 2 -> 1 (1 flips, drained first)", [])
    assert not core.board.is_draining[DECODE_A]
    assert complete(core, journey, 1.5, 2.0) == [("ended", "r1", "completed", None)]  # no StartFlip
    assert core.board.num_local_prefill == 1


def test_a_flip_is_not_carried_out_while_a_retry_placed_work_on_the_node() -> None:
    """With local-decode-2 down and local-decode-1 draining: a lost prefill node's retry lets go of
    local-decode-1 (its flip falls due), then places the retried attempt back on it, the only
    decode node up. No StartFlip may come while it holds the retried attempt's decode."""
    core = make_core()
    journey = start(core, "r1", LONG, 0.0)
    assert shown(core.node_lost(DECODE_B, 0.5, "killed")) == []
    assert shown(core.request_flip(DECODE_A, Role.PREFILL)) == []
    acts = core.node_lost(REMOTE, 1.0, "killed")
    assert shown(acts) == [("release", "r1", 1, Stage.ROUTED, REMOTE, DECODE_A),
                           ("dispatch", "r1", 2, LOCAL_PREFILL, DECODE_A)]
    assert journey.decode_slot == DECODE_A and core.board.is_draining[DECODE_A]
    assert complete(core, journey, 1.5, 2.0) == [("ended", "r1", "completed", None),
                                                 StartFlip(DECODE_A, Role.PREFILL)]


def test_a_node_flipped_to_decode_still_holds_the_kv_it_is_sending() -> None:
    """local-prefill-0 prefills a request, drains and flips to decode while the request's KV is
    still on its way; losing the node then must take that request with it (its KV is lost)."""
    core = make_core()
    journey = start(core, "r1", SHORT, 0.0)
    assert journey.prefill_slot == LOCAL_PREFILL
    advance(core, journey, Stage.TRANSFERRING, 0.5)
    assert shown(core.request_flip(LOCAL_PREFILL, Role.DECODE)) == [StartFlip(LOCAL_PREFILL, Role.DECODE)]
    core.flipped(LOCAL_PREFILL)
    assert not core.board.is_prefill[LOCAL_PREFILL] and journey.stage == Stage.TRANSFERRING
    assert core.held_by(LOCAL_PREFILL) == [journey]
    acts = core.node_lost(LOCAL_PREFILL, 1.0, "killed")  # no local prefill node left: remote retries it
    assert shown(acts) == [("release", "r1", 1, Stage.TRANSFERRING, LOCAL_PREFILL, DECODE_A),
                           ("dispatch", "r1", 2, REMOTE, DECODE_A)]
