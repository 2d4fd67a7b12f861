"""A hostile local process against a live run's worker port (issue 13).

The attacker does what any local user can: finds the gateway's listening port (`ss`; since issue 25
no worker's command line names it), connects to 127.0.0.1 and says hello as an existing node. It
must be refused, receive no command, and leave the real node and its requests alone: every request
completes with the tokens of a single-process greedy generation.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path

import aiomqtt
import pandas as pd
import pytest

from emulator.limits import MAX_PENDING_HANDSHAKES
from emulator.live.session import run_live
from emulator.net.ledger import Ledger
from emulator.net.names import new_run_id
from emulator.telemetry.broker import parse_broker_url
from emulator.wire import auth
from emulator.workload.build import build_requests
from emulator.workload.tokens import synthesize_tokens
from model_stub import HybridModel, get_preset

from ..live.attackers import own_listening_ports
from ..live.test_engine import assert_nothing_left, scenario

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces and TUN need CAP_NET_ADMIN")]
NODE = "local-decode-1"  # the scenario's only decode node: every request's tokens come from it
READ_S = 3.0  # how long an attacker listens for commands after its hello
COMMANDS = {"prefill", "decode", "set_role", "cancel", "shutdown"}


def _worker_pid(run_id: str, name: str) -> int | None:
    return next((int(e["pid"]) for e in Ledger.open(run_id).entries
                 if e.get("kind") == "pid" and e.get("name") == name), None)


def _gateway_port() -> int:
    """The listening socket of this process (the gateway runs in it), as `ss -ltnp` shows it."""
    return min(own_listening_ports(os.getpid()))


def _stolen_secret(pid: int) -> str:
    """A same-user process can read a worker's initial environment: the secret alone must not
    let it take over a connected node."""
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    prefix = f"{auth.SECRET_ENV}=".encode()
    return next(v[len(prefix):] for v in environ if v.startswith(prefix)).decode()


def _hello(node: str, **extra: object) -> bytes:
    hello = {"v": 1, "op": "hello", "node": node, "roles": ["prefill", "decode"], "kv_port": 1,
             "pid": os.getpid(), "device": "cpu", "threads": 1, **extra}
    return json.dumps(hello).encode() + b"\n"


async def _attack(port: int, make_hello) -> tuple[list[str], bool]:
    """One hostile connection: hello (made from the gateway's nonce, if it sends one), then answer
    every decode with forged tokens. Returns the ops received after the hello and whether the
    gateway closed the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    nonce = None
    try:
        first = await asyncio.wait_for(reader.readline(), 1.0)
        if first and json.loads(first).get("op") == "challenge":
            nonce = json.loads(first)["nonce"]
    except TimeoutError:
        first = b""
    writer.write(make_hello(nonce))
    await writer.drain()
    ops, closed = [], False
    if first and nonce is None:
        ops.append(json.loads(first)["op"])
    try:
        async with asyncio.timeout(READ_S):
            while line := await reader.readline():
                msg = json.loads(line)
                ops.append(msg["op"])
                if msg["op"] == "decode":
                    forged = {"v": 1, "op": "completed", "rid": msg["rid"], "t": 1.0,
                              "tokens": [0] * msg["output_len"], "tpot_s": 0.001}
                    writer.write(json.dumps(forged).encode() + b"\n")
                    await writer.drain()
            closed = True
    except TimeoutError:
        pass
    except ConnectionError:
        closed = True
    writer.close()
    return ops, closed


async def _wait_running(url: str, run_id: str) -> None:
    address = parse_broker_url(url)
    async with aiomqtt.Client(address.host, address.port) as client:
        await client.subscribe(f"prfaas/{run_id}/status")
        async for message in client.messages:
            if json.loads(message.payload)["state"] == "running":
                return


async def _attacks(url: str, run_id: str) -> dict[str, tuple[list[str], bool]]:
    await _wait_running(url, run_id)  # every real worker has said hello
    pid = _worker_pid(run_id, NODE)
    port = _gateway_port()
    results = {}
    results["no proof"] = await _attack(port, lambda nonce: _hello(NODE))
    results["wrong proof"] = await _attack(port, lambda nonce: _hello(NODE, proof="0" * 64))
    secret = _stolen_secret(pid)
    for name in ("remote-prefill-0", "local-prefill-0", NODE):  # argv, which `ps` shows, never holds it
        assert secret.encode() not in Path(f"/proc/{_worker_pid(run_id, name)}/cmdline").read_bytes()
    results["secret"] = secret
    for what, node in (("duplicate", NODE), ("unknown node", "local-decode-7")):
        results[what] = await _attack(port, lambda nonce, node=node: _hello(
            node, proof=auth.make_proof(secret, nonce or "0" * 64, node)))
    results["flood"] = await _flood(port)
    return results


async def _flood(port: int) -> tuple[list[str], bool]:
    """More idle connections than the gateway lets prove themselves at once (this user's class):
    each gets its challenge, and the oldest 4 are closed to make room for the newest 4."""
    conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(MAX_PENDING_HANDSHAKES + 4)]
    firsts = await asyncio.gather(*(asyncio.wait_for(r.readline(), 10.0) for r, _ in conns))
    ends = await asyncio.gather(*(asyncio.wait_for(r.read(), 10.0) for r, _ in conns[:4]))
    for _, writer in conns:
        writer.close()
    ops = [json.loads(line)["op"] if line else "closed" for line in firsts]
    assert ops == ["challenge"] * (MAX_PENDING_HANDSHAKES + 4) and ends == [b""] * 4, (ops, ends)
    return [], True


