"""Fixtures for live-worker tests: the test plays the gateway, spawns real worker processes and,
with root, a real tun topology; every process and namespace is removed afterwards."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from emulator.net.ledger import sweep
from emulator.net.names import new_run_id
from emulator.net.spec import parse_link_spec
from emulator.net.topology import Topology
from emulator.wire import auth, protocol as p
from emulator.wire.worker_settings import WorkerSettings
from model_stub import HybridModel, get_preset

REPO_ROOT = Path(__file__).resolve().parents[3]
PRESET, SIZE, SEED = "kimi-linear-mini", "tiny", 1234
WAIT_S = 30.0
SECRET = auth.new_secret()  # what the launcher would hand every worker of a run


class ControlServer:
    """The gateway's side of the control protocol, recording every message by node, in order."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, p.Message]] = []
        self.writers: dict[str, asyncio.StreamWriter] = {}
        self.closed: set[str] = set()
        self._new = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0,
                                                  limit=p.STREAM_LIMIT)
        return self._server.sockets[0].getsockname()[1]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._handlers.add(asyncio.current_task())
        nonce = auth.new_nonce()
        await p.write_message(writer, p.Challenge(nonce=nonce))
        hello = await p.read_message(reader)
        node = hello.node
        assert auth.check_proof(SECRET, nonce, node, hello.proof), f"{node}: wrong proof"
        self.writers[node] = writer
        try:
            msg = hello
            while msg is not None:
                self.messages.append((node, msg))
                self._new.set()
                msg = await p.read_message(reader)
        finally:
            self.closed.add(node)
            self._new.set()

    def of(self, node: str, op: str) -> list[p.Message]:
        return [m for n, m in self.messages if n == node and m.op == op]

    async def wait_until(self, predicate, what: str, node: str, timeout: float = WAIT_S):
        """The first recorded message of `node` that satisfies `predicate`; a closed connection
        ends the wait."""
        async def find() -> p.Message:
            while True:
                for n, m in self.messages:
                    if n == node and predicate(m):
                        return m
                if node in self.closed:
                    raise AssertionError(f"{node} closed its control connection before {what}")
                self._new.clear()
                await self._new.wait()

        return await asyncio.wait_for(find(), timeout)

    async def wait(self, node: str, op: str, rid: int | None = None,
                   timeout: float = WAIT_S) -> p.Message:
        """The first `op` (for `rid`) from `node`; a `failed` for that rid fails the test."""
        def match(m: p.Message) -> bool:
            if rid is not None and getattr(m, "rid", None) != rid:
                return False
            if m.op == "failed" and op != "failed":
                raise AssertionError(f"{node}: request {rid} failed: {m}")
            return m.op == op

        return await self.wait_until(match, f"{op} {rid}", node, timeout)

    async def wait_closed(self, node: str, timeout: float = WAIT_S) -> None:
        async def closed() -> None:
            while node not in self.closed:
                self._new.clear()
                await self._new.wait()

        await asyncio.wait_for(closed(), timeout)

    async def send(self, node: str, *msgs: p.Message) -> None:
        """Send `msgs` in one write (after the node's hello), so the worker reads them together."""
        await self.wait(node, "hello")
        writer = self.writers[node]
        writer.write(b"".join(p.encode(m) for m in msgs))
        await writer.drain()

    async def close(self) -> None:
        for writer in self.writers.values():
            writer.close()
        if self._server is not None:
            self._server.close()
        await asyncio.wait_for(asyncio.gather(*self._handlers, return_exceptions=True), WAIT_S)


@pytest.fixture
def spawn(tmp_path):
    """Start `python -m emulator.worker` processes; kills any still alive at the end."""
    procs: list[subprocess.Popen] = []

    def start(node: str, port: int, netns: str = "", kv_addr: str = "127.0.0.1", **settings):
        log_path = tmp_path / f"{node}.log"
        path = WorkerSettings(gateway_port=port, netns=netns, kv_addr=kv_addr, preset=PRESET, size=SIZE, seed=SEED,
                              device="cpu", threads=1, connections=2, **settings).write(
            tmp_path / f"{node}.settings.json")
        command = [sys.executable, "-m", "emulator.worker", "--node", node, "--settings", str(path)]
        env = {**os.environ, "OMP_NUM_THREADS": "1",
               auth.SECRET_ENV: SECRET}
        with open(log_path, "wb") as log_file:
            proc = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=log_file,
                                    stderr=subprocess.STDOUT)
        proc.log_path = log_path
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


@pytest.fixture(scope="module")
def reference():
    """Greedy tokens from one process, the model every worker builds from the same seed."""
    model = HybridModel(get_preset(PRESET, SIZE, seed=SEED), device="cpu")
    return lambda prompt, n: model.generate(list(prompt), n)


@pytest.fixture(scope="module")
def topology():
    """remote and local namespaces joined by a shaped tun link (200 Mbit/s, 5 ms)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: namespaces and TUN need CAP_NET_ADMIN")
    run_id = new_run_id()
    topo = Topology(parse_link_spec({"bandwidth_mbit": 200, "delay_ms": 5}), backend="tun",
                    run_id=run_id)
    try:
        yield topo.up()
    finally:
        topo.down()
        sweep(run_id, force=True)
