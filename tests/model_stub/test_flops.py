"""Prefill FLOP counts against hand computation from the config fields."""

from model_stub.config import LayerKind, get_preset
from model_stub.flops import layer_prefill_flops, prefill_flops


def test_dense_tiny_prefill_flops_by_hand():
    # dense-gqa-mini tiny: d_model 64, 2 heads / 1 kv head of 32, mlp 128, vocab 259, 4 full layers
    tokens = 10
    proj = 2 * tokens * 64 * (2 + 2 * 1) * 32 + 2 * tokens * 2 * 32 * 64
    attention = 2 * 2 * (32 + 32) * sum(range(1, tokens + 1))  # causal: query p sees p + 1 keys
    mlp = 2 * tokens * 64 * 3 * 128
    head = 2 * 64 * 259
    assert prefill_flops(get_preset("dense-gqa-mini", "tiny"), tokens) == 4 * (proj + attention + mlp) + head


def test_sliding_window_caps_keys_per_query():
    config = get_preset("mimo-v2-flash-mini", "tiny")  # window 16
    full_ = layer_prefill_flops(config, LayerKind.FULL, 100)
    swa = layer_prefill_flops(config, LayerKind.SWA, 100)
    per_key = 2 * config.attn_heads * 2 * config.attn_head_dim
    keys_full = sum(p + 1 for p in range(100))
    keys_swa = sum(min(p + 1, 16) for p in range(100))
    assert full_ - swa == per_key * (keys_full - keys_swa)


def test_delta_rule_cost_is_linear_in_tokens():
    config = get_preset("qwen3-next-mini", "small")
    one = layer_prefill_flops(config, LayerKind.GDN, 4096)
    four = layer_prefill_flops(config, LayerKind.GDN, 4 * 4096)
    assert four == 4 * one  # 4096 is a whole number of chunks, so the count scales exactly


def test_resumed_prefill_counts_attention_to_the_cached_prefix():
    config = get_preset("dense-gqa-mini", "tiny")
    cold = layer_prefill_flops(config, LayerKind.FULL, 64, start=0)
    warm = layer_prefill_flops(config, LayerKind.FULL, 64, start=64)
    per_key = 2 * config.attn_heads * 2 * config.attn_head_dim
    assert warm - cold == per_key * 64 * 64
