"""Cache frames: bit-exact round trips, and every corrupt or mismatched frame refused by name."""

from __future__ import annotations

import random
import struct
import zlib

import pytest
import torch

from model_stub import PRESET_NAMES, HybridCache, get_preset, serialize
from model_stub.serialize import FrameError

# The layout from serialize's docstring, spelled out independently of its private structs.
FIXED = struct.Struct("<4sBBBBHHIQI")  # magic version kind dtype num_tensors layer reserved
#                                        num_tokens payload_len payload_crc32
TENSOR = struct.Struct("<B4I")  # ndim, 4 dims
CRC = struct.Struct("<I")
FIELDS = (
    "magic", "version", "kind", "dtype", "num_tensors", "layer_index", "reserved", "num_tokens",
    "payload_len", "payload_crc32",
)
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
PROMPT_LEN = 150  # past the tiny window (16) and two blocks (64)


def unpack(frame: bytes) -> tuple[dict, list[tuple[int, ...]], bytes]:
    """(fixed fields, [(ndim, d0..d3)] per tensor, payload) of a frame."""
    fields = dict(zip(FIELDS, FIXED.unpack_from(frame), strict=True))
    tensors = [TENSOR.unpack_from(frame, FIXED.size + i * TENSOR.size) for i in range(2)]
    return fields, tensors, frame[serialize.HEADER_BYTES :]


def repack(frame: bytes, tensors: list[tuple[int, ...]] | None = None, payload: bytes | None = None,
           **changes: object) -> bytes:
    """The frame with some header fields changed and a *valid* header crc, so later checks run."""
    fields, old_tensors, old_payload = unpack(frame)
    fields.update(changes)
    header = FIXED.pack(*fields.values()) + b"".join(
        TENSOR.pack(*t) for t in (old_tensors if tensors is None else tensors)
    )
    return header + CRC.pack(zlib.crc32(header)) + (old_payload if payload is None else payload)


def flip(frame: bytes, offset: int) -> bytes:
    data = bytearray(frame)
    data[offset] ^= 0x01
    return bytes(data)


def assert_caches_equal(got: HybridCache, ref: HybridCache) -> None:
    assert got.num_tokens == ref.num_tokens and got.config == ref.config
    for a, b in zip(got.layers, ref.layers, strict=True):
        assert a.kind is b.kind
        for x, y in zip(a.tensors, b.tensors, strict=True):
            assert x.dtype == y.dtype and torch.equal(x, y)


@pytest.fixture(scope="module")
def kimi_cache(tiny_model, random_tokens) -> HybridCache:
    return tiny_model("kimi-linear-mini").prefill(random_tokens(PROMPT_LEN))[1]


@pytest.fixture(scope="module")
def kimi_frames(kimi_cache) -> list[bytes]:
    return list(serialize.encode_cache(kimi_cache))


def test_header_size_is_what_the_layout_says():
    assert FIXED.size == 28 and TENSOR.size == 17
    assert serialize.HEADER_BYTES == FIXED.size + 2 * TENSOR.size + CRC.size == 66
    assert (serialize.MAGIC, serialize.VERSION, serialize.NUM_TENSORS) == (b"PKV1", 1, 2)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("name", PRESET_NAMES)
def test_cache_round_trips_bit_exact(tiny_model, random_tokens, name, dtype):
    model = tiny_model(name, dtype)
    _, cache = model.prefill(random_tokens(PROMPT_LEN))
    assert {t.dtype for layer in cache.layers for t in layer.tensors} == {DTYPES[dtype]}
    frames = list(serialize.encode_cache(cache))
    assert len(frames) == model.config.num_layers
    decoded = serialize.decode_cache(frames, model.config)
    assert_caches_equal(decoded, cache)
    assert list(serialize.encode_cache(decoded)) == frames  # byte for byte
    for i, frame in enumerate(frames):
        fields, tensors, payload = unpack(frame)
        assert (fields["layer_index"], fields["num_tokens"]) == (i, PROMPT_LEN)
        assert fields["payload_len"] == len(payload) == cache.layers[i].nbytes
        assert [t[0] for t in tensors] == [x.dim() for x in cache.layers[i].tensors]


