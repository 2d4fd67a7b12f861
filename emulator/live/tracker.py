"""Every request's life as the gateway sees it: attempts, timestamps, and its one terminal record.

A request is `completed` or `failed` exactly once; `finish` refuses a second ending, so a late
message from a worker that was already given up on cannot rewrite history. Times are seconds since
the run started. No I/O here: the gateway feeds it and publishes what it returns.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from emulator.control.router import RouteDecision
from emulator.control.types import FailReason, RequestSpec, RequestStatus
from emulator.telemetry.records import RequestRecord

MAX_ATTEMPTS = 3  # a request whose worker died or whose transfer failed is retried this many times


@dataclass(slots=True)
class RequestState:
    spec: RequestSpec
    arrival_s: float
    attempts: int = 0
    rid: int | None = None  # the current attempt's wire id (a retry gets a fresh one)
    decision: RouteDecision | None = None
    prefill_node: str | None = None
    decode_node: str | None = None
    cached_len: int = 0
    prefill_start_s: float | None = None
    prefill_end_s: float | None = None
    transfer_start_s: float | None = None
    transfer_end_s: float | None = None
    kv_bytes: int | None = None
    first_token: int | None = None
    first_token_s: float | None = None
    tokens: list[int] = field(default_factory=list)
    record: RequestRecord | None = None

    @property
    def is_done(self) -> bool:
        return self.record is not None

    @property
    def route(self) -> str | None:
        return None if self.decision is None or self.decision.route is None else self.decision.route.value

    def reset_attempt(self) -> None:
        """Forget what the failed attempt reached; arrival and attempts stay."""
        self.rid = self.decision = self.prefill_node = self.decode_node = None
        self.prefill_start_s = self.prefill_end_s = self.transfer_start_s = self.transfer_end_s = None
        self.kv_bytes = self.first_token = self.first_token_s = None
        self.cached_len = 0
        self.tokens = []


class Tracker:
    """Requests by id and by current wire id; the terminal records in the order they ended."""

    def __init__(self) -> None:
        self.by_id: dict[str, RequestState] = {}
        self.by_rid: dict[int, RequestState] = {}
        self.records: list[RequestRecord] = []
        self._ended_rids: dict[int, int] = {}  # wire id of an ended attempt -> index in records
        self._next_rid = 1

    def arrive(self, spec: RequestSpec, now_s: float) -> RequestState:
        state = self.by_id[spec.id] = RequestState(spec, now_s)
        return state

    def new_attempt(self, state: RequestState) -> int:
        if state.rid is not None:
            self.by_rid.pop(state.rid, None)
        state.reset_attempt()
        state.attempts += 1
        state.rid, self._next_rid = self._next_rid, self._next_rid + 1
        self.by_rid[state.rid] = state
        return state.rid

    def get(self, rid: int) -> RequestState | None:
        """The live request behind a wire id, or None for a stale or finished attempt."""
        state = self.by_rid.get(rid)
        return None if state is None or state.is_done else state

    @property
    def open(self) -> list[RequestState]:
        return [s for s in self.by_id.values() if not s.is_done]

    def finish(self, state: RequestState, now_s: float, tpot_s: float | None = None,
               fail_reason: FailReason | None = None, fail_detail: str | None = None) -> RequestRecord | None:
        """End a request once, failed when `fail_reason` is given (`fail_detail` in words); returns
        its record (None if it had already ended)."""
        if state.is_done:
            return None
        if state.rid is not None:
            self.by_rid.pop(state.rid, None)
            self._ended_rids[state.rid] = len(self.records)
        record = _record(state, now_s, tpot_s, fail_reason, fail_detail)
        state.record = record
        self.records.append(record)
        return record

    def late_transfer(self, rid: int, start_s: float, end_s: float) -> None:
        """Fill in the transfer times of a request that ended before its sender heard DONE."""
        i = self._ended_rids.get(rid)
        if i is not None and self.records[i].transfer_end_s is None:
            self.records[i] = dataclasses.replace(self.records[i], transfer_start_s=start_s, transfer_end_s=end_s)


def _record(state: RequestState, now_s: float, tpot_s: float | None, fail_reason: FailReason | None,
            fail_detail: str | None) -> RequestRecord:
    spec, failed = state.spec, fail_reason is not None
    first = state.first_token_s
    return RequestRecord(
        id=spec.id, arrival_s=state.arrival_s, input_len=spec.input_len, cached_len=state.cached_len,
        incremental_len=spec.input_len - state.cached_len, route=state.route,
        prefill_node=state.prefill_node, decode_node=state.decode_node,
        queue_s=None if state.prefill_start_s is None else state.prefill_start_s - state.arrival_s,
        prefill_start_s=state.prefill_start_s, prefill_end_s=state.prefill_end_s,
        transfer_start_s=state.transfer_start_s, transfer_end_s=state.transfer_end_s,
        kv_bytes=state.kv_bytes, first_token_s=first,
        ttft_s=None if first is None else first - state.arrival_s,
        tpot_s=None if failed else tpot_s, output_len=spec.output_len,
        finish_s=now_s, status=(RequestStatus.FAILED if failed else RequestStatus.COMPLETED).value,
        fail_reason=None if fail_reason is None else fail_reason.value,
        fail_detail=fail_detail if failed else None,
    )
