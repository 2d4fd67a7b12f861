"""Where work goes inside the local cluster: the decode node that takes a request's KV, and which
local nodes flip to reach a prefill/decode split. Pure functions on plain lists (the run core calls
the first per request): both engines place and split by these rules, nothing else.
"""

from __future__ import annotations

from emulator.control.types import Role


def least_held(slots: list[int], is_up: list[bool], is_draining: list[bool], held: list[int]) -> int:
    """The slot of `slots` that should take the next request: up, not draining if any such is up,
    holding the fewest requests, the lowest slot on ties (`slots` ascending); -1 when none is up.
    The other lists are indexed by slot."""
    best, best_draining, best_held = -1, True, 0
    for slot in slots:
        if is_up[slot]:
            draining, count = is_draining[slot], held[slot]
            if best < 0 or draining < best_draining or (draining == best_draining and count < best_held):
                best, best_draining, best_held = slot, draining, count
    return best


def split_flips(prefill: list[int], decode: list[int], target: int) -> list[tuple[int, Role]]:
    """The flips that move the local cluster toward `target` prefill nodes, given the local indices
    now in each role (ascending): the lowest decode indices become prefill, the highest prefill
    indices become decode."""
    grow = [(index, Role.PREFILL) for index in decode[: max(0, target - len(prefill))]]
    shrink = [(index, Role.DECODE) for index in reversed(prefill)][: max(0, len(prefill) - target)]
    return grow + shrink
