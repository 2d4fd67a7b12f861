"""A live run under the attacks of issue 25 on its two ports: every request still completes.

- Worker port, during start-up: another local user keeps 24 silent connections to the gateway's
  port (more than its 16 handshake slots), reopening each one the gateway closes. Before issue 25
  they filled every slot, the workers were refused and the run failed at start.
- KV ports (every local worker's), during the run: root inside each datacenter's namespace keeps
  256 connections that send a proof-less HELLO and then nothing (they held the per-peer limit: 0 of
  12 requests completed), and sends, unproven, a refused chunk for every request id (each id was
  poisoned: 12 of 12 failed).
- No worker's argv names the gateway's port or holds the secret, and another user can read neither
  a worker's environment nor its settings file.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from emulator.limits import MAX_PENDING_HANDSHAKES
from emulator.live.session import run_live
from emulator.net.ledger import Ledger
from emulator.net.names import netns_name, new_run_id
from emulator.net.topology import LOCAL, REMOTE
from emulator.transport import frames
from emulator.wire import auth
from emulator.workload.build import build_requests
from emulator.workload.tokens import synthesize_tokens
from model_stub import HybridModel, get_preset

from . import attackers
from .test_engine import assert_nothing_left, scenario

pytestmark = [pytest.mark.root, pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces, and attackers of other users")]
POLL_S = 0.02
KV_IDLE = 256  # per namespace, as in the report


async def _poll(find, what: str, timeout_s: float = 120.0):
    try:
        async with asyncio.timeout(timeout_s):
            while not (found := await asyncio.to_thread(find)):
                await asyncio.sleep(POLL_S)
    except TimeoutError:
        raise AssertionError(f"{what} did not appear within {timeout_s:g} s") from None
    return found


def _worker_pids(run_id: str) -> dict[str, int]:
    return {e["name"]: int(e["pid"]) for e in Ledger.open(run_id).entries
            if e.get("kind") == "pid" and e.get("name", "").startswith(("remote-", "local-"))}


class Attacks:
    """The attackers of one run, started as soon as the ports they aim at exist."""

    def __init__(self, run_id: str, out: Path) -> None:
        self.run_id, self.out = run_id, out
        self.procs: list[subprocess.Popen] = []
        self.gateway_port = 0
        self.kv_targets: set[tuple[str, int]] = set()
        self.argv: dict[str, bytes] = {}
        self.nobody_reads: dict[str, str] = {}
        self.settings_modes: dict[str, int] = {}
        self.secret = ""

    async def run(self, baseline: set[int], num_local: int) -> None:
        """`num_local`: the local workers, each of which listens for KV (any may be flipped to decode)."""
        holder = attackers.as_nobody(attackers.SILENT_HOLDER, str(MAX_PENDING_HANDSHAKES + 8), "0.05",
                                     stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.procs.append(holder)
        ports = await _poll(lambda: attackers.own_listening_ports(os.getpid()) - baseline, "the gateway's port")
        self.gateway_port = min(ports)
        holder.stdin.write(f"{self.gateway_port}\n")
        holder.stdin.flush()
        local = netns_name(self.run_id, LOCAL)
        self.kv_targets = await _poll(lambda: (t if len(t := attackers.netns_listeners(local)) == num_local else None),
                                      "every local worker's KV port")
        for (host, port) in sorted(self.kv_targets):
            for dc in (LOCAL, REMOTE):
                self.procs.append(attackers.in_netns(
                    netns_name(self.run_id, dc), attackers.KV_ATTACKER, host, str(port), str(KV_IDLE),
                    str(frames.VERSION), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        await self._inspect_workers()

    async def _inspect_workers(self) -> None:
        """While the run runs: each worker's argv, and what another user can read of it."""
        pids = await _poll(lambda: (p if len(p := _worker_pids(self.run_id)) == 3 else None), "three workers")
        environ = Path(f"/proc/{pids['local-decode-1']}/environ").read_bytes().split(b"\0")
        prefix = f"{auth.SECRET_ENV}=".encode()
        self.secret = next(v[len(prefix):] for v in environ if v.startswith(prefix)).decode()
        self.argv = {name: Path(f"/proc/{pid}/cmdline").read_bytes() for name, pid in pids.items()}
        paths = [f"/proc/{pid}/{what}" for pid in pids.values() for what in ("cmdline", "environ")]
        settings = [self.out / "logs" / f"{name}.settings.json" for name in pids]
        self.settings_modes = {path.name: path.stat().st_mode & 0o777 for path in settings}
        self.nobody_reads = await asyncio.to_thread(attackers.readable_by_nobody, paths + list(map(str, settings)))

    def stop(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(30)


def test_every_request_completes_while_both_ports_are_attacked(tmp_path: Path, embedded_broker,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    sc = scenario(duration_s=6.0, workload={
        "arrival": {"kind": "poisson", "rate_per_s": 2.0}, "input_len": {"kind": "uniform", "min": 200, "max": 3000},
        "output_len": {"kind": "fixed", "tokens": 6}, "max_requests": 12})
    run_id, out = new_run_id(), tmp_path / "run"
    attacks = Attacks(run_id, out)

    async def both() -> dict:
        baseline = attackers.own_listening_ports(os.getpid())
        attacker = asyncio.create_task(attacks.run(baseline, sc.clusters.local.instances))
        try:
            return await run_live(sc, out, broker_url=embedded_broker.url, run_id=run_id)
        finally:
            attacks.stop()
            if attacker.done() and not attacker.cancelled() and attacker.exception():
                raise attacker.exception()
            attacker.cancel()

    doc = asyncio.run(both())
    assert attacks.gateway_port and attacks.kv_targets and attacks.argv, "the attacks did not start during the run"
    requests = pd.read_parquet(out / "requests.parquet")
    assert len(requests) == len(build_requests(sc)) > 0
    assert (requests["status"] == "completed").all(), requests[["id", "status", "fail_reason"]]
    model = HybridModel(get_preset("kimi-linear-mini", "tiny", seed=sc.seed), device="cpu")
    outputs = {row["id"]: row["tokens"] for row in map(json.loads, (out / "outputs.jsonl").open())}
    for spec in build_requests(sc):
        prompt = synthesize_tokens(spec, sc.prefix_cache.block_tokens, sc.seed).tolist()
        assert outputs[spec.id] == model.generate(prompt, spec.output_len), spec.id
    # the attacks landed: the gateway closed the other user's connections, the decode worker the KV ones
    refusals = [r.getMessage() for r in caplog.records if "worker port: refused" in r.getMessage()]
    assert [m for m in refusals if "make room" in m or "no hello" in m], refusals[:5]
    for name in ("local-prefill-0", "local-decode-1"):
        log = (out / "logs" / f"{name}.log").read_text()
        assert "KV connection from" in log and "refused so far" in log, (name, log[-2000:])
        assert log.count("\n") < 100, (name, log.count("\n"))  # refusals are logged at most every 10 s
    # nothing to read in argv, nothing readable for another user
    for name, argv in attacks.argv.items():
        assert str(attacks.gateway_port).encode() not in argv and b"--gateway" not in argv, (name, argv)
        assert attacks.secret and attacks.secret.encode() not in argv, name
    for path, result in attacks.nobody_reads.items():
        assert result == ("readable" if path.endswith("cmdline") else "denied"), (path, result)
    assert set(attacks.settings_modes.values()) == {0o600}, attacks.settings_modes  # whatever folder holds them
    assert_nothing_left(doc)
