"""Fixtures for the telemetry tests (the brokers live in tests/emulator/conftest.py)."""

from __future__ import annotations

import uuid

import pytest

from emulator.telemetry.records import RequestRecord


@pytest.fixture
def mqtt_run_id() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


DESIGN_FIELDS = (
    "id", "arrival_s", "input_len", "cached_len", "incremental_len", "route", "prefill_node",
    "decode_node", "queue_s", "prefill_start_s", "prefill_end_s", "transfer_start_s",
    "transfer_end_s", "kv_bytes", "first_token_s", "ttft_s", "tpot_s", "output_len", "finish_s",
    "status", "fail_reason", "fail_detail",  # fail_detail: issue 14, after design.md's list
)


def completed_record(rid: str, route: str, arrival_s: float, ttft_s: float, tpot_s: float,
         kv_bytes: int) -> RequestRecord:
    prefill = "remote-prefill-0" if route == "prfaas" else "local-prefill-0"
    return RequestRecord(
        id=rid, arrival_s=arrival_s, input_len=1000, cached_len=200, incremental_len=800,
        route=route, prefill_node=prefill, decode_node="local-decode-0", queue_s=0.01,
        prefill_start_s=arrival_s + 0.01, prefill_end_s=arrival_s + 0.1,
        transfer_start_s=arrival_s + 0.05, transfer_end_s=arrival_s + 0.12, kv_bytes=kv_bytes,
        first_token_s=arrival_s + ttft_s, ttft_s=ttft_s, tpot_s=tpot_s, output_len=16,
        finish_s=arrival_s + ttft_s + 15 * tpot_s, status="completed",
    )


def hand_made_records() -> list[RequestRecord]:
    """Five requests whose summary numbers are worked out by hand in test_records.py."""
    return [
        completed_record("r1", "prfaas", 0.0, ttft_s=1.0, tpot_s=0.05, kv_bytes=1_000_000_000),
        completed_record("r2", "local", 1.0, ttft_s=0.2, tpot_s=0.03, kv_bytes=100_000_000),
        completed_record("r3", "local", 2.0, ttft_s=0.4, tpot_s=0.04, kv_bytes=200_000_000),
        RequestRecord(id="r4", arrival_s=3.0, input_len=9000, cached_len=0, incremental_len=9000,
                      route="prfaas", prefill_node="remote-prefill-0", kv_bytes=500_000_000,
                      output_len=16, finish_s=4.0, status="failed", fail_reason="link_down",
                      fail_detail="link: every connection lost and reconnects exhausted"),
        RequestRecord(id="r5", arrival_s=4.0, input_len=10, cached_len=0, incremental_len=10,
                      output_len=16, status="failed", fail_reason="worker_lost"),
    ]


@pytest.fixture
def records() -> list[RequestRecord]:
    return hand_made_records()


@pytest.fixture
def design_fields() -> tuple[str, ...]:
    return DESIGN_FIELDS
