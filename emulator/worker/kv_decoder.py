"""The decode worker's side of the KV stream: what a layer frame means, for the transport's receiver.

The transport moves and bounds bytes; only this module knows they are `model_stub` layer frames
(kind, dtype, shapes, checksum) and how they add up to a HybridCache.
"""

from __future__ import annotations

import math

import torch

from emulator.limits import MAX_TOKENS
from model_stub.cache import HybridCache, LayerCache, expected_shapes
from model_stub.config import ModelConfig
from model_stub.serialize import HEADER_BYTES, FrameError, assemble_cache, decode_layer


def layer_frame_caps(config: ModelConfig, max_tokens: int = MAX_TOKENS) -> tuple[int, ...]:
    """The largest serialised frame each layer of `config` can have (at `max_tokens` tokens)."""
    itemsize = torch.empty(0, dtype=getattr(torch, config.dtype)).element_size()
    return tuple(HEADER_BYTES + itemsize * sum(math.prod(s) for s in expected_shapes(config, kind, max_tokens))
                 for kind in config.layer_kinds)


class ModelKVDecoder:
    """Decodes layer frames of `config`'s model and assembles them into its cache (a KVDecoder)."""

    def __init__(self, config: ModelConfig, max_tokens: int = MAX_TOKENS) -> None:
        self.config = config
        self.layer_caps = layer_frame_caps(config, max_tokens)

    def decode_layer(self, index: int, frame: bytes) -> tuple[LayerCache, int]:
        """One layer's frame as (its cache, its tokens); FrameError (a ValueError) when it is not
        a valid layer `index` of this model."""
        got_index, layer, tokens = decode_layer(frame, self.config)
        if got_index != index:
            raise FrameError(f"frame.layer_index: {got_index} arrived as layer {index}")
        return layer, tokens

    def assemble(self, layers: dict[int, tuple[LayerCache, int]]) -> HybridCache:
        return assemble_cache(layers, self.config)
