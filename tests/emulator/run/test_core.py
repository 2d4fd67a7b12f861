"""The run core's request path, driven by protocol events with explicit times and asserted through
the actions it answers with: routing and decode placement (Dispatch), the one record per request
(Ended), retries (Release then Dispatch), the failures the core itself decides, and the TTFT
window. No engine, no clock. Node loss and role flips: test_core_nodes.py; refused, late and
duplicate reports and the end of the run: test_core_reports.py."""

from __future__ import annotations

import pytest

from emulator.control.types import Cluster, FailReason, NodeId, Route
from emulator.run.core import MAX_ATTEMPTS
from emulator.run.journey import Stage
from emulator.run.protocol import Dispatch, Ended, Publish
from emulator.telemetry.records import RequestRecord
from tests.emulator.run.core_case import (
    BLOCK_TOKENS,
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
    spec,
    start,
)



def test_a_remote_request_ends_in_one_completed_record() -> None:
    core = make_core()
    acts = core.arrive(spec("r1", LONG), 1.0)
    assert shown(acts) == [("dispatch", "r1", 1, REMOTE, DECODE_A)]
    [dispatch] = acts
    assert isinstance(dispatch, Dispatch) and dispatch.decision.route is Route.PRFAAS
    journey = dispatch.journey
    assert core.open == {"r1": journey} and (core.num_arrived, core.in_flight) == (1, 1)
    assert (journey.stage, journey.attempts, journey.route) == (Stage.ROUTED, 1, "prfaas")
    assert (journey.prefill_node, journey.decode_node) == ("remote-prefill-0", "local-decode-1")
    assert loads(core) == [("remote-prefill-0", LONG, 1, True), ("local-prefill-0", 0, 0, True)]
    assert held(core) == ([1, 0, 0, 0], [0, 0, 1, 0])

    assert shown(core.prefill_started(journey, 1, 1.5)) == [] and journey.stage == Stage.PREFILLING
    assert shown(core.prefill_done(journey, 1, 2.5, 1.0, 0, 4096)) == [("send_decode", "r1", 1)]
    assert journey.stage == Stage.TRANSFERRING
    assert loads(core) == IDLE_LOADS and held(core) == ([0, 0, 0, 0], [0, 0, 1, 0])
    full_blocks = LONG // BLOCK_TOKENS  # the prompt's full blocks are in the prefix index now
    lookup = core.index.lookup(spec("r1", LONG).block_hashes)
    assert lookup.on_node(NodeId.parse("remote-prefill-0")) == full_blocks * BLOCK_TOKENS

    assert shown(core.transfer_done(journey, 1, 1.5, 3.0)) == [] and journey.stage == Stage.DECODING
    assert shown(core.first_token(journey, 1, 3.25)) == []
    acts = core.finished(journey, 1, 4.0, 0.05)
    assert shown(acts) == [("ended", "r1", "completed", None)]
    record = RequestRecord(
        id="r1", arrival_s=1.0, input_len=LONG, cached_len=0, incremental_len=LONG, route="prfaas",
        prefill_node="remote-prefill-0", decode_node="local-decode-1", queue_s=0.5, prefill_start_s=1.5,
        prefill_end_s=2.5, transfer_start_s=1.5, transfer_end_s=3.0, kv_bytes=4096, first_token_s=3.25,
        ttft_s=2.25, tpot_s=0.05, output_len=5, finish_s=4.0, status="completed")
    assert isinstance(acts[0], Ended) and acts[0].record == record and acts[0].journey is journey
    assert core.records == [record] and core.open == {} and journey.is_done and journey.record == record
    assert (core.num_completed, core.num_failed, core.in_flight) == (1, 0, 0)
    assert (core.num_prfaas, core.num_local) == (1, 0)
    assert held(core) == NOTHING_HELD
    assert core.ttft.sorted_values(4.0) == [2.25]
    assert core.end_reason is None  # arrivals are not over: the run goes on


def test_a_local_request_ends_in_one_completed_record() -> None:
    core = make_core()
    journey = start(core, "r1", SHORT, 0.0)
    assert (journey.route, journey.prefill_slot, journey.prefill_node) == ("local", LOCAL_PREFILL, "local-prefill-0")
    assert loads(core) == [("remote-prefill-0", 0, 0, True), ("local-prefill-0", SHORT, 1, True)]
    assert held(core) == ([0, 1, 0, 0], [0, 0, 1, 0]) and journey.decode_node == "local-decode-1"
    assert shown(core.prefill_started(journey, 1, 0.0)) == []
    assert shown(core.prefill_done(journey, 1, 0.4, 0.4, 0, 1024)) == [("send_decode", "r1", 1)]
    assert held(core) == ([0, 0, 0, 0], [0, 0, 1, 0])
    assert shown(core.first_token(journey, 1, 0.6)) == []  # before the sender's DONE: the decode side has the KV
    assert journey.stage == Stage.DECODING
    assert shown(core.transfer_done(journey, 1, 0.4, 0.5)) == []
    assert shown(core.finished(journey, 1, 0.9, 0.075)) == [("ended", "r1", "completed", None)]
    [record] = core.records
    assert (record.route, record.prefill_node, record.decode_node) == ("local", "local-prefill-0", "local-decode-1")
    assert (record.queue_s, record.ttft_s, record.tpot_s, record.finish_s) == (0.0, 0.6, 0.075, 0.9)
    assert (record.transfer_start_s, record.transfer_end_s, record.kv_bytes) == (0.4, 0.5, 1024)
    assert (record.status, record.fail_reason, record.fail_detail) == ("completed", None, None)
    assert (core.num_prfaas, core.num_local, core.num_completed) == (0, 1, 1)
    assert held(core) == NOTHING_HELD


