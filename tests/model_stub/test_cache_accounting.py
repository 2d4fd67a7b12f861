"""Cache byte accounting: the config's formulas against the tensors prefill really keeps."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from model_stub import PRESET_NAMES, HybridCache, HybridModel, LayerKind, ModelConfig, get_preset

# (size, prompt lengths): tiny's window is 16, small's is 128; small stays short to stay fast
LENGTHS = {"tiny": (1, 10, 16, 17, 100), "small": (100, 200, 300)}
CASES = [(name, size) for size in LENGTHS for name in PRESET_NAMES]

# Growing bytes per token, by hand from the preset dims (float32 = 4 bytes):
#   full: 2 (k, v) * kv_heads * head_dim * 4;   mla: (kv_lora_rank + qk_rope_dim) * 4
HAND_KV_BYTES_PER_TOKEN = {
    ("kimi-linear-mini", "tiny"): 1 * (32 + 16) * 4,  # 1 mla layer
    ("qwen3-next-mini", "tiny"): 1 * 2 * 1 * 32 * 4,  # 1 full layer
    ("mimo-v2-flash-mini", "tiny"): 1 * 2 * 1 * 32 * 4,  # 1 full layer
    ("dense-gqa-mini", "tiny"): 4 * 2 * 1 * 32 * 4,  # 4 full layers
    ("kimi-linear-mini", "small"): 2 * (128 + 32) * 4,
    ("qwen3-next-mini", "small"): 2 * 2 * 2 * 64 * 4,
    ("mimo-v2-flash-mini", "small"): 2 * 2 * 2 * 64 * 4,
    ("dense-gqa-mini", "small"): 8 * 2 * 2 * 64 * 4,
}


@pytest.fixture(scope="module")
def prefilled(random_tokens) -> Callable[[str, str, int], HybridCache]:
    """`get(name, size, n)`: the cache after prefilling n tokens, one model per (name, size)."""
    models: dict[tuple[str, str], HybridModel] = {}
    caches: dict[tuple[str, str, int], HybridCache] = {}

    def get(name: str, size: str, n: int) -> HybridCache:
        if (name, size) not in models:
            models[name, size] = HybridModel(get_preset(name, size), device="cpu")
        if (name, size, n) not in caches:
            caches[name, size, n] = models[name, size].prefill(random_tokens(n))[1]
        return caches[name, size, n]

    return get


def tensor_bytes(cache: HybridCache, growing: bool | None = None) -> int:
    return sum(
        t.numel() * t.element_size()
        for layer in cache.layers
        if growing is None or layer.kind.is_growing == growing
        for t in layer.tensors
    )


def hand_growing_bytes_per_token(config: ModelConfig) -> int:
    """Per-token bytes of the full/mla layers, from the config's fields (not its methods)."""
    total = 0
    for kind in config.layer_kinds:
        if kind is LayerKind.FULL:
            total += 2 * config.attn_kv_heads * config.attn_head_dim * config.itemsize
        elif kind is LayerKind.MLA:
            total += (config.kv_lora_rank + config.qk_rope_dim) * config.itemsize
    return total


@pytest.mark.parametrize(("name", "size"), CASES)
def test_cache_bytes_match_the_config_after_prefill(prefilled, name, size):
    config = get_preset(name, size)
    for n in LENGTHS[size]:
        cache = prefilled(name, size, n)
        assert cache.num_tokens == n
        assert cache.nbytes == tensor_bytes(cache)
        assert cache.growing_bytes == tensor_bytes(cache, growing=True)
        assert cache.fixed_bytes == tensor_bytes(cache, growing=False)
        assert cache.growing_bytes == n * config.kv_bytes_per_token()
        assert cache.fixed_bytes == config.fixed_bytes(n)
        assert cache.bytes_for(n) == cache.nbytes == config.cache_bytes(n)


@pytest.mark.parametrize(("name", "size"), CASES)
def test_kv_bytes_per_token_matches_hand_arithmetic(name, size):
    config = get_preset(name, size)
    assert config.kv_bytes_per_token() == HAND_KV_BYTES_PER_TOKEN[name, size]
    assert hand_growing_bytes_per_token(config) == HAND_KV_BYTES_PER_TOKEN[name, size]


@pytest.mark.parametrize(("name", "size"), CASES)
def test_only_full_and_mla_layers_grow_past_the_window(prefilled, name, size):
    config = get_preset(name, size)
    short, long = LENGTHS[size][-2:]
    assert config.window <= short < long
    a, b = prefilled(name, size, short), prefilled(name, size, long)
    per_token = hand_growing_bytes_per_token(config)
    assert b.growing_bytes - a.growing_bytes == (long - short) * per_token
    assert b.fixed_bytes == a.fixed_bytes  # recurrent states, conv states and full SWA windows
    for la, lb in zip(a.layers, b.layers, strict=True):
        grown = lb.nbytes - la.nbytes
        assert grown == (long - short) * config.growing_bytes_per_token(la.kind), la.kind
        assert (grown > 0) == la.kind.is_growing, la.kind


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_swa_window_fills_then_stays_full(prefilled, name):
    config = get_preset(name, "tiny")
    for n in LENGTHS["tiny"]:
        for layer in prefilled(name, "tiny", n).layers:
            if layer.kind is LayerKind.SWA:
                assert [t.shape[1] for t in layer.tensors] == [min(n, config.window)] * 2


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_accounting_holds_while_decoding(name, random_tokens):
    config = get_preset(name, "tiny")
    model = HybridModel(config, device="cpu")
    _, cache = model.prefill(random_tokens(10))
    for step, token in enumerate(random_tokens(12, seed=1), start=11):  # crosses the window (16)
        model.decode_step([token], [cache])
        assert cache.num_tokens == step
        assert cache.nbytes == tensor_bytes(cache) == config.cache_bytes(step)
        assert cache.growing_bytes == step * config.kv_bytes_per_token()
        assert cache.fixed_bytes == config.fixed_bytes(step)
