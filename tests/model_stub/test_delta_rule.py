"""The gated delta rule: the chunkwise form (prefill) against the step-by-step form (decode)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from hypothesis import example, given, settings, strategies as st

from model_stub.config import get_preset
from model_stub.delta_rule import (
    MAX_CHUNK_LOG_SPAN,
    chunk_gated_delta_rule,
    recurrent_gated_delta_rule,
)

DECAY_LOG_MIN = -2.0
MAX_REL_ERR = 1e-4
DIMS = st.sampled_from([4, 8, 16, 32])
CHUNKS = st.sampled_from([16, 32, 64])


def make_inputs(
    gen: torch.Generator, b: int, h: int, t: int, dk: int, dv: int, per_channel: bool,
    decay_log_min: float = DECAY_LOG_MIN, dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, ...]:
    """q, k (L2-normalised), v, g in [decay_log_min, 0], beta in (0, 1), a nonzero state."""
    q = F.normalize(torch.randn(b, h, t, dk, generator=gen), dim=-1)
    k = F.normalize(torch.randn(b, h, t, dk, generator=gen), dim=-1)
    v = torch.randn(b, h, t, dv, generator=gen)
    g = decay_log_min * torch.rand(b, h, t, dk if per_channel else 1, generator=gen)
    beta = torch.rand(b, h, t, generator=gen).clamp_min(1e-6)
    state = torch.randn(b, h, dk, dv, generator=gen)
    return tuple(x.to(dtype) for x in (q, k, v, g, beta, state))


def rel_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    return float((got.float() - ref.float()).abs().max() / ref.float().abs().max())


def check_forms_agree(
    make_generator: Callable[[int], torch.Generator], seed: int, b: int, h: int, t: int,
    dk: int, dv: int, chunk: int, per_channel: bool,
) -> None:
    inputs = make_inputs(make_generator(seed), b, h, t, dk, dv, per_channel)
    o_ref, s_ref = recurrent_gated_delta_rule(*inputs)
    o, s = chunk_gated_delta_rule(*inputs, chunk_size=chunk)
    assert o.shape == (b, h, t, dv) and s.shape == (b, h, dk, dv)
    assert rel_err(o, o_ref) < MAX_REL_ERR
    assert rel_err(s, s_ref) < MAX_REL_ERR


shapes = dict(
    seed=st.integers(0, 2**31 - 1), b=st.integers(1, 2), h=st.integers(1, 3),
    t=st.integers(1, 200), dk=DIMS, dv=DIMS, chunk=CHUNKS,
)


@settings(max_examples=75, deadline=None)
@given(**shapes)
@example(seed=0, b=1, h=1, t=1, dk=4, dv=4, chunk=64)
@example(seed=1, b=2, h=3, t=64, dk=32, dv=32, chunk=64)  # exactly one chunk
@example(seed=2, b=1, h=2, t=65, dk=32, dv=16, chunk=64)  # one step into the second chunk
@example(seed=3, b=2, h=1, t=200, dk=32, dv=32, chunk=16)
def test_chunk_matches_recurrent_per_channel_decay(make_generator, seed, b, h, t, dk, dv, chunk):
    """KDA: g has one log-decay per key channel, (b, h, t, dk)."""
    check_forms_agree(make_generator, seed, b, h, t, dk, dv, chunk, per_channel=True)


@settings(max_examples=75, deadline=None)
@given(**shapes)
@example(seed=0, b=1, h=1, t=1, dk=4, dv=4, chunk=16)
@example(seed=1, b=2, h=3, t=128, dk=32, dv=8, chunk=64)
@example(seed=2, b=1, h=1, t=200, dk=8, dv=32, chunk=32)
def test_chunk_matches_recurrent_scalar_decay(make_generator, seed, b, h, t, dk, dv, chunk):
    """Gated DeltaNet: one log-decay per head and step, (b, h, t, 1), broadcast over channels."""
    check_forms_agree(make_generator, seed, b, h, t, dk, dv, chunk, per_channel=False)


@pytest.mark.parametrize("per_channel", [True, False])
@pytest.mark.parametrize("chunk", [16, 32, 64])
def test_chunk_form_holds_at_the_decay_limit(generator, chunk, per_channel):
    """g at chunk_size * |min g| == MAX_CHUNK_LOG_SPAN: the factors must still fit float32."""
    q, k, v, g, beta, state = make_inputs(generator, 1, 2, 150, 32, 32, per_channel)
    g = torch.full_like(g, -MAX_CHUNK_LOG_SPAN / chunk)
    g[:, :, ::3] = 0.0  # mix strong and no decay so channel/step ratios span the whole range
    o_ref, s_ref = recurrent_gated_delta_rule(q, k, v, g, beta, state)
    o, s = chunk_gated_delta_rule(q, k, v, g, beta, state, chunk_size=chunk)
    assert torch.isfinite(o).all() and torch.isfinite(s).all()
    assert rel_err(o, o_ref) < MAX_REL_ERR
    assert rel_err(s, s_ref) < MAX_REL_ERR


@pytest.mark.parametrize(("chunk", "g_min"), [(64, -2.6), (32, -5.5), (16, -10.5), (64, -50.0)])
def test_chunk_form_rejects_decay_beyond_the_limit(generator, chunk, g_min):
    q, k, v, g, beta, state = make_inputs(generator, 1, 1, 40, 8, 8, per_channel=True)
    g[0, 0, 7, 3] = g_min  # a single step and channel beyond the limit is enough
    with pytest.raises(ValueError, match="log-decay too negative"):
        chunk_gated_delta_rule(q, k, v, g, beta, state, chunk_size=chunk)


def test_config_rejects_chunk_size_times_decay_beyond_the_limit():
    get_preset("kimi-linear-mini", "tiny", chunk_size=64, decay_log_min=-2.5)  # exactly 160: fine
    with pytest.raises(ValueError, match=r"chunk_size \* \|decay_log_min\|"):
        get_preset("kimi-linear-mini", "tiny", chunk_size=64, decay_log_min=-2.6)
    with pytest.raises(ValueError, match=r"chunk_size \* \|decay_log_min\|"):
        get_preset("qwen3-next-mini", "tiny", chunk_size=128, decay_log_min=-2.0)


def test_empty_sequence_keeps_the_state(generator):
    q, k, v, g, beta, state = make_inputs(generator, 2, 2, 0, 8, 16, per_channel=True)
    o, s = chunk_gated_delta_rule(q, k, v, g, beta, state)
    assert o.shape == (2, 2, 0, 16)
    assert torch.equal(s, state)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("per_channel", [True, False])
def test_chunk_form_runs_in_half_precision(generator, dtype, per_channel):
    """Half inputs give half outputs close to a float32 reference, even at the strongest decay.

    Regression: the chunk form used to solve its triangular system in the input dtype (no half
    kernel exists) and to scale keys by up to e^64 at chunk 64, beyond float16's range.
    """
    inputs = make_inputs(generator, 1, 2, 150, 32, 32, per_channel)
    q, k, v, g, beta, state = inputs
    g = torch.full_like(g, DECAY_LOG_MIN)
    g[:, :, ::2] = 0.0
    o_ref, s_ref = recurrent_gated_delta_rule(q, k, v, g, beta, state)
    half = tuple(x.to(dtype) for x in (q, k, v, g, beta, state))
    o, s = chunk_gated_delta_rule(*half, chunk_size=64)
    assert o.dtype == dtype and s.dtype == dtype
    assert rel_err(o, o_ref) < 2e-2
    assert rel_err(s, s_ref) < 2e-2
