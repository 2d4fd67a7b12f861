"""Model configuration, layer kinds and the presets that mirror real hybrid layouts.

A config is plain data: it says which mixer each layer uses and how big its cache is. It does not
build tensors (see `model.py`), so the byte accounting here can serve the emulator's cost models.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum

BYTE_VOCAB = 256
BOS_ID, EOS_ID, PAD_ID = 256, 257, 258
VOCAB_SIZE = 259
BLOCK_TOKENS = 64  # prefix-cache block size; snapshots sit on multiples of it

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


class LayerKind(StrEnum):
    KDA = "kda"  # Kimi Delta Attention: gated delta rule, per-channel decay
    GDN = "gdn"  # Gated DeltaNet: gated delta rule, scalar per-head decay
    SWA = "swa"  # sliding-window softmax attention
    FULL = "full"  # full softmax attention with GQA
    MLA = "mla"  # full attention with a latent (compressed) KV cache

    @property
    def is_growing(self) -> bool:
        """True for kinds whose cache grows with every token (the part PrfaaS must ship)."""
        return self in (LayerKind.FULL, LayerKind.MLA)

    @property
    def is_recurrent(self) -> bool:
        return self in (LayerKind.KDA, LayerKind.GDN)


@dataclass(frozen=True, slots=True)
class ModelConfig:
    name: str
    size: str
    layer_kinds: tuple[LayerKind, ...]
    d_model: int
    mlp_hidden: int
    # linear (kda/gdn) mixers
    linear_heads: int
    linear_head_dim: int  # d_k = d_v
    conv_kernel: int = 4
    chunk_size: int = 64
    decay_log_min: float = -2.0  # lower bound of a step's log-decay; see delta_rule.py
    # softmax attention (full/swa)
    attn_heads: int = 4
    attn_kv_heads: int = 2
    attn_head_dim: int = 64
    window: int = 128
    rope_theta: float = 10000.0
    # mla
    kv_lora_rank: int = 128
    qk_nope_dim: int = 64
    qk_rope_dim: int = 32
    v_head_dim: int = 64
    vocab_size: int = VOCAB_SIZE
    dtype: str = "float32"
    seed: int = 1234

    def __post_init__(self) -> None:
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"dtype: {self.dtype!r} is not one of {sorted(DTYPE_BYTES)}")
        if self.attn_heads % self.attn_kv_heads:
            raise ValueError("attn_heads must be a multiple of attn_kv_heads (GQA groups)")
        if self.chunk_size * -self.decay_log_min > 160:
            raise ValueError("chunk_size * |decay_log_min| must be <= 160 (float32 range)")

    @property
    def num_layers(self) -> int:
        return len(self.layer_kinds)

    @property
    def itemsize(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def pattern(self) -> str:
        return ",".join(k.value for k in self.layer_kinds)

    def growing_bytes_per_token(self, kind: LayerKind) -> int:
        """Cache bytes one more token adds to one layer of this kind (0 for bounded kinds)."""
        if kind is LayerKind.FULL:
            return 2 * self.attn_kv_heads * self.attn_head_dim * self.itemsize
        if kind is LayerKind.MLA:
            return (self.kv_lora_rank + self.qk_rope_dim) * self.itemsize
        return 0

    def layer_bytes(self, kind: LayerKind, tokens: int) -> int:
        """Bytes of one layer's cache after `tokens` tokens."""
        if kind.is_growing:
            return tokens * self.growing_bytes_per_token(kind)
        if kind is LayerKind.SWA:
            return min(tokens, self.window) * 2 * self.attn_kv_heads * self.attn_head_dim * self.itemsize
        state = self.linear_heads * self.linear_head_dim * self.linear_head_dim
        conv = self.conv_channels * (self.conv_kernel - 1)
        return (state + conv) * self.itemsize

    @property
    def conv_channels(self) -> int:
        """Channels of the short causal conv over q, k and v of a linear layer."""
        return 3 * self.linear_heads * self.linear_head_dim

    def layer_sizes(self, tokens: int) -> tuple[int, ...]:
        """Each layer's cache bytes after `tokens` tokens, in layer order: what a sender shipping
        the cache layer by layer hands over as each layer's prefill ends."""
        return tuple(self.layer_bytes(kind, tokens) for kind in self.layer_kinds)

    def kv_bytes_per_token(self) -> int:
        return sum(self.growing_bytes_per_token(k) for k in self.layer_kinds)

    def fixed_bytes(self, tokens: int) -> int:
        """Bytes of the bounded part of the cache (recurrent states, conv states, SWA windows)."""
        return sum(self.layer_bytes(k, tokens) for k in self.layer_kinds if not k.is_growing)

    def cache_bytes(self, tokens: int) -> int:
        return sum(self.layer_bytes(k, tokens) for k in self.layer_kinds)


def _pattern(unit: str, repeats: int) -> tuple[LayerKind, ...]:
    return tuple(LayerKind(k) for k in unit.split(",")) * repeats


_SMALL = dict(d_model=256, mlp_hidden=768, linear_heads=4, linear_head_dim=64)
# GPU scale: matmuls large enough to measure a GPU's efficiency against its GEMM rate (bf16).
_BASE = dict(
    d_model=2048, mlp_hidden=5632, linear_heads=16, linear_head_dim=128, attn_heads=16, attn_kv_heads=4,
    attn_head_dim=128, window=1024, kv_lora_rank=512, qk_nope_dim=128, qk_rope_dim=64, v_head_dim=128,
)
_TINY = dict(
    d_model=64, mlp_hidden=128, linear_heads=2, linear_head_dim=32, attn_heads=2, attn_kv_heads=1,
    attn_head_dim=32, window=16, kv_lora_rank=32, qk_nope_dim=16, qk_rope_dim=16, v_head_dim=32,
)

# (layer unit, repeats at small size, repeats at tiny size): the ratios mirror the real models.
_LAYOUTS = {
    "kimi-linear-mini": ("kda,kda,kda,mla", 2, 1),  # Kimi Linear: KDA:MLA 3:1
    "qwen3-next-mini": ("gdn,gdn,gdn,full", 2, 1),  # Qwen3-Next / Qwen3.5: GDN:GQA 3:1
    "mimo-v2-flash-mini": ("swa,swa,swa,swa,swa,full", 2, 1),  # MiMo-V2-Flash: SWA:GQA 5:1
    "dense-gqa-mini": ("full", 8, 4),  # dense baseline
}
PRESET_NAMES = tuple(_LAYOUTS)
SIZES = ("small", "tiny", "base")  # base: the GPU bench's size (layers as small, matrices 8x wider)


def get_preset(name: str, size: str = "small", **overrides: object) -> ModelConfig:
    """The preset `name` at `size`; keyword overrides replace fields (e.g. dtype, chunk_size)."""
    if name not in _LAYOUTS:
        raise KeyError(f"model: unknown preset {name!r}; choose one of {', '.join(PRESET_NAMES)}")
    if size not in SIZES:
        raise KeyError(f"size: unknown size {size!r}; choose one of {', '.join(SIZES)}")
    unit, small_repeats, tiny_repeats = _LAYOUTS[name]
    dims = {"small": _SMALL, "tiny": _TINY, "base": _BASE}[size]
    repeats = tiny_repeats if size == "tiny" else small_repeats
    config = ModelConfig(name=name, size=size, layer_kinds=_pattern(unit, repeats), **dims)
    return dataclasses.replace(config, **overrides) if overrides else config
