"""The run core: every request's lifecycle and the operator's view of the nodes, written once for
both engines. Sans-I/O: the engine feeds it events with the time passed in and carries out what it
answers; it starts no process, opens no socket and reads no clock (h11's shape, or vLLM's
EngineCore with the executors outside).

Events and answers (a journey is one request, emulator.run.journey):
  arrive(spec, now) -> Journey              then route it
  route(journey, now) -> RouteDecision|None dispatch the prefill there (its decode node is placed
                                            too: the KV streams straight to it); None: it ended failed
  prefill_started / prefill_finished        stamps, the prefix index, the scheduler's feed
  kv_arrived(journey, now) -> slot          admit it on that decode node
  first_token / completed                   its one record
  retry_or_fail(journey, why, now) -> RouteDecision|None   after the engine let go of the attempt
  node_down(slot, now) -> [Journey]         let go of each, then retry_or_fail it
  node_up, request_flip, set_split, flipped; `board.take_flips()` says which slots flip now.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from emulator.control.control_state import ControlState
from emulator.control.prefix_cache import PrefixCacheIndex
from emulator.control.router import RouteDecision, Router
from emulator.control.scheduler import DualTimescaleScheduler
from emulator.control.types import Cluster, FailReason, RequestSpec, RequestStatus, Role
from emulator.run.board import NodeBoard
from emulator.run.journey import DECODING, ENDED, PREFILLING, ROUTED, TRANSFERRING, Journey
from emulator.run.ttft_window import TtftWindow
from emulator.telemetry.records import RequestRecord

MAX_ATTEMPTS: Final = 3  # a request whose node was lost or whose transfer failed is tried this often
TTFT_WINDOW_S: Final = 30.0
_COMPLETED: Final = RequestStatus.COMPLETED.value
_FAILED: Final = RequestStatus.FAILED.value
_REMOTE: Final = Cluster.REMOTE  # bound once: Enum class attributes are slow (3.11)
_LOCAL: Final = Cluster.LOCAL


class RunCore:
    """One run's requests and nodes. `records` holds each request's one ending, in order."""

    def __init__(self, router: Router, index: PrefixCacheIndex, scheduler: DualTimescaleScheduler | None,
                 board: NodeBoard, *, block_tokens: int, use_index: bool = True) -> None:
        self.router, self.index, self.scheduler, self.board = router, index, scheduler, board
        self.block_tokens = block_tokens
        self.use_index = use_index  # False only when no lookup can ever hit (the virtual engine knows)
        self.fed: DualTimescaleScheduler | None = None  # the scheduler while a loop of it runs
        self.refresh_feed()
        self.open: dict[str, Journey] = {}  # arrived and not ended, by request id
        self.records: list[RequestRecord] = []
        self.ttft = TtftWindow(TTFT_WINDOW_S)
        self.num_arrived = self.num_completed = self.num_failed = 0
        self.num_prfaas = self.num_local = 0  # routed, by route, once per request
        self.is_stopping = False  # no retry once the run is ending

    @property
    def state(self) -> ControlState:
        return self.router.state

    def refresh_feed(self) -> None:
        """Feed the scheduler only while one of its loops is on (a knob may switch both off)."""
        self.fed = self.scheduler if self.scheduler is not None and self.state.is_scheduling else None

    @property
    def in_flight(self) -> int:
        return self.num_arrived - self.num_completed - self.num_failed

    # ---- the request path ----

    def arrive(self, spec: RequestSpec, now: float) -> Journey:
        self.num_arrived += 1
        if self.fed is not None:
            self.fed.observe_arrival(now, spec.input_len)
        journey = Journey(spec, now)
        self.open[spec.id] = journey
        return journey

    def route(self, journey: Journey, now: float) -> RouteDecision | None:
        """Start an attempt: choose its prefill node and its decode node and count it on both.
        None: no prefill or no decode node could take it, and it has ended failed."""
        journey.attempts += 1
        spec, board = journey.spec, self.board
        decision = self.router.decide(spec, board.loads, now)
        chosen, route = decision.node, decision.route
        if chosen is None or route is None:
            self._end(journey, now, None, FailReason.NO_PREFILL_NODE, decision.reason)
            return None
        slot = chosen.index if chosen.cluster is _REMOTE else board.num_remote + chosen.index
        journey.stage, journey.route = ROUTED, route._value_
        journey.prefill_slot, journey.prefill_node = slot, board.names[slot]
        journey.cached_len, journey.incremental_len = decision.cached_len, decision.incremental_len
        board.add_prefill(slot, decision.incremental_len)
        decode = board.pick_decode()
        if decode < 0:
            self._end(journey, now, None, FailReason.NO_DECODE_NODE, "no decode node is up")
            return None
        journey.decode_slot, journey.decode_node = decode, board.names[decode]
        board.add_decode(decode)
        if journey.attempts == 1:
            if route._value_ == "prfaas":
                self.num_prfaas += 1
            else:
                self.num_local += 1
        return decision

    def prefill_started(self, journey: Journey, now: float) -> None:
        journey.stage, journey.prefill_start_s = PREFILLING, now

    def prefill_finished(self, journey: Journey, now: float, service_s: float) -> None:
        """The prompt is prefilled (its KV may still be on the way): its blocks enter the prefix
        index and the scheduler hears the prefill's cost. `journey.cached_len` is what the node
        really reused (the live worker says; the virtual engine takes the router's)."""
        if journey.stage > PREFILLING:
            return  # reported twice: the first report counted
        journey.stage, journey.prefill_end_s = TRANSFERRING, now
        spec, slot = journey.spec, journey.prefill_slot
        self.board.end_prefill(slot, journey.incremental_len)
        if self.use_index:
            full_blocks = min(spec.input_len // self.block_tokens, len(spec.block_hashes))
            if full_blocks:
                self.index.insert(self.board.ids[slot], spec.block_hashes[:full_blocks], now)
        if self.fed is not None:
            cluster = _REMOTE if slot < self.board.num_remote else _LOCAL
            self.fed.observe_prefill(cluster, spec.input_len - journey.cached_len, service_s, now)

    def kv_arrived(self, journey: Journey, now: float) -> int:
        """The KV is at the decode side: the decode slot to admit it on."""
        journey.stage, journey.transfer_end_s = DECODING, now
        return journey.decode_slot

    def first_token(self, journey: Journey, now: float) -> None:
        journey.first_token_s = now

    def completed(self, journey: Journey, now: float, tpot_s: float | None) -> RequestRecord | None:
        """The last token is out; None if the request had already ended (a late report)."""
        if journey.stage == ENDED:
            return None
        return self._end(journey, now, tpot_s, None, None)

    def late_transfer(self, journey: Journey, start_s: float, end_s: float) -> None:
        """The transfer times of a request that ended before its sender reported them (the live
        sender's DONE often comes after the decode side finished): filled into its record."""
        record = journey.record
        if record is None or record.transfer_end_s is not None:
            return
        for i in range(len(self.records) - 1, -1, -1):
            if self.records[i] is record:
                journey.record = self.records[i] = dataclasses.replace(
                    record, transfer_start_s=start_s, transfer_end_s=end_s)
                return

    # ---- failures ----

    def retry_or_fail(self, journey: Journey, reason: FailReason, detail: str, now: float) -> RouteDecision | None:
        """The attempt is lost (the engine has let go of its mechanics): route another attempt
        (dispatch it where the decision says) or, after MAX_ATTEMPTS or while stopping, end it
        failed with `reason` (None)."""
        if journey.stage == ENDED:
            return None
        if journey.attempts >= MAX_ATTEMPTS or self.is_stopping:
            self.fail(journey, reason, detail, now)
            return None
        self._release(journey)
        journey.reset()
        return self.route(journey, now)

    def fail(self, journey: Journey, reason: FailReason, detail: str, now: float) -> None:
        if journey.stage != ENDED:
            self._end(journey, now, None, reason, detail)

    def fail_open(self, reason: FailReason, detail: str, now: float) -> list[Journey]:
        """End every request still open (the run is over); returns them, for the engine to let go."""
        self.is_stopping = True
        ended = list(self.open.values())
        for journey in ended:
            self.fail(journey, reason, detail, now)
        return ended

    def _release(self, journey: Journey) -> None:
        """Take the attempt off the nodes that hold it."""
        board, stage = self.board, journey.stage
        if stage == ROUTED or stage == PREFILLING:
            board.end_prefill(journey.prefill_slot, journey.incremental_len)
        if journey.decode_slot >= 0:
            board.end_decode(journey.decode_slot)

    def _end(self, journey: Journey, now: float, tpot_s: float | None, reason: FailReason | None,
             detail: str | None) -> RequestRecord:
        self._release(journey)
        journey.stage = ENDED
        del self.open[journey.spec.id]
        spec, first, start, arrival = journey.spec, journey.first_token_s, journey.prefill_start_s, journey.arrival_s
        failed = reason is not None
        record = RequestRecord(
            id=spec.id, arrival_s=arrival, input_len=spec.input_len,
            cached_len=journey.cached_len, incremental_len=journey.incremental_len,
            route=journey.route, prefill_node=journey.prefill_node, decode_node=journey.decode_node,
            queue_s=None if start is None else start - arrival, prefill_start_s=start,
            prefill_end_s=journey.prefill_end_s, transfer_start_s=journey.transfer_start_s,
            transfer_end_s=journey.transfer_end_s, kv_bytes=journey.kv_bytes, first_token_s=first,
            ttft_s=None if first is None else first - arrival, tpot_s=None if failed else tpot_s,
            output_len=spec.output_len, finish_s=now, status=_FAILED if failed else _COMPLETED,
            fail_reason=None if reason is None else reason._value_, fail_detail=detail)
        self.records.append(record)
        journey.record = record
        if failed:
            self.num_failed += 1
        else:
            self.num_completed += 1
            if first is not None:
                self.ttft.add(now, first - arrival)
        return record

    # ---- nodes ----

    def held_by(self, slot: int) -> list[Journey]:
        """The open journeys that need the node at `slot`, whatever its role now: those it
        prefills until their KV has arrived (a node flipped to decode may still be sending KV it
        produced), and those placed on it to decode."""
        return [j for j in self.open.values()
                if (j.prefill_slot == slot and ROUTED <= j.stage <= TRANSFERRING) or j.decode_slot == slot]

    def node_down(self, slot: int) -> list[Journey]:
        """The node at `slot` is lost: it takes no work, its cached prefixes are gone, and the
        journeys it held are returned: let go of each, then `retry_or_fail` it."""
        board = self.board
        board.set_up(slot, False)
        if board.is_prefill[slot]:
            self.index.drop_node(board.ids[slot])
        return self.held_by(slot)

    def node_up(self, slot: int) -> None:
        self.board.set_up(slot, True)

    def request_flip(self, slot: int, role: Role) -> bool:
        """Drain-then-flip: the node takes no new work and flips once it holds nothing."""
        return self.board.request_flip(slot, role)

    def flipped(self, slot: int) -> None:
        """The engine carried a flip out: a prefill node's cached prefixes go with its old role."""
        board = self.board
        if board.is_prefill[slot]:
            self.index.drop_node(board.ids[slot])
        board.flipped(slot)

    def set_split(self, target: int) -> str:
        """Flip local nodes toward `target` prefill nodes (control.placement's rule), drained first."""
        board = self.board
        before = board.num_local_prefill_heading
        done = sum(self.request_flip(board.num_remote + index, role) for index, role in board.split_flips(target))
        return f"local prefill instances {before} -> {target} ({done} flips, drained first)"
