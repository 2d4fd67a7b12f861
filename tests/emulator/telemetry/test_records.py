"""The per-request record, the run summary (hand-computed) and `expect:` checks."""

from __future__ import annotations

import dataclasses

import pytest

from emulator.control.types import FailReason, RequestStatus
from emulator.errors import TelemetryError
from emulator.telemetry.records import REQUEST_FIELDS, RequestRecord, check_expectations, summarize


def test_record_fields_are_exactly_the_design_list(design_fields: tuple[str, ...]) -> None:
    assert REQUEST_FIELDS == design_fields


def test_record_init_takes_exactly_the_fields_by_keyword_with_their_defaults() -> None:
    """RequestRecord writes its __init__ out (mypyc compiles it, and a compiled one shows no
    signature): it must behave as the one dataclass would make."""
    fields = dataclasses.fields(RequestRecord)
    given = {"id": "r1", "arrival_s": 1.0, "input_len": 10, "cached_len": 2, "incremental_len": 8,
             "route": "local", "prefill_node": "local-prefill-0", "decode_node": "local-decode-1", "queue_s": 0.5,
             "prefill_start_s": 1.5, "prefill_end_s": 2.0, "transfer_start_s": 1.5, "transfer_end_s": 2.1,
             "kv_bytes": 100, "first_token_s": 2.2, "ttft_s": 1.2, "tpot_s": 0.02, "output_len": 4,
             "finish_s": 2.3, "status": "completed", "fail_reason": None, "fail_detail": "none"}
    assert list(given) == [f.name for f in fields]
    assert dataclasses.asdict(RequestRecord(**given)) == given
    required = {f.name: given[f.name] for f in fields if f.default is dataclasses.MISSING}
    assert dataclasses.asdict(RequestRecord(**required)) == {
        f.name: given[f.name] if f.default is dataclasses.MISSING else f.default for f in fields}
    for name in required:
        with pytest.raises(TypeError):
            RequestRecord(**{k: v for k, v in required.items() if k != name})
    with pytest.raises(TypeError):
        RequestRecord(*required.values())  # type: ignore[misc]
    with pytest.raises(TypeError):
        RequestRecord(**required, not_a_field=1)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [({"status": "lost"}, "status = 'lost'"), ({"route": "moon"}, "route = 'moon'"),
     ({"status": "failed"}, "failed with fail_reason = None"),
     ({"status": "failed", "fail_reason": "worker lost: local-decode-0 (its process ended)"},
      "fail_reason = 'worker lost: local-decode-0"),
     ({"status": "failed", "fail_reason": "WORKER_LOST"}, "use one of no_prefill_node"),
     ({"fail_reason": "worker_lost"}, "completed with fail_reason = 'worker_lost'")],
)
def test_record_refuses_unknown_status_route_and_silent_failures(changes: dict,
                                                                 fragment: str) -> None:
    fields = {"id": "x", "arrival_s": 0.0, "input_len": 1, "cached_len": 0,
              "incremental_len": 1, "output_len": 1, "status": "completed"} | changes
    with pytest.raises(TelemetryError, match=fragment):
        RequestRecord(**fields)


@pytest.mark.parametrize("reason", list(FailReason))
def test_record_takes_every_fail_reason_as_its_tag_with_free_detail(reason: FailReason) -> None:
    record = RequestRecord(id="x", arrival_s=0.0, input_len=1, cached_len=0, incremental_len=1,
                           output_len=1, status=RequestStatus.FAILED.value, fail_reason=reason.value,
                           fail_detail="transfer from remote-prefill-0: anything at all")
    assert summarize([record], 1.0)["failed_by_reason"] == {reason.value: 1}


