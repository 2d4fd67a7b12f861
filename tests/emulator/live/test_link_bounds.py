"""A live run and a link value the old bounds let through (issue 25): `link {"v": 1,
"bandwidth_mbit": 1e-310}` on the control topic ended the run with `MetricsSnapshot
link_utilization=inf` and a traceback. Now it is refused in one line at the boundary and the run
goes on to its end, with finite metrics and its record."""

from __future__ import annotations

import asyncio
import json
import math
import os
from pathlib import Path

import aiomqtt
import pandas as pd
import pytest

from emulator.live.session import run_live
from emulator.net.names import new_run_id
from emulator.scenario import parse_scenario
from emulator.telemetry.broker import parse_broker_url

pytestmark = [pytest.mark.root, pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces and TUN need CAP_NET_ADMIN")]
TINY_LINK = b'{"v":1,"bandwidth_mbit":1e-310}'


def scenario():
    return parse_scenario({
        "name": "live-link-bounds", "engine": "live", "seed": 7, "duration_s": 4.0,
        "model": {"preset": "kimi-linear-mini", "size": "tiny"},
        "clusters": {"remote": {"instances": 1, "device": "cpu"},
                     "local": {"instances": 2, "device": "cpu", "prefill_instances": 1, "decode_max_batch": 4}},
        "link": {"bandwidth_mbit": 200, "delay_ms": 5},
        "router": {"policy": "all-remote", "threshold_tokens": 0},
        "scheduler": {"short_term": {"enabled": False}, "long_term": {"enabled": False}},
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": 2.0},
                     "input_len": {"kind": "fixed", "tokens": 1024},
                     "output_len": {"kind": "fixed", "tokens": 4}, "max_requests": 6},
    }, Path.cwd())


async def _operate(url: str, run_id: str, events: list[dict]) -> None:
    """Once the first request has been routed, send the subnormal bandwidth."""
    address = parse_broker_url(url)
    async with aiomqtt.Client(address.host, address.port) as client:
        await client.subscribe(f"prfaas/{run_id}/events")
        sent = False
        async for message in client.messages:
            event = json.loads(message.payload)
            events.append(event)
            if not sent and event.get("event") == "routed":
                await client.publish(f"prfaas/{run_id}/control/link", TINY_LINK)
                sent = True


def test_a_subnormal_bandwidth_is_refused_and_the_run_ends_with_finite_metrics(
        tmp_path: Path, embedded_broker) -> None:
    run_id, events = new_run_id(), []

    async def both() -> dict:
        operator = asyncio.create_task(_operate(embedded_broker.url, run_id, events))
        try:
            return await run_live(scenario(), tmp_path / "run", broker_url=embedded_broker.url, run_id=run_id)
        finally:
            operator.cancel()

    doc = asyncio.run(both())
    errors = [e["error"] for e in events if e.get("event") == "error"]
    assert len(errors) == 1 and "bandwidth_mbit" in errors[0] and "0.001" in errors[0]
    assert "\n" not in errors[0]
    assert doc["meta"]["end_reason"] == "run ended"
    assert not any("link ->" in line for line in doc["meta"]["knob_changes"])
    requests = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    assert (requests["status"] == "completed").all() and len(requests) == doc["summary"]["requests"] > 0
    timeseries = pd.read_parquet(tmp_path / "run" / "timeseries.parquet")
    numbers = timeseries.select_dtypes("number").to_numpy(dtype=float).ravel()
    assert all(math.isfinite(x) for x in numbers if not math.isnan(x))  # NaN there is "no data"
    assert not doc.get("record_notes")
