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
    # (b*h, n, c, d), contiguous once here: every matmul below then runs on views, not on copies
    q, k, v, g = (x.reshape(b * h, n, c, x.shape[-1]).contiguous() for x in (q, k, v, g))
    beta = beta.reshape(b * h, n, c, 1)

    gc = g.cumsum(dim=-2)  # (b*h, n, c, dk|1): log-decay from chunk start, inclusive
    if c * float(-g.min()) > MAX_CHUNK_LOG_SPAN:
        raise ValueError("chunk_gated_delta_rule: log-decay too negative for this chunk size")
    mid = gc[..., c // 2 - 1 : c // 2, :]
    # one exp over the chunk; the other decay factors are its reciprocal and small per-chunk rescales
    e_fwd = (gc - mid).exp()  # e^{G_t - m}
    e_inv = e_fwd.reciprocal()  # e^{m - G_t}
    k_inv = k * e_inv  # k_i e^{m - G_i}

    strict = torch.ones(c, c, dtype=torch.bool, device=k.device).tril(-1)
    causal = torch.ones(c, c, dtype=torch.bool, device=k.device).tril(0)
    # masked_fill (not multiply): the masked upper triangle may hold inf from the factoring
    a = ((k * e_fwd) @ k_inv.transpose(-1, -2)).masked_fill_(~strict, 0.0).mul_(beta)  # (b*h, n, c, c)
    p = ((q * e_fwd) @ k_inv.transpose(-1, -2)).masked_fill_(~causal, 0.0)  # (b*h, n, c, c)

    decay_from_start = e_fwd * mid.exp()  # e^{G_t}
    rhs = torch.empty(b * h, n, c, dk + dv, dtype=k.dtype, device=k.device)
    torch.mul(k * decay_from_start, beta, out=rhs[..., :dk])
    torch.mul(v, beta, out=rhs[..., dk:])
    solved = torch.linalg.solve_triangular(a, rhs, upper=False, unitriangular=True)
    q_and_w = torch.empty(b * h, n, 2 * c, dk, dtype=k.dtype, device=k.device)  # one matmul with S
    torch.mul(q, decay_from_start, out=q_and_w[:, :, :c])
    q_and_w[:, :, c:] = solved[..., :dk]  # w; U = u0 - w @ S0
    u0 = solved[..., dk:]
    k_end = (k_inv * (gc[..., -1:, :] - mid).exp()).transpose(-1, -2)  # (b*h, n, dk, c): k_i e^{G_end - G_i}
    decay_end = gc[..., -1, :].exp().unsqueeze(-1)  # (b*h, n, dk|1, 1)

    out = torch.empty(b * h, n, c, dv, dtype=v.dtype, device=v.device)
    state = state.to(v.dtype).reshape(b * h, dk, dv)
    for i in range(n):
        q_s, w_s = (q_and_w[:, i] @ state).split(c, dim=-2)
        u = u0[:, i] - w_s  # (b*h, c, dv)
        torch.baddbmm(q_s, p[:, i], u, out=out[:, i])
        state = torch.baddbmm(decay_end[:, i] * state, k_end[:, i], u)
    out = out.view(b, h, n * c, dv)[:, :, :t]
    return out.to(dtype), state.view(b, h, dk, dv).to(dtype)
