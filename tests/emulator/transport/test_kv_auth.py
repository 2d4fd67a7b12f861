"""The KV port proves its peers (issue 25): a receiver challenges each connection with a fresh
nonce and takes chunks only after a HELLO whose proof is keyed by the run's secret. Until then a
connection touches no reassembly state, holds only a handshake slot (until the proof deadline, or
until a newer connection needs the slot) and never counts against the proven senders' limits.

Real sockets on 127.0.0.1, a real receiver and sender; the attacker is raw bytes."""

from __future__ import annotations

import asyncio
import socket
import zlib

import pytest

from emulator.transport.frames import (
    HEADER_BYTES,
    ChunkHeader,
    FrameType,
    challenge,
    decode_header,
    encode_header,
    hello,
)
from emulator.transport.receiver import KVReceiver
from emulator.transport.sender import KVSender
from emulator.wire import auth
from emulator.worker.kv_decoder import ModelKVDecoder
from model_stub import HybridModel, get_preset
from model_stub.serialize import encode_cache

from .kv_peer import PROOF, SENDER, challenged, closed_by_peer, read_frame

LEGACY_HELLO = encode_header(ChunkHeader(FrameType.HELLO, 0))  # what every sender sent before issue 25


@pytest.fixture(scope="module")
def shipped():
    """The tiny model's config and the layer frames of one real prefill."""
    model = HybridModel(get_preset("kimi-linear-mini", "tiny"), device="cpu")
    _, cache = model.prefill(list(range(40, 240)) * 2)
    return model.config, list(encode_cache(cache))


def listener() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    return sock


def data_chunk(request_id: int, layer: int, num_layers: int, layer_bytes: int, payload: bytes) -> bytes:
    header = ChunkHeader(FrameType.DATA, request_id, layer, num_layers, 0, 1 if len(payload) == layer_bytes else 2,
                         layer_bytes, 0, len(payload), zlib.crc32(payload))
    return encode_header(header) + payload


async def deliver(frames: list[bytes], target: tuple[str, int], request_id: int, proof=PROOF, **sender_kw):
    sender = KVSender(socket.socket, target, proof=proof, sender_id=SENDER, **sender_kw)
    await sender.start()
    try:
        for i, frame in enumerate(frames):
            sender.send_layer(request_id, i, len(frames), frame)
        return await sender.finish(request_id, deadline_s=30)
    finally:
        await sender.close()


def untouched(receiver: KVReceiver) -> bool:
    """No reassembly state, no failure to report, no byte counted: what an unproven peer may cause."""
    return (not receiver.reassembler.partial and receiver.reassembler.bytes_in_use == 0
            and not receiver.failures and not receiver.first_chunk_at and receiver.bytes_received == 0
            and receiver.reassembler.finished(1) is None)


def other_secret(nonce: bytes) -> bytes:
    return hello(auth.KvHelloProof(auth.new_secret()).prove(nonce, SENDER), SENDER)


def worker_port_proof(nonce: bytes) -> bytes:
    """The worker port's proof for the same secret, nonce and node: another label, so no proof here."""
    return hello(bytes.fromhex(auth.make_proof(PROOF._secret, nonce.hex(), SENDER)), SENDER)


@pytest.mark.parametrize("first", [
    pytest.param(lambda nonce: LEGACY_HELLO, id="hello without a proof"),
    pytest.param(other_secret, id="another run's secret"),
    pytest.param(worker_port_proof, id="the worker port's proof"),
    pytest.param(lambda nonce: hello(PROOF.prove(nonce, "local-prefill-0"), SENDER), id="proof for another sender"),
    pytest.param(lambda nonce: hello(PROOF.prove(bytes(32), SENDER), SENDER), id="proof for another nonce"),
    pytest.param(lambda nonce: b"", id="data first"),
])
def test_a_connection_without_a_valid_proof_is_closed_and_touches_nothing(shipped, first):
    config, frames = shipped

    async def main():
        sock = listener()
        receiver = KVReceiver(ModelKVDecoder(config), lambda rid, cache: None, proof=PROOF)
        await receiver.start(sock)
        reader, writer, nonce = await challenged(sock.getsockname())
        writer.write(first(nonce) + data_chunk(1, 0, len(frames), len(frames[0]), frames[0]))
        closed = await closed_by_peer(reader)
        state = untouched(receiver), receiver.num_connections
        writer.close()
        await receiver.close()
        return closed, state

    closed, (is_untouched, num_connections) = asyncio.run(main())
    assert closed and is_untouched and num_connections == 0


