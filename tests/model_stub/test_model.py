"""HybridModel: prefill + decode against a full forward, batching, snapshots and input checks."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from model_stub import PRESET_NAMES, HybridCache, HybridModel, get_preset
from model_stub.config import BLOCK_TOKENS, VOCAB_SIZE
from model_stub.model import resolve_dtype

REL_ATOL = 1e-4  # absolute tolerance on logits, as a fraction of the reference logits' scale


def assert_logits_close(got: torch.Tensor, ref: torch.Tensor) -> None:
    torch.testing.assert_close(got, ref, rtol=0, atol=REL_ATOL * float(ref.abs().max()))


def assert_caches_close(got: HybridCache, ref: HybridCache) -> None:
    assert got.num_tokens == ref.num_tokens
    assert [c.kind for c in got.layers] == [c.kind for c in ref.layers]
    for i, (a, b) in enumerate(zip(got.layers, ref.layers, strict=True)):
        for x, y in zip(a.tensors, b.tensors, strict=True):
            assert x.shape == y.shape, f"layer {i} ({a.kind.value})"
            scale = max(float(y.abs().max()), 1.0)
            torch.testing.assert_close(x, y, rtol=0, atol=REL_ATOL * scale, msg=f"layer {i}")


def clone_tensors(cache: HybridCache) -> list[torch.Tensor]:
    return [t.clone() for layer in cache.layers for t in layer.tensors]


# (prefill length, decode steps): both cross the tiny window (16) and the chunk/block size (64)
@pytest.mark.parametrize(("prefill_len", "decode_len"), [(100, 40), (15, 55), (64, 16), (1, 70)])
@pytest.mark.parametrize("name", PRESET_NAMES)
def test_prefill_then_decode_matches_full_forward(
    tiny_model, random_tokens, name, prefill_len, decode_len
):
    model = tiny_model(name)
    tokens = random_tokens(prefill_len + decode_len)
    full_logits, full_cache = model.prefill(tokens, all_logits=True)  # (t, vocab)
    logits, cache = model.prefill(tokens[:prefill_len])
    got = [logits]
    for token in tokens[prefill_len:]:
        got.append(model.decode_step([token], [cache])[0])
    assert_logits_close(torch.stack(got), full_logits[prefill_len - 1 :])
    assert_caches_close(cache, full_cache)


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_prefill_last_logits_are_the_last_row_of_all_logits(tiny_model, random_tokens, name):
    model = tiny_model(name)
    tokens = random_tokens(70)
    all_logits, _ = model.prefill(tokens, all_logits=True)
    last, _ = model.prefill(tokens)
    assert all_logits.shape == (70, VOCAB_SIZE) and last.shape == (VOCAB_SIZE,)
    assert_logits_close(last, all_logits[-1])


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_on_layer_done_reports_each_final_layer_cache_in_order(tiny_model, random_tokens, name):
    model = tiny_model(name)
    calls = []
    _, cache = model.prefill(random_tokens(80), on_layer_done=lambda i, c: calls.append((i, c)))
    assert [i for i, _ in calls] == list(range(model.config.num_layers))
    for (i, reported), layer in zip(calls, cache.layers, strict=True):
        assert reported is layer, f"layer {i}: the callback saw a different object"
        assert reported.kind is model.config.layer_kinds[i]


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_batched_decode_matches_decoding_each_request_alone(tiny_model, random_tokens, name):
    model = tiny_model(name)
    lengths = (17, 70, 130)  # inside/past the window, past one and two blocks
    prompts = [random_tokens(n, seed=n) for n in lengths]
    steps = [random_tokens(4, seed=1000 + n) for n in lengths]  # teacher-forced next tokens
    batch = [model.prefill(p)[1] for p in prompts]
    batched = [model.decode_step([s[j] for s in steps], batch) for j in range(4)]  # (3, vocab) each
    for r, prompt in enumerate(prompts):
        _, alone = model.prefill(prompt)
        for j in range(4):
            assert_logits_close(batched[j][r], model.decode_step([steps[r][j]], [alone])[0])
        assert batch[r].num_tokens == lengths[r] + 4
        assert_caches_close(batch[r], alone)


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_resume_from_snapshot_matches_full_prefill(tiny_model, random_tokens, name):
    model = tiny_model(name)
    tokens = random_tokens(200)
    ref_logits, ref_cache = model.prefill(tokens, all_logits=True)
    _, cache = model.prefill(tokens, checkpoint_at=[64, 128])
    assert sorted(cache.checkpoints) == [64, 128]
    for at in (64, 128):
        snap = cache.snapshot(at)
        assert snap.num_tokens == at
        assert_caches_close(snap, model.prefill(tokens[:at])[1])  # the prefix's own cache
        logits, resumed = model.prefill(tokens[at:], cache=snap, all_logits=True)
        assert_logits_close(logits, ref_logits[at:])
        assert_caches_close(resumed, ref_cache)


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_resumed_cache_keeps_earlier_checkpoints(tiny_model, random_tokens, name):
    """snapshot(128) -> resume -> snapshot(64) and snapshot(192) still give exact prefixes."""
    model = tiny_model(name)
    tokens = random_tokens(230)
    _, cache = model.prefill(tokens[:150], checkpoint_at=[64, 128])
    _, resumed = model.prefill(tokens[128:], cache=cache.snapshot(128), checkpoint_at=[192])
    assert sorted(resumed.checkpoints) == [64, 192]
    for at in (64, 192):
        assert_caches_close(resumed.snapshot(at), model.prefill(tokens[:at])[1])


def test_resume_point_is_kept_when_asked(tiny_model, random_tokens):
    """A prefix entry reused by a later request can be snapshotted again from the resumed cache."""
    model = tiny_model("kimi-linear-mini")
    tokens = random_tokens(200)
    _, cache = model.prefill(tokens[:128])
    _, resumed = model.prefill(tokens[128:], cache=cache, checkpoint_at=[128])
    assert 128 in resumed.checkpoints
    assert_caches_close(resumed.snapshot(128), cache)


def test_snapshot_at_the_end_needs_no_checkpoint(tiny_model, random_tokens):
    model = tiny_model("mimo-v2-flash-mini")
    tokens = random_tokens(128)
    _, cache = model.prefill(tokens)
    snap = cache.snapshot(128)
    assert_caches_close(snap, cache)
    logits, _ = model.prefill([7], cache=snap)
    assert_logits_close(logits, model.prefill(tokens + [7])[0])


@pytest.mark.parametrize(
    ("at", "message"),
    [
        (65, "positive multiple of 64"),
        (100, "positive multiple of 64"),
        (0, "positive multiple of 64"),
        (-64, "positive multiple of 64"),
        (256, r"<= num_tokens=200"),
        (64, r"no checkpoint at 64; pass checkpoint_at=\[64\]"),
    ],
)
def test_snapshot_rejects_bad_positions(tiny_model, random_tokens, at, message):
    model = tiny_model("kimi-linear-mini")
    _, cache = model.prefill(random_tokens(200), checkpoint_at=[128])
    assert BLOCK_TOKENS == 64
    with pytest.raises(ValueError, match=message):
        cache.snapshot(at)


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_prefill_does_not_modify_the_cache_passed_in(tiny_model, random_tokens, name):
    model = tiny_model(name)
    tokens = random_tokens(160)
    _, cache = model.prefill(tokens[:100], checkpoint_at=[64])
    layers, before = list(cache.layers), clone_tensors(cache)
    checkpoint_before = [
        t.clone() for ck in cache.checkpoints[64] if ck is not None for t in ck.tensors
    ]
    _, new = model.prefill(tokens[100:], cache=cache, checkpoint_at=[128])
    assert new is not cache and new.num_tokens == 160
    assert cache.num_tokens == 100 and sorted(cache.checkpoints) == [64]
    assert all(a is b for a, b in zip(cache.layers, layers, strict=True))
    for a, b in zip(clone_tensors(cache), before, strict=True):
        assert torch.equal(a, b)
    checkpoint_after = [t for ck in cache.checkpoints[64] if ck is not None for t in ck.tensors]
    for a, b in zip(checkpoint_after, checkpoint_before, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("bad", [[VOCAB_SIZE], [-1], [1, 2, 10_000]])
def test_tokens_outside_the_vocab_are_rejected(tiny_model, bad):
    model = tiny_model("qwen3-next-mini")
    with pytest.raises(ValueError, match=r"tokens: ids must be in \[0, 259\)"):
        model.prefill(bad)
    _, cache = model.prefill([1, 2, 3])
    before = clone_tensors(cache)
    with pytest.raises(ValueError, match=r"tokens: ids must be in \[0, 259\)"):
        model.decode_step(bad[-1:], [cache])
    assert cache.num_tokens == 3
    assert all(torch.equal(a, b) for a, b in zip(clone_tensors(cache), before, strict=True))


def test_empty_prompt_and_token_count_mismatch_are_rejected(tiny_model):
    model = tiny_model("dense-gqa-mini")
    with pytest.raises(ValueError, match="at least one token"):
        model.prefill([])
    _, cache = model.prefill([1, 2, 3])
    with pytest.raises(ValueError, match="2 tokens for 1 caches"):
        model.decode_step([1, 2], [cache])


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_same_config_gives_same_weights_and_tokens(random_tokens, name):
    config = get_preset(name, "tiny")
    a, b = HybridModel(config, device="cpu"), HybridModel(config, device="cpu")
    state_a, state_b = a.state_dict(), b.state_dict()
    assert state_a.keys() == state_b.keys()
    for key, value in state_a.items():
        assert torch.equal(value, state_b[key]), key
    prompt = random_tokens(40)
    assert a.generate(prompt, 8) == b.generate(prompt, 8)
    other = HybridModel(dataclasses.replace(config, seed=config.seed + 1), device="cpu")
    assert not torch.equal(other.lm_head.weight, a.lm_head.weight)


def test_building_a_model_leaves_the_global_rng_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    HybridModel(get_preset("kimi-linear-mini", "tiny"), device="cpu")
    assert torch.equal(torch.rand(3), expected)


def test_greedy_continue_after_prefill_equals_generate(tiny_model, random_tokens):
    model = tiny_model("kimi-linear-mini")
    prompt = random_tokens(90)
    logits, cache = model.prefill(prompt)
    tokens = model.greedy_continue(cache, int(logits.argmax()), 12)
    assert len(tokens) == 12 and cache.num_tokens == 90 + 11
    assert tokens == model.generate(prompt, 12)


@pytest.mark.parametrize(("dtype", "device", "resolved"), [
    ("auto", "cpu", "float32"), ("auto", "cuda", "bfloat16"), ("bfloat16", "cpu", "bfloat16"),
    ("float32", "cuda", "float32"),
])
def test_dtype_auto_is_bfloat16_on_cuda_and_float32_on_cpu(dtype, device, resolved):
    assert resolve_dtype(dtype, torch.device(device)) == resolved
    with pytest.raises(ValueError, match="dtype: 'int8' is not auto or one of float32"):
        resolve_dtype("int8", torch.device(device))
