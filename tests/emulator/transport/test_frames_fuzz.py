"""Fuzzing the receive path: random bytes and mutated valid headers, fed to the header decoder, the
per-connection reader and reassembly. Only the project's own errors may escape, and what is
allocated is bounded by what arrived, never by what a header claims (issue 13)."""

from __future__ import annotations

import struct
import tracemalloc
import zlib

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from emulator.errors import PrfaasError
from emulator.transport import frames
from emulator.transport.chunk_protocol import ChunkProtocol
from emulator.transport.frames import HEADER_BYTES, ChunkHeader, FrameType, decode_header
from emulator.transport.reassembly import Reassembler

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# What decoding may allocate beyond the bytes it was fed: buffers, a few headers, bookkeeping.
ALLOC_BUDGET_BYTES = 256 << 10

U8, U16, U32, U64 = (st.integers(0, 2**b - 1) for b in (8, 16, 32, 64))
SIZES = st.one_of(st.integers(0, 4096), st.sampled_from([frames.MAX_CHUNK_BYTES, frames.MAX_LAYER_BYTES, 2**32 - 1]),
                  U64)


@st.composite
def headers(draw) -> bytes:
    """A header with arbitrary (often absurd) fields and a correct header checksum, so every check
    after the checksum is reached."""
    body = struct.pack(
        "<4sBBBBQHHIIQQII",
        draw(st.sampled_from([frames.MAGIC, b"PKVC", b"HTTP"])), draw(st.sampled_from([frames.VERSION, 0, 2, 255])),
        draw(st.one_of(st.sampled_from([t.value for t in FrameType]), U8)), draw(U8), draw(U8), draw(U64),
        draw(st.one_of(st.integers(0, 8), U16)), draw(st.one_of(st.integers(0, 8), U16)),
        draw(st.one_of(st.integers(0, 8), U32)), draw(st.one_of(st.integers(0, 8), U32)), draw(SIZES),
        draw(SIZES), draw(st.one_of(st.integers(0, 4096), U32)), draw(U32),
    )
    return body + struct.pack("<I", zlib.crc32(body))


@st.composite
def claiming_headers(draw) -> bytes:
    """A valid DATA header whose sizes claim much more than will follow (up to 4 MiB chunks of
    2 GiB layers), the shape a hostile peer uses to make a receiver allocate."""
    num_layers = draw(st.integers(1, 8))
    length = draw(st.one_of(st.integers(1, 4096), st.sampled_from([1 << 20, frames.MAX_CHUNK_BYTES])))
    layer_bytes = draw(st.one_of(st.integers(length, length + 4096), st.sampled_from([frames.MAX_LAYER_BYTES])))
    header = ChunkHeader(FrameType.DATA, draw(st.integers(0, 5)), draw(st.integers(0, num_layers - 1)), num_layers,
                         0, draw(st.integers(1, 3)), layer_bytes, 0, length, draw(U32))
    return frames.encode_header(header)


@st.composite
def streams(draw) -> bytes:
    """What a hostile peer might send down one connection: valid-checksum headers with absurd
    sizes, each followed by a little payload, and random bytes."""
    parts = draw(st.lists(st.one_of(
        st.tuples(st.one_of(headers(), claiming_headers()), st.binary(max_size=512)).map(lambda hp: hp[0] + hp[1]),
        st.binary(min_size=1, max_size=HEADER_BYTES * 2),
    ), min_size=1, max_size=8))
    return b"".join(parts)


class WireEnd:
    """The socket end a ChunkProtocol talks to: records replies and whether it was closed."""

    def __init__(self) -> None:
        self.closed = False
        self.written = 0

    def write(self, data: bytes) -> None:
        self.written += len(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default=None):
        return ("127.0.0.9", 40000) if name == "peername" else default