def test_a_proof_replayed_on_another_connection_is_refused(shipped):
    """A proof answers one nonce: sent again on a second connection (another nonce) it proves nothing,
    while the connection it was made for stays open."""
    config, _ = shipped

    async def main():
        sock = listener()
        receiver = KVReceiver(ModelKVDecoder(config), lambda rid, cache: None, proof=PROOF)
        await receiver.start(sock)
        first_reader, first_writer, nonce = await challenged(sock.getsockname())
        proven = hello(PROOF.prove(nonce, SENDER), SENDER)
        first_writer.write(proven)
        reader, writer, _ = await challenged(sock.getsockname())
        writer.write(proven)  # observed, replayed
        replay_closed = await closed_by_peer(reader)
        first_open = not first_reader.at_eof() and receiver.num_connections == 1
        first_writer.close()
        writer.close()
        await receiver.close()
        return replay_closed, first_open

    assert asyncio.run(main()) == (True, True)


def test_a_silent_connection_and_a_proven_hello_without_data_are_closed_at_their_deadlines(shipped):
    """Silent: closed at the proof deadline. Proven, then nothing: closed after the stall timeout.
    A proven sender whose connections carried data may stay idle between requests (the existing
    trust test covers it)."""
    config, _ = shipped

    async def main():
        sock = listener()
        receiver = KVReceiver(ModelKVDecoder(config), lambda rid, cache: None, proof=PROOF,
                              handshake_timeout_s=0.3, stall_timeout_s=0.5)
        await receiver.start(sock)
        silent = await asyncio.open_connection(*sock.getsockname())
        reader, writer, nonce = await challenged(sock.getsockname())
        writer.write(hello(PROOF.prove(nonce, SENDER), SENDER))
        closed = [await closed_by_peer(silent[0]), await closed_by_peer(reader)]
        silent[1].close()
        writer.close()
        await receiver.close()
        return closed

    assert asyncio.run(main()) == [True, True]


@pytest.mark.parametrize("attack", ["hello", "silent"])
def test_256_idle_sockets_do_not_stop_a_proven_sender(shipped, attack):
    """The report: 256 sockets that sent HELLO and then nothing were never closed and held the
    per-peer limit, so no request completed. Here they stay open while a proven sender delivers
    (from the same address, so a per-address limit could not tell them apart)."""
    config, frames = shipped

    async def main():
        sock = listener()
        receiver = KVReceiver(ModelKVDecoder(config), lambda rid, cache: None, proof=PROOF)
        await receiver.start(sock)
        idle = [await asyncio.open_connection(*sock.getsockname()) for _ in range(256)]
        if attack == "hello":
            for _, writer in idle:
                writer.write(LEGACY_HELLO)
        await asyncio.sleep(0.2)  # let the receiver see every one of them first
        result = await deliver(frames, sock.getsockname(), request_id=1)
        for _, writer in idle:
            writer.close()
        await receiver.close()
        return result

    result = asyncio.run(main())
    assert result.status == "delivered", result


