"""Reports the run core must not take at face value, and the end of the run (emulator.run.ending),
through `RunCore.handle` and the actions it answers with: an event the request's stage cannot take
is refused with IllegalEvent and changes nothing; a late report (an attempt given up on, a request
that ended) and a duplicate answer nothing; the KV sender's DONE after the end fills the record in;
arrivals over, the drain over and a stop end what is open and then the run (EndRun), once."""

from __future__ import annotations

from typing import Any

import pytest

from emulator.control.types import FailReason
from emulator.run.core import RunCore
from emulator.run.journey import Journey, Stage
from emulator.run.protocol import (
    ArrivalsOver,
    AttemptFailed,
    DrainOver,
    EndRun,
    Event,
    Finished,
    FirstToken,
    IllegalEvent,
    NodeLost,
    PrefillDone,
    PrefillStarted,
    Stop,
    TransferDone,
)
from tests.emulator.run.core_case import (
    DECODE_A,
    DECODE_B,
    IDLE_LOADS,
    LOCAL_PREFILL,
    LONG,
    NOTHING_HELD,
    REMOTE,
    SHORT,
    advance,
    complete,
    held,
    loads,
    make_core,
    shown,
    start,
)

STOPPED = "stopped by the operator"


def snapshot(core: RunCore, journey: Journey) -> tuple[Any, ...]:
    """All a report could change: the journey's current attempt, the records, the board, the counts."""
    return (journey.stage, journey.attempt_id, journey.attempts, journey.prefill_start_s, journey.prefill_end_s,
            journey.transfer_start_s, journey.transfer_end_s, journey.first_token_s, journey.kv_bytes,
            journey.cached_len, journey.record, list(core.records), held(core), loads(core), dict(core.open),
            core.num_completed, core.num_failed, len(core.ttft), list(core.index.nodes()), core.end_reason)


def every_report(attempt: int, t: float) -> list[Event]:
    return [PrefillStarted(attempt, t), PrefillDone(attempt, t, 0.1, 0, 1024), TransferDone(attempt, t, t),
            FirstToken(attempt, t), Finished(attempt, t, 0.1),
            AttemptFailed(attempt, t, FailReason.DECODE_FAILED, "decode worker error")]


# ---- refused: the stage cannot take the event ----


def refused(name: str, stage: Stage, event: Event, words: str):  # noqa: ANN201  (a pytest.param)
    return pytest.param(stage, event, words, id=name)


ILLEGAL = [
    refused("prefill-done-before-started", Stage.ROUTED, PrefillDone(1, 1.0, 0.4, 0, 1024),
            "prefill done for request r1 (attempt 1) before its prefill started: it is routed"),
    refused("transfer-done-before-prefill-done", Stage.PREFILLING, TransferDone(1, 1.0, 1.1),
            "transfer done for request r1 (attempt 1) before its prefill ended: it is prefilling"),
    refused("first-token-before-prefill-done", Stage.PREFILLING, FirstToken(1, 1.0),
            "first token for request r1 (attempt 1) before its prefill ended: it is prefilling"),
    refused("finished-before-first-token", Stage.DECODING, Finished(1, 1.0, 0.1),
            "finished for request r1 (attempt 1) before its first token: it is decoding"),
    refused("finished-while-transferring", Stage.TRANSFERRING, Finished(1, 1.0, 0.1),
            "finished for request r1 (attempt 1) before its first token: it is transferring"),
    refused("attempt-never-started", Stage.DECODING, Finished(99, 1.0, 0.1),
            "Finished: attempt 99 was never started in this run"),
    refused("attempt-never-started-prefill", Stage.ROUTED, PrefillStarted(2, 1.0),
            "PrefillStarted: attempt 2 was never started in this run"),
]


@pytest.mark.parametrize(("stage", "event", "words"), ILLEGAL)
def test_an_event_the_stage_cannot_take_is_refused_and_changes_nothing(stage: Stage, event: Event,
                                                                        words: str) -> None:
    core = make_core()
    journey = start(core, "r1", SHORT, 0.0)
    advance(core, journey, stage, 0.5)
    before = snapshot(core, journey)
    with pytest.raises(IllegalEvent) as err:
        core.handle(event)
    assert str(err.value).startswith(words) and "\n" not in str(err.value)
    assert snapshot(core, journey) == before
    assert complete(core, journey, 2.0, 3.0) == [("ended", "r1", "completed", None)]  # it goes on


# ---- late and duplicate reports answer nothing ----


