"""MQTT payloads the runs publish: topics, round trips of each message, refusals of bad ones."""

from __future__ import annotations

import json

import pytest

from emulator.errors import TelemetryError
from emulator.telemetry.schemas import (
    METRICS_VERSION,
    ErrorEvent,
    KnobState,
    MetricsSnapshot,
    QueueDepths,
    RequestCounts,
    RequestEvent,
    StatusMessage,
    control_topic,
    knob_of,
    parse_message,
    topic,
)

SNAPSHOT = MetricsSnapshot(
    run_id="r1", t_s=12.5, ttft_p50_s=0.8, ttft_p90_s=None,
    requests=RequestCounts(arrived=10, completed=7, failed=1, in_flight=2, prfaas=4, local=6),
    queues=QueueDepths(remote_prefill=1, local_prefill=0, decode=3), egress_bit_per_s=420e6,
    link_capacity_bit_per_s=1e9, link_utilization=0.42, retrans_rate=0.001, rtt_ms=20.4,
    threshold_tokens=4096, roles={"local-prefill-0": "prefill", "local-decode-0": "decode"},
    link={"bandwidth_mbit": 1000.0, "delay_ms": 10.0, "jitter_ms": 0.0, "loss_pct": 0.0},
    knobs=KnobState(policy="prfaas", affinity="longest-prefix", has_scheduler=True, short_term=True,
                    rate_per_s=1.5, is_paused=True),
)
MESSAGES = [
    ("metrics", SNAPSHOT),
    ("events", RequestEvent(run_id="r1", t_s=1.0, request_id="q7", event="routed", route="prfaas",
                            node="remote-prefill-0", reason="incremental > t",
                            detail={"input_len": 9000.0})),
    ("events", ErrorEvent(run_id="r1", t_s=2.0, topic="prfaas/r1/control/x", error="bad")),
    ("status", StatusMessage(run_id="r1", t_s=0.0, state="running", engine="live",
                             link_backend="tun", note="netem unavailable")),
]


def test_topics() -> None:
    assert topic("r1", "metrics") == "prfaas/r1/metrics"
    assert control_topic("r1", "threshold") == "prfaas/r1/control/threshold"
    assert control_topic("r1", "#") == "prfaas/r1/control/#"
    assert knob_of("r1", "prfaas/r1/control/link") == "link"
    for bad in (lambda: topic("r1", "logs"), lambda: topic("a/b", "metrics"),
                lambda: control_topic("r1", "+")):
        with pytest.raises(TelemetryError):
            bad()


@pytest.mark.parametrize(("kind", "message"), MESSAGES, ids=[type(m).__name__ for _, m in MESSAGES])
def test_message_round_trip(kind: str, message) -> None:
    payload = message.model_dump_json().encode()
    assert json.loads(payload)["v"] == (METRICS_VERSION if kind == "metrics" else 1)
    assert parse_message(kind, payload) == message


def test_a_v1_metrics_payload_in_mbit_is_refused_in_one_line() -> None:
    """Metrics v2 carries bit/s (`egress_bit_per_s`); a v1 payload (`egress_mbit`) names the version."""
    old = {"v": 1, "run_id": "r", "t_s": 1.0, "egress_mbit": 12.0}
    with pytest.raises(TelemetryError, match="v = 1 is invalid") as refused:
        parse_message("metrics", json.dumps(old).encode())
    assert "\n" not in str(refused.value)


def test_message_with_unknown_field_or_version_is_refused() -> None:
    data = SNAPSHOT.model_dump() | {"v": 3}
    with pytest.raises(TelemetryError, match="v = 3"):
        parse_message("metrics", json.dumps(data).encode())
    with pytest.raises(TelemetryError, match="v = 2"):
        parse_message("status", json.dumps({"v": 2, "run_id": "r", "t_s": 0, "state": "running",
                                            "engine": "live"}).encode())
    with pytest.raises(TelemetryError, match="extra is not a known field"):
        parse_message("status", json.dumps({"run_id": "r", "t_s": 0, "state": "running",
                                            "engine": "live", "extra": 1}).encode())
