"""KV transport frames: a request's cache as checksummed chunks, and the receiver's replies.

One layer's cache is first a `model_stub.serialize` layer frame (kind, dtype, shapes, its own
checksum); the transport cuts that byte string into chunks so several connections can carry one
layer. Every chunk header is fixed-size, little-endian and self-checking:

    magic "PKVC" | version u8 | type u8 | flags u8 | reserved u8 | request_id u64 |
    layer_index u16 | num_layers u16 | chunk_index u32 | num_chunks u32 | layer_bytes u64 |
    offset u64 | length u32 | payload_crc32 u32 | header_crc32 u32

Replies (ACK, NACK, DONE, FAIL) use the same header; FAIL carries a short UTF-8 reason. A receiver
opens each connection with a CHALLENGE (a fresh nonce); the sender answers with a HELLO whose
payload is its proof (PROOF_BYTES, keyed by the run's secret: see `HelloProof`) and its node id,
before any DATA. Only the HELLO costs anything: DATA carries no per-chunk MAC. Sizes are checked
against caps before anything is allocated. No pickle anywhere.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from enum import IntEnum
from typing import Protocol

from emulator.errors import TransportError

MAGIC = b"PKVC"
VERSION = 2  # 2: CHALLENGE, and a HELLO that proves the sender (issue 25)
CHUNK_BYTES = 1 << 20  # stripes a layer over connections; 256 KiB-1 MiB measure the same at 1 Gbit/s here
MAX_CHUNK_BYTES = 4 << 20
MAX_LAYER_BYTES = 1 << 31
MAX_LAYERS = 1024
MAX_REASON_BYTES = 1024
NONCE_BYTES = 32  # a CHALLENGE's payload
PROOF_BYTES = 32  # an HMAC-SHA256, the first part of a HELLO's payload; the sender's id follows
MAX_SENDER_BYTES = 64  # a node id ("remote-prefill-12") in UTF-8

_BODY = struct.Struct("<4sBBBBQHHIIQQII")
_CRC = struct.Struct("<I")
HEADER_BYTES = _BODY.size + _CRC.size


class FrameType(IntEnum):
    DATA = 1  # sender -> receiver: one chunk of one layer
    ACK = 2  # receiver -> sender: the chunk arrived intact
    NACK = 3  # receiver -> sender: the chunk's payload was corrupt; send it again
    DONE = 4  # receiver -> sender: every layer arrived and the cache was rebuilt
    FAIL = 5  # receiver -> sender: the request cannot be completed (reason in the payload)
    HELLO = 6  # sender -> receiver: the answer to CHALLENGE (proof, then the sender's id)
    CHALLENGE = 7  # receiver -> sender: the first frame on a new connection (a fresh nonce)


class HelloProof(Protocol):
    """The run's secret as the KV port uses it (emulator/wire/auth.py's KvHelloProof): a receiver
    draws a nonce per connection, a sender proves it, the receiver checks in constant time."""

    def new_nonce(self) -> bytes: ...

    def prove(self, nonce: bytes, sender: str) -> bytes: ...

    def check(self, nonce: bytes, sender: str, proof: bytes) -> bool: ...


class FrameError(TransportError, ValueError):
    """A header that cannot be trusted: the connection carrying it is closed. (A ValueError too, as
    it was before the error hierarchy existed.)"""


class PayloadCorrupt(FrameError):
    """The header is sound but the payload's checksum is wrong: re-request just this chunk."""

    def __init__(self, header: ChunkHeader) -> None:
        super().__init__(
            f"chunk.payload_crc32: mismatch for request {header.request_id} layer {header.layer_index} "
            f"chunk {header.chunk_index}; asking the sender to resend it"
        )
        self.header = header


@dataclass(frozen=True, slots=True)
class ChunkHeader:
    type: FrameType
    request_id: int
    layer_index: int = 0
    num_layers: int = 0
    chunk_index: int = 0
    num_chunks: int = 0
    layer_bytes: int = 0
    offset: int = 0
    length: int = 0
    payload_crc32: int = 0
    flags: int = 0

    @property
    def key(self) -> tuple[int, int, int]:
        """(request, layer, chunk): what an ACK or NACK refers to."""
        return self.request_id, self.layer_index, self.chunk_index


def encode_header(h: ChunkHeader) -> bytes:
    body = _BODY.pack(
        MAGIC, VERSION, int(h.type), h.flags, 0, h.request_id, h.layer_index, h.num_layers,
        h.chunk_index, h.num_chunks, h.layer_bytes, h.offset, h.length, h.payload_crc32,
    )
    return body + _CRC.pack(zlib.crc32(body))


def decode_header(data: bytes) -> ChunkHeader:
    """Parse and validate a header; FrameError names the first field that is wrong."""
    if len(data) != HEADER_BYTES:
        raise FrameError(f"chunk header: {len(data)} bytes, expected {HEADER_BYTES}")
    body = data[: _BODY.size]
    if zlib.crc32(body) != _CRC.unpack_from(data, _BODY.size)[0]:
        raise FrameError("chunk.header_crc32: mismatch; the header is corrupt")
    (magic, version, type_, flags, _, request_id, layer, num_layers, chunk, num_chunks, layer_bytes,
     offset, length, crc) = _BODY.unpack(body)
    if magic != MAGIC:
        raise FrameError(f"chunk.magic: {magic!r} is not {MAGIC!r}; not a KV transport stream")
    if version != VERSION:
        raise FrameError(f"chunk.version: {version} is not supported (this side speaks {VERSION})")
    if type_ not in FrameType._value2member_map_:
        raise FrameError(f"chunk.type: {type_} is not a known frame type")
    h = ChunkHeader(FrameType(type_), request_id, layer, num_layers, chunk, num_chunks, layer_bytes, offset,
                    length, crc, flags)
    _check_sizes(h)
    return h


