"""The receiver knows no model: its user's decoder reads each layer and bounds it (issue 14)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys

import pytest

from emulator.transport.receiver import KVReceiver
from emulator.transport.sender import KVSender, TransferFailure

from .kv_peer import PROOF, SENDER

LAYERS = [b"first layer " * 300, b"second", b"third layer" * 1000]


class BytesDecoder:
    """Frames are opaque bytes; a frame that starts with `bad` is not a valid layer."""

    layer_caps = (4096, 4096, 16384)

    def decode_layer(self, index: int, frame: bytes) -> tuple[int, bytes]:
        if frame.startswith(b"bad"):
            raise ValueError(f"layer {index}: bad frame")
        return index, frame

    def assemble(self, layers: dict[int, tuple[int, bytes]]) -> list[bytes]:
        return [layers[i][1] for i in sorted(layers)]


async def send(frames: list[bytes], caps: tuple[int, ...] = BytesDecoder.layer_caps):
    listener = socket.create_server(("127.0.0.1", 0))
    arrived: dict[int, list[bytes]] = {}
    decoder = BytesDecoder()
    decoder.layer_caps = caps
    receiver = KVReceiver(decoder, arrived.__setitem__, proof=PROOF)
    await receiver.start(listener)
    sender = KVSender(socket.socket, listener.getsockname(), proof=PROOF, sender_id=SENDER, num_connections=2)
    await sender.start()
    for i, frame in enumerate(frames):
        sender.send_layer(7, i, len(frames), frame)
    result = await sender.finish(7, deadline_s=10)
    await sender.close()
    await receiver.close()
    return result, arrived.get(7)


def test_a_users_decoder_rebuilds_what_was_sent_without_any_model():
    result, arrived = asyncio.run(send(LAYERS))
    assert result.status == "delivered", result
    assert arrived == LAYERS


def test_the_decoders_refusal_fails_the_request_with_its_words():
    result, arrived = asyncio.run(send([LAYERS[0], b"bad frame", LAYERS[2]]))
    assert result.status == "failed" and result.failure is TransferFailure.REFUSED
    assert "layer 1: bad frame" in result.reason and arrived is None


def test_a_layer_over_the_decoders_bound_is_refused_unread():
    result, arrived = asyncio.run(send(LAYERS, caps=(4096, 4096, 100)))
    assert result.status == "failed" and "layer_bytes" in result.reason and arrived is None


@pytest.mark.live
def test_the_transport_imports_no_model():
    code = ("import sys, emulator.transport.receiver, emulator.transport.sender; "
            "print([m for m in sys.modules if m.split('.')[0] in ('model_stub', 'torch')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
