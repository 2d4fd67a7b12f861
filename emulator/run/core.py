"""The run core: every request's lifecycle and the operator's view of the nodes, written once for
both engines. Sans-I/O (h11's shape, or vLLM's EngineCore with the executors outside): the engine
feeds it the events of emulator.run.protocol, each with its own time, and carries out the actions
it answers with; it starts no process, opens no socket and reads no clock.

Flips, retries, first tokens, late and duplicate reports and the end of the run (emulator.run.ending)
are decided here only. Knobs, the timeline and the scheduler's ticks are in emulator.run.steering.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from emulator.control.control_state import ControlState
from emulator.control.prefix_cache import PrefixCacheIndex
from emulator.control.router import Router
from emulator.control.scheduler import DualTimescaleScheduler
from emulator.control.types import Cluster, FailReason, RequestSpec, RequestStatus, Role
from emulator.run import protocol as ev
from emulator.run.board import NodeBoard
from emulator.run.ending import EndPolicy
from emulator.run.journey import DECODING, ENDED, PREFILLING, ROUTED, TRANSFERRING, Journey
from emulator.run.protocol import NOTHING, Action, Actions, Dispatch, Ended, SendDecode
from emulator.run.ttft_window import TtftWindow
from emulator.telemetry.records import RequestRecord

MAX_ATTEMPTS: Final = 3  # a request whose node was lost or whose transfer failed is tried this often
TTFT_WINDOW_S: Final = 30.0
_COMPLETED: Final = RequestStatus.COMPLETED.value
_FAILED: Final = RequestStatus.FAILED.value
_REMOTE: Final = Cluster.REMOTE  # bound once: Enum class attributes are slow (3.11)
_LOCAL: Final = Cluster.LOCAL
_STAGES: Final = ("arrived", "routed", "prefilling", "transferring", "decoding", "ended")


class RunCore:
    """One run's requests and nodes. `records` holds each request's one ending, in order.
    `publishes`: answer each step of a request with a Publish (the live engine's feed).
    `by_id`: index every attempt by its id for `handle` (the live engine's workers report by wire
    id); the virtual engine hands the journey itself and keeps no ended journey alive."""

    def __init__(self, router: Router, index: PrefixCacheIndex, scheduler: DualTimescaleScheduler | None,
                 board: NodeBoard, *, block_tokens: int, ending: EndPolicy, use_index: bool = True,
                 publishes: bool = False, by_id: bool = True) -> None:
        self.router, self.index, self.scheduler, self.board = router, index, scheduler, board
        self.block_tokens, self.ending = block_tokens, ending
        self.use_index = use_index  # False only when no lookup can ever hit (the virtual engine knows)
        self.publishes, self.by_id = publishes, by_id
        self.fed: DualTimescaleScheduler | None = None  # the scheduler while a loop of it runs
        self.refresh_feed()
        self.open: dict[str, Journey] = {}  # arrived and not ended, by request id
        self.by_attempt: dict[int, Journey] = {}  # every attempt's id -> its journey
        self.records: list[RequestRecord] = []
        self.ttft = TtftWindow(TTFT_WINDOW_S)
        self.num_arrived = self.num_completed = self.num_failed = 0
        self.num_prfaas = self.num_local = 0  # routed, by route, once per request
        self.is_stopping = self.arrivals_over = False  # stopping: no retry once the run is ending
        self.end_reason: str | None = None  # set once, with the EndRun action
        self._next_attempt = 1
        self.clock_s = 0.0  # the latest event time seen: the index, router and scheduler need it monotonic

    @property
    def state(self) -> ControlState:
        return self.router.state

    def refresh_feed(self) -> None:
        """Feed the scheduler only while one of its loops is on (a knob may switch both off)."""
        self.fed = self.scheduler if self.scheduler is not None and self.state.is_scheduling else None

    @property
    def in_flight(self) -> int:
        return self.num_arrived - self.num_completed - self.num_failed

    def _clock(self, t: float) -> float:
        """`t`, or the latest time seen when `t` is earlier: a worker's stamp (its prefill's end)
        may come after the gateway routed a later arrival; the record keeps the stamp itself."""
        if t > self.clock_s:
            self.clock_s = t
        return self.clock_s

    def handle(self, event: ev.Event) -> Actions:
        """One event of emulator.run.protocol, whatever its kind (the methods below, by attempt id)."""
        if isinstance(event, ev.Arrive):
            return self.arrive(event.spec, event.t)
        if isinstance(event, ev.NodeLost):
            return self.node_lost(event.slot, event.t, event.why)
        if isinstance(event, ev.NodeBack):
            return self.node_back(event.slot)
        if isinstance(event, ev.Flipped):
            return self.flipped(event.slot)
        if isinstance(event, ev.ArrivalsOver):
            return self.end_arrivals(event.t)
        if isinstance(event, ev.DrainOver):
            return self.drain_over(event.t)
        if isinstance(event, ev.Stop):
            return self.stop(event.reason, event.detail, event.t)
        journey = self.by_attempt.get(event.attempt)
        if journey is None:
            raise ev.IllegalEvent(f"{type(event).__name__}: attempt {event.attempt} was never started in this run")
        if isinstance(event, ev.PrefillStarted):
            return self.prefill_started(journey, event.attempt, event.t)
        if isinstance(event, ev.PrefillDone):
            return self.prefill_done(journey, event.attempt, event.t, event.service_s, event.cached_len,
                                     event.kv_bytes)
        if isinstance(event, ev.TransferDone):
            return self.transfer_done(journey, event.attempt, event.t_start, event.t_end)
        if isinstance(event, ev.FirstToken):
            return self.first_token(journey, event.attempt, event.t)
        if isinstance(event, ev.Finished):
            return self.finished(journey, event.attempt, event.t, event.tpot_s)
        return self.attempt_failed(journey, event.attempt, event.t, event.reason, event.detail, event.transfer)

    # ---- the request path ----

    def arrive(self, spec: RequestSpec, t: float) -> Actions:
        """Admit and route a request: Dispatch its first attempt, or Ended (nothing can take it)."""
        self.num_arrived += 1
        if self.fed is not None:
            self.fed.observe_arrival(self._clock(t), spec.input_len)
        journey = Journey(spec, t)
        self.open[spec.id] = journey
        acts: list[Action] = [ev.Publish(journey, "arrived", detail={"input_len": spec.input_len})] \
            if self.publishes else []
        self._route(journey, t, acts)
        return acts

    def _route(self, journey: Journey, t: float, acts: list[Action]) -> None:
        """Start an attempt: choose its prefill node and its decode node and count it on both."""
        journey.attempts += 1
        journey.attempt_id, self._next_attempt = self._next_attempt, self._next_attempt + 1
        if self.by_id:
            self.by_attempt[journey.attempt_id] = journey
        spec, board = journey.spec, self.board
        decision = self.router.decide(spec, board.loads, self._clock(t))
        chosen, route = decision.node, decision.route
        if chosen is None or route is None:
            self._end(journey, t, None, FailReason.NO_PREFILL_NODE, decision.reason, acts)
            return
        slot = chosen.index if chosen.cluster is _REMOTE else board.num_remote + chosen.index
        journey.stage, journey.route = ROUTED, route._value_
        journey.prefill_slot, journey.prefill_node = slot, board.names[slot]
        journey.cached_len, journey.incremental_len = decision.cached_len, decision.incremental_len
        journey.prefill_work_s = work_s = self.router.prefill_s(chosen.cluster, decision.incremental_len)
        board.add_prefill(slot, decision.incremental_len, work_s)
        decode = board.pick_decode()
        if decode < 0:
            self._end(journey, t, None, FailReason.NO_DECODE_NODE, "no decode node is up", acts)
            return
        journey.decode_slot, journey.decode_node = decode, board.names[decode]
        board.add_decode(decode)
        if journey.attempts == 1:
            if route._value_ == "prfaas":
                self.num_prfaas += 1
            else:
                self.num_local += 1
        if self.publishes:
            acts.append(ev.Publish(journey, "routed", node=journey.prefill_node, reason=decision.reason))
        acts.append(Dispatch(journey, decision))

    def _current(self, journey: Journey, attempt: int) -> bool:
        """Whether a report is about the request's current attempt (else it is late: no action)."""
        return journey.attempt_id == attempt and journey.stage != ENDED

    def prefill_started(self, journey: Journey, attempt: int, t: float) -> Actions:
        if not self._current(journey, attempt) or journey.stage > ROUTED:
            return NOTHING  # late, or reported twice
        journey.stage, journey.prefill_start_s = PREFILLING, t
        self.board.start_prefill(journey.prefill_slot, t, journey.prefill_work_s)
        return (ev.Publish(journey, "prefill_start", node=journey.prefill_node),) if self.publishes else NOTHING

    def prefill_done(self, journey: Journey, attempt: int, t: float, service_s: float, cached_len: int,
                     kv_bytes: int) -> Actions:
        """The prompt is prefilled (its KV may still be on the way): its blocks enter the prefix
        index, the scheduler hears the prefill's cost, and the decode node is told to take it."""
        if not self._current(journey, attempt) or journey.stage > PREFILLING:
            return NOTHING
        if journey.stage < PREFILLING:
            raise ev.IllegalEvent(_illegal("prefill done", journey, "before its prefill started"))
        journey.stage, journey.prefill_end_s = TRANSFERRING, t
        journey.cached_len, journey.kv_bytes = cached_len, kv_bytes
        spec, slot = journey.spec, journey.prefill_slot
        self.board.end_prefill(slot, journey.incremental_len, 0.0, is_started=True)
        if self.use_index:
            full_blocks = min(spec.input_len // self.block_tokens, len(spec.block_hashes))
            if full_blocks:
                self.index.insert(self.board.ids[slot], spec.block_hashes[:full_blocks], self._clock(t))
        if self.fed is not None:
            cluster = _REMOTE if slot < self.board.num_remote else _LOCAL
            self.fed.observe_prefill(cluster, spec.input_len - cached_len, service_s, self._clock(t))
        acts: list[Action] = [ev.Publish(journey, "prefill_end", node=journey.prefill_node,
                                      detail={"kv_bytes": kv_bytes, "cached_len": cached_len})] \
            if self.publishes else []
        acts.append(SendDecode(journey))
        if self.board.flips_due:
            self._flips(acts)
        return acts

    def transfer_done(self, journey: Journey, attempt: int, t_start: float, t_end: float) -> Actions:
        """The KV is at the decode node (the live sender's DONE may come after the decode side's
        first token, or after the request ended: its times are filled in all the same)."""
        if journey.attempt_id != attempt:
            return NOTHING
        if journey.stage == ENDED:
            self._late_transfer(journey, t_start, t_end)
            return NOTHING
        if journey.stage < TRANSFERRING:
            raise ev.IllegalEvent(_illegal("transfer done", journey, "before its prefill ended"))
        if journey.transfer_end_s is not None:
            return NOTHING
        journey.stage, journey.transfer_start_s, journey.transfer_end_s = DECODING, t_start, t_end
        return (ev.Publish(journey, "transfer_end", node=journey.prefill_node),) if self.publishes else NOTHING

    def first_token(self, journey: Journey, attempt: int, t: float) -> Actions:
        if not self._current(journey, attempt) or journey.first_token_s is not None:
            return NOTHING
        if journey.stage < TRANSFERRING:
            raise ev.IllegalEvent(_illegal("first token", journey, "before its prefill ended"))
        journey.stage, journey.first_token_s = DECODING, t  # the decode side has the KV
        return (ev.Publish(journey, "first_token", node=journey.decode_node,
                        detail={"ttft_s": t - journey.arrival_s}),) if self.publishes else NOTHING

    def finished(self, journey: Journey, attempt: int, t: float, tpot_s: float | None) -> Actions:
        """The last token is out: the request's one record."""
        if not self._current(journey, attempt):
            return NOTHING
        if journey.first_token_s is None:
            raise ev.IllegalEvent(_illegal("finished", journey, "before its first token"))
        acts: list[Action] = []
        self._end(journey, t, tpot_s, None, None, acts)
        return acts

    def _late_transfer(self, journey: Journey, start_s: float, end_s: float) -> None:
        record = journey.record
        if record is None or record.transfer_end_s is not None or record.prefill_end_s is None:
            return  # known already, or the attempt ended before its prefill did: no KV was sent
        for i in range(len(self.records) - 1, -1, -1):
            if self.records[i] is record:
                journey.record = self.records[i] = dataclasses.replace(
                    record, transfer_start_s=start_s, transfer_end_s=end_s)
                return

    # ---- failures ----

    def attempt_failed(self, journey: Journey, attempt: int, t: float, reason: FailReason, detail: str,
                       transfer: tuple[float, float] | None = None) -> Actions:
        """A node reported the attempt failed: Release it, then Dispatch another or end it failed."""
        if not self._current(journey, attempt):
            return NOTHING
        if transfer is not None:
            journey.transfer_start_s, journey.transfer_end_s = transfer
        acts: list[Action] = []
        self._retry_or_fail(journey, reason, detail, t, acts)
        self._flips(acts)
        return acts

    def _retry_or_fail(self, journey: Journey, reason: FailReason, detail: str, t: float,
                       acts: list[Action]) -> None:
        if journey.attempts >= MAX_ATTEMPTS or self.is_stopping:
            self._end(journey, t, None, reason, detail, acts)
            return
        self._release(journey, acts)
        journey.reset()
        self._route(journey, t, acts)

    def _release(self, journey: Journey, acts: list[Action]) -> None:
        """Take the attempt off the nodes that hold it, and ask the engine to let go of it."""
        board, stage = self.board, journey.stage
        if stage == ROUTED or stage == PREFILLING:
            board.end_prefill(journey.prefill_slot, journey.incremental_len, journey.prefill_work_s,
                              is_started=stage == PREFILLING)
        if journey.decode_slot >= 0:
            board.end_decode(journey.decode_slot)
        acts.append(ev.Release(journey, journey.attempt_id, journey.handle, stage, journey.prefill_slot,
                            journey.decode_slot))

    def _end(self, journey: Journey, t: float, tpot_s: float | None, reason: FailReason | None,
             detail: str | None, acts: list[Action]) -> None:
        failed = reason is not None
        if failed:
            self._release(journey, acts)
        else:  # completed: nothing is left in motion
            self.board.end_decode(journey.decode_slot)
        journey.stage = ENDED
        del self.open[journey.spec.id]
        spec, first, start, arrival = journey.spec, journey.first_token_s, journey.prefill_start_s, journey.arrival_s
        record = RequestRecord(
            id=spec.id, arrival_s=arrival, input_len=spec.input_len,
            cached_len=journey.cached_len, incremental_len=journey.incremental_len,
            route=journey.route, prefill_node=journey.prefill_node, decode_node=journey.decode_node,
            queue_s=None if start is None else start - arrival, prefill_start_s=start,
            prefill_end_s=journey.prefill_end_s, transfer_start_s=journey.transfer_start_s,
            transfer_end_s=journey.transfer_end_s, kv_bytes=journey.kv_bytes, first_token_s=first,
            ttft_s=None if first is None else first - arrival, tpot_s=None if failed else tpot_s,
            output_len=spec.output_len, finish_s=t, status=_FAILED if failed else _COMPLETED,
            fail_reason=None if reason is None else reason._value_, fail_detail=detail)
        self.records.append(record)
        journey.record = record
        if failed:
            self.num_failed += 1
        else:
            self.num_completed += 1
            if first is not None:
                self.ttft.add(self._clock(t), first - arrival)
        acts.append(Ended(journey, record))
        if self.board.flips_due:
            self._flips(acts)
        if self.arrivals_over and not self.open and not self.is_stopping:
            self._end_run(self.ending.words(0), acts)

    # ---- the end of the run (emulator.run.ending) ----

    def end_arrivals(self, t: float) -> Actions:
        """The duration is over: no more arrivals; the run ends once nothing is open."""
        self.arrivals_over = True
        acts: list[Action] = []
        if not self.open:
            self._end_run(self.ending.words(0), acts)
        return acts

    def drain_over(self, t: float) -> Actions:
        """The drain is over: what is still open fails `unfinished`, and the run ends."""
        num_open = len(self.open)
        acts = self._fail_open(FailReason.UNFINISHED, self.ending.unfinished_detail(), t)
        self._end_run(self.ending.words(num_open), acts)
        return acts

    def stop(self, reason: FailReason, detail: str, t: float) -> Actions:
        """The run is stopped (or failed) now: what is open fails `reason`."""
        acts = self._fail_open(reason, detail, t)
        self._end_run(f"run ended: {detail}", acts)
        return acts

    def _fail_open(self, reason: FailReason, detail: str, t: float) -> list[Action]:
        self.is_stopping = self.arrivals_over = True
        acts: list[Action] = []
        for journey in list(self.open.values()):
            self._end(journey, t, None, reason, detail, acts)
        return acts

    def _end_run(self, reason: str, acts: list[Action]) -> None:
        """EndRun, once: the first reason stands."""
        if self.end_reason is None:
            self.end_reason = reason
            acts.append(ev.EndRun(reason))

    # ---- nodes ----

    def held_by(self, slot: int) -> list[Journey]:
        """The open journeys that need the node at `slot`, whatever its role now: those it
        prefills until their KV has arrived (a node flipped to decode may still be sending KV it
        produced), and those placed on it to decode."""
        return [j for j in self.open.values()
                if (j.prefill_slot == slot and ROUTED <= j.stage <= TRANSFERRING) or j.decode_slot == slot]

    def node_lost(self, slot: int, t: float, why: str) -> Actions:
        """The node at `slot` is lost: it takes no work, its cached prefixes are gone, and each
        journey it held is Released and retried elsewhere or ended failed."""
        board = self.board
        if not board.is_up[slot]:
            return NOTHING
        board.set_up(slot, False)
        if board.is_prefill[slot]:
            self.index.drop_node(board.ids[slot])
        acts: list[Action] = []
        detail = f"worker lost: {board.names[slot]} ({why})"
        for journey in self.held_by(slot):
            self._retry_or_fail(journey, FailReason.WORKER_LOST, detail, t, acts)
        self._flips(acts)
        return acts

    def node_back(self, slot: int) -> Actions:
        self.board.set_up(slot, True)
        return NOTHING

    def request_flip(self, slot: int, role: Role) -> Actions:
        """Drain-then-flip: the node takes no new work and flips once it holds nothing (StartFlip)."""
        acts: list[Action] = []
        if self.board.request_flip(slot, role):
            self._flips(acts)
        return acts

    def flipped(self, slot: int) -> Actions:
        """The engine carried a flip out: a prefill node's cached prefixes go with its old role."""
        board = self.board
        if not board.is_draining[slot]:
            raise ev.IllegalEvent(f"flipped: {board.names[slot]} was not asked to flip")
        if board.is_prefill[slot]:
            self.index.drop_node(board.ids[slot])
        board.flipped(slot)
        return NOTHING

    def set_split(self, target: int) -> tuple[str, Actions]:
        """Flip local nodes toward `target` prefill nodes (control.placement's rule), drained first."""
        board = self.board
        before = board.num_local_prefill_heading
        done = sum(board.request_flip(board.num_remote + index, role) for index, role in board.split_flips(target))
        acts: list[Action] = []
        self._flips(acts)
        return f"local prefill instances {before} -> {target} ({done} flips, drained first)", acts

    def _flips(self, acts: list[Action]) -> None:
        """A StartFlip for each draining node that holds nothing now."""
        board = self.board
        for slot in board.take_flips():
            acts.append(ev.StartFlip(slot, Role.DECODE if board.is_prefill[slot] else Role.PREFILL))


def _illegal(what: str, journey: Journey, why: str) -> str:
    return (f"{what} for request {journey.spec.id} (attempt {journey.attempt_id}) {why}: it is "
            f"{_STAGES[journey.stage]}; the report is refused")
