"""The run core's request path, driven by scripted events with explicit times: routing, decode
placement (with the routing, on both engines), the one record per
request, retries, the failures the core itself decides, and the TTFT window. No engine, no clock.
Node loss and role flips: test_core_nodes.py."""

from __future__ import annotations

from emulator.control.types import FailReason, NodeId, Route
from emulator.run.core import MAX_ATTEMPTS
from emulator.run.journey import Stage
from emulator.telemetry.records import RequestRecord
from tests.emulator.run.core_case import (
    BLOCK_TOKENS,
    DECODE_A,
    DECODE_B,
    LOCAL_PREFILL,
    LONG,
    REMOTE,
    SHORT,
    held,
    loads,
    make_core,
    spec,
    start,
)

IDLE_LOADS = [("remote-prefill-0", 0, 0, True), ("local-prefill-0", 0, 0, True)]
NOTHING_HELD = ([0, 0, 0, 0], [0, 0, 0, 0])


def test_a_remote_request_ends_in_one_completed_record() -> None:
    core = make_core()
    journey = core.arrive(spec("r1", LONG), 1.0)
    assert core.open == {"r1": journey} and (core.num_arrived, core.in_flight) == (1, 1)
    decision = core.route(journey, 1.0)
    assert decision is not None and decision.route is Route.PRFAAS
    assert (journey.stage, journey.attempts, journey.route) == (Stage.ROUTED, 1, "prfaas")
    assert (journey.prefill_slot, journey.prefill_node) == (REMOTE, "remote-prefill-0")
    assert loads(core) == [("remote-prefill-0", LONG, 1, True), ("local-prefill-0", 0, 0, True)]
    assert (journey.decode_slot, journey.decode_node) == (DECODE_A, "local-decode-1")
    assert held(core) == ([1, 0, 0, 0], [0, 0, 1, 0])

    core.prefill_started(journey, 1.5)
    journey.transfer_start_s = 1.5  # the engine's own stamp: its KV starts to flow
    assert journey.stage == Stage.PREFILLING
    core.prefill_finished(journey, 2.5, 1.0)
    assert journey.stage == Stage.TRANSFERRING
    assert loads(core) == IDLE_LOADS and held(core) == ([0, 0, 0, 0], [0, 0, 1, 0])
    full_blocks = LONG // BLOCK_TOKENS  # the prompt's full blocks are in the prefix index now
    lookup = core.index.lookup(spec("r1", LONG).block_hashes)
    assert lookup.on_node(NodeId.parse("remote-prefill-0")) == full_blocks * BLOCK_TOKENS

    journey.kv_bytes = 4096
    assert core.kv_arrived(journey, 3.0) == DECODE_A  # placed when routed: that node
    assert journey.stage == Stage.DECODING
    core.first_token(journey, 3.25)
    record = core.completed(journey, 4.0, 0.05)
    assert record == RequestRecord(
        id="r1", arrival_s=1.0, input_len=LONG, cached_len=0, incremental_len=LONG, route="prfaas",
        prefill_node="remote-prefill-0", decode_node="local-decode-1", queue_s=0.5, prefill_start_s=1.5,
        prefill_end_s=2.5, transfer_start_s=1.5, transfer_end_s=3.0, kv_bytes=4096, first_token_s=3.25,
        ttft_s=2.25, tpot_s=0.05, output_len=5, finish_s=4.0, status="completed")
    assert core.records == [record] and core.open == {} and journey.is_done
    assert (core.num_completed, core.num_failed, core.in_flight) == (1, 0, 0)
    assert (core.num_prfaas, core.num_local) == (1, 0)
    assert held(core) == NOTHING_HELD
    assert core.ttft.sorted_values(4.0) == [2.25]


def test_a_local_request_ends_in_one_completed_record() -> None:
    core = make_core()
    journey = start(core, "r1", SHORT, 0.0)
    assert (journey.route, journey.prefill_slot, journey.prefill_node) == ("local", LOCAL_PREFILL, "local-prefill-0")
    assert loads(core) == [("remote-prefill-0", 0, 0, True), ("local-prefill-0", SHORT, 1, True)]
    assert held(core) == ([0, 1, 0, 0], [0, 0, 1, 0]) and journey.decode_node == "local-decode-1"
    core.prefill_started(journey, 0.0)
    core.prefill_finished(journey, 0.4, 0.4)
    assert held(core) == ([0, 0, 0, 0], [0, 0, 1, 0])
    assert core.kv_arrived(journey, 0.5) == DECODE_A
    core.first_token(journey, 0.6)
    record = core.completed(journey, 0.9, 0.075)
    assert record is not None
    assert (record.route, record.prefill_node, record.decode_node) == ("local", "local-prefill-0", "local-decode-1")
    assert (record.queue_s, record.ttft_s, record.tpot_s, record.finish_s) == (0.0, 0.6, 0.075, 0.9)
    assert (record.status, record.fail_reason, record.fail_detail) == ("completed", None, None)
    assert (core.num_prfaas, core.num_local, core.num_completed) == (0, 1, 1)
    assert held(core) == NOTHING_HELD