def test_a_hostile_hello_is_refused_and_the_run_keeps_its_real_tokens(
        tmp_path: Path, embedded_broker, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    sc = scenario(duration_s=6.0, workload={
        "arrival": {"kind": "poisson", "rate_per_s": 2.0}, "input_len": {"kind": "uniform", "min": 200, "max": 3000},
        "output_len": {"kind": "fixed", "tokens": 6}, "max_requests": 12})
    run_id = new_run_id()

    async def both() -> tuple[dict, dict]:
        attacker = asyncio.create_task(_attacks(embedded_broker.url, run_id))
        try:
            doc = await run_live(sc, tmp_path / "run", broker_url=embedded_broker.url, run_id=run_id)
        finally:
            results = attacker.result() if attacker.done() and not attacker.cancelled() else {}
            attacker.cancel()
        return doc, results

    doc, results = asyncio.run(both())
    secret = results.pop("secret", "")
    assert set(results) == {"no proof", "wrong proof", "duplicate", "unknown node", "flood"}, \
        "the attacks did not finish during the run"
    for what, (ops, closed) in results.items():
        assert not set(ops) & COMMANDS, f"{what}: the attacker received {ops}"
        assert closed, f"{what}: the gateway kept the connection open"
    # the real node was never declared lost, and every token came from the real model
    requests = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    assert len(requests) == len(build_requests(sc)) and (requests["status"] == "completed").all()
    assert not [r for r in caplog.records if f"{NODE} lost" in r.getMessage()]
    refusals = [r.getMessage() for r in caplog.records if "refused a connection" in r.getMessage()]
    for claimed, reason in ((NODE, "hello.proof: missing"), (NODE, "wrong proof"), (NODE, "already connected"),
                            ("local-decode-7", "not a node of this run"), ("(none)", "to make room")):
        assert [m for m in refusals if claimed in m and reason in m], (claimed, reason, refusals)
    assert secret not in caplog.text and secret not in (tmp_path / "run" / "summary.json").read_text()
    model = HybridModel(get_preset("kimi-linear-mini", "tiny", seed=sc.seed), device="cpu")
    outputs = {row["id"]: row["tokens"] for row in map(json.loads, (tmp_path / "run" / "outputs.jsonl").open())}
    for spec in build_requests(sc):
        prompt = synthesize_tokens(spec, sc.prefix_cache.block_tokens, sc.seed).tolist()
        assert outputs[spec.id] == model.generate(prompt, spec.output_len), spec.id
    assert_nothing_left(doc)


def test_a_restarted_worker_proves_itself_again_and_takes_work(tmp_path: Path) -> None:
    """After a kill the old connection is closed, so the restarted process (same node id, same
    secret, a new nonce) is admitted and serves the remote route again."""
    sc = scenario(duration_s=10.0, timeline=[{"at_s": 1.0, "kill": "remote-prefill-0"},
                                             {"at_s": 2.0, "restart": "remote-prefill-0"}],
                  workload={"arrival": {"kind": "poisson", "rate_per_s": 2.0},
                            "input_len": {"kind": "fixed", "tokens": 2048},
                            "output_len": {"kind": "fixed", "tokens": 4}, "max_requests": 20})
    doc = asyncio.run(run_live(sc, tmp_path / "run", embedded_broker=False))
    requests = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    assert any("timeline: restart remote-prefill-0" in line for line in doc["meta"]["knob_changes"])
    assert len(requests) == len(build_requests(sc))
    failed = requests[requests["status"] == "failed"]
    assert (failed["fail_reason"].str.len() > 0).all()
    back = requests[(requests["arrival_s"] > 2.0) & (requests["prefill_node"] == "remote-prefill-0")]
    assert len(back) and (back["status"] == "completed").all()
    assert_nothing_left(doc)
