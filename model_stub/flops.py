"""Matmul FLOPs of a prefill, counted from the config, for roofline efficiency in the bench.

Counts 2 * m * n * k per matmul the implementation really runs, with causal attention counted for
the keys each query may see. Elementwise work (norms, gates, exp) is left out on purpose: the
roofline is the GEMM rate, so efficiency says how close the model runs to pure matmul speed.
"""

from __future__ import annotations

from model_stub.config import LayerKind, ModelConfig


def _attended_keys(tokens: int, start: int, window: int | None) -> int:
    """Sum over the new queries of the keys each attends to (itself included)."""
    positions = range(start, start + tokens)
    if window is None:
        return sum(p + 1 for p in positions)
    return sum(min(p + 1, window) for p in positions)


def _delta_rule_flops(config: ModelConfig, tokens: int) -> int:
    """The chunk form per head and chunk: two c x c Gram products, the triangular solve, hand-offs."""
    c, d = config.chunk_size, config.linear_head_dim
    chunks = -(-tokens // c)
    per_chunk = 4 * c * c * d + c * c * 2 * d + 2 * c * c * d + 6 * c * d * d
    return config.linear_heads * chunks * per_chunk


def layer_prefill_flops(config: ModelConfig, kind: LayerKind, tokens: int, start: int = 0) -> int:
    """FLOPs of one block (mixer + MLP) prefilling `tokens` new tokens after `start` cached ones."""
    dm, t = config.d_model, tokens
    mlp = 2 * t * dm * 3 * config.mlp_hidden
    if kind.is_recurrent:
        inner = config.linear_heads * config.linear_head_dim
        proj = 2 * t * dm * (3 * inner + inner + config.linear_heads) + 2 * t * inner * dm
        if kind is LayerKind.KDA:
            proj += 2 * t * (dm * config.linear_head_dim + config.linear_head_dim * inner)
        else:
            proj += 2 * t * dm * config.linear_heads
        return proj + _delta_rule_flops(config, t) + mlp
    if kind is LayerKind.MLA:
        h = config.attn_heads
        qk, dv = config.qk_nope_dim + config.qk_rope_dim, config.v_head_dim
        proj = 2 * t * dm * (h * qk + config.kv_lora_rank + config.qk_rope_dim) + 2 * t * h * dv * dm
        expand = 2 * (start + t) * config.kv_lora_rank * h * (config.qk_nope_dim + dv)
        attn = 2 * h * (qk + dv) * _attended_keys(t, start, None)
        return proj + expand + attn + mlp
    h, hkv, d = config.attn_heads, config.attn_kv_heads, config.attn_head_dim
    proj = 2 * t * dm * (h + 2 * hkv) * d + 2 * t * h * d * dm
    window = config.window if kind is LayerKind.SWA else None
    attn = 2 * h * 2 * d * _attended_keys(t, start, window)
    return proj + attn + mlp


def prefill_flops(config: ModelConfig, tokens: int, start: int = 0) -> int:
    """Whole-model prefill FLOPs, with the LM head run for the last token only (as prefill does)."""
    layers = sum(layer_prefill_flops(config, k, tokens, start) for k in config.layer_kinds)
    return layers + 2 * config.d_model * config.vocab_size
