"""The worker port's proof of origin: the HMAC answer to a nonce, the secret's trip through the
environment, and the gateway's handshake over a real socket (wrong, late, oversized, nested hellos)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from emulator.control.types import Cluster, Role
from emulator.errors import WorkerError
from emulator.live.launcher import WorkerPlan, WorkerProcesses
from emulator.net.ledger import Ledger
from emulator.net.names import new_run_id
from emulator.net.spec import parse_link_spec
from emulator.net.topology import Topology
from emulator.paths import REPO_ROOT
from emulator.wire import auth, protocol as p
from emulator.wire.worker_settings import WorkerSettings

from ..live.test_engine import scenario

NODE = "local-decode-1"
HEX64 = st.binary(min_size=32, max_size=32).map(bytes.hex)
NODES = st.text(min_size=1, max_size=p.MAX_NODE_CHARS)


def hello(node: str, proof: str) -> p.Hello:
    return p.Hello(node=node, roles=["prefill", "decode"], kv_port=4000, pid=1, device="cpu",
                   threads=1, proof=proof)


# ---- the proof ----


def test_the_right_secret_proves_and_anything_else_does_not():
    secret, nonce = auth.new_secret(), auth.new_nonce()
    proof = auth.make_proof(secret, nonce, NODE)
    assert auth.check_proof(secret, nonce, NODE, proof)
    assert not auth.check_proof(auth.new_secret(), nonce, NODE, proof)  # another run's secret
    assert not auth.check_proof(secret, auth.new_nonce(), NODE, proof)  # replayed on a new connection
    assert not auth.check_proof(secret, nonce, "local-decode-0", proof)  # claimed for another node
    assert not auth.check_proof(secret, nonce, NODE, "0" * 64)
    assert secret not in proof and len(proof) == 64


@settings(max_examples=200, deadline=None)
@given(HEX64, HEX64, HEX64, NODES, NODES)
def test_a_proof_holds_for_exactly_its_secret_nonce_and_node(secret, other, nonce, node, node2):
    proof = auth.make_proof(secret, nonce, node)
    assert auth.check_proof(secret, nonce, node, proof)
    assert auth.check_proof(other, nonce, node, proof) == (other == secret)
    assert auth.check_proof(secret, nonce, node2, proof) == (node2 == node)


def test_the_worker_takes_the_secret_out_of_its_environment():
    secret = auth.new_secret()
    environ = {auth.SECRET_ENV: secret, "HOME": "/root"}
    assert auth.take_secret(environ) == secret
    assert environ == {"HOME": "/root"}  # child processes no longer inherit it
    with pytest.raises(WorkerError, match=f"{auth.SECRET_ENV}: missing"):
        auth.take_secret(environ)
    bad = "not-hex-but-secret-text"
    with pytest.raises(WorkerError, match="not 64 hex digits") as err:
        auth.take_secret({auth.SECRET_ENV: bad})
    assert bad not in str(err.value)


def test_the_gate_never_shows_its_secret():
    gate = auth.WorkerGate(max_pending=2)
    assert gate.secret not in repr(gate) and gate.env() == {auth.SECRET_ENV: gate.secret}
    assert "KvHelloProof()" == repr(auth.KvHelloProof(gate.secret))


def test_a_worker_port_proof_is_no_kv_port_proof():
    """The same secret, nonce and node prove nothing on the other port: the labels differ."""
    secret, nonce = auth.new_secret(), auth.new_nonce()
    worker_proof = auth.make_proof(secret, nonce, NODE)
    assert worker_proof != auth.make_proof(secret, nonce, NODE, auth.KV_LABEL)
    assert not auth.KvHelloProof(secret).check(bytes.fromhex(nonce), NODE, bytes.fromhex(worker_proof))
    assert auth.KvHelloProof(secret).check(bytes.fromhex(nonce), NODE,
                                           bytes.fromhex(auth.make_proof(secret, nonce, NODE, auth.KV_LABEL)))


def test_a_flood_of_refusals_logs_a_bounded_number_of_lines(caplog):
    caplog.set_level(logging.WARNING)
    gate = auth.WorkerGate()
    for _ in range(10_000):
        gate.refuse(NODE, "wrong proof for this run")
    # the first ones each, then only the 2^k-th: 128, 256, ... 8192
    assert len(caplog.records) == auth.MAX_LOGGED_REFUSALS + 7
    assert "(10000 refused" not in caplog.text and "(8192 refused so far)" in caplog.text


# ---- the handshake over a real socket ----


async def _handshake(gate: auth.WorkerGate, send) -> tuple[auth.Admission, list[bytes]]:
    """Run the gate's handshake for one connection whose client answers with `send(nonce)`."""
    done: asyncio.Future[auth.Admission] = asyncio.get_running_loop().create_future()

    async def serve(reader, writer):
        done.set_result(await gate.handshake(reader, writer))
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, limit=p.STREAM_LIMIT)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    challenge = p.decode(await reader.readline())
    assert isinstance(challenge, p.Challenge)
    if (data := send(challenge.nonce)) is not None:
        writer.write(data)
        writer.write_eof()
        await writer.drain()
    admission = await asyncio.wait_for(done, 10)
    rest = (await reader.read()).splitlines()
    writer.close()
    server.close()
    return admission, rest