def test_a_publishing_core_answers_each_step_with_a_publish_before_its_action() -> None:
    core = make_core()
    core.publishes = True
    acts = core.arrive(spec("r1", SHORT), 0.0)
    assert shown(acts) == [("publish", "r1", "arrived"), ("publish", "r1", "routed"),
                           ("dispatch", "r1", 1, LOCAL_PREFILL, DECODE_A)]
    assert isinstance(acts[-1], Dispatch)
    journey = acts[-1].journey
    assert shown(core.prefill_started(journey, 1, 0.1)) == [("publish", "r1", "prefill_start")]
    assert shown(core.prefill_done(journey, 1, 0.4, 0.3, 0, 1024)) == [
        ("publish", "r1", "prefill_end"), ("send_decode", "r1", 1)]
    assert shown(core.transfer_done(journey, 1, 0.4, 0.5)) == [("publish", "r1", "transfer_end")]
    [first] = core.first_token(journey, 1, 0.75)
    assert isinstance(first, Publish) and (first.event, first.node, first.detail) == (
        "first_token", "local-decode-1", {"ttft_s": 0.75})
    assert shown(core.finished(journey, 1, 1.0, 0.05)) == [("ended", "r1", "completed", None)]


def test_decodes_go_to_the_up_node_holding_fewest_the_lowest_on_ties() -> None:
    core = make_core()
    first, second = start(core, "a", SHORT, 0.0), start(core, "b", SHORT, 0.0)
    assert (first.decode_slot, second.decode_slot) == (DECODE_A, DECODE_B)
    assert start(core, "c", SHORT, 0.0).decode_slot == DECODE_A
    complete(core, first, 0.5, 1.0)
    complete(core, second, 0.5, 1.0)
    assert held(core)[1] == [0, 0, 1, 0]
    assert start(core, "d", SHORT, 1.0).decode_slot == DECODE_B


def test_the_ttft_window_holds_the_completions_of_the_last_30_seconds() -> None:
    core = make_core()
    steps = (("a", 0.0, 1.0, 2.0), ("b", 1.0, 4.0, 5.0), ("c", 2.0, 2.5, 20.0))
    journeys = []
    for rid, arrival, _, _ in steps:  # the prefix index wants its times in order: KV in on arrival
        journeys.append(journey := start(core, rid, SHORT, arrival))
        advance(core, journey, Stage.DECODING, arrival)
    for journey, (rid, _, first, end) in zip(journeys, steps, strict=True):
        assert shown(core.first_token(journey, journey.attempt_id, first)) == []
        assert shown(core.finished(journey, journey.attempt_id, end, 0.1)) == [("ended", rid, "completed", None)]
    assert core.ttft.sorted_values(20.0) == [0.5, 1.0, 3.0]
    assert core.ttft.percentile(50, 20.0) == 1.0
    assert core.ttft.sorted_values(32.0) == [0.5, 3.0]  # a sample at t stays while now - 30 < t
    assert core.ttft.sorted_values(50.0) == []


def test_a_failed_attempt_is_released_and_dispatched_again_and_the_third_ends_it_failed() -> None:
    core = make_core()
    journey = start(core, "r1", LONG, 0.0)
    advance(core, journey, Stage.PREFILLING, 0.1)
    for attempt in range(2, MAX_ATTEMPTS + 1):
        acts = core.attempt_failed(journey, attempt - 1, float(attempt), FailReason.TRANSFER_FAILED,
                                   "connection reset")
        stage = Stage.PREFILLING if attempt == 2 else Stage.ROUTED
        assert shown(acts) == [("release", "r1", attempt - 1, stage, REMOTE, DECODE_A),
                               ("dispatch", "r1", attempt, REMOTE, DECODE_A)]
        assert isinstance(acts[1], Dispatch) and acts[1].decision.route is Route.PRFAAS
        assert (journey.attempts, journey.attempt_id, journey.stage) == (attempt, attempt, Stage.ROUTED)
        assert journey.prefill_start_s is None  # the old attempt's
        assert held(core) == ([1, 0, 0, 0], [0, 0, 1, 0])  # the new attempt's only
    acts = core.attempt_failed(journey, MAX_ATTEMPTS, 9.0, FailReason.TRANSFER_FAILED, "connection reset")
    assert shown(acts) == [("release", "r1", MAX_ATTEMPTS, Stage.ROUTED, REMOTE, DECODE_A),
                           ("ended", "r1", "failed", "transfer_failed")]
    [record] = core.records
    assert (record.status, record.fail_reason, record.fail_detail) == ("failed", "transfer_failed", "connection reset")
    assert (record.arrival_s, record.finish_s, record.route, record.tpot_s) == (0.0, 9.0, "prfaas", None)
    assert (core.num_failed, core.num_completed, core.in_flight) == (1, 0, 0)
    assert (core.num_prfaas, core.num_local) == (1, 0)  # counted once per request, not per attempt
    assert held(core) == NOTHING_HELD and loads(core) == IDLE_LOADS