def test_decodes_go_to_the_up_node_holding_fewest_the_lowest_on_ties() -> None:
    core = make_core()
    first, second = start(core, "a", SHORT, 0.0), start(core, "b", SHORT, 0.0)
    assert (first.decode_slot, second.decode_slot) == (DECODE_A, DECODE_B)
    assert start(core, "c", SHORT, 0.0).decode_slot == DECODE_A
    core.fail(first, FailReason.DECODE_FAILED, "decode worker error", 1.0)
    core.fail(second, FailReason.DECODE_FAILED, "decode worker error", 1.0)
    assert held(core)[1] == [0, 0, 1, 0]
    assert start(core, "d", SHORT, 1.0).decode_slot == DECODE_B


def test_the_ttft_window_holds_the_completions_of_the_last_30_seconds() -> None:
    core = make_core()
    for rid, arrival, first, end in (("a", 0.0, 1.0, 2.0), ("b", 1.0, 4.0, 5.0), ("c", 2.0, 2.5, 20.0)):
        journey = core.arrive(spec(rid, SHORT), arrival)
        core.route(journey, arrival)
        core.first_token(journey, first)
        core.completed(journey, end, 0.1)
    assert core.ttft.sorted_values(20.0) == [0.5, 1.0, 3.0]
    assert core.ttft.percentile(50, 20.0) == 1.0
    assert core.ttft.sorted_values(32.0) == [0.5, 3.0]  # a sample at t stays while now - 30 < t
    assert core.ttft.sorted_values(50.0) == []


def test_a_lost_attempt_is_routed_again_and_the_third_loss_ends_it_failed() -> None:
    core = make_core()
    journey = start(core, "r1", LONG, 0.0)
    core.prefill_started(journey, 0.1)
    journey.transfer_start_s = 0.1
    for attempt in range(2, MAX_ATTEMPTS + 1):
        decision = core.retry_or_fail(journey, FailReason.TRANSFER_FAILED, "connection reset", float(attempt))
        assert decision is not None and decision.route is Route.PRFAAS
        assert (journey.attempts, journey.stage, journey.decode_slot) == (attempt, Stage.ROUTED, DECODE_A)
        assert (journey.prefill_start_s, journey.transfer_start_s) == (None, None)  # the old attempt's
        assert held(core) == ([1, 0, 0, 0], [0, 0, 1, 0])  # the new attempt's only
    assert core.retry_or_fail(journey, FailReason.TRANSFER_FAILED, "connection reset", 9.0) is None
    [record] = core.records
    assert (record.status, record.fail_reason, record.fail_detail) == ("failed", "transfer_failed", "connection reset")
    assert (record.arrival_s, record.finish_s, record.route, record.tpot_s) == (0.0, 9.0, "prfaas", None)
    assert (core.num_failed, core.num_completed, core.in_flight) == (1, 0, 0)
    assert (core.num_prfaas, core.num_local) == (1, 0)  # counted once per request, not per attempt
    assert held(core) == NOTHING_HELD and loads(core) == IDLE_LOADS


def test_no_retry_once_the_run_is_stopping() -> None:
    core = make_core()
    journey = start(core, "r1", SHORT, 0.0)
    core.is_stopping = True
    assert core.retry_or_fail(journey, FailReason.WORKER_LOST, "worker lost: local-prefill-0", 1.0) is None
    [record] = core.records
    assert (journey.attempts, record.fail_reason, record.fail_detail) == (
        1, "worker_lost", "worker lost: local-prefill-0")
    assert held(core) == NOTHING_HELD


def test_no_prefill_node_up_ends_the_request_no_prefill_node() -> None:
    core = make_core()
    for slot in (REMOTE, LOCAL_PREFILL):
        assert core.node_down(slot) == []
    assert all(not is_up for *_, is_up in loads(core))
    journey = core.arrive(spec("r1", SHORT), 2.0)
    assert core.route(journey, 2.0) is None
    [record] = core.records
    assert (record.status, record.fail_reason, record.route, record.prefill_node) == (
        "failed", "no_prefill_node", None, None)
    assert record.fail_detail is not None
    assert record.fail_detail.startswith("no prefill node is up (remote 0/1 up, local 0/1 up)")
    assert (journey.attempts, core.num_failed, core.num_prfaas + core.num_local) == (1, 1, 0)
    assert held(core) == NOTHING_HELD