def test_a_late_report_from_an_attempt_given_up_on_answers_nothing() -> None:
    core = make_core()
    journey = start(core, "r1", SHORT, 0.0)
    advance(core, journey, Stage.PREFILLING, 0.1)
    acts = core.handle(AttemptFailed(1, 0.5, FailReason.TRANSFER_FAILED, "connection reset"))
    assert shown(acts) == [("release", "r1", 1, Stage.PREFILLING, LOCAL_PREFILL, DECODE_A),
                           ("dispatch", "r1", 2, LOCAL_PREFILL, DECODE_A)]
    before = snapshot(core, journey)
    for event in every_report(1, 1.0):
        assert shown(core.handle(event)) == [], event
    assert snapshot(core, journey) == before
    assert complete(core, journey, 2.0, 3.0) == [("ended", "r1", "completed", None)]
    assert core.records[0].prefill_start_s == 2.0  # the current attempt's times only


def test_reports_after_a_request_ended_answer_nothing() -> None:
    core = make_core()
    assert shown(core.node_lost(DECODE_B, 0.0, "killed")) == []
    failed = start(core, "failed", SHORT, 0.0)
    advance(core, failed, Stage.DECODING, 0.5)
    assert shown(core.handle(FirstToken(1, 0.6))) == []
    acts = core.handle(NodeLost(DECODE_A, 1.0, "killed"))  # its retry finds no decode node
    assert shown(acts) == [("release", "failed", 1, Stage.DECODING, LOCAL_PREFILL, DECODE_A),
                           ("release", "failed", 2, Stage.ROUTED, LOCAL_PREFILL, -1),
                           ("ended", "failed", "failed", "no_decode_node")]
    before = snapshot(core, failed)
    for event in every_report(1, 2.0) + every_report(2, 2.0):
        if not isinstance(event, TransferDone):  # the sender's DONE: the tests below
            assert shown(core.handle(event)) == [], event
    assert snapshot(core, failed) == before
    [record] = core.records
    assert (record.fail_reason, record.ttft_s, record.tpot_s, record.finish_s) == ("no_decode_node", None, None, 1.0)


def test_a_completed_request_takes_no_late_failure() -> None:
    core = make_core()
    journey = start(core, "r1", SHORT, 0.0)
    complete(core, journey, 0.5, 1.0)
    before = snapshot(core, journey)
    assert shown(core.handle(AttemptFailed(1, 2.0, FailReason.WORKER_LOST, "worker lost"))) == []
    assert shown(core.handle(Finished(1, 2.0, 0.2))) == []  # reported twice: one record
    assert snapshot(core, journey) == before and core.records[0].status == "completed"


def test_duplicate_reports_answer_nothing_and_the_first_stands() -> None:
    core = make_core()
    journey = start(core, "r1", SHORT, 0.0)
    assert shown(core.handle(PrefillStarted(1, 0.1))) == []
    assert shown(core.handle(PrefillStarted(1, 0.2))) == [] and journey.prefill_start_s == 0.1
    assert shown(core.handle(PrefillDone(1, 0.4, 0.3, 0, 1024))) == [("send_decode", "r1", 1)]
    assert shown(core.handle(PrefillDone(1, 0.5, 0.4, 0, 2048))) == []
    assert (journey.stage, journey.prefill_end_s, journey.kv_bytes) == (Stage.TRANSFERRING, 0.4, 1024)
    assert held(core) == ([0, 0, 0, 0], [0, 0, 1, 0]) and loads(core) == IDLE_LOADS
    assert shown(core.handle(TransferDone(1, 0.4, 0.5))) == []
    assert shown(core.handle(TransferDone(1, 0.4, 0.7))) == [] and journey.transfer_end_s == 0.5
    assert shown(core.handle(PrefillStarted(1, 0.6))) == [] and journey.stage == Stage.DECODING
    assert shown(core.handle(FirstToken(1, 0.6))) == []
    assert shown(core.handle(FirstToken(1, 0.8))) == [] and journey.first_token_s == 0.6
    assert shown(core.handle(Finished(1, 1.0, 0.1))) == [("ended", "r1", "completed", None)]
    [record] = core.records
    assert (record.prefill_start_s, record.prefill_end_s, record.transfer_end_s, record.ttft_s) == (0.1, 0.4, 0.5, 0.6)