def test_snapshot_views_round_trip(tiny_model, random_tokens):
    """A snapshot's growing layers are non-contiguous views; their frames hold just the prefix."""
    model = tiny_model("qwen3-next-mini")
    _, cache = model.prefill(random_tokens(PROMPT_LEN), checkpoint_at=[64])
    snap = cache.snapshot(64)
    decoded = serialize.decode_cache(list(serialize.encode_cache(snap)), model.config)
    assert decoded.num_tokens == 64
    for a, b in zip(decoded.layers, snap.layers, strict=True):
        assert all(torch.equal(x, y) for x, y in zip(a.tensors, b.tensors, strict=True))


def test_decode_cache_accepts_frames_in_any_order(kimi_cache, kimi_frames):
    shuffled = list(kimi_frames)
    random.Random(7).shuffle(shuffled)
    for order in (list(reversed(kimi_frames)), shuffled):
        assert_caches_equal(serialize.decode_cache(order, kimi_cache.config), kimi_cache)


def test_decode_layer_returns_index_cache_and_length(kimi_cache, kimi_frames):
    index, layer, tokens = serialize.decode_layer(kimi_frames[3], kimi_cache.config)
    assert (index, layer.kind, tokens) == (3, kimi_cache.layers[3].kind, PROMPT_LEN)
    assert all(torch.equal(a, b) for a, b in zip(layer.tensors, kimi_cache.layers[3].tensors, strict=False))


def test_flipped_payload_byte_is_rejected(kimi_frames):
    for frame in kimi_frames:
        for offset in (serialize.HEADER_BYTES, len(frame) - 1):
            with pytest.raises(FrameError, match=r"frame\.payload_crc32"):
                serialize.decode_layer(flip(frame, offset))


@pytest.mark.parametrize("offset", [0, 4, 8, 12, 20, 28, 36, serialize.HEADER_BYTES - 1])
def test_flipped_header_byte_is_rejected(kimi_frames, offset):
    with pytest.raises(FrameError, match=r"frame\.header_crc32"):
        serialize.decode_layer(flip(kimi_frames[0], offset))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (dict(magic=b"PKV2"), r"frame\.magic: b'PKV2'"),
        (dict(magic=b"\0\0\0\0"), r"frame\.magic"),
        (dict(version=2), r"frame\.version: 2"),
        (dict(version=0), r"frame\.version: 0"),
        (dict(kind=99), r"unknown kind 99"),
        (dict(dtype=7), r"dtype 7"),
        (dict(num_tensors=3), r"num_tensors 3"),
    ],
)
def test_bad_header_fields_are_rejected_by_name(kimi_frames, changes, message):
    with pytest.raises(FrameError, match=message):
        serialize.decode_layer(repack(kimi_frames[0], **changes))


def test_repacked_header_is_accepted_unchanged(kimi_frames, kimi_cache):
    """The helper re-creates a valid header: without changes the frame still decodes."""
    assert repack(kimi_frames[1]) == kimi_frames[1]
    assert serialize.decode_layer(repack(kimi_frames[1]), kimi_cache.config)[0] == 1


@pytest.mark.parametrize("delta", [-1, 1, 1 << 20])
def test_payload_len_not_matching_shapes_is_rejected(kimi_frames, delta):
    fields, _, _ = unpack(kimi_frames[0])
    bad = repack(kimi_frames[0], payload_len=fields["payload_len"] + delta)
    with pytest.raises(FrameError, match=r"frame\.payload_len: \d+ does not match the shapes"):
        serialize.decode_layer(bad)


def test_bad_ndim_is_rejected(kimi_frames):
    _, tensors, _ = unpack(kimi_frames[0])
    for bad in [(0, 0, 0, 0, 0), (5, 1, 1, 1, 1), (1, 2, 3, 0, 0)]:
        with pytest.raises(FrameError, match=r"frame\.tensor\[0\]\.ndim"):
            serialize.decode_layer(repack(kimi_frames[0], tensors=[bad, tensors[1]]))


