"""The worker port's handshake slots (issue 25): idle connections, however many and from whichever
user, cannot keep the run's workers from proving themselves.

Slots are per class of peer: the gateway's own user (the run's workers run as it) and everyone else,
told apart by the kernel (emulator/net/peer_uid.py). In each class a newcomer always gets its
challenge: when the class's slots are all taken, its oldest unproven connection is closed. Real
sockets and the gate's own accept path (`WorkerGate.admit`, which the session calls)."""

from __future__ import annotations

import asyncio
import os
import subprocess

import pytest

from emulator.limits import MAX_PENDING_HANDSHAKES
from emulator.net.peer_uid import peer_uid
from emulator.wire import auth, protocol as p

from ..live.attackers import SILENT_HOLDER, as_nobody

WAIT_S = 10.0  # a liveness bound, not a timing assertion
NODES = ["remote-prefill-0", "local-prefill-0", "local-decode-1"]
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the attacker runs as another user")


def hello(node: str, nonce: str, secret: str) -> bytes:
    return p.encode(p.Hello(node=node, roles=["prefill"], kv_port=None, pid=os.getpid(), device="cpu", threads=1,
                            proof=auth.make_proof(secret, nonce, node)))


async def worker(port: int, node: str, secret: str) -> None:
    """What a worker does on the control port: read the challenge, answer it, stay connected."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    challenge = p.decode(await asyncio.wait_for(reader.readline(), WAIT_S))
    assert isinstance(challenge, p.Challenge), challenge
    writer.write(hello(node, challenge.nonce, secret))
    await writer.drain()
    return writer


async def gateway(gate: auth.WorkerGate, admitted: dict[str, auth.Admission], refused: list[auth.Admission]):
    """A listener whose connections go through the gate's accept path, as the session's do."""
    async def serve(reader, writer):
        admission = await gate.admit(reader, writer)
        if admission.hello is None:
            refused.append(admission)
            writer.close()
            return
        admitted[admission.hello.node] = admission
        await reader.read()  # held open, as a node's connection is

    return await asyncio.start_server(serve, "127.0.0.1", 0, limit=p.STREAM_LIMIT)


async def until(predicate) -> None:
    async with asyncio.timeout(WAIT_S):
        while not predicate():
            await asyncio.sleep(0.01)


def test_silent_connections_of_the_same_user_do_not_keep_workers_out():
    """More silent connections than there are slots, all held open: each worker still gets its
    challenge (the oldest silent one makes room) and is admitted."""
    gate = auth.WorkerGate(peer_uid=peer_uid)

    async def main():
        admitted, refused = {}, []
        server = await gateway(gate, admitted, refused)
        port = server.sockets[0].getsockname()[1]
        silent = [await asyncio.open_connection("127.0.0.1", port) for _ in range(MAX_PENDING_HANDSHAKES + 8)]
        await until(lambda: gate.num_pending == MAX_PENDING_HANDSHAKES)
        workers = [await worker(port, node, gate.secret) for node in NODES]
        await until(lambda: len(admitted) == len(NODES))
        for _, w in silent:
            w.close()
        for w in workers:
            w.close()
        server.close()
        return admitted, refused

    admitted, refused = asyncio.run(main())
    assert sorted(admitted) == sorted(NODES)
    assert [r for r in refused if "make room" in r.reason]  # the silent ones were the ones closed


@needs_root
@pytest.mark.root
def test_another_users_connections_never_take_the_run_users_slots():
    """The attack of the report (silent connections filled every slot and the run failed at start),
    by another local user who also reopens each connection the gateway closes: that user's
    connections share their own slots, and every worker is admitted."""
    gate = auth.WorkerGate(peer_uid=peer_uid)

    async def main():
        admitted, refused = {}, []
        server = await gateway(gate, admitted, refused)
        port = server.sockets[0].getsockname()[1]
        attacker = as_nobody(SILENT_HOLDER, str(4 * MAX_PENDING_HANDSHAKES), "0.02", stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, text=True)
        try:
            attacker.stdin.write(f"{port}\n")
            attacker.stdin.flush()
            await until(lambda: gate.num_pending_of(auth.PeerClass.OTHER) == MAX_PENDING_HANDSHAKES)
            workers = [await worker(port, node, gate.secret) for node in NODES]
            await until(lambda: len(admitted) == len(NODES))
            others = gate.num_pending_of(auth.PeerClass.OTHER)
        finally:
            attacker.kill()
            attacker.wait()
        for w in workers:
            w.close()
        server.close()
        return admitted, refused, others

    admitted, refused, others = asyncio.run(main())
    assert sorted(admitted) == sorted(NODES)
    assert others == MAX_PENDING_HANDSHAKES  # the attacker's class stayed full the whole time
    assert refused and all(r.hello is None for r in refused)


def test_a_gate_without_a_peer_lookup_puts_everyone_in_one_class():
    gate = auth.WorkerGate()

    async def main():
        admitted, refused = {}, []
        server = await gateway(gate, admitted, refused)
        port = server.sockets[0].getsockname()[1]
        silent = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
        await until(lambda: gate.num_pending == 3)
        counts = {c: gate.num_pending_of(c) for c in auth.PeerClass}
        for _, w in silent:
            w.close()
        server.close()
        return counts

    assert asyncio.run(main()) == {auth.PeerClass.OWNER: 0, auth.PeerClass.OTHER: 3}


def test_a_worker_on_another_host_is_admitted_on_its_proof_alone():
    """A worker on another Ray node (issue 30): the kernel cannot name its user (peer_uid is None
    off this host), so it takes an OTHER slot, and its proof admits it; a wrong proof does not."""
    gate = auth.WorkerGate(peer_uid=lambda sock: None)  # what peer_uid answers for a peer on another host

    async def main():
        admitted, refused = {}, []
        server = await gateway(gate, admitted, refused)
        port = server.sockets[0].getsockname()[1]
        good = await worker(port, "remote-prefill-0", gate.secret)
        bad = await worker(port, "local-prefill-0", auth.new_secret())
        await until(lambda: admitted and refused)
        good.close()
        bad.close()
        server.close()
        return set(admitted), [a.reason for a in refused]

    assert asyncio.run(main()) == ({"remote-prefill-0"}, ["wrong proof for this run"])