def test_summarize_hand_computed(records: list[RequestRecord]) -> None:
    summary = summarize(records, duration_s=10.0)
    # TTFTs of completed requests sorted: 0.2, 0.4, 1.0; p90 rank 1.8 -> 0.4 + 0.8 * 0.6.
    assert summary == {
        "duration_s": 10.0,
        "requests": 5,
        "completed": 3,
        "failed_count": 2,
        "completed_fraction": pytest.approx(0.6),
        "ttft_mean_s": pytest.approx(1.6 / 3),
        "ttft_p50_s": pytest.approx(0.4),
        "ttft_p90_s": pytest.approx(0.88),
        "ttft_p99_s": pytest.approx(0.988),
        # each completed one: prefill 0.09 s, its KV in 0.02 s after the prefill ended
        "ttft_noqueue_mean_s": pytest.approx(0.11),
        "ttft_noqueue_p50_s": pytest.approx(0.11),
        "ttft_noqueue_p90_s": pytest.approx(0.11),
        "tpot_mean_s": pytest.approx(0.04),
        "throughput_rps": pytest.approx(0.3),
        "prfaas_fraction": pytest.approx(0.4),
        # remote input tokens (r1 1000 + r4 9000) of every request's (3 x 1000 + 9000 + 10)
        "prfaas_input_token_fraction": pytest.approx(10_000 / 12_010),
        # completed ones: 200 of 1000 tokens cached each
        "prefix_hit_fraction": pytest.approx(0.2),
        "prefix_hit_fraction_remote": pytest.approx(0.2),
        "prefix_hit_fraction_local": pytest.approx(0.2),
        "kv_bytes_total": 1_800_000_000,
        # PrfaaS KV bytes (1.0 GB + 0.5 GB of the failed one) * 8 / 10 s = 1.2 Gbit/s
        "egress_gbps_mean": pytest.approx(1.2),
        "egress_bit_per_s_mean": pytest.approx(1.2e9),
        # by reason, in FailReason's order (worker_lost comes before link_down there)
        "failed_by_reason": {"worker_lost": 1, "link_down": 1},
        # r4 was routed to remote-prefill-0 and never started: a node it waited on, not one it used
        "prefill_nodes": {
            "remote-prefill-0": {"requests": 1, "busy_fraction": pytest.approx(0.009),
                                 "queue_mean": pytest.approx(0.001)},
            "local-prefill-0": {"requests": 2, "busy_fraction": pytest.approx(0.018),
                                "queue_mean": pytest.approx(0.002)},
        },
        "decode_nodes": {"local-decode-0": {"requests": 3}},
    }


def test_summarize_empty_run_has_no_data_not_zero_division() -> None:
    summary = summarize([], duration_s=0.0)
    assert summary["requests"] == 0 and summary["failed_by_reason"] == {}
    assert summary["ttft_p90_s"] is None and summary["completed_fraction"] is None
    assert summary["throughput_rps"] is None and summary["egress_gbps_mean"] is None
    assert summary["egress_bit_per_s_mean"] is None and summary["ttft_noqueue_p90_s"] is None
    assert summary["prefix_hit_fraction"] is None and summary["prfaas_input_token_fraction"] is None
    assert summary["prefill_nodes"] == {} and summary["decode_nodes"] == {}


def test_expectations_pass(records: list[RequestRecord]) -> None:
    summary = summarize(records, duration_s=10.0)
    expect = {"ttft_p90_s": {"max": 1.0}, "completed_fraction": {"min": 0.6, "max": 1.0},
              "failed_count": {"max": 2}}
    assert check_expectations(summary, expect) == []


def test_expectations_fail_one_line_each(records: list[RequestRecord]) -> None:
    summary = summarize(records, duration_s=10.0) | {"ttft_p90_s": 12.3}
    expect = {
        "ttft_p90_s": {"max": 10.0},
        "completed_fraction": {"min": 0.99},
        "ttft_p99": {"max": 1.0},
        "throughput_rps": {"avg": 1.0},
        "failed_by_reason": {"max": 0},
    }
    failures = check_expectations(summary, expect)
    assert failures[:2] == ["ttft_p90_s = 12.3 > max 10.0", "completed_fraction = 0.6 < min 0.99"]
    assert failures[2].startswith("ttft_p99: unknown metric; use one of ")
    assert "ttft_p99_s" in failures[2]
    assert failures[3] == "throughput_rps: bound 'avg' is unknown; use min or max"
    assert failures[4].startswith("failed_by_reason = {") and "(not a number)" in failures[4]
    assert len(failures) == 5


def test_expectation_on_a_metric_without_data_fails() -> None:
    assert check_expectations(summarize([], 0.0), {"ttft_p90_s": {"max": 1.0}}) == [
        "ttft_p90_s = none (no data); expected max 1.0"]
