"""The node board on its own: slot numbering and names, the loads the router reads, held counts,
decode placement and drain-then-flip bookkeeping. Two remote and four local nodes, two of them
prefill: slots 0-1 remote-prefill-0/1, 2-3 local-prefill-0/1, 4-5 local-decode-2/3."""

from __future__ import annotations

import pytest

from emulator.control.router import NodeLoad
from emulator.control.types import NodeId, Role
from emulator.run.board import NodeBoard

NAMES = ["remote-prefill-0", "remote-prefill-1", "local-prefill-0", "local-prefill-1", "local-decode-2",
         "local-decode-3"]


def loads(board: NodeBoard) -> list[tuple[str, int, int, bool]]:
    return [(str(load.node), load.queued_tokens, load.queued_requests, load.is_up) for load in board.loads]


def test_slots_are_numbered_remote_first_and_named_by_their_role() -> None:
    board = NodeBoard(2, 4, 2)
    assert list(board.slots) == [0, 1, 2, 3, 4, 5] and board.names == NAMES
    assert board.ids == [NodeId.parse(name) for name in NAMES]
    assert loads(board) == [(name, 0, 0, True) for name in NAMES[:4]]
    assert board.decode_slots == [4, 5] and board.num_local_prefill == 2


@pytest.mark.parametrize(("name", "slot"), [
    ("remote-prefill-1", 1), ("local-prefill-0", 2), ("local-decode-3", 5),
    ("local-prefill-3", 5), ("local-decode-0", 2),  # a local index keeps its slot in either role
    ("remote-prefill-2", -1), ("local-decode-4", -1)])
def test_slot_of_finds_a_node_by_its_index_whatever_its_role(name: str, slot: int) -> None:
    assert NodeBoard(2, 4, 2).slot_of(NodeId.parse(name)) == slot


def test_prefills_held_are_the_loads_the_router_reads() -> None:
    board = NodeBoard(2, 4, 2)
    board.add_prefill(1, 3000, 1.5)
    board.add_prefill(1, 500, 0.25)
    board.add_prefill(3, 200, 0.125)
    assert loads(board)[1] == ("remote-prefill-1", 3500, 2, True)
    assert loads(board)[3] == ("local-prefill-1", 200, 1, True)
    board.end_prefill(1, 3000, 1.5, is_started=False)
    board.end_prefill(3, 200, 0.125, is_started=False)
    assert loads(board)[1] == ("remote-prefill-1", 500, 1, True)
    assert board.loads[3] == NodeLoad(NodeId.parse("local-prefill-1"), 0, 0, True)
    assert board.prefill_held == [0, 1, 0, 0, 0, 0] and board.flips_due == []


def test_work_left_is_the_prompts_waiting_plus_the_end_of_the_one_in_service() -> None:
    """Each prompt counts its own seconds while it waits; once started, its end time instead."""
    board = NodeBoard(2, 4, 2)
    board.add_prefill(2, 4000, 2.0)
    board.add_prefill(2, 1000, 0.5)
    board.add_prefill(2, 3000, 1.25)
    assert board.loads[2][4:] == (3.75, 0.0)
    board.start_prefill(2, 10.0, 2.0)
    assert board.loads[2][4:] == (1.75, 12.0)
    board.end_prefill(2, 3000, 1.25, is_started=False)  # let go of while it waited
    assert board.loads[2][4:] == (0.5, 12.0)
    board.end_prefill(2, 4000, 0.0, is_started=True)
    board.start_prefill(2, 12.0, 0.5)
    assert board.loads[2] == NodeLoad(NodeId.parse("local-prefill-0"), 1000, 1, True, 0.0, 12.5)
    board.end_prefill(2, 1000, 0.0, is_started=True)
    assert board.loads[2] == NodeLoad(NodeId.parse("local-prefill-0"), 0, 0, True, 0.0, 0.0)


def test_a_down_node_is_down_for_the_router_and_for_decode_placement() -> None:
    board = NodeBoard(2, 4, 2)
    board.set_up(0, False)
    board.set_up(4, False)
    assert loads(board)[0] == ("remote-prefill-0", 0, 0, False)
    assert board.pick_decode() == 5
    board.set_up(5, False)
    assert board.pick_decode() == -1
    board.set_up(4, True)
    assert board.pick_decode() == 4


