"""A live run against a poisoned and flooded control bus: retained pause and 100 % loss planted on its
topics before it starts are not applied, and 5,000 bad control messages in a burst are answered at
most once a second (with counts) while the good message after them still steers the run."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import aiomqtt
import pandas as pd
import pytest

from emulator.live.session import run_live
from emulator.net.names import new_run_id
from emulator.scenario import parse_scenario
from emulator.telemetry.broker import EmbeddedBroker, parse_broker_url
from emulator.workload.build import build_requests

pytestmark = [pytest.mark.root, pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces and TUN need CAP_NET_ADMIN")]
NUM_FLOOD = 5000
PLANTED = [("pause", b'{"v": 1}'), ("link", b'{"v": 1, "loss_pct": 100}')]


def scenario():
    return parse_scenario({
        "name": "live-control-hygiene", "engine": "live", "seed": 7, "duration_s": 12.0,
        "model": {"preset": "kimi-linear-mini", "size": "tiny"},
        "clusters": {"remote": {"instances": 1, "device": "cpu"},
                     "local": {"instances": 2, "device": "cpu", "prefill_instances": 1, "decode_max_batch": 4}},
        "link": {"bandwidth_mbit": 200, "delay_ms": 5},
        "router": {"policy": "prfaas", "threshold_tokens": 1024},
        "scheduler": {"short_term": {"enabled": False}, "long_term": {"enabled": False}},
        "prefix_cache": {"block_tokens": 64, "capacity_mib": {"remote": 64, "local": 64}},
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": 1.0}, "input_len": {"kind": "fixed", "tokens": 2048},
                     "output_len": {"kind": "fixed", "tokens": 4}, "max_requests": 12},
    }, Path.cwd())


async def _plant(url: str, run_id: str) -> None:
    address = parse_broker_url(url)
    async with aiomqtt.Client(address.host, address.port) as attacker:
        for knob, payload in PLANTED:
            await attacker.publish(f"prfaas/{run_id}/control/{knob}", payload, qos=1, retain=True)


async def _flood_then_steer(url: str, run_id: str, errors: list[dict]) -> None:
    """Once the first request is routed: 5,000 bad threshold messages, then one good one."""
    address = parse_broker_url(url)
    async with aiomqtt.Client(address.host, address.port) as client:
        await client.subscribe(f"prfaas/{run_id}/events")
        sent = False
        async for message in client.messages:
            event = json.loads(message.payload)
            if event.get("event") == "error":
                errors.append(event)
            if not sent and event.get("event") == "routed":
                for i in range(NUM_FLOOD):
                    await client.publish(f"prfaas/{run_id}/control/threshold", b'{"v": true, "tokens": %d}' % i)
                await client.publish(f"prfaas/{run_id}/control/threshold", b'{"v": 1, "tokens": 1000000}', qos=1)
                sent = True


def test_retained_control_is_not_applied_and_a_flood_is_echoed_once_a_second(
        tmp_path: Path, embedded_broker: EmbeddedBroker) -> None:
    url, run_id, sc, errors = embedded_broker.url, new_run_id(), scenario(), []

    async def both() -> dict:
        await _plant(url, run_id)
        operator = asyncio.create_task(_flood_then_steer(url, run_id, errors))
        try:
            return await run_live(sc, tmp_path / "run", broker_url=url, run_id=run_id)
        finally:
            operator.cancel()

    doc = asyncio.run(both())
    requests = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    # neither the planted pause (no arrivals) nor the 100 % loss (no KV crosses) was applied
    assert len(requests) == len(build_requests(sc)) and (requests["status"] == "completed").all()
    changes = doc["meta"]["knob_changes"]
    assert not any("pause" in line or "loss" in line for line in changes), changes
    assert any("threshold -> 1000000" in line for line in changes), changes  # the good one, after the flood
    note = doc["meta"]["engine_details"]["mqtt"]
    assert f"{len(PLANTED)} retained control messages from before the run ignored" in note, note
    assert "control messages refused" in note and "not echoed: at most one error a second" in note, note
    # at most one echoed line a second of run time (plus the first), each counting what it stands for
    span_s = errors[-1]["t_s"] - errors[0]["t_s"]
    assert 1 <= len(errors) <= span_s + 2, (len(errors), span_s)
    assert sum(1 + e["num_suppressed"] for e in errors) <= NUM_FLOOD
    assert all(e["error"].startswith("control/threshold: v = true") for e in errors)