@pytest.mark.parametrize("who", ["unproven", "another proven sender"])
def test_a_refused_chunk_cannot_poison_a_request_id(shipped, who):
    """The report: a peer that sent a refused chunk first for a request id made every later chunk of
    it fail 'already failed here'. An unproven peer is closed before it names an id; another proven
    sender is answered FAIL for its own chunk, and the request is neither failed nor reported."""
    config, frames = shipped
    growing = next(i for i, kind in enumerate(config.layer_kinds) if kind.is_growing)
    poison = data_chunk(1, growing, config.num_layers, 2**30, b"7 bytes")  # beyond any layer of this model

    async def main():
        sock = listener()
        arrived = {}
        receiver = KVReceiver(ModelKVDecoder(config), arrived.__setitem__, proof=PROOF)
        await receiver.start(sock)
        if who == "unproven":  # it does not wait for the challenge
            reader, writer = await asyncio.open_connection(*sock.getsockname())
            writer.write(poison)
            answer = "closed" if await closed_by_peer(reader) else "open"
        else:
            reader, writer, nonce = await challenged(sock.getsockname())
            writer.write(hello(PROOF.prove(nonce, "local-prefill-0"), "local-prefill-0") + poison)
            answer = (await read_frame(reader))[0].type.name
        result = await deliver(frames, sock.getsockname(), request_id=1)
        writer.close()
        failures = receiver.take_failures()
        await receiver.close()
        return answer, result, arrived, failures

    answer, result, arrived, failures = asyncio.run(main())
    assert answer == ("closed" if who == "unproven" else "FAIL")
    assert result.status == "delivered", result
    assert 1 in arrived and failures == []


def test_a_sender_with_the_wrong_secret_fails_its_transfer_with_a_reason(shipped):
    """The receiver closes each connection whose proof fails; the sender gives up after its
    reconnects and says why, instead of waiting out its deadline."""
    config, frames = shipped

    async def main():
        sock = listener()
        receiver = KVReceiver(ModelKVDecoder(config), lambda rid, cache: None, proof=PROOF)
        await receiver.start(sock)
        result = await deliver(frames, sock.getsockname(), request_id=1, proof=auth.KvHelloProof(auth.new_secret()),
                               num_connections=1, max_reconnects=2)
        state = untouched(receiver)
        await receiver.close()
        return result, state

    result, is_untouched = asyncio.run(main())
    assert result.status == "failed" and result.reason.startswith("link:"), result
    assert is_untouched


def test_the_challenge_and_hello_round_trip_byte_for_byte():
    nonce = PROOF.new_nonce()
    header = decode_header(challenge(nonce)[:HEADER_BYTES])
    assert header.type is FrameType.CHALLENGE and challenge(nonce)[HEADER_BYTES:] == nonce
    frame = hello(PROOF.prove(nonce, SENDER), SENDER)
    header = decode_header(frame[:HEADER_BYTES])
    assert header.type is FrameType.HELLO and header.length == 32 + len(SENDER)
    assert PROOF.check(nonce, SENDER, frame[HEADER_BYTES:HEADER_BYTES + 32])
    assert not PROOF.check(PROOF.new_nonce(), SENDER, frame[HEADER_BYTES:HEADER_BYTES + 32])
    assert "secret" not in repr(PROOF) and PROOF._secret not in repr(PROOF)


def test_a_flood_of_unproven_connections_logs_a_bounded_number_of_lines(shipped, caplog):
    """Each refused connection is counted; the log says so at most every 10 s (a peer may send
    garbage in a loop: 3,000 lines in one short live run before)."""
    config, _ = shipped
    caplog.set_level("WARNING")

    async def main():
        sock = listener()
        receiver = KVReceiver(ModelKVDecoder(config), lambda rid, cache: None, proof=PROOF)
        await receiver.start(sock)
        for first in (LEGACY_HELLO, data_chunk(1, 0, 1, 8, b"x")) * 100:
            reader, writer = await asyncio.open_connection(*sock.getsockname())
            writer.write(first)
            assert await closed_by_peer(reader)
            writer.close()
        refused = receiver.refused_connections
        await receiver.close()
        return refused

    assert asyncio.run(main()) == 200
    lines = [r for r in caplog.records if "KV connection" in r.getMessage()]
    assert 1 <= len(lines) <= 2, [r.getMessage() for r in lines]