def test_decode_placement_prefers_the_fewest_held_and_draining_nodes_last() -> None:
    board = NodeBoard(2, 4, 2)
    assert board.pick_decode() == 4
    board.add_decode(4)
    assert board.pick_decode() == 5
    board.add_decode(5)
    board.add_decode(5)
    assert board.pick_decode() == 4
    assert board.request_flip(4, Role.PREFILL)
    assert board.pick_decode() == 5  # holds more, but 4 drains
    board.set_up(5, False)
    assert board.pick_decode() == 4  # the only decode node up, draining or not
    assert board.decode_held == [0, 0, 0, 0, 1, 2]


def test_a_draining_node_flips_when_its_last_request_leaves() -> None:
    board = NodeBoard(2, 4, 2)
    board.add_prefill(3, 100, 0.5)
    board.add_decode(5)
    assert board.request_flip(3, Role.DECODE) and board.request_flip(5, Role.PREFILL)
    assert loads(board)[3] == ("local-prefill-1", 100, 1, False)  # draining: not up for routing
    assert board.take_flips() == []
    board.end_decode(5)
    board.end_prefill(3, 100, 0.5, is_started=False)
    assert board.take_flips() == [5, 3] and board.take_flips() == []
    board.flipped(5)
    board.flipped(3)
    assert board.names == NAMES[:3] + ["local-decode-1", "local-decode-2", "local-prefill-3"]
    assert [name for name, *_ in loads(board)] == NAMES[:3] + ["local-prefill-3"]
    assert board.decode_slots == [3, 4] and not any(board.is_draining)


def test_asking_a_draining_node_for_its_own_role_calls_the_flip_off() -> None:
    board = NodeBoard(2, 4, 2)
    board.add_prefill(3, 100, 0.5)
    assert board.request_flip(3, Role.DECODE) and board.split_flips(2) == [(1, Role.PREFILL)]
    assert board.num_local_prefill == 2 and board.num_local_prefill_heading == 1
    assert board.request_flip(3, Role.PREFILL)
    assert not board.is_draining[3] and loads(board)[3] == ("local-prefill-1", 100, 1, True)
    board.end_prefill(3, 100, 0.5, is_started=False)
    assert board.take_flips() == [] and board.num_local_prefill_heading == 2


def test_a_flip_falls_due_again_when_work_placed_since_has_left() -> None:
    board = NodeBoard(2, 4, 2)
    board.set_up(5, False)
    assert board.request_flip(4, Role.PREFILL)  # idle: due at once
    board.add_decode(board.pick_decode())  # the only decode node up, draining or not
    assert board.take_flips() == []
    board.end_decode(4)
    assert board.take_flips() == [4]


def test_an_idle_node_is_due_at_once_and_only_once() -> None:
    board = NodeBoard(2, 4, 2)
    assert board.request_flip(4, Role.PREFILL) and board.request_flip(4, Role.PREFILL)
    assert board.take_flips() == [4]


def test_a_node_that_goes_down_while_draining_keeps_its_role() -> None:
    board = NodeBoard(2, 4, 2)
    board.add_decode(4)
    board.request_flip(4, Role.PREFILL)
    board.set_up(4, False)
    board.end_decode(4)
    assert board.take_flips() == [] and not board.is_draining[4]
    board.set_up(4, True)
    assert board.names == NAMES and board.pick_decode() == 4


@pytest.mark.parametrize(("slot", "role"), [(0, Role.DECODE), (2, Role.PREFILL), (4, Role.DECODE), (5, Role.PREFILL)])
def test_remote_same_role_and_down_nodes_are_not_flipped(slot: int, role: Role) -> None:
    board = NodeBoard(2, 4, 2)
    board.set_up(5, False)
    assert not board.request_flip(slot, role)
    assert not any(board.is_draining) and board.take_flips() == []


@pytest.mark.parametrize(("target", "flips"), [
    (2, []), (3, [(2, Role.PREFILL)]), (4, [(2, Role.PREFILL), (3, Role.PREFILL)]),
    (9, [(2, Role.PREFILL), (3, Role.PREFILL)]), (1, [(1, Role.DECODE)]), (0, [(1, Role.DECODE), (0, Role.DECODE)])])
def test_split_flips_name_local_indices(target: int, flips: list[tuple[int, Role]]) -> None:
    assert NodeBoard(2, 4, 2).split_flips(target) == flips


def test_a_local_cluster_of_decode_nodes_only() -> None:
    board = NodeBoard(1, 2, 0)
    assert board.names == ["remote-prefill-0", "local-decode-0", "local-decode-1"]
    assert loads(board) == [("remote-prefill-0", 0, 0, True)] and board.num_local_prefill == 0
    assert board.split_flips(1) == [(0, Role.PREFILL)]
