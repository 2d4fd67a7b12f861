"""The gateway's wiring of remote caches to the fluid link's senders (the sharing itself:
test_link.py)."""

from __future__ import annotations

from collections.abc import Callable

from emulator.scenario import Scenario
from emulator.virtual.engine import simulate
from emulator.virtual.gateway import kv_sender


def test_each_prefill_and_decode_worker_pair_has_its_own_sender(small: Callable[..., Scenario]) -> None:
    # Two remote prefill workers and two decode workers: a run uses all four pairs, and each pair's
    # caches share one sender (one set of connections, as a live prefill worker keeps per target)
    # that no other pair's caches ride.
    result = simulate(small(clusters={"remote": {"instances": 2, "device": "fast"},
                                      "local": {"instances": 4, "device": "slow", "prefill_instances": 2}}))
    board = result.gateway.board
    slot = {name: i for i, name in enumerate(board.names)}
    pairs = {(slot[r.prefill_node], slot[r.decode_node]) for r in result.records if r.route == "prfaas"}
    assert len(pairs) == 4
    keys = {pair: kv_sender(*pair, len(board.ids)) for pair in pairs}
    assert len(set(keys.values())) == 4