def test_a_retry_that_finds_no_prefill_node_ends_no_prefill_node() -> None:
    core = make_core()
    journey = start(core, "r1", LONG, 0.0)
    core.node_down(LOCAL_PREFILL)
    assert core.node_down(REMOTE) == [journey]
    assert core.retry_or_fail(journey, FailReason.WORKER_LOST, "worker lost: remote-prefill-0", 1.0) is None
    [record] = core.records
    assert (journey.attempts, record.fail_reason) == (2, "no_prefill_node")
    assert held(core) == NOTHING_HELD


def test_no_decode_node_up_ends_the_request_no_decode_node() -> None:
    core = make_core()
    core.node_down(DECODE_A)
    core.node_down(DECODE_B)
    journey = core.arrive(spec("r1", LONG), 1.0)
    assert core.route(journey, 1.0) is None
    [record] = core.records
    assert (record.status, record.fail_reason, record.fail_detail) == (
        "failed", "no_decode_node", "no decode node is up")
    assert (record.route, record.prefill_node, record.decode_node) == ("prfaas", "remote-prefill-0", None)
    assert held(core) == NOTHING_HELD and loads(core) == IDLE_LOADS  # its prefill let go of


def test_a_late_completion_after_a_failure_changes_nothing() -> None:
    core = make_core()
    journey = start(core, "r1", SHORT, 0.0)
    core.first_token(journey, 0.5)
    core.fail(journey, FailReason.DECODE_FAILED, "decode worker error", 1.0)
    before = (list(core.records), held(core), core.num_completed, core.num_failed, len(core.ttft))
    assert core.completed(journey, 2.0, 0.1) is None
    core.fail(journey, FailReason.WORKER_LOST, "again", 2.0)
    assert core.retry_or_fail(journey, FailReason.WORKER_LOST, "again", 2.0) is None
    assert (list(core.records), held(core), core.num_completed, core.num_failed, len(core.ttft)) == before
    [record] = core.records
    assert (record.fail_reason, record.ttft_s, record.tpot_s, record.finish_s) == ("decode_failed", 0.5, None, 1.0)


def test_fail_open_ends_every_open_request_with_the_reason() -> None:
    core = make_core()
    done = start(core, "done", SHORT, 0.0)
    core.first_token(done, 0.5)
    core.completed(done, 1.0, 0.1)
    routed = start(core, "routed", LONG, 1.0)
    moving = start(core, "moving", SHORT, 1.0)
    core.prefill_started(moving, 1.0)
    core.prefill_finished(moving, 1.5, 0.5)
    ended = core.fail_open(FailReason.UNFINISHED, "still open when the run stopped", 9.0)
    assert ended == [routed, moving] and core.open == {} and core.is_stopping
    assert [(r.id, r.status, r.fail_reason, r.fail_detail, r.finish_s) for r in core.records[1:]] == [
        ("routed", "failed", "unfinished", "still open when the run stopped", 9.0),
        ("moving", "failed", "unfinished", "still open when the run stopped", 9.0)]
    assert (core.num_completed, core.num_failed, core.in_flight) == (1, 2, 0)
    assert held(core) == NOTHING_HELD and loads(core) == IDLE_LOADS


def test_a_prefill_reported_twice_counts_once() -> None:
    core = make_core()
    journey = start(core, "r1", SHORT, 0.0)
    core.prefill_started(journey, 0.0)
    core.prefill_finished(journey, 0.4, 0.4)
    core.prefill_finished(journey, 0.5, 0.5)
    assert (journey.stage, journey.prefill_end_s) == (Stage.TRANSFERRING, 0.4)
    assert held(core) == ([0, 0, 0, 0], [0, 0, 1, 0]) and loads(core) == IDLE_LOADS


def test_transfer_times_reported_after_the_end_fill_in_the_record_once() -> None:
    core = make_core()
    journey = start(core, "r1", LONG, 0.0)
    core.prefill_started(journey, 0.1)
    core.late_transfer(journey, 0.1, 0.2)  # still open: nothing to fill in
    assert core.records == [] and journey.transfer_end_s is None
    core.prefill_finished(journey, 0.6, 0.5)
    core.fail(journey, FailReason.DECODE_FAILED, "decode worker error", 0.8)  # before the sender's DONE
    assert core.records[0].transfer_end_s is None
    core.late_transfer(journey, 0.1, 0.95)
    [record] = core.records
    assert journey.record is record and (record.transfer_start_s, record.transfer_end_s) == (0.1, 0.95)
    assert (record.status, record.fail_reason, record.finish_s) == ("failed", "decode_failed", 0.8)
    core.late_transfer(journey, 0.2, 2.0)  # the first report stands
    assert core.records == [record] and record.transfer_end_s == 0.95