def feed(data: bytes, step: int, proven: bool = True, chunks: list | None = None) -> tuple[WireEnd, Reassembler]:
    """Push `data` through a ChunkProtocol in `step`-byte reads into a Reassembler, as the receiver
    does; `proven`: as if its HELLO had proven the run's secret (a HELLO in `data` proves nothing
    here). Each chunk that reaches the reassembler is appended to `chunks`."""
    reassembler = Reassembler(max_bytes=1 << 30, abandon_after_s=30)
    end = WireEnd()

    def on_chunk(header: ChunkHeader, payload: memoryview, _: ChunkProtocol) -> None:
        if chunks is not None:
            chunks.append(header)
        try:
            frames.check_payload(header, payload)
            reassembler.add(header, payload, now=0.0, peer="127.0.0.9")
        except PrfaasError:
            pass

    protocol = ChunkProtocol(on_chunk, lambda p, h, payload: None, lambda p: None, bytes(32))
    protocol.connection_made(end)
    if proven:
        protocol.prove("remote-prefill-0", 0.0)
    i = 0
    while i < len(data) and not end.closed:
        buf = protocol.get_buffer(-1)
        assert len(buf) > 0  # asyncio would spin on an empty buffer
        n = min(len(buf), step, len(data) - i)
        buf[:n] = data[i : i + n]
        protocol.buffer_updated(n)
        i += n
    return end, reassembler


@FUZZ
@given(st.binary(max_size=3 * HEADER_BYTES))
def test_random_bytes_raise_only_frame_errors(data):
    try:
        decode_header(data)
    except PrfaasError:
        pass


@FUZZ
@given(headers())
def test_mutated_headers_either_decode_within_caps_or_raise_frame_errors(wire):
    try:
        h = decode_header(wire)
    except PrfaasError:
        return
    assert 0 <= h.length <= max(frames.MAX_CHUNK_BYTES, frames.MAX_REASON_BYTES)
    if h.type is FrameType.DATA:
        assert h.offset + h.length <= h.layer_bytes <= frames.MAX_LAYER_BYTES
        assert h.layer_index < h.num_layers <= frames.MAX_LAYERS


@pytest.mark.slow
@FUZZ
@given(streams(), st.sampled_from([1, 7, HEADER_BYTES, 4096, 1 << 20]))
def test_a_hostile_stream_allocates_only_what_it_sent(data, step):
    tracemalloc.start()
    try:
        _, reassembler = feed(data, step)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= len(data) + ALLOC_BUDGET_BYTES, f"{peak} bytes allocated for {len(data)} received"
    assert reassembler.bytes_in_use <= len(data) + ALLOC_BUDGET_BYTES


@pytest.mark.slow
@FUZZ
@given(streams(), st.sampled_from([1, 7, HEADER_BYTES, 4096, 1 << 20]))
def test_an_unproven_stream_never_reaches_reassembly(data, step):
    """Issue 25: whatever an unproven peer sends, no chunk of it is placed and nothing is held."""
    chunks: list[ChunkHeader] = []
    _, reassembler = feed(data, step, proven=False, chunks=chunks)
    assert chunks == [] and reassembler.bytes_in_use == 0 and not reassembler.partial


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 3), st.integers(1, 2**31), st.integers(0, 300)),
                min_size=1, max_size=60))
def test_reassembly_accounts_for_every_byte_it_holds(chunks):
    """Chunks of many requests with claims up to 2 GiB: the budget's count covers what is really
    held (payloads and bookkeeping), and real memory stays near it."""
    reassembler = Reassembler(max_bytes=1 << 20, abandon_after_s=30)
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for rid, layer, claimed, size in chunks:
            payload = bytes(size % 200 + 1)
            length = min(len(payload), claimed)
            h = ChunkHeader(FrameType.DATA, rid, layer, 4, 0, 2 if length < claimed else 1, claimed, 0, length,
                            zlib.crc32(payload[:length]))
            try:
                reassembler.add(h, payload[:length], now=0.0, peer=f"10.0.0.{rid % 3}")
            except PrfaasError:
                pass
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held - before <= reassembler.bytes_in_use + ALLOC_BUDGET_BYTES
    assert peak - before <= reassembler.max_bytes + ALLOC_BUDGET_BYTES
