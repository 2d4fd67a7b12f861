"""The hybrid cache: per layer, what decoding needs to continue a request.

Growing layers (full, mla) keep every token's KV; bounded layers keep a recurrent state plus conv
state (kda, gdn) or the last `window` tokens (swa). Tensors are per request (no batch dim) and are
never written in place, so a snapshot can share them with the cache it came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from model_stub.config import BLOCK_TOKENS, LayerKind, ModelConfig

TENSOR_NAMES: dict[LayerKind, tuple[str, str]] = {
    LayerKind.FULL: ("k", "v"),
    LayerKind.SWA: ("k", "v"),
    LayerKind.MLA: ("c_kv", "k_rope"),
    LayerKind.KDA: ("state", "conv"),
    LayerKind.GDN: ("state", "conv"),
}


def expected_shapes(config: ModelConfig, kind: LayerKind, tokens: int) -> tuple[tuple[int, ...], ...]:
    """Shapes of a layer's tensors after `tokens` tokens; the contract deserialisation checks."""
    if kind in (LayerKind.FULL, LayerKind.SWA):
        kept = tokens if kind is LayerKind.FULL else min(tokens, config.window)
        kv = (config.attn_kv_heads, kept, config.attn_head_dim)
        return kv, kv
    if kind is LayerKind.MLA:
        return (tokens, config.kv_lora_rank), (tokens, config.qk_rope_dim)
    d = config.linear_head_dim
    return (config.linear_heads, d, d), (config.conv_channels, config.conv_kernel - 1)


@dataclass(slots=True)
class LayerCache:
    """One layer's cache: its kind and two tensors, named by TENSOR_NAMES[kind]."""

    kind: LayerKind
    tensors: tuple[Tensor, Tensor]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors)

    def truncated(self, tokens: int) -> LayerCache:
        """The first `tokens` tokens of a growing layer (views; nothing is copied)."""
        if not self.kind.is_growing:
            raise ValueError(f"truncated: {self.kind.value} layers cannot rewind; use a checkpoint")
        axis = 1 if self.kind is LayerKind.FULL else 0
        return LayerCache(self.kind, tuple(t.narrow(axis, 0, tokens) for t in self.tensors))

    def to(self, device: torch.device | str) -> LayerCache:
        return LayerCache(self.kind, tuple(t.to(device) for t in self.tensors))


@dataclass(slots=True)
class HybridCache:
    """A request's cache after `num_tokens` tokens.

    `checkpoints` maps a position to the bounded layers' caches at that position (None for growing
    layers, which are truncated instead); prefill records them where asked, so prefix-cache entries
    can be cut at block boundaries without recomputing.
    """

    config: ModelConfig
    layers: list[LayerCache]
    num_tokens: int
    checkpoints: dict[int, tuple[LayerCache | None, ...]] = field(default_factory=dict)

    @property
    def growing_bytes(self) -> int:
        return sum(c.nbytes for c in self.layers if c.kind.is_growing)

    @property
    def fixed_bytes(self) -> int:
        return sum(c.nbytes for c in self.layers if not c.kind.is_growing)

    @property
    def nbytes(self) -> int:
        return self.growing_bytes + self.fixed_bytes

    def bytes_for(self, tokens: int) -> int:
        """Bytes this model's cache holds after `tokens` tokens (what a transfer must ship)."""
        return self.config.cache_bytes(tokens)

    def snapshot(self, at_tokens: int) -> HybridCache:
        """A prefix-cache entry for the first `at_tokens` tokens, from which prefill can resume."""
        if at_tokens % BLOCK_TOKENS or not 0 < at_tokens <= self.num_tokens:
            raise ValueError(
                f"snapshot: at_tokens={at_tokens} must be a positive multiple of {BLOCK_TOKENS} "
                f"and <= num_tokens={self.num_tokens}"
            )
        if at_tokens == self.num_tokens:
            bounded = tuple(None if c.kind.is_growing else c for c in self.layers)
        elif at_tokens in self.checkpoints:
            bounded = self.checkpoints[at_tokens]
        else:
            raise ValueError(
                f"snapshot: no checkpoint at {at_tokens}; pass checkpoint_at=[{at_tokens}] to prefill "
                f"(recorded: {sorted(self.checkpoints) or 'none'})"
            )
        layers = [
            c.truncated(at_tokens) if c.kind.is_growing else kept
            for c, kept in zip(self.layers, bounded, strict=True)
        ]
        earlier = {p: ck for p, ck in self.checkpoints.items() if p < at_tokens}
        return HybridCache(self.config, layers, at_tokens, earlier)

    def to(self, device: torch.device | str) -> HybridCache:
        checkpoints = {
            p: tuple(None if c is None else c.to(device) for c in ck) for p, ck in self.checkpoints.items()
        }
        return HybridCache(self.config, [c.to(device) for c in self.layers], self.num_tokens, checkpoints)
