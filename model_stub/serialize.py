"""Layer-wise cache serialisation without pickle: a fixed binary header, then raw tensor bytes.

Frame layout (little-endian):

    magic "PKV1" | version u8 | kind u8 | dtype u8 | num_tensors u8 | layer_index u16 |
    reserved u16 | num_tokens u32 | payload_len u64 | payload_crc32 u32 |
    num_tensors x (ndim u8, 4 x dim u32) | header_crc32 u32 | payload

Every size is checked against the header's own shapes and a cap before anything is allocated, so
a frame from a socket cannot make the reader allocate more than the cap.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

import torch

from model_stub.cache import HybridCache, LayerCache, expected_shapes
from model_stub.config import LayerKind, ModelConfig

MAGIC = b"PKV1"
VERSION = 1
MAX_DIMS = 4
MAX_PAYLOAD_BYTES = 1 << 31  # 2 GiB: larger than any layer of the presets at 1M tokens

_FIXED = struct.Struct("<4sBBBBHHIQI")
_TENSOR = struct.Struct("<B4I")
_CRC = struct.Struct("<I")
NUM_TENSORS = 2
HEADER_BYTES = _FIXED.size + NUM_TENSORS * _TENSOR.size + _CRC.size

_KIND_CODES = {kind: code for code, kind in enumerate(LayerKind)}
_DTYPE_CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
_CODE_KINDS = {code: kind for kind, code in _KIND_CODES.items()}
_CODE_DTYPES = {code: dtype for dtype, code in _DTYPE_CODES.items()}


class FrameError(ValueError):
    """A frame that cannot be a valid layer cache; the message names the field and the problem."""


def _raw(tensor: torch.Tensor) -> bytes:
    return tensor.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes()


def encode_layer(layer_index: int, cache: LayerCache, num_tokens: int) -> bytes:
    """One layer's cache as a frame (header + payload)."""
    payload = b"".join(_raw(t) for t in cache.tensors)
    dtype = cache.tensors[0].dtype
    header = _FIXED.pack(
        MAGIC, VERSION, _KIND_CODES[cache.kind], _DTYPE_CODES[dtype], NUM_TENSORS, layer_index, 0,
        num_tokens, len(payload), zlib.crc32(payload),
    )
    for t in cache.tensors:
        dims = list(t.shape) + [0] * (MAX_DIMS - t.dim())
        header += _TENSOR.pack(t.dim(), *dims)
    return header + _CRC.pack(zlib.crc32(header)) + payload


def decode_header(data: bytes, max_payload_bytes: int = MAX_PAYLOAD_BYTES) -> dict:
    """Parse and check a header; returns its fields. Raises FrameError naming the bad field."""
    if len(data) < HEADER_BYTES:
        raise FrameError(f"frame: {len(data)} bytes is shorter than the {HEADER_BYTES}-byte header")
    body, (crc,) = data[: HEADER_BYTES - _CRC.size], _CRC.unpack_from(data, HEADER_BYTES - _CRC.size)
    if zlib.crc32(body) != crc:
        raise FrameError("frame.header_crc32: mismatch; the header is corrupt")
    magic, version, kind, dtype, num_tensors, layer_index, _, num_tokens, payload_len, payload_crc = (
        _FIXED.unpack_from(body)
    )
    if magic != MAGIC:
        raise FrameError(f"frame.magic: {magic!r} is not {MAGIC!r}; not a KV cache frame")
    if version != VERSION:
        raise FrameError(f"frame.version: {version} is not supported (this reader speaks {VERSION})")
    if kind not in _CODE_KINDS or dtype not in _CODE_DTYPES or num_tensors != NUM_TENSORS:
        raise FrameError(f"frame: unknown kind {kind}, dtype {dtype} or num_tensors {num_tensors}")
    torch_dtype = _CODE_DTYPES[dtype]
    itemsize = torch.empty(0, dtype=torch_dtype).element_size()
    shapes, expected_len = [], 0
    for i in range(NUM_TENSORS):
        ndim, *dims = _TENSOR.unpack_from(body, _FIXED.size + i * _TENSOR.size)
        if not 1 <= ndim <= MAX_DIMS or any(dims[ndim:]):
            raise FrameError(f"frame.tensor[{i}].ndim: {ndim} does not match its dims {dims}")
        shape = tuple(dims[:ndim])
        numel = 1
        for d in shape:
            numel *= d
        shapes.append(shape)
        expected_len += numel * itemsize
    if payload_len != expected_len:
        raise FrameError(f"frame.payload_len: {payload_len} does not match the shapes {shapes} ({expected_len} bytes)")
    if payload_len > max_payload_bytes:
        raise FrameError(f"frame.payload_len: {payload_len} exceeds the limit of {max_payload_bytes} bytes")
    return dict(
        kind=_CODE_KINDS[kind], dtype=torch_dtype, layer_index=layer_index, num_tokens=num_tokens,
        payload_len=payload_len, payload_crc32=payload_crc, shapes=tuple(shapes),
    )


