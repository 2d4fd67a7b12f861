"""The live engine end to end: real worker processes, a real shaped link, a real MQTT broker.

Each run uses the tiny preset and a few seconds of arrivals; tokens are compared with a
single-process greedy generation of the same prompt, bytes on the link with the KV the transport
shipped, and control messages with the routes of the requests that follow them.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import aiomqtt
import pandas as pd
import pytest

from emulator.live.session import run_live
from emulator.net import netns
from emulator.net.ledger import process_start_time
from emulator.net.names import new_run_id
from emulator.scenario import parse_scenario
from emulator.telemetry.broker import parse_broker_url
from emulator.workload.build import build_requests
from emulator.workload.tokens import synthesize_tokens
from model_stub import HybridModel, get_preset

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces and TUN need CAP_NET_ADMIN")
THRESHOLD = 1024


def scenario(**changes):
    data = {
        "name": "live-e2e", "engine": "live", "seed": 7, "duration_s": 4.0,
        "model": {"preset": "kimi-linear-mini", "size": "tiny"},
        "clusters": {"remote": {"instances": 1, "device": "cpu"},
                     "local": {"instances": 2, "device": "cpu", "prefill_instances": 1, "decode_max_batch": 4}},
        "link": {"bandwidth_mbit": 200, "delay_ms": 5},
        "router": {"policy": "prfaas", "threshold_tokens": THRESHOLD},
        "scheduler": {"short_term": {"enabled": False}, "long_term": {"enabled": False}},
        "prefix_cache": {"block_tokens": 64, "capacity_mib": {"remote": 64, "local": 64}},
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": 2.0},
                     "input_len": {"kind": "uniform", "min": 200, "max": 3000},
                     "output_len": {"kind": "fixed", "tokens": 6}, "max_requests": 8},
    }
    for key, value in changes.items():
        data[key] = value
    return parse_scenario(data, Path.cwd())


def run(sc, tmp_path: Path, **kwargs) -> tuple[dict, pd.DataFrame]:
    out = tmp_path / "run"
    doc = asyncio.run(run_live(sc, out, **kwargs))
    return doc, pd.read_parquet(out / "requests.parquet")


def assert_nothing_left(doc: dict) -> None:
    run_id = doc["meta"]["run_id"]
    assert netns.list_netns(f"prf-{run_id}-") == []
    for name, pid in doc["meta"]["engine_details"]["worker_pids"].items():
        assert process_start_time(pid) is None, f"{name} (pid {pid}) is still running"


def test_every_request_completes_with_the_reference_tokens_and_its_kv_crosses_the_link(tmp_path: Path) -> None:
    sc = scenario()
    doc, requests = run(sc, tmp_path, broker_url=None, embedded_broker=True)
    assert doc["summary"]["completed"] == len(requests) == len(build_requests(sc)) > 0
    assert (requests["status"] == "completed").all()
    # routing: incremental length over the threshold went to the remote cluster, the rest stayed
    remote = requests["incremental_len"] > THRESHOLD
    assert (requests.loc[remote, "route"] == "prfaas").all() and remote.any()
    assert requests.loc[remote, "prefill_node"].str.startswith("remote-").all()
    assert (requests.loc[~remote, "route"] == "local").all()
    # the remote requests' KV crossed the shaped link: link counters agree with the shipped bytes
    shipped = requests.loc[remote, "kv_bytes"].sum()
    assert doc["meta"]["engine_details"]["link_bytes_to_local"] == pytest.approx(shipped, rel=0.05)
    # tokens equal a single-process greedy generation of the same prompt
    model = HybridModel(get_preset("kimi-linear-mini", "tiny", seed=sc.seed), device="cpu")
    outputs = {row["id"]: row["tokens"] for row in map(json.loads, (tmp_path / "run" / "outputs.jsonl").open())}
    for spec in build_requests(sc):
        prompt = synthesize_tokens(spec, sc.prefix_cache.block_tokens, sc.seed).tolist()
        assert outputs[spec.id] == model.generate(prompt, spec.output_len), spec.id
    assert (requests["ttft_s"] > 0).all() and (requests["ttft_s"] >= requests["queue_s"]).all()
    assert_nothing_left(doc)


async def _operate(url: str, run_id: str, events: list[dict], statuses: list[dict]) -> None:
    """An operator: raise the threshold once requests flow, then send a malformed message."""
    address = parse_broker_url(url)
    async with aiomqtt.Client(address.host, address.port) as client:
        await client.subscribe(f"prfaas/{run_id}/events")
        await client.subscribe(f"prfaas/{run_id}/status")
        sent = False
        async for message in client.messages:
            event = json.loads(message.payload)
            if message.topic.matches(f"prfaas/{run_id}/status"):
                statuses.append(event)
                continue
            events.append(event)
            if not sent and event.get("event") == "completed":
                await client.publish(f"prfaas/{run_id}/control/threshold", json.dumps({"v": 1, "tokens": 10**6}))
                await client.publish(f"prfaas/{run_id}/control/threshold", b'{"v": 1, "tokens": -5}')
                sent = True


@pytest.mark.parametrize("broker", ["embedded_broker", "mosquitto"])
def test_control_messages_steer_the_next_requests_and_bad_ones_are_refused(
        tmp_path: Path, broker: str, request: pytest.FixtureRequest) -> None:
    fixture = request.getfixturevalue(broker)
    url = fixture if isinstance(fixture, str) else fixture.url
    sc = scenario(duration_s=6.0, workload={
        "arrival": {"kind": "poisson", "rate_per_s": 2.0}, "input_len": {"kind": "fixed", "tokens": 2048},
        "output_len": {"kind": "fixed", "tokens": 4}, "max_requests": 12})
    run_id, events, statuses = new_run_id(), [], []

    async def both() -> dict:
        operator = asyncio.create_task(_operate(url, run_id, events, statuses))
        try:
            return await run_live(sc, tmp_path / "run", broker_url=url, run_id=run_id)
        finally:
            operator.cancel()

    doc = asyncio.run(both())
    requests = pd.read_parquet(tmp_path / "run" / "requests.parquet").sort_values("arrival_s")
    assert (requests["status"] == "completed").all()
    errors = [e for e in events if e.get("event") == "error"]
    assert errors and "tokens" in errors[0]["error"]  # the malformed message was answered, not applied
    assert any("threshold -> 1000000" in line for line in doc["meta"]["knob_changes"])
    # the status topic reports the change and the threshold the router now uses
    taken = [s for s in statuses if s["note"] == "control: threshold -> 1000000 tokens"]
    assert taken and taken[0]["state"] == "running" and taken[0]["threshold_tokens"] == 10**6
    assert {s["duration_s"] for s in statuses} == {6.0}  # a dashboard that did not start the run shows progress
    # every request above 1024 tokens went remote until the change; the ones routed after it stay local
    routed = {e["request_id"]: e["t_s"] for e in events if e.get("event") == "routed"}
    changed_at = min(e["t_s"] for e in events if e.get("event") == "completed")
    early = [rid for rid, t in routed.items() if t < changed_at]
    late = [rid for rid, t in routed.items() if t > changed_at + 0.5]
    route = dict(zip(requests["id"], requests["route"], strict=True))
    assert early and all(route[r] == "prfaas" for r in early)
    assert late and all(route[r] == "local" for r in late)
    assert_nothing_left(doc)


def test_a_killed_prefill_worker_loses_no_request(tmp_path: Path) -> None:
    sc = scenario(duration_s=5.0, timeline=[{"at_s": 1.5, "kill": "remote-prefill-0"}],
                  workload={"arrival": {"kind": "poisson", "rate_per_s": 3.0},
                            "input_len": {"kind": "uniform", "min": 1500, "max": 4000},
                            "output_len": {"kind": "fixed", "tokens": 4}, "max_requests": 14})
    doc, requests = run(sc, tmp_path, embedded_broker=False)
    assert len(requests) == len(build_requests(sc))  # every request ended, none vanished
    assert set(requests["status"]) <= {"completed", "failed"}
    failed = requests[requests["status"] == "failed"]
    assert failed["fail_reason"].notna().all() and (failed["fail_reason"].str.len() > 0).all()
    # after the kill the remote cluster is down: later requests fall back to the local prefill node
    late = requests[requests["arrival_s"] > 2.0]
    assert (late["status"] == "completed").all() and (late["prefill_node"] == "local-prefill-0").all()
    assert any("timeline: kill remote-prefill-0" in line for line in doc["meta"]["knob_changes"])
    assert_nothing_left(doc)