def test_a_failed_transfer_keeps_the_transfer_times_it_reports() -> None:
    core = make_core()
    journey = start(core, "r1", LONG, 0.0)
    advance(core, journey, Stage.TRANSFERRING, 0.5)
    for attempt in range(1, MAX_ATTEMPTS + 1):
        advance(core, journey, Stage.TRANSFERRING, 0.5 + attempt)
        core.attempt_failed(journey, attempt, 1.0 + attempt, FailReason.TRANSFER_FAILED, "reset",
                            transfer=(0.5 + attempt, 0.9 + attempt))
    [record] = core.records
    assert (record.fail_reason, record.transfer_start_s, record.transfer_end_s) == ("transfer_failed", 3.5, 3.9)


def test_no_prefill_node_up_ends_the_request_no_prefill_node() -> None:
    core = make_core()
    for slot in (REMOTE, LOCAL_PREFILL):
        assert shown(core.node_lost(slot, 1.0, "killed")) == []
    assert all(not is_up for *_, is_up in loads(core))
    acts = core.arrive(spec("r1", SHORT), 2.0)
    assert shown(acts) == [("release", "r1", 1, Stage.ARRIVED, -1, -1), ("ended", "r1", "failed", "no_prefill_node")]
    [record] = core.records
    assert (record.status, record.fail_reason, record.route, record.prefill_node) == (
        "failed", "no_prefill_node", None, None)
    assert record.fail_detail is not None
    assert record.fail_detail.startswith("no prefill node is up (remote 0/1 up, local 0/1 up)")
    assert (core.num_failed, core.num_prfaas + core.num_local) == (1, 0)
    assert held(core) == NOTHING_HELD


def test_a_retry_that_finds_no_prefill_node_ends_no_prefill_node() -> None:
    core = make_core()
    journey = start(core, "r1", LONG, 0.0)
    assert shown(core.node_lost(LOCAL_PREFILL, 0.5, "killed")) == []
    acts = core.node_lost(REMOTE, 1.0, "killed")
    assert shown(acts) == [("release", "r1", 1, Stage.ROUTED, REMOTE, DECODE_A),
                           ("release", "r1", 2, Stage.ARRIVED, -1, -1),
                           ("ended", "r1", "failed", "no_prefill_node")]
    [record] = core.records
    assert (journey.attempts, record.fail_reason) == (2, "no_prefill_node")
    assert held(core) == NOTHING_HELD


def test_no_decode_node_up_ends_the_request_no_decode_node() -> None:
    core = make_core()
    assert shown(core.node_lost(DECODE_A, 0.5, "killed")) == []
    assert shown(core.node_lost(DECODE_B, 0.5, "killed")) == []
    acts = core.arrive(spec("r1", LONG), 1.0)
    assert shown(acts) == [("release", "r1", 1, Stage.ROUTED, REMOTE, -1),  # its prefill let go of
                           ("ended", "r1", "failed", "no_decode_node")]
    [record] = core.records
    assert (record.status, record.fail_reason, record.fail_detail) == (
        "failed", "no_decode_node", "no decode node is up")
    assert (record.route, record.prefill_node, record.decode_node) == ("prfaas", "remote-prefill-0", None)
    assert held(core) == NOTHING_HELD and loads(core) == IDLE_LOADS


def test_the_board_counts_each_waiting_prompt_at_its_own_length_and_the_one_in_service_until_its_end() -> None:
    """The router's work left, kept by the core from the events (both engines send the same ones):
    T(500) + T(800) queued; r1 starts at 2 s (until 2 + T(500)); its end clears the service; a
    waiting prompt failed off the node takes its own seconds with it."""
    core = make_core()
    price = core.router.prefill_s
    r1, r2 = (core.arrive(spec(rid, n), 1.0)[0] for rid, n in (("r1", SHORT), ("r2", 800)))
    assert isinstance(r1, Dispatch) and isinstance(r2, Dispatch)
    t500, t800 = price(Cluster.LOCAL, SHORT), price(Cluster.LOCAL, 800)
    assert core.board.loads[1][1:] == (1300, 2, True, t500 + t800, 0.0)
    core.prefill_started(r1.journey, r1.journey.attempt_id, 2.0)
    assert core.board.loads[1][1:] == (1300, 2, True, pytest.approx(t800), 2.0 + t500)  # a running sum
    core.prefill_done(r1.journey, r1.journey.attempt_id, 2.4, t500, 0, 1024)
    assert core.board.loads[1][1:] == (800, 1, True, pytest.approx(t800), 0.0)
    core.stop(FailReason.INTERRUPTED, "stopped", 3.0)
    assert core.board.loads[1][1:] == (0, 0, True, 0.0, 0.0)
