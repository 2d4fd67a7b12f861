"""Local placement rules as pure functions: the decode node for the next request (least_held) and
the flips toward a prefill/decode split (split_flips)."""

from __future__ import annotations

import pytest

from emulator.control.placement import least_held, split_flips
from emulator.control.types import Role

P, D = Role.PREFILL, Role.DECODE


def case(name: str, slots: list[int], up: str, draining: str, held: list[int], best: int):  # noqa: ANN201
    """`up`/`draining` spell one flag per slot index ("1" set, "0" not)."""
    return pytest.param(slots, [c == "1" for c in up], [c == "1" for c in draining], held, best, id=name)


@pytest.mark.parametrize(("slots", "is_up", "is_draining", "held", "best"), [
    case("fewest held", [0, 1, 2], "111", "000", [3, 1, 2], 1),
    case("tie: lowest slot", [0, 1, 2], "111", "000", [2, 1, 1], 1),
    case("all tied: the first", [0, 1, 2], "111", "000", [0, 0, 0], 0),
    case("down skipped", [0, 1, 2], "101", "000", [3, 0, 2], 2),
    case("draining last, even holding fewer", [0, 1], "11", "10", [0, 5], 1),
    case("draining tie: fewest held", [0, 1, 2], "111", "111", [4, 2, 3], 1),
    case("only draining ones up", [0, 1], "11", "11", [1, 1], 0),
    case("a draining node when the rest is down", [0, 1], "01", "01", [0, 9], 1),
    case("all down", [0, 1], "00", "00", [0, 0], -1),
    case("no slots", [], "", "", [], -1),
    case("only the listed slots", [2, 3], "1111", "0000", [0, 0, 4, 1], 3),
])
def test_least_held(slots: list[int], is_up: list[bool], is_draining: list[bool], held: list[int],
                    best: int) -> None:
    assert least_held(slots, is_up, is_draining, held) == best


@pytest.mark.parametrize(("prefill", "decode", "target", "flips"), [
    ([0, 1], [2, 3], 2, []),
    ([0, 1], [2, 3], 3, [(2, P)]),  # the lowest decode index grows prefill
    ([0, 1], [2, 3], 4, [(2, P), (3, P)]),
    ([0, 1], [2, 3], 7, [(2, P), (3, P)]),  # no more nodes than there are
    ([0, 1], [2, 3], 1, [(1, D)]),  # the highest prefill index shrinks it
    ([0, 1], [2, 3], 0, [(1, D), (0, D)]),
    ([1, 3], [0, 2], 3, [(0, P)]),  # indices, not positions: roles interleave after flips
    ([1, 3], [0, 2], 1, [(3, D)]),
    ([], [0, 1], 1, [(0, P)]),
    ([0, 1], [], 0, [(1, D), (0, D)]),
    ([], [], 2, []),
])
def test_split_flips(prefill: list[int], decode: list[int], target: int, flips: list[tuple[int, Role]]) -> None:
    assert split_flips(prefill, decode, target) == flips