def decode_layer(
    data: bytes, config: ModelConfig | None = None, max_payload_bytes: int = MAX_PAYLOAD_BYTES,
    pin_memory: bool = False, match_dtype: bool = True,
) -> tuple[int, LayerCache, int]:
    """A frame back to (layer_index, LayerCache, num_tokens); checked against `config` when given.

    `pin_memory` decodes straight into page-locked memory (needs CUDA), so a receiver can upload the
    layer to the GPU asynchronously without another host copy. `match_dtype=False` accepts a frame
    in another dtype than `config`'s (tensors stay in the frame's dtype: a receiver that casts).
    """
    header = decode_header(data, max_payload_bytes)
    payload = memoryview(data)[HEADER_BYTES:]
    if len(payload) != header["payload_len"]:
        raise FrameError(f"frame.payload: {len(payload)} bytes received, header says {header['payload_len']}")
    if zlib.crc32(payload) != header["payload_crc32"]:
        raise FrameError("frame.payload_crc32: mismatch; the payload is corrupt")
    layer_index, kind = header["layer_index"], header["kind"]
    if config is not None:
        _check_against_config(config, layer_index, kind, header, match_dtype)
    tensors, offset = [], 0
    for shape in header["shapes"]:
        t = torch.empty(shape, dtype=header["dtype"], pin_memory=pin_memory)
        n = t.numel() * t.element_size()
        t.view(-1).view(torch.uint8).copy_(torch.frombuffer(bytearray(payload[offset : offset + n]), dtype=torch.uint8))
        tensors.append(t)
        offset += n
    return layer_index, LayerCache(kind, tuple(tensors)), header["num_tokens"]


def _check_against_config(config: ModelConfig, layer_index: int, kind: LayerKind, header: dict,
                          match_dtype: bool) -> None:
    shapes, tokens = header["shapes"], header["num_tokens"]
    if match_dtype and header["dtype"] != getattr(torch, config.dtype):
        raise FrameError(f"frame.dtype: {header['dtype']} but {config.name} is {config.dtype}")
    if layer_index >= config.num_layers:
        raise FrameError(f"frame.layer_index: {layer_index} but {config.name} has {config.num_layers} layers")
    if config.layer_kinds[layer_index] is not kind:
        raise FrameError(
            f"frame.kind: layer {layer_index} is {kind.value}, "
            f"{config.name} expects {config.layer_kinds[layer_index].value}"
        )
    want = expected_shapes(config, kind, tokens)
    if tuple(shapes) != want:
        raise FrameError(f"frame.shapes: {shapes} for layer {layer_index}, expected {want} at {tokens} tokens")


def encode_cache(cache: HybridCache) -> Iterator[bytes]:
    """One frame per layer, in layer order (checkpoints stay local: they are not shipped)."""
    for i, layer in enumerate(cache.layers):
        yield encode_layer(i, layer, cache.num_tokens)


def decode_cache(frames: list[bytes], config: ModelConfig, device: str | torch.device = "cpu") -> HybridCache:
    """Frames (any order) back into a HybridCache; every layer exactly once, all at one length."""
    layers: dict[int, tuple[LayerCache, int]] = {}
    for frame in frames:
        index, layer, tokens = decode_layer(frame, config)
        if index in layers:
            raise FrameError(f"frame.layer_index: layer {index} arrived twice")
        layers[index] = layer, tokens
    return assemble_cache(layers, config, device)


def assemble_cache(
    layers: dict[int, tuple[LayerCache, int]], config: ModelConfig, device: str | torch.device = "cpu"
) -> HybridCache:
    """Decoded layers (index -> (cache, num_tokens)) into a HybridCache, checking it is whole.

    Receivers decode each layer as soon as it is complete and call this once the last one lands.
    """
    missing = sorted(set(range(config.num_layers)) - set(layers))
    lengths = {tokens for _, tokens in layers.values()}
    if missing or len(lengths) != 1:
        raise FrameError(f"cache: missing layers {missing} or mixed num_tokens {sorted(lengths)}")
    ordered = [layers[i][0].to(device) for i in range(config.num_layers)]
    return HybridCache(config, ordered, lengths.pop())