def test_payload_above_the_cap_is_rejected(kimi_frames):
    frame = kimi_frames[0]
    payload_len = len(frame) - serialize.HEADER_BYTES
    serialize.decode_layer(frame, max_payload_bytes=payload_len)  # exactly at the cap: fine
    with pytest.raises(FrameError, match=r"frame\.payload_len: \d+ exceeds the limit of 1024"):
        serialize.decode_layer(frame, max_payload_bytes=1024)


def test_huge_declared_payload_is_refused_before_reading_it(kimi_frames):
    """A lone header claiming 2 x 4 TiB of float32 is refused by the cap, not by a short read."""
    huge = (2, 1 << 20, 1 << 20, 0, 0)
    payload_len = 2 * (1 << 40) * 4
    header_only = repack(kimi_frames[0], tensors=[huge, huge], payload_len=payload_len, payload=b"")
    for decode in (serialize.decode_header, serialize.decode_layer):
        with pytest.raises(FrameError, match=rf"frame\.payload_len: {payload_len} exceeds"):
            decode(header_only)


@pytest.mark.parametrize("keep", [0, 10, serialize.HEADER_BYTES - 1])
def test_frame_shorter_than_its_header_is_rejected(kimi_frames, keep):
    with pytest.raises(FrameError, match=rf"frame: {keep} bytes is shorter than the 66-byte"):
        serialize.decode_layer(kimi_frames[0][:keep])


@pytest.mark.parametrize("cut", [1, 100])
def test_truncated_payload_is_rejected(kimi_frames, cut):
    frame = kimi_frames[3]
    with pytest.raises(FrameError, match=r"frame\.payload: \d+ bytes received, header says \d+"):
        serialize.decode_layer(frame[:-cut])
    with pytest.raises(FrameError, match=r"frame\.payload: "):
        serialize.decode_layer(frame + b"\0")


def test_frames_that_do_not_fit_the_config_are_rejected(tiny_model, random_tokens, kimi_frames):
    kimi = get_preset("kimi-linear-mini", "tiny")
    # a tiny model's frame offered to the small model
    with pytest.raises(FrameError, match=r"frame\.shapes: .* for layer 0"):
        serialize.decode_layer(kimi_frames[0], get_preset("kimi-linear-mini", "small"))
    with pytest.raises(FrameError, match=r"frame\.shapes: .* expected .* at 149 tokens"):
        serialize.decode_layer(repack(kimi_frames[3], num_tokens=PROMPT_LEN - 1), kimi)
    with pytest.raises(FrameError, match=r"frame\.kind: layer 0 is kda, qwen3-next-mini expects"):
        serialize.decode_layer(kimi_frames[0], get_preset("qwen3-next-mini", "tiny"))
    mimo_frames = list(
        serialize.encode_cache(tiny_model("mimo-v2-flash-mini").prefill(random_tokens(20))[1])
    )
    with pytest.raises(FrameError, match=r"frame\.layer_index: 5 but dense-gqa-mini has 4 layers"):
        serialize.decode_layer(mimo_frames[5], get_preset("dense-gqa-mini", "tiny"))
    bf16 = get_preset("kimi-linear-mini", "tiny", dtype="bfloat16")
    with pytest.raises(FrameError, match=r"frame\.dtype: torch\.float32 but .* is bfloat16"):
        serialize.decode_layer(kimi_frames[0], bf16)


def test_duplicate_missing_or_mixed_layers_are_rejected(tiny_model, kimi_frames, kimi_cache):
    config = kimi_cache.config
    with pytest.raises(FrameError, match=r"frame\.layer_index: layer 0 arrived twice"):
        serialize.decode_cache(kimi_frames + kimi_frames[:1], config)
    with pytest.raises(FrameError, match=r"missing layers \[0\]"):
        serialize.decode_cache(kimi_frames[1:], config)
    with pytest.raises(FrameError, match=r"missing layers \[0, 1, 2, 3\]"):
        serialize.decode_cache([], config)
    _, shorter = tiny_model("kimi-linear-mini").prefill([1, 2, 3])
    mixed = kimi_frames[:2] + list(serialize.encode_cache(shorter))[2:]
    with pytest.raises(FrameError, match=r"mixed num_tokens \[3, 150\]"):
        serialize.decode_cache(mixed, config)