def test_the_senders_done_after_the_end_fills_the_records_transfer_times_once() -> None:
    core = make_core()
    done = start(core, "done", LONG, 0.0)
    advance(core, done, Stage.TRANSFERRING, 0.5)
    assert shown(core.handle(FirstToken(1, 0.8))) == []  # the decode side has the KV before the DONE
    assert shown(core.handle(Finished(1, 1.0, 0.1))) == [("ended", "done", "completed", None)]
    assert core.records[0].transfer_end_s is None
    assert shown(core.handle(TransferDone(1, 0.5, 0.75))) == []
    [record] = core.records
    assert done.record is record and (record.transfer_start_s, record.transfer_end_s) == (0.5, 0.75)
    assert (record.status, record.finish_s, record.ttft_s) == ("completed", 1.0, 0.8)
    assert shown(core.handle(TransferDone(1, 0.6, 2.0))) == [] and core.records == [record]  # the first stands


def test_the_senders_done_after_a_stop_fills_the_failed_record() -> None:
    core = make_core()
    journey = start(core, "r1", LONG, 0.0)
    advance(core, journey, Stage.TRANSFERRING, 0.6)
    core.handle(Stop(0.8, FailReason.INTERRUPTED, STOPPED))  # before the sender's DONE
    assert core.records[0].transfer_end_s is None
    assert shown(core.handle(TransferDone(1, 0.6, 0.95))) == []
    [record] = core.records
    assert journey.record is record and (record.transfer_start_s, record.transfer_end_s) == (0.6, 0.95)
    assert (record.status, record.fail_reason, record.finish_s) == ("failed", "interrupted", 0.8)


def test_a_senders_done_for_an_attempt_that_never_prefilled_changes_no_record() -> None:
    """Only an attempt whose prefill ended has KV to send: a DONE reported for one that ended
    before (here never dispatched: its retry found no decode node) is a late report like the
    rest, and must not write a transfer into a record that has no prefill end."""
    core = make_core()
    core.node_lost(DECODE_B, 0.0, "killed")
    journey = start(core, "r1", SHORT, 0.0)
    advance(core, journey, Stage.TRANSFERRING, 0.5)
    core.node_lost(DECODE_A, 1.0, "killed")  # attempt 2 ends at once: no decode node is up
    [record] = core.records
    assert (journey.attempt_id, record.fail_reason, record.prefill_end_s) == (2, "no_decode_node", None)
    assert shown(core.handle(TransferDone(1, 0.5, 0.9))) == []  # the attempt given up on: ignored
    assert core.records == [record]
    assert shown(core.handle(TransferDone(2, 1.5, 2.0))) == []
    assert core.records == [record] and journey.record is record  # fails: times written in


# ---- the end of the run ----


def test_arrivals_over_with_nothing_open_ends_the_run_at_once() -> None:
    core = make_core()
    assert shown(core.handle(ArrivalsOver(10.0))) == [EndRun("run ended")]
    assert core.end_reason == "run ended"
    assert shown(core.handle(ArrivalsOver(10.0))) == [] and shown(core.handle(DrainOver(15.0))) == []


def test_the_last_request_ending_after_arrivals_over_ends_the_run() -> None:
    core = make_core()
    first, last = start(core, "first", SHORT, 0.0), start(core, "last", LONG, 0.5)
    assert shown(core.end_arrivals(10.0)) == [] and core.end_reason is None
    assert complete(core, first, 10.5, 11.0) == [("ended", "first", "completed", None)]
    acts = core.attempt_failed(last, 2, 11.5, FailReason.TRANSFER_FAILED, "reset")  # still retried
    assert shown(acts) == [("release", "last", 2, Stage.ROUTED, REMOTE, DECODE_B),
                           ("dispatch", "last", 3, REMOTE, DECODE_A)]  # the one first left
    assert complete(core, last, 12.0, 12.5) == [("ended", "last", "completed", None), EndRun("run ended")]
    assert core.end_reason == "run ended" and core.in_flight == 0