def case(send, claimed: str, reason: str):
    return pytest.param(send, claimed, reason, id=reason)


SECRET = auth.new_secret()


@pytest.mark.parametrize("send, claimed, reason", [
    case(lambda n: p.encode(hello(NODE, auth.make_proof(SECRET, n, NODE))), f"'{NODE}'", ""),
    case(lambda n: p.encode(hello(NODE, auth.make_proof(auth.new_secret(), n, NODE))), f"'{NODE}'",
         "wrong proof for this run"),
    case(lambda n: p.encode(hello(NODE, auth.make_proof(SECRET, "ab" * 32, NODE))), f"'{NODE}'",
         "wrong proof for this run"),
    case(lambda n: json.dumps({"v": 1, "op": "hello", "node": NODE, "roles": ["decode"], "kv_port": 1,
                               "pid": 1, "device": "cpu", "threads": 1}).encode() + b"\n", f"'{NODE}'",
         "hello.proof: missing"),
    case(lambda n: p.encode(p.Completed(rid=1, t=1.0, tokens=[0], tpot_s=0.0)), "",
         "sent completed instead of hello"),
    case(lambda n: b"[" * 3000 + b"\n", "", "nested too deeply"),
    case(lambda n: b"x" * (p.MAX_LINE_BYTES // 2) + b"\n", "", "a hello is shorter"),
    case(lambda n: b'{"v": 1, "op": "hello", "node": "local-decode-1', "", "connection closed"),
    case(lambda n: None, "", "no hello within 0.5 s"),
])
def test_the_handshake_admits_only_a_proven_hello(send, claimed, reason):
    gate = auth.WorkerGate(SECRET, timeout_s=0.5)
    admission, rest = asyncio.run(_handshake(gate, send))
    assert admission.claimed == claimed
    assert reason in admission.reason and (admission.reason == "") == (reason == "")
    assert (admission.hello is not None) == (reason == "")
    assert rest == []  # the handshake sends the challenge, nothing else
    assert SECRET not in admission.reason


def test_claimed_node_is_printable_and_clipped():
    line = json.dumps({"node": "evil\n" + "x" * 500}).encode()
    assert "\n" not in p.claimed_node(line) and len(p.claimed_node(line)) <= p.MAX_NODE_CHARS + 2
    assert p.claimed_node(b"[" * 5000) == p.claimed_node(b"{not json") == ""


# ---- the worker's side, as a process ----


def settings_file(tmp_path: Path, port: int) -> str:
    """A worker's settings naming the gateway's port (the default settings: the tiny model on cpu)."""
    return str(WorkerSettings(gateway_port=port).write(tmp_path / "settings.json"))


@pytest.mark.live
def test_a_worker_refuses_a_gateway_that_sends_no_challenge(tmp_path):
    """Whatever answers on the gateway's port must challenge first; the worker exits 2 in one line."""
    async def main() -> subprocess.CompletedProcess:
        async def serve(reader, writer):
            writer.write(p.encode(p.Shutdown()))
            await writer.drain()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        env = {**os.environ, "OMP_NUM_THREADS": "1",
               auth.SECRET_ENV: auth.new_secret()}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "emulator.worker", "--node", "remote-prefill-0", "--settings",
            settings_file(tmp_path, port), cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 120)
        server.close()
        return subprocess.CompletedProcess([], proc.returncode, out, err)

    done = asyncio.run(main())
    err = done.stderr.decode()
    assert done.returncode == 2 and err.count("\n") == 1, err
    assert "settings.gateway_port: sent shutdown before a challenge" in err


@pytest.mark.live
def test_a_worker_without_the_secret_exits_2_naming_the_variable(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != auth.SECRET_ENV}
    done = subprocess.run([sys.executable, "-m", "emulator.worker", "--node", "local-decode-0",
                           "--settings", settings_file(tmp_path, 1)], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and f"{auth.SECRET_ENV}: missing" in done.stderr


@pytest.mark.live
def test_the_launcher_hands_each_worker_the_secret_in_its_environment_not_argv(tmp_path):
    """A worker the launcher starts proves itself with the run's secret, which its argv lacks, and
    finds the gateway through its settings file (its owner's only), not argv either."""
    sc = scenario()
    run_id = new_run_id()
    topology = Topology(parse_link_spec({"bandwidth_mbit": 100}), backend="proxy", run_id=run_id).up()

    async def main() -> tuple[str, p.Hello, bytes]:
        got: asyncio.Future[tuple[str, p.Hello]] = asyncio.get_running_loop().create_future()

        async def serve(reader, writer):
            nonce = auth.new_nonce()
            await p.write_message(writer, p.Challenge(nonce=nonce))
            got.set_result((nonce, await p.read_message(reader)))
            await p.write_message(writer, p.Shutdown())

        server = await asyncio.start_server(serve, "127.0.0.1", 0, limit=p.STREAM_LIMIT)
        port = server.sockets[0].getsockname()[1]
        workers = WorkerProcesses(sc, topology, port, tmp_path, Ledger.open(run_id))
        proc = workers.start(WorkerPlan(Cluster.REMOTE, 0, Role.PREFILL))
        try:
            nonce, msg = await asyncio.wait_for(got, 120)
            argv = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
            assert auth.check_proof(workers.gate.secret, nonce, "remote-prefill-0", msg.proof)
            assert str(port).encode() not in argv and b"--gateway" not in argv
            return workers.gate.secret, msg, argv
        finally:
            workers.stop_all()
            server.close()

    try:
        secret, msg, argv = asyncio.run(main())
    finally:
        topology.down()
    assert msg.node == "remote-prefill-0" and secret.encode() not in argv
    assert secret not in (tmp_path / "remote-prefill-0.log").read_text()
    settings = tmp_path / "remote-prefill-0.settings.json"
    assert settings.stat().st_mode & 0o777 == 0o600 and secret not in settings.read_text()


def test_the_settings_file_is_rewritten_its_owners_only(tmp_path):
    """Written 0600 even over a file that was world-readable, and never through a symlink."""
    path = tmp_path / "s.json"
    path.write_text("{}")
    path.chmod(0o644)
    WorkerSettings(gateway_port=4000).write(path)
    assert path.stat().st_mode & 0o777 == 0o600
    (tmp_path / "link.json").symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(OSError):
        WorkerSettings(gateway_port=4000).write(tmp_path / "link.json")
    assert not (tmp_path / "elsewhere.json").exists()
