"""The run core's protocol: the events an engine feeds it and the actions it answers with (h11's
shape). An engine turns its I/O or its heap events into these events and carries out the actions;
what a request does next is decided by the core alone (emulator.run.core).

Events name an attempt by its id (`Journey.attempt_id`, unique in a run; the live engine's wire
id), so a report from an attempt given up on is told from the current one. An event the request's
stage cannot take is refused with `IllegalEvent`; a late report (an attempt given up on, or a
request that ended) and a duplicate (the stage is past it) are answered with no action.

Actions are plain classes (compiled, each a native object the virtual engine builds per request).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from emulator.control.router import RouteDecision
from emulator.control.types import FailReason, RequestSpec, Role
from emulator.errors import PrfaasError
from emulator.net.spec import LinkSpec
from emulator.run.journey import Journey
from emulator.telemetry.records import RequestRecord


class IllegalEvent(PrfaasError):
    """An event the request's stage cannot take (a decode report before its prefill ended, an
    attempt the run never started): refused, and the request is left as it was."""


# ---- events (the entry `RunCore.handle` takes; the engines may call the methods directly) ----


@dataclass(frozen=True, slots=True)
class Arrive:
    spec: RequestSpec
    t: float


@dataclass(frozen=True, slots=True)
class PrefillStarted:
    attempt: int
    t: float


@dataclass(frozen=True, slots=True)
class PrefillDone:
    """`cached_len` is what the node really reused; `service_s` the prefill's own time."""

    attempt: int
    t: float
    service_s: float
    cached_len: int
    kv_bytes: int


@dataclass(frozen=True, slots=True)
class TransferDone:
    attempt: int
    t_start: float
    t_end: float


@dataclass(frozen=True, slots=True)
class FirstToken:
    attempt: int
    t: float


@dataclass(frozen=True, slots=True)
class Finished:
    attempt: int
    t: float
    tpot_s: float | None


@dataclass(frozen=True, slots=True)
class AttemptFailed:
    """A node reported the attempt failed (`transfer`: its KV transfer's start and end, if known)."""

    attempt: int
    t: float
    reason: FailReason
    detail: str
    transfer: tuple[float, float] | None = None


@dataclass(frozen=True, slots=True)
class NodeLost:
    slot: int
    t: float
    why: str


@dataclass(frozen=True, slots=True)
class NodeBack:
    slot: int
    t: float


@dataclass(frozen=True, slots=True)
class Flipped:
    """The engine carried a StartFlip out: the node at `slot` serves its other role now."""

    slot: int
    t: float


@dataclass(frozen=True, slots=True)
class ArrivalsOver:
    """The scenario's duration is over: no request arrives any more; the drain starts."""

    t: float


@dataclass(frozen=True, slots=True)
class DrainOver:
    """The drain after the duration is over (EndPolicy): what is open fails `unfinished`."""

    t: float


@dataclass(frozen=True, slots=True)
class Stop:
    """The operator (or the run's own failure) ends the run now: what is open fails `reason`."""

    t: float
    reason: FailReason
    detail: str


Event = (Arrive | PrefillStarted | PrefillDone | TransferDone | FirstToken | Finished | AttemptFailed | NodeLost
         | NodeBack | Flipped | ArrivalsOver | DrainOver | Stop)


# ---- actions ----


class Dispatch:
    """Start the attempt: its prompt to the prefill node at `journey.prefill_slot`, its KV to the
    decode node at `journey.decode_slot` (the router's `decision`: a cached prefix to move first)."""

    __slots__ = ("journey", "decision")

    def __init__(self, journey: Journey, decision: RouteDecision) -> None:
        self.journey, self.decision = journey, decision


class SendDecode:
    """The prefill is done: the decode node takes the request once its KV is in."""

    __slots__ = ("journey",)

    def __init__(self, journey: Journey) -> None:
        self.journey = journey


class Release:
    """Let go of an attempt given up on: whatever it still has in motion (a queued or running
    prefill on a node that is up, a transfer, a place at the decode node). The journey may already
    be on its next attempt; the fields are the attempt's own."""

    __slots__ = ("journey", "attempt", "handle", "stage", "prefill_slot", "decode_slot")

    def __init__(self, journey: Journey, attempt: int, handle: object, stage: int, prefill_slot: int,
                 decode_slot: int) -> None:
        self.journey, self.attempt, self.handle, self.stage = journey, attempt, handle, stage
        self.prefill_slot, self.decode_slot = prefill_slot, decode_slot


class Ended:
    """The request ended: `record` is its one record (completed or failed, with the reason)."""

    __slots__ = ("journey", "record")

    def __init__(self, journey: Journey, record: RequestRecord) -> None:
        self.journey, self.record = journey, record


class Publish:
    """A step of a request for the run's live feed (only when the core was asked to publish)."""

    __slots__ = ("journey", "event", "node", "reason", "detail")

    def __init__(self, journey: Journey, event: str, node: str | None = None, reason: str | None = None,
                 detail: dict[str, float] | None = None) -> None:
        self.journey, self.event, self.node, self.reason, self.detail = journey, event, node, reason, detail


@dataclass(frozen=True, slots=True)
class StartFlip:
    """The node at `slot` has drained: switch it to `role` (then report Flipped)."""

    slot: int
    role: Role


@dataclass(frozen=True, slots=True)
class Note:
    """A line for the run's decision log (`scheduler`) or knob log (`timeline`, `control`);
    `refused`: the knob or a step of the event was refused (the words say why)."""

    source: str
    words: str
    refused: bool = False


@dataclass(frozen=True, slots=True)
class ReshapeLink:
    spec: LinkSpec


@dataclass(frozen=True, slots=True)
class SetArrivalRate:
    rate_per_s: float


@dataclass(frozen=True, slots=True)
class PauseArrivals:
    resume: bool


@dataclass(frozen=True, slots=True)
class KillNode:
    slot: int


@dataclass(frozen=True, slots=True)
class RestartNode:
    slot: int


@dataclass(frozen=True, slots=True)
class EndRun:
    """Every request has ended and none will arrive: the run is over, for `reason` (in words)."""

    reason: str


Action = (Dispatch | SendDecode | Release | Ended | Publish | StartFlip | Note | ReshapeLink | SetArrivalRate
          | PauseArrivals | KillNode | RestartNode | EndRun)
Actions = Sequence[Action]
NOTHING: Final[Actions] = ()  # the answer to an event that asks for nothing
