"""Softmax-attention mixers: full attention with GQA, sliding-window attention, and MLA.

Full and MLA caches grow with every token (the KV that PrfaaS ships across datacenters); SWA keeps
only the last `window` tokens. Prefill attends in query blocks so memory stays O(block * keys).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model_stub.cache import LayerCache
from model_stub.config import LayerKind, ModelConfig
from model_stub.layers import RMSNorm, apply_rope, rope_cos_sin

QUERY_BLOCK = 1024


def _sdpa(q: Tensor, k: Tensor, v: Tensor, **kwargs: object) -> Tensor:
    """SDPA that keeps to the fused CPU kernel, which needs value and query head dims equal.

    MLA's values are narrower than its keys; zero-padding them costs little next to the unfused
    fallback, which materialises the whole score matrix (about 10x slower at 4K tokens).
    """
    dv = v.shape[-1]
    if dv < q.shape[-1]:
        v = F.pad(v, (0, q.shape[-1] - dv))
    gqa = q.shape[1] != k.shape[1]
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa, **kwargs)[..., :dv]


def causal_attention(q: Tensor, k: Tensor, v: Tensor, window: int | None = None) -> Tensor:
    """Causal (optionally windowed) attention where the last key sits at the last query's position.

    q: (b, hq, tq, d); k: (b, hkv, tk, d); v: (b, hkv, tk, dv), tk >= tq. Returns (b, hq, tq, dv).
    """
    tq, tk = q.shape[2], k.shape[2]
    if window is None and tq == tk:  # the fused kernel tiles causal attention without a mask
        return _sdpa(q, k, v, is_causal=True)
    offset = tk - tq  # key index of query 0
    block = QUERY_BLOCK if window is None else window  # a window block sees at most 2 windows of keys
    out = []
    for lo in range(0, tq, block):
        hi = min(lo + block, tq)
        key_lo = 0 if window is None else max(0, offset + lo - window + 1)
        key_hi = offset + hi
        q_pos = torch.arange(offset + lo, offset + hi, device=q.device).unsqueeze(1)
        k_pos = torch.arange(key_lo, key_hi, device=q.device).unsqueeze(0)
        mask = k_pos <= q_pos
        if window is not None:
            mask &= k_pos > q_pos - window
        out.append(_sdpa(q[:, :, lo:hi], k[:, :, key_lo:key_hi], v[:, :, key_lo:key_hi], attn_mask=mask))
    return torch.cat(out, dim=2)


def padded_decode_attention(q: Tensor, keys: Sequence[Tensor], values: Sequence[Tensor]) -> Tensor:
    """One query per request over per-request keys of different lengths.

    q: (b, hq, 1, d); keys[i]: (hkv, len_i, d); values[i]: (hkv, len_i, dv). Returns (b, hq, 1, dv).
    """
    longest = max(k.shape[1] for k in keys)
    k = torch.stack([F.pad(k, (0, 0, 0, longest - k.shape[1])) for k in keys])  # (b, hkv, L, d)
    v = torch.stack([F.pad(v, (0, 0, 0, longest - v.shape[1])) for v in values])
    lengths = torch.tensor([k.shape[1] for k in keys], device=q.device)
    mask = torch.arange(longest, device=q.device) < lengths.unsqueeze(1)  # (b, L)
    return _sdpa(q, k, v, attn_mask=mask[:, None, None, :])


class SoftmaxAttention(nn.Module):
    """GQA attention with RoPE; `window` set makes it sliding-window (kind swa)."""

    def __init__(self, config: ModelConfig, kind: LayerKind) -> None:
        super().__init__()
        self.kind = kind
        self.heads, self.kv_heads, self.head_dim = config.attn_heads, config.attn_kv_heads, config.attn_head_dim
        self.window = config.window if kind is LayerKind.SWA else None
        self.rope_theta = config.rope_theta
        self.q_proj = nn.Linear(config.d_model, self.heads * self.head_dim, bias=False)
        self.kv_proj = nn.Linear(config.d_model, 2 * self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, config.d_model, bias=False)

    def _project(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x (b, t, d_model), positions (b, t) -> q (b, hq, t, d), k, v (b, hkv, t, d), roped."""
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv_proj(x).view(b, t, 2, self.kv_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        cos, sin = rope_cos_sin(positions, self.head_dim, self.rope_theta, x.dtype)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (b, 1, t, d)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def _keep(self, k: Tensor, v: Tensor, end: int | None) -> LayerCache:
        """Cache of keys/values (hkv, t, d) up to index `end` (exclusive; None for all)."""
        end = k.shape[1] if end is None else end
        lo = 0 if self.window is None else max(0, end - self.window)
        return LayerCache(self.kind, (k[:, lo:end], v[:, lo:end]))

    def prefill(
        self, x: Tensor, cache: LayerCache | None, start: int, checkpoint_at: Sequence[int]
    ) -> tuple[Tensor, LayerCache, dict[int, LayerCache]]:
        b, t, _ = x.shape
        positions = torch.arange(start, start + t, device=x.device).unsqueeze(0)
        q, k, v = self._project(x, positions)
        if cache is not None:
            k = torch.cat([cache.tensors[0].unsqueeze(0), k], dim=2)
            v = torch.cat([cache.tensors[1].unsqueeze(0), v], dim=2)
        o = causal_attention(q, k, v, self.window)  # (b, hq, t, d)
        y = self.o_proj(o.transpose(1, 2).reshape(b, t, -1))
        first_key = start + t - k.shape[2]  # position of k[:, :, 0]
        checkpoints = {}
        if self.window is not None:  # a growing layer is truncated instead
            checkpoints = {p: self._keep(k[0], v[0], p - first_key) for p in checkpoint_at if start < p < start + t}
        return y, self._keep(k[0], v[0], None), checkpoints

    def decode(self, x: Tensor, caches: Sequence[LayerCache], positions: Tensor) -> tuple[Tensor, list[LayerCache]]:
        b = x.shape[0]
        q, k, v = self._project(x, positions.unsqueeze(1))  # q (b, hq, 1, d); k, v (b, hkv, 1, d)
        new = [
            self._keep(torch.cat([c.tensors[0], k[i]], dim=1), torch.cat([c.tensors[1], v[i]], dim=1), None)
            for i, c in enumerate(caches)
        ]  # the window already drops the key that falls out of reach of this query
        o = padded_decode_attention(q, [c.tensors[0] for c in new], [c.tensors[1] for c in new])
        return self.o_proj(o.transpose(1, 2).reshape(b, 1, -1)), new


class MlaAttention(nn.Module):
    """Multi-head latent attention: the cache holds a compressed latent plus one shared RoPE key.

    Per token it stores kv_lora_rank + qk_rope_dim values, as DeepSeek-V3 and Kimi Linear do; keys
    and values are re-expanded from the latent at every use (no weight absorption: clarity first).
    """

    kind = LayerKind.MLA

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.heads, self.rank = config.attn_heads, config.kv_lora_rank
        self.nope, self.rope, self.v_dim = config.qk_nope_dim, config.qk_rope_dim, config.v_head_dim
        self.rope_theta = config.rope_theta
        self.q_proj = nn.Linear(config.d_model, self.heads * (self.nope + self.rope), bias=False)
        self.kv_down = nn.Linear(config.d_model, self.rank + self.rope, bias=False)
        self.kv_norm = RMSNorm(self.rank)
        self.kv_up = nn.Linear(self.rank, self.heads * (self.nope + self.v_dim), bias=False)
        self.o_proj = nn.Linear(self.heads * self.v_dim, config.d_model, bias=False)

    def _project(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x (b, t, d_model) -> q (b, h, t, nope+rope), latent (b, t, rank), k_rope (b, t, rope)."""
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.nope + self.rope).transpose(1, 2)
        latent, k_rope = self.kv_down(x).split([self.rank, self.rope], dim=-1)
        cos, sin = rope_cos_sin(positions, self.rope, self.rope_theta, x.dtype)  # (b, t, rope)
        q_rope = apply_rope(q[..., self.nope :], cos.unsqueeze(1), sin.unsqueeze(1))
        q = torch.cat([q[..., : self.nope], q_rope], dim=-1)
        return q, self.kv_norm(latent), apply_rope(k_rope, cos, sin)

    def _expand(self, latent: Tensor, k_rope: Tensor) -> tuple[Tensor, Tensor]:
        """latent (T, rank), k_rope (T, rope) -> k (h, T, nope+rope), v (h, T, v_dim)."""
        t = latent.shape[0]
        kv = self.kv_up(latent).view(t, self.heads, self.nope + self.v_dim).transpose(0, 1)
        k_nope, v = kv.split([self.nope, self.v_dim], dim=-1)
        k = torch.cat([k_nope, k_rope.unsqueeze(0).expand(self.heads, t, self.rope)], dim=-1)
        return k, v

    def prefill(
        self, x: Tensor, cache: LayerCache | None, start: int, checkpoint_at: Sequence[int]
    ) -> tuple[Tensor, LayerCache, dict[int, LayerCache]]:
        b, t, _ = x.shape
        positions = torch.arange(start, start + t, device=x.device).unsqueeze(0)
        q, latent, k_rope = self._project(x, positions)
        latent, k_rope = latent[0], k_rope[0]
        if cache is not None:
            latent = torch.cat([cache.tensors[0], latent])
            k_rope = torch.cat([cache.tensors[1], k_rope])
        k, v = self._expand(latent, k_rope)
        o = causal_attention(q, k.unsqueeze(0), v.unsqueeze(0))
        y = self.o_proj(o.transpose(1, 2).reshape(b, t, -1))
        return y, LayerCache(self.kind, (latent, k_rope)), {}

    def decode(self, x: Tensor, caches: Sequence[LayerCache], positions: Tensor) -> tuple[Tensor, list[LayerCache]]:
        b = x.shape[0]
        q, latent, k_rope = self._project(x, positions.unsqueeze(1))
        new = [
            LayerCache(self.kind, (torch.cat([c.tensors[0], latent[i]]), torch.cat([c.tensors[1], k_rope[i]])))
            for i, c in enumerate(caches)
        ]
        expanded = [self._expand(*c.tensors) for c in new]
        o = padded_decode_attention(q, [k for k, _ in expanded], [v for _, v in expanded])
        return self.o_proj(o.transpose(1, 2).reshape(b, 1, -1)), new
