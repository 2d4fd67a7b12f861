"""The gateway's request tracker: one ending per request, fresh wire ids per attempt, and transfer
times that arrive after the request ended still land in its record."""

from __future__ import annotations

from emulator.control.types import FailReason, RequestSpec
from emulator.live.tracker import Tracker

SPEC = RequestSpec(id="rq-000001", arrival_s=0.0, input_len=2048, output_len=4)


def test_a_request_ends_once_and_a_retry_gets_a_fresh_wire_id() -> None:
    tracker = Tracker()
    state = tracker.arrive(SPEC, now_s=1.0)
    first = tracker.new_attempt(state)
    second = tracker.new_attempt(state)
    assert first != second and tracker.get(first) is None and tracker.get(second) is state
    record = tracker.finish(state, now_s=3.0, fail_reason=FailReason.WORKER_LOST,
                            fail_detail="worker lost: remote-prefill-0")
    assert record is not None and record.status == "failed"
    assert (record.fail_reason, record.fail_detail) == ("worker_lost", "worker lost: remote-prefill-0")
    assert tracker.finish(state, now_s=4.0, tpot_s=0.1) is None  # a late completion cannot rewrite it
    assert tracker.records == [record] and tracker.get(second) is None


def test_transfer_times_that_arrive_after_completion_fill_the_record() -> None:
    tracker = Tracker()
    state = tracker.arrive(SPEC, now_s=0.5)
    rid = tracker.new_attempt(state)
    state.first_token_s = 1.5
    tracker.finish(state, now_s=2.0, tpot_s=0.05)
    assert tracker.records[0].transfer_end_s is None
    tracker.late_transfer(rid, 0.9, 2.1)
    assert (tracker.records[0].transfer_start_s, tracker.records[0].transfer_end_s) == (0.9, 2.1)
    assert tracker.records[0].ttft_s == 1.0 and tracker.records[0].status == "completed"
    tracker.late_transfer(rid, 5.0, 6.0)  # only the first report counts
    assert tracker.records[0].transfer_end_s == 2.1
