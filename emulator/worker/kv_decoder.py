"""The decode worker's side of the KV stream: what a layer frame means, for the transport's receiver.

The transport moves and bounds bytes; only this module knows they are `model_stub` layer frames
(kind, dtype, shapes, checksum), how they reach the model's device (kv_staging's uploader, as each
layer lands) and how they add up to a HybridCache.
"""

from __future__ import annotations

import logging
import math

import torch

from emulator.limits import MAX_TOKENS
from emulator.worker.kv_staging import LayerUploader, Upload
from model_stub.cache import HybridCache, LayerCache, expected_shapes
from model_stub.config import DTYPE_BYTES, ModelConfig
from model_stub.model import TORCH_DTYPES
from model_stub.serialize import HEADER_BYTES, FrameError, assemble_cache, decode_layer

log = logging.getLogger(__name__)
WIDEST_ITEMSIZE = max(DTYPE_BYTES.values())


def layer_frame_caps(config: ModelConfig, max_tokens: int = MAX_TOKENS) -> tuple[int, ...]:
    """The largest serialised frame each layer of `config` can have (at `max_tokens` tokens), in the
    widest dtype: a prefill worker may ship in another dtype than this model's (see ModelKVDecoder)."""
    return tuple(HEADER_BYTES + WIDEST_ITEMSIZE * sum(math.prod(s) for s in expected_shapes(config, kind, max_tokens))
                 for kind in config.layer_kinds)


class ModelKVDecoder:
    """Decodes layer frames of `config`'s model onto `device` and assembles them (a KVDecoder).

    A frame in another dtype than the model's is cast on arrival, announced once per dtype: with
    dtype `auto` a prefill worker on a GPU ships bfloat16 and a decode worker on a CPU computes in
    float32, and refusing would fail every such transfer. Shapes, kinds and checksums stay strict.
    """

    def __init__(self, config: ModelConfig, max_tokens: int = MAX_TOKENS,
                 device: torch.device | str = "cpu") -> None:
        self.config = config
        self.layer_caps = layer_frame_caps(config, max_tokens)
        self.uploader = LayerUploader(torch.device(device), TORCH_DTYPES[config.dtype])
        self._announced: set[torch.dtype] = {self.uploader.dtype}

    def decode_layer(self, index: int, frame: bytes) -> tuple[Upload, int]:
        """One layer's frame as (its upload to the device, its tokens); FrameError (a ValueError)
        when it is not a valid layer `index` of this model."""
        got_index, layer, tokens = decode_layer(frame, self.config, pin_memory=self.uploader.pin_memory,
                                                match_dtype=False)
        if got_index != index:
            raise FrameError(f"frame.layer_index: {got_index} arrived as layer {index}")
        dtype = layer.tensors[0].dtype
        if dtype not in self._announced:  # decode threads may race here: at worst a second line
            self._announced.add(dtype)
            log.warning("KV frames arrive in %s but this worker's model is %s: cast on arrival "
                        "(settings.dtype alike on every worker avoids it)", dtype, self.config.dtype)
        return self.uploader.upload(layer), tokens

    def assemble(self, layers: dict[int, tuple[Upload, int]]) -> HybridCache:
        ready: dict[int, tuple[LayerCache, int]] = {
            i: (self.uploader.ready(upload), tokens) for i, (upload, tokens) in layers.items()}
        return assemble_cache(ready, self.config, self.uploader.device)
