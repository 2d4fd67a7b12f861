"""Payload buffers handed from a connection to reassembly and back: kept payloads stay intact, exact
sizes are reused, the idle pool is bounded."""

from __future__ import annotations

import random

from emulator.transport.buffer_pool import BufferPool
from emulator.transport.chunk_protocol import INITIAL_PAYLOAD_BYTES, ChunkProtocol
from emulator.transport.frames import encode_header, split_layer
from emulator.transport.reassembly import LayerAssembly


class _Proven(ChunkProtocol):
    """A ChunkProtocol already past its HELLO, fed bytes by hand (no socket)."""

    def __init__(self, on_chunk, buffers: BufferPool) -> None:
        super().__init__(on_chunk, lambda *a: None, lambda p: None, b"n" * 32, buffers)
        self.prove("remote-prefill-0", 0.0)

    def feed(self, data: bytes, step: int = 50_000) -> None:
        while data:
            buffer = self.get_buffer(-1)
            n = min(len(buffer), step, len(data))
            buffer[:n] = data[:n]
            self.buffer_updated(n)
            data = data[n:]


def _wire(layer_frames: list[bytes], request_id: int, chunk_bytes: int) -> bytes:
    return b"".join(encode_header(c.header) + c.payload for i, frame in enumerate(layer_frames)
                    for c in split_layer(request_id, i, len(layer_frames), frame, chunk_bytes))


def test_pool_reuses_exact_sizes_only_and_keeps_at_most_its_bound() -> None:
    pool = BufferPool(max_bytes=3000)
    first = bytearray(1000)
    pool.give(first)
    pool.give(bytearray(1500))
    pool.give(bytearray(600))  # would exceed 3000 idle bytes: dropped
    assert pool.idle_bytes == 2500
    assert pool.take(999) is None and pool.take(1001) is None
    assert pool.take(1000) is first and pool.take(1000) is None
    assert pool.idle_bytes == 1500


def test_chunks_handed_over_stay_intact_while_their_buffers_go_round_and_layers_join_byte_for_byte() -> None:
    rng = random.Random(3)
    chunk_bytes = 4 * INITIAL_PAYLOAD_BYTES  # above the first buffer: payloads are handed over, not copied
    layers = [rng.randbytes(3 * chunk_bytes + 1234), rng.randbytes(2 * chunk_bytes), rng.randbytes(100)]
    pool = BufferPool()
    kept: list = []
    protocol = _Proven(lambda h, payload, p: kept.append((h, payload)), pool)
    joined: dict[tuple[int, int], bytes] = {}
    for request_id in (1, 2, 3):
        kept.clear()
        protocol.feed(_wire(layers, request_id, chunk_bytes))  # every payload kept until all arrived
        handed = [p for _, p in kept if isinstance(p, memoryview)]
        assert len(handed) == 5  # the full-size chunks; the 1234- and 100-byte ones were copied out
        if request_id > 1:  # the second request on received into the buffers the first gave back
            assert {id(p.obj) for p in handed} <= recycled
        for header, payload in kept:
            assert bytes(payload) == layers[header.layer_index][header.offset: header.offset + header.length]
        assemblies = {}
        for header, payload in kept:
            assemblies.setdefault(header.layer_index, {})[header.chunk_index] = (header.offset, payload)
        for index, parts in assemblies.items():
            layer = LayerAssembly(len(layers[index]), len(parts), dict(parts))
            joined[request_id, index] = layer.frame(pool)
        recycled = {id(p.obj) for p in handed}
    assert all(frame == layers[index] for (_, index), frame in joined.items())
