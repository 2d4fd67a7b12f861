"""The gated delta rule in its two forms: chunkwise-parallel (prefill) and recurrent (decode).

Shared by KDA (per-channel decay) and Gated DeltaNet (scalar per-head decay, passed with a
trailing dimension of 1 so it broadcasts). With state S of shape (d_k, d_v) per head, step t is

    S_t = (I - beta_t k_t k_t^T) Diag(alpha_t) S_{t-1} + beta_t k_t v_t^T,   o_t = S_t^T q_t

and `g` holds log(alpha), one value per step (and channel).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

# exp() of the largest exponent the chunk form may meet stays inside float32 (max ~ e^88).
MAX_CHUNK_LOG_SPAN = 160.0


def recurrent_gated_delta_rule(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor
) -> tuple[Tensor, Tensor]:
    """Step-by-step reference and decode path.

    q, k: (b, h, t, dk); v: (b, h, t, dv); g: (b, h, t, dk) or (b, h, t, 1); beta: (b, h, t);
    state: (b, h, dk, dv). Returns (o: (b, h, t, dv), final state).
    """
    outputs = []
    for t in range(q.shape[2]):
        state = state * g[:, :, t].exp().unsqueeze(-1)  # (b, h, dk, dv)
        predicted = torch.einsum("bhkv,bhk->bhv", state, k[:, :, t])
        update = beta[:, :, t, None] * (v[:, :, t] - predicted)  # (b, h, dv)
        state = state + k[:, :, t].unsqueeze(-1) * update.unsqueeze(-2)
        outputs.append(torch.einsum("bhkv,bhk->bhv", state, q[:, :, t]))
    return torch.stack(outputs, dim=2), state


def chunk_gated_delta_rule(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor, chunk_size: int = 64
) -> tuple[Tensor, Tensor]:
    """Chunkwise-parallel form (WY/UT representation); same contract as the recurrent form.

    Inside a chunk, with cumulative log-decay G_t and the state S0 at the chunk start, the
    "new values" u_t = beta_t (v_t - S'_t^T k_t) solve a unit lower-triangular system
    (I + A) U = diag(beta) (V - (K * e^G) S0), A_ti = beta_t <k_t e^{G_t}, k_i e^{-G_i}> (i < t).
    All chunks are solved at once; only the (h, dk, dv) state hand-off between chunks loops.
    Decay ratios are factored around the chunk's middle step, so the factors stay in float32 range
    as long as chunk_size * |min g| <= MAX_CHUNK_LOG_SPAN (callers bound g; see ModelConfig).
    """
    b, h, t, dk = k.shape
    dv = v.shape[-1]
    if t == 0:
        return v.new_zeros(b, h, 0, dv), state
    # float32 inside: there is no half-precision triangular solve, and float16 cannot hold e^{+-80}
    dtype = v.dtype
    q, k, v, g, beta, state = (x.float() for x in (q, k, v, g, beta, state))
    c = chunk_size
    pad = (-t) % c
    if pad:  # zero k/beta and zero log-decay: padded steps leave the state unchanged
        q, k, v, g = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v, g))
        beta = F.pad(beta, (0, pad))
    n = (t + pad) // c
    q, k, v, g = (x.reshape(b, h, n, c, x.shape[-1]) for x in (q, k, v, g))  # (b, h, n, c, d)
    beta = beta.reshape(b, h, n, c, 1)

    gc = g.float().cumsum(dim=-2)  # (b, h, n, c, dk|1): log-decay from chunk start, inclusive
    if c * float(-g.min()) > MAX_CHUNK_LOG_SPAN:
        raise ValueError("chunk_gated_delta_rule: log-decay too negative for this chunk size")
    mid = gc[..., c // 2 - 1 : c // 2, :]
    k_fwd = k * (gc - mid).exp().to(k.dtype)  # k_t e^{G_t - m}
    k_inv = k * (mid - gc).exp().to(k.dtype)  # k_i e^{m - G_i}
    q_fwd = q * (gc - mid).exp().to(q.dtype)

    strict = torch.ones(c, c, dtype=torch.bool, device=k.device).tril(-1)
    causal = torch.ones(c, c, dtype=torch.bool, device=k.device).tril(0)
    # masked_fill (not multiply): the masked upper triangle may hold inf from the factoring
    a = (k_fwd @ k_inv.transpose(-1, -2)).masked_fill(~strict, 0.0) * beta  # (b, h, n, c, c)
    p = (q_fwd @ k_inv.transpose(-1, -2)).masked_fill(~causal, 0.0)  # (b, h, n, c, c)

    decay_from_start = gc.exp().to(k.dtype)  # e^{G_t}
    rhs = torch.cat([beta * k * decay_from_start, beta * v], dim=-1)  # (b, h, n, c, dk + dv)
    solved = torch.linalg.solve_triangular(a, rhs, upper=False, unitriangular=True)
    w, u0 = solved[..., :dk], solved[..., dk:]  # U = u0 - w @ S0
    q_and_w = torch.cat([q * decay_from_start, w], dim=-2)  # (b, h, n, 2c, dk): one matmul with S
    k_end = k * (gc[..., -1:, :] - gc).exp().to(k.dtype)  # decay from step i to chunk end
    decay_end = gc[..., -1, :].exp().to(k.dtype).unsqueeze(-1)  # (b, h, n, dk|1, 1)

    out = torch.empty(b, h, n, c, dv, dtype=v.dtype, device=v.device)
    state = state.to(v.dtype)
    for i in range(n):
        q_s, w_s = (q_and_w[:, :, i] @ state).split(c, dim=-2)
        u = u0[:, :, i] - w_s  # (b, h, c, dv)
        out[:, :, i] = q_s + p[:, :, i] @ u
        state = decay_end[:, :, i] * state + k_end[:, :, i].transpose(-1, -2) @ u
    return out.reshape(b, h, n * c, dv)[:, :, :t].to(dtype), state.to(dtype)
