"""Transport frames: chunks round-trip byte for byte; bad headers and payloads are caught early."""

import random
import struct
import zlib

import pytest

from emulator.transport import frames
from emulator.transport.frames import (
    HEADER_BYTES,
    ChunkHeader,
    FrameError,
    FrameType,
    PayloadCorrupt,
    check_payload,
    decode_header,
    encode_header,
    reply,
    split_layer,
)
from model_stub import HybridModel, get_preset
from model_stub.serialize import decode_cache, encode_cache


def repack(h: ChunkHeader, **changes) -> bytes:
    """A header with fields changed but a valid header checksum, so the later checks are reached."""
    fields = {**{f: getattr(h, f) for f in h.__slots__}, **changes}
    body = struct.pack("<4sBBBBQHHIIQQII", fields.pop("magic", frames.MAGIC), fields.pop("version", frames.VERSION),
                       int(fields["type"]), fields["flags"], 0, fields["request_id"], fields["layer_index"],
                       fields["num_layers"], fields["chunk_index"], fields["num_chunks"], fields["layer_bytes"],
                       fields["offset"], fields["length"], fields["payload_crc32"])
    return body + struct.pack("<I", zlib.crc32(body))


@pytest.fixture(scope="module")
def layer_frames():
    model = HybridModel(get_preset("kimi-linear-mini", "tiny"), device="cpu")
    _, cache = model.prefill(list(range(200)))
    return model.config, cache, list(encode_cache(cache))


def test_header_layout_is_fixed():
    assert HEADER_BYTES == 4 + 4 * 1 + 8 + 2 * 2 + 4 * 2 + 8 * 2 + 4 * 2 + 4 == 56


def test_chunks_reassemble_byte_for_byte_in_any_order(layer_frames):
    config, cache, layers = layer_frames
    rebuilt = []
    for i, frame in enumerate(layers):
        chunks = split_layer(7, i, len(layers), frame, chunk_bytes=1000)
        assert sum(c.header.length for c in chunks) == len(frame)
        random.Random(i).shuffle(chunks)
        buffer = bytearray(len(frame))
        for c in chunks:
            wire = c.encode()
            h = decode_header(wire[:HEADER_BYTES])
            payload = wire[HEADER_BYTES:]
            check_payload(h, payload)
            buffer[h.offset : h.offset + h.length] = payload
        assert bytes(buffer) == frame
        rebuilt.append(bytes(buffer))
    back = decode_cache(rebuilt, config)
    for a, b in zip(back.layers, cache.layers, strict=False):
        assert all(x.equal(y) for x, y in zip(a.tensors, b.tensors, strict=False))


def test_a_flipped_payload_byte_names_the_chunk_to_resend(layer_frames):
    _, _, layers = layer_frames
    chunk = split_layer(3, 1, 4, layers[1], chunk_bytes=512)[2]
    wire = bytearray(chunk.encode())
    wire[HEADER_BYTES + 10] ^= 0x40
    h = decode_header(bytes(wire[:HEADER_BYTES]))
    with pytest.raises(PayloadCorrupt) as err:
        check_payload(h, wire[HEADER_BYTES:])
    assert err.value.header.key == (3, 1, 2) and "chunk.payload_crc32" in str(err.value)


def test_a_flipped_header_byte_is_rejected():
    wire = bytearray(encode_header(ChunkHeader(FrameType.DATA, 1, 0, 1, 0, 1, 10, 0, 10, 0)))
    wire[9] ^= 1
    with pytest.raises(FrameError, match="chunk.header_crc32"):
        decode_header(bytes(wire))


GOOD = ChunkHeader(FrameType.DATA, 5, 1, 4, 0, 2, 1000, 0, 500, 0)


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"magic": b"HTTP"}, "chunk.magic"),
        ({"version": 9}, "chunk.version"),
        ({"type": 77}, "chunk.type"),
        ({"length": frames.MAX_CHUNK_BYTES + 1}, "chunk.length"),
        ({"layer_bytes": frames.MAX_LAYER_BYTES + 1, "length": 10}, "chunk.layer_bytes"),
        ({"offset": 900}, "chunk.offset"),
        ({"layer_index": 4}, "chunk.layer_index"),
        ({"num_layers": frames.MAX_LAYERS + 1}, "chunk.layer_index"),
        ({"chunk_index": 2}, "chunk.chunk_index"),
    ],
)
def test_malformed_headers_name_the_field_before_any_allocation(changes, field):
    with pytest.raises(FrameError) as err:
        decode_header(repack(GOOD, **changes))
    assert str(err.value).startswith(field)


def test_replies_round_trip_and_fail_carries_a_bounded_reason():
    ack = decode_header(reply(FrameType.ACK, (5, 2, 9)))
    assert ack.type is FrameType.ACK and ack.key == (5, 2, 9) and ack.length == 0
    wire = reply(FrameType.FAIL, (5, 0, 0), reason="deadline " * 500)
    h = decode_header(wire[:HEADER_BYTES])
    assert h.length == frames.MAX_REASON_BYTES
    check_payload(h, wire[HEADER_BYTES:])
    assert wire[HEADER_BYTES:].decode().startswith("deadline")


def test_an_ack_claiming_a_payload_is_rejected():
    with pytest.raises(FrameError, match="chunk.length"):
        decode_header(repack(ChunkHeader(FrameType.ACK, 1), length=100))


def test_split_layer_rejects_absurd_chunk_sizes():
    with pytest.raises(ValueError, match="chunk_bytes"):
        split_layer(1, 0, 1, b"abc", chunk_bytes=0)


@pytest.mark.parametrize("type_, length", [
    (FrameType.HELLO, 0),  # the proof-less HELLO of frame version 1
    (FrameType.HELLO, frames.PROOF_BYTES),  # a proof and no sender id
    (FrameType.HELLO, frames.PROOF_BYTES + frames.MAX_SENDER_BYTES + 1),
    (FrameType.CHALLENGE, frames.NONCE_BYTES - 1),
    (FrameType.CHALLENGE, 1 << 20),
])
def test_a_hello_or_challenge_of_the_wrong_size_is_rejected(type_, length):
    with pytest.raises(FrameError, match="chunk.length"):
        decode_header(repack(ChunkHeader(type_, 0), length=length))


def test_a_hello_names_its_sender_in_utf8():
    proof = bytes(range(frames.PROOF_BYTES))
    wire = frames.hello(proof, "local-prefill-3")
    h = decode_header(wire[:HEADER_BYTES])
    check_payload(h, wire[HEADER_BYTES:])
    assert frames.read_hello(wire[HEADER_BYTES:]) == (proof, "local-prefill-3")
    with pytest.raises(FrameError, match="not UTF-8"):
        frames.read_hello(proof + b"\xff\xfe")