def _check_sizes(h: ChunkHeader) -> None:
    if h.type is FrameType.FAIL:
        if h.length > MAX_REASON_BYTES:
            raise FrameError(f"chunk.length: a FAIL reason of {h.length} bytes exceeds {MAX_REASON_BYTES}")
        return
    if h.type is FrameType.CHALLENGE:
        if h.length != NONCE_BYTES:
            raise FrameError(f"chunk.length: a CHALLENGE carries a {NONCE_BYTES}-byte nonce, got {h.length}")
        return
    if h.type is FrameType.HELLO:
        if not PROOF_BYTES < h.length <= PROOF_BYTES + MAX_SENDER_BYTES:
            raise FrameError(f"chunk.length: a HELLO carries a {PROOF_BYTES}-byte proof and a sender id of 1 to "
                             f"{MAX_SENDER_BYTES} bytes, got {h.length} bytes; senders answer the receiver's CHALLENGE")
        return
    if h.type is not FrameType.DATA:
        if h.length:
            raise FrameError(f"chunk.length: a {h.type.name} frame carries no payload, got {h.length}")
        return
    if not 0 < h.num_layers <= MAX_LAYERS or h.layer_index >= h.num_layers:
        raise FrameError(f"chunk.layer_index: {h.layer_index} of {h.num_layers} layers (max {MAX_LAYERS})")
    if not 0 < h.layer_bytes <= MAX_LAYER_BYTES:
        raise FrameError(f"chunk.layer_bytes: {h.layer_bytes} is outside (0, {MAX_LAYER_BYTES}]")
    if not 0 < h.length <= MAX_CHUNK_BYTES:
        raise FrameError(f"chunk.length: {h.length} is outside (0, {MAX_CHUNK_BYTES}]")
    if h.offset + h.length > h.layer_bytes:
        raise FrameError(f"chunk.offset: {h.offset}+{h.length} runs past the layer's {h.layer_bytes} bytes")
    if not h.chunk_index < h.num_chunks <= h.layer_bytes:
        raise FrameError(f"chunk.chunk_index: {h.chunk_index} of {h.num_chunks} chunks is impossible")


def check_payload(h: ChunkHeader, payload: bytes | memoryview) -> None:
    if len(payload) != h.length:
        raise FrameError(f"chunk.payload: {len(payload)} bytes, header says {h.length}")
    if zlib.crc32(payload) != h.payload_crc32:
        raise PayloadCorrupt(h)


@dataclass(frozen=True, slots=True)
class Chunk:
    header: ChunkHeader
    payload: memoryview

    def encode(self) -> bytes:
        return encode_header(self.header) + self.payload


def split_layer(
    request_id: int, layer_index: int, num_layers: int, layer_frame: bytes, chunk_bytes: int = CHUNK_BYTES
) -> list[Chunk]:
    """Cut one layer's serialised frame into chunks of at most `chunk_bytes`."""
    if not 0 < chunk_bytes <= MAX_CHUNK_BYTES:
        raise ValueError(f"chunk_bytes: {chunk_bytes} must be in (0, {MAX_CHUNK_BYTES}]")
    view, total = memoryview(layer_frame), len(layer_frame)
    num_chunks = -(-total // chunk_bytes)
    chunks = []
    for i in range(num_chunks):
        part = view[i * chunk_bytes : (i + 1) * chunk_bytes]
        header = ChunkHeader(FrameType.DATA, request_id, layer_index, num_layers, i, num_chunks, total,
                             i * chunk_bytes, len(part), zlib.crc32(part))
        chunks.append(Chunk(header, part))
    return chunks


def challenge(nonce: bytes) -> bytes:
    """The frame a receiver writes first on every connection."""
    return _with_payload(FrameType.CHALLENGE, nonce)


def hello(proof: bytes, sender: str) -> bytes:
    """A sender's answer to the CHALLENGE: its proof, then its id."""
    return _with_payload(FrameType.HELLO, proof + sender.encode())


def read_hello(payload: bytes | memoryview) -> tuple[bytes, str]:
    """A HELLO's (proof, sender id); FrameError when the id is not UTF-8."""
    try:
        return bytes(payload[:PROOF_BYTES]), bytes(payload[PROOF_BYTES:]).decode()
    except UnicodeDecodeError:
        raise FrameError("chunk.payload: a HELLO's sender id is not UTF-8") from None


def _with_payload(type_: FrameType, payload: bytes) -> bytes:
    return encode_header(ChunkHeader(type_, 0, length=len(payload), payload_crc32=zlib.crc32(payload))) + payload


def reply(type_: FrameType, key: tuple[int, int, int], reason: str = "") -> bytes:
    """An ACK/NACK for one chunk, or DONE/FAIL for a request (FAIL with a short reason)."""
    request_id, layer, chunk = key
    payload = reason.encode()[:MAX_REASON_BYTES] if type_ is FrameType.FAIL else b""
    header = ChunkHeader(type_, request_id, layer, 0, chunk, 0, 0, 0, len(payload), zlib.crc32(payload))
    return encode_header(header) + payload