def test_the_drain_over_fails_what_is_open_unfinished_and_ends_the_run() -> None:
    core = make_core()
    start(core, "routed", LONG, 1.0)
    moving = start(core, "moving", SHORT, 1.0)
    advance(core, moving, Stage.TRANSFERRING, 1.5)
    assert shown(core.handle(ArrivalsOver(10.0))) == []
    acts = core.handle(DrainOver(15.0))
    detail = core.ending.unfinished_detail()
    assert detail == "still open 5 s after the scenario's 10 s (the run's drain)"
    words = core.ending.words(2)
    assert words == "run ended: 2 requests still open 5 s after the scenario's 10 s failed unfinished"
    assert shown(acts) == [("release", "routed", 1, Stage.ROUTED, REMOTE, DECODE_A),
                           ("ended", "routed", "failed", "unfinished"),
                           ("release", "moving", 2, Stage.TRANSFERRING, LOCAL_PREFILL, DECODE_B),
                           ("ended", "moving", "failed", "unfinished"), EndRun(words)]
    assert [(r.id, r.fail_detail, r.finish_s) for r in core.records] == [("routed", detail, 15.0),
                                                                        ("moving", detail, 15.0)]
    assert (core.end_reason, core.is_stopping, core.open) == (words, True, {})
    assert held(core) == NOTHING_HELD and loads(core) == IDLE_LOADS


def test_a_stop_fails_what_is_open_with_its_reason_and_retries_nothing() -> None:
    core = make_core()
    done = start(core, "done", SHORT, 0.0)
    complete(core, done, 0.5, 1.0)
    routed, moving = start(core, "routed", LONG, 1.0), start(core, "moving", SHORT, 1.0)
    advance(core, moving, Stage.DECODING, 1.5)
    acts = core.handle(Stop(3.0, FailReason.INTERRUPTED, STOPPED))
    assert shown(acts) == [("release", "routed", 2, Stage.ROUTED, REMOTE, DECODE_A),
                           ("ended", "routed", "failed", "interrupted"),
                           ("release", "moving", 3, Stage.DECODING, LOCAL_PREFILL, DECODE_B),
                           ("ended", "moving", "failed", "interrupted"), EndRun(f"run ended: {STOPPED}")]
    assert [(r.id, r.status, r.fail_reason, r.fail_detail) for r in core.records[1:]] == [
        ("routed", "failed", "interrupted", STOPPED), ("moving", "failed", "interrupted", STOPPED)]
    assert (routed.attempts, moving.attempts, core.num_completed, core.num_failed) == (1, 1, 1, 2)
    assert held(core) == NOTHING_HELD and loads(core) == IDLE_LOADS
    # what reports the stop still meets answers nothing, and the run ends once
    assert shown(core.handle(AttemptFailed(3, 3.5, FailReason.WORKER_LOST, "worker lost"))) == []
    assert shown(core.handle(NodeLost(DECODE_B, 3.5, "killed"))) == []
    assert shown(core.handle(Stop(4.0, FailReason.INTERRUPTED, "again"))) == []
    assert shown(core.handle(DrainOver(15.0))) == [] and core.end_reason == f"run ended: {STOPPED}"


def test_an_attempt_failing_while_the_run_stops_is_not_retried() -> None:
    """An arrival that races the stop (the live gateway's) is still routed, but once the run is
    stopping its failure ends it: no retry, and no second EndRun."""
    core = make_core()
    assert shown(core.stop(FailReason.INTERRUPTED, STOPPED, 1.0)) == [EndRun(f"run ended: {STOPPED}")]
    late = start(core, "late", SHORT, 1.1)
    acts = core.node_lost(LOCAL_PREFILL, 1.2, "killed")
    assert shown(acts) == [("release", "late", 1, Stage.ROUTED, LOCAL_PREFILL, DECODE_A),
                           ("ended", "late", "failed", "worker_lost")]
    assert late.attempts == 1 and held(core) == NOTHING_HELD


def test_a_workers_stamp_earlier_than_the_last_one_the_core_took_is_kept_in_the_record() -> None:
    """Live: two workers' prefills end 1 ms apart, and their reports cross on the way to the gateway;
    the prefix index refused the earlier time second and the run died (bench/live_overhead.py)."""
    core = make_core()
    remote, local = start(core, "r1", LONG, 1.0), start(core, "r2", SHORT, 1.0)
    core.handle(PrefillStarted(remote.attempt_id, 1.5))
    core.handle(PrefillStarted(local.attempt_id, 1.5))
    core.handle(PrefillDone(local.attempt_id, 2.45, 0.95, 0, 1024))
    acts = core.handle(PrefillDone(remote.attempt_id, 2.4, 0.9, 0, 4096))  # stamped earlier, heard later
    assert [type(a).__name__ for a in acts] == ["SendDecode"]
    assert (remote.prefill_end_s, local.prefill_end_s, core.clock_s) == (2.4, 2.45, 2.45)
    assert core.index.lookup(remote.spec.block_hashes).on_node(core.board.ids[REMOTE]) > 0
