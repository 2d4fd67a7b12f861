"""KV transfer end to end: a real model's cache crosses real sockets (and a shaped link) intact."""

from __future__ import annotations

import asyncio
import socket

import pytest

from emulator.net.spec import parse_link_spec
from emulator.net.topology import LOCAL, REMOTE, Topology
from emulator.transport.congestion import CongestionMonitor
from emulator.transport.frames import HEADER_BYTES
from emulator.transport.receiver import KVReceiver
from emulator.transport.sender import KVSender, TransferFailure
from emulator.worker.kv_decoder import ModelKVDecoder
from model_stub import HybridModel, get_preset
from model_stub.serialize import encode_layer

from ..net.conftest import needs_root
from .kv_peer import PROOF, SENDER

PROMPT = list(range(40, 240)) * 2  # 400 tokens
HELLO_BYTES = HEADER_BYTES + 32 + len(SENDER)  # a HELLO frame: header, proof, sender id


@pytest.fixture(scope="module")
def model():
    return HybridModel(get_preset("kimi-linear-mini", "tiny"), device="cpu")


def loopback_listener() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


async def transfer(model, make_socket, listener, target, request_id=1, during=None, **sender_kw):
    """Prefill, stream each layer as it completes, and decode from what arrived."""
    arrived = {}
    receiver = KVReceiver(ModelKVDecoder(model.config), lambda rid, cache: arrived.__setitem__(rid, cache), proof=PROOF)
    await receiver.start(listener)
    sender = KVSender(make_socket, target, proof=PROOF, sender_id=SENDER, **sender_kw)
    await sender.start()
    num_layers = model.config.num_layers
    loop = asyncio.get_running_loop()

    def prefill():
        return model.prefill(PROMPT, on_layer_done=lambda i, layer: sender.send_layer(
            request_id, i, num_layers, encode_layer(i, layer, len(PROMPT))))

    logits, cache = await loop.run_in_executor(None, prefill)
    if during is not None:
        await during(sender)
    result = await sender.finish(request_id, deadline_s=30)
    await sender.close()
    await receiver.close()
    return result, arrived.get(request_id), int(logits.argmax()), cache, sender, receiver


def assert_same_generation(model, arrived, first_token, reference_cache):
    for a, b in zip(arrived.layers, reference_cache.layers, strict=True):
        assert all(x.equal(y) for x, y in zip(a.tensors, b.tensors, strict=False))  # bit-exact
    assert model.greedy_continue(arrived, first_token, 16) == model.generate(PROMPT, 16)


def test_cache_crosses_loopback_bit_exact_and_decodes_the_same_tokens(model):
    listener = loopback_listener()
    monitor = CongestionMonitor()
    result, arrived, first, cache, sender, receiver = asyncio.run(
        transfer(model, socket.socket, listener, listener.getsockname(), chunk_bytes=4096, monitor=monitor))
    assert result.status == "delivered", result
    assert_same_generation(model, arrived, first, cache)
    assert sender.resent_chunks == 0
    # egress per destination counts every byte put on the wire, headers included
    assert monitor.bytes_sent_to == {sender.destination: sender.bytes_sent}
    assert sender.bytes_sent > receiver.bytes_received == sum(len(f) for f in map(
        lambda i: encode_layer(i, cache.layers[i], len(PROMPT)), range(len(cache.layers))))


def test_a_killed_connection_mid_transfer_still_delivers(model):
    listener = loopback_listener()

    async def kill_one(sender):
        sender.sockets[0].shutdown(socket.SHUT_RDWR)

    result, arrived, first, cache, *_ = asyncio.run(transfer(
        model, socket.socket, listener, listener.getsockname(), during=kill_one, chunk_bytes=1024, window_chunks=4))
    assert result.status == "delivered", result
    assert_same_generation(model, arrived, first, cache)


