"""One request's journey through a run, as the run core keeps it: where it is in its lifecycle, the
nodes of its current attempt and the times it reached each step. Both engines stamp the same fields;
the core turns a journey into its one terminal record.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final

from emulator.control.types import RequestSpec
from emulator.telemetry.records import RequestRecord


class Stage(IntEnum):
    """Where the current attempt is. A node lost takes with it the journeys at the stages that
    still need it: a prefill node those up to TRANSFERRING (its KV is still on the way), a decode
    node every journey placed on it."""

    ARRIVED = 0  # admitted, not routed yet (or between attempts)
    ROUTED = 1  # a prefill node is chosen: queued there, or its cached prefix is on the way
    PREFILLING = 2
    TRANSFERRING = 3  # prefill done, KV not yet at the decode node
    DECODING = 4  # KV at the decode node: waiting for a batch slot or generating
    ENDED = 5


# The stages as plain ints, bound once: the virtual engine compares them per event (mypyc reads a
# Final int natively, an IntEnum member by attribute lookup).
ARRIVED: Final = 0
ROUTED: Final = 1
PREFILLING: Final = 2
TRANSFERRING: Final = 3
DECODING: Final = 4
ENDED: Final = 5


class Journey:
    """A request across its attempts. `arrival_s` and `attempts` survive a retry; the rest is the
    current attempt's and `reset` forgets it. `attempt_id` names the current attempt in the run
    (the core's events carry it; the live engine's wire id). `prefill_slot`/`decode_slot` are the
    core's node slots (-1: none yet). `prefill_work_s` is T_prefill(incremental_len) at its prefill
    node by the profile: the work the board counts for it (priced once, at dispatch). `handle` is
    the engine's own per-attempt mechanics (the virtual engine's transfer, the live engine's wire
    id); the core never reads it. `record` is its ending."""

    __slots__ = ("spec", "arrival_s", "attempts", "attempt_id", "stage", "route", "prefill_slot", "decode_slot",
                 "prefill_node", "decode_node", "cached_len", "incremental_len", "prefill_work_s",
                 "prefill_start_s", "prefill_end_s", "transfer_start_s", "transfer_end_s", "kv_bytes", "first_token_s",
                 "handle", "record")

    route: str | None
    prefill_node: str | None
    decode_node: str | None
    prefill_start_s: float | None
    prefill_end_s: float | None
    transfer_start_s: float | None
    transfer_end_s: float | None
    kv_bytes: int | None
    first_token_s: float | None
    handle: object
    record: RequestRecord | None

    def __init__(self, spec: RequestSpec, arrival_s: float) -> None:
        self.spec = spec
        self.arrival_s = arrival_s
        self.attempts = 0
        self.record = None  # its one ending, once it ended
        self.reset()

    def reset(self) -> None:
        """Forget what the previous attempt reached (arrival and attempts stay)."""
        self.stage = ARRIVED
        self.attempt_id = -1
        self.route = self.prefill_node = self.decode_node = None
        self.prefill_slot = self.decode_slot = -1
        self.cached_len = 0
        self.incremental_len = self.spec.input_len
        self.prefill_work_s = 0.0
        self.prefill_start_s = self.prefill_end_s = self.transfer_start_s = None
        self.transfer_end_s = self.first_token_s = None
        self.kv_bytes = None
        self.handle = None

    @property
    def is_done(self) -> bool:
        return self.stage == ENDED