def test_a_flipped_byte_is_caught_and_repaired_by_resend(model):
    """A relay between sender and receiver flips one payload byte of the first chunk it carries
    (after the connection's HELLO, which carries the proof and the sender's id)."""
    listener = loopback_listener()

    async def main():
        flipped = asyncio.Event()

        async def pipe(reader, writer, corrupt):
            data = bytearray()
            while chunk := await reader.read(65536):
                if corrupt and not flipped.is_set():
                    data += chunk
                    if len(data) > HELLO_BYTES + HEADER_BYTES + 8:  # past the HELLO and the first chunk's header
                        data[HELLO_BYTES + HEADER_BYTES + 3] ^= 0xFF
                        flipped.set()
                        chunk, data = bytes(data), bytearray()
                    else:
                        continue
                writer.write(chunk)
                await writer.drain()
            writer.close()

        async def relay(client_reader, client_writer):
            up_reader, up_writer = await asyncio.open_connection(*listener.getsockname())
            await asyncio.gather(pipe(client_reader, up_writer, True), pipe(up_reader, client_writer, False))

        server = await asyncio.start_server(relay, "127.0.0.1", 0)
        target = server.sockets[0].getsockname()
        out = await transfer(model, socket.socket, listener, target, num_connections=1, chunk_bytes=4096)
        server.close()
        return out, flipped.is_set()

    (result, arrived, first, cache, sender, receiver), flipped = asyncio.run(main())
    assert flipped and receiver.corrupt_chunks == 1 and sender.resent_chunks >= 1
    assert result.status == "delivered"
    assert_same_generation(model, arrived, first, cache)


def test_a_malformed_header_is_rejected_and_the_receiver_keeps_serving(model):
    listener = loopback_listener()

    def send_garbage() -> bytes:
        with socket.create_connection(listener.getsockname(), timeout=5) as bad:
            bad.sendall(b"PKVC" + b"\xff" * (HEADER_BYTES - 4))  # absurd sizes, wrong header crc
            received = b""
            while data := bad.recv(1 << 16):  # the CHALLENGE, then EOF
                received += data
            return received[HEADER_BYTES + 32:]

    async def garbage_first(sender):
        closed = await asyncio.get_running_loop().run_in_executor(None, send_garbage)
        assert closed == b""  # the receiver closed that connection only

    result, arrived, first, cache, *_ = asyncio.run(
        transfer(model, socket.socket, listener, listener.getsockname(), during=garbage_first))
    assert result.status == "delivered"
    assert_same_generation(model, arrived, first, cache)


def test_a_transfer_that_cannot_finish_fails_with_the_reason(model):
    """Nobody ever answers: the deadline ends the transfer as failed, not silently."""

    async def main():
        silent = loopback_listener()  # accepts (kernel backlog) but never reads or replies
        sender = KVSender(socket.socket, silent.getsockname(), proof=PROOF, sender_id=SENDER, num_connections=1)
        await sender.start()
        sender.send_layer(5, 0, 1, b"x" * 1000)
        result = await sender.finish(5, deadline_s=0.5)
        await sender.close()
        silent.close()
        return result

    result = asyncio.run(main())
    assert result.status == "failed" and result.reason.startswith("deadline")
    assert result.failure is TransferFailure.DEADLINE


@needs_root
@pytest.mark.root
def test_cache_crosses_a_shaped_link_between_namespaces(model, run_id):
    topo = Topology(parse_link_spec({"bandwidth_mbit": 200, "delay_ms": 5}), backend="tun", run_id=run_id).up()
    try:
        listener = topo.socket(LOCAL)
        listener.bind((topo.address(LOCAL), 0))
        listener.listen()
        target = topo.target(LOCAL, listener.getsockname()[1])
        result, arrived, first, cache, sender, _ = asyncio.run(
            transfer(model, lambda: topo.socket(REMOTE), listener, target, chunk_bytes=8192))
        assert result.status == "delivered", result
        assert_same_generation(model, arrived, first, cache)
        crossed = topo.counters().directions["remote->local"].bytes
        assert crossed >= sender.bytes_sent  # the stream really went over the shaped link
    finally:
        topo.down()


def test_early_layers_arrive_while_later_layers_still_compute():
    """Layer-wise pipelining: the receiver holds the first chunk before the prefill has ended."""
    import time

    model = HybridModel(get_preset("kimi-linear-mini", "small"), device="cpu")
    prompt = list(range(256)) * 8  # 2048 tokens: each layer takes long enough to overlap

    async def main():
        listener = loopback_listener()
        receiver = KVReceiver(ModelKVDecoder(model.config), lambda rid, cache: None, proof=PROOF)
        await receiver.start(listener)
        sender = KVSender(socket.socket, listener.getsockname(), proof=PROOF, sender_id=SENDER)
        await sender.start()
        n = model.config.num_layers

        def prefill() -> float:
            model.prefill(prompt, on_layer_done=lambda i, layer: sender.send_layer(
                2, i, n, encode_layer(i, layer, len(prompt))))
            return time.monotonic()

        prefill_end = await asyncio.get_running_loop().run_in_executor(None, prefill)
        result = await sender.finish(2, deadline_s=30)
        await sender.close()
        await receiver.close()
        return result, receiver.first_chunk_at[2], prefill_end

    result, first_chunk, prefill_end = asyncio.run(main())
    assert result.status == "delivered"
    assert first_chunk < prefill_end
