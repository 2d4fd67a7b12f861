"""Linear-attention mixers with a fixed-size state: KDA (per-channel decay) and Gated DeltaNet.

Both follow the same recipe: q/k/v projections through a short causal conv, L2-normalised q/k,
a write strength beta, a decay alpha, the gated delta rule, then a normed and gated output. They
differ only in how alpha is made and in the output gate's nonlinearity.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model_stub.cache import LayerCache
from model_stub.config import LayerKind, ModelConfig
from model_stub.delta_rule import chunk_gated_delta_rule, recurrent_gated_delta_rule
from model_stub.layers import RMSNorm, ShortConv


def _slow_decay_bias(shape: tuple[int, ...], generator_seed: int) -> Tensor:
    """Bias so that sigmoid(bias) is in [0.001, 0.05]: per-step decays near 1, as trained models learn."""
    gen = torch.Generator().manual_seed(generator_seed)
    target = 0.001 + 0.049 * torch.rand(shape, generator=gen)
    return torch.log(target / (1 - target))


class DeltaRuleMixer(nn.Module):
    """Shared mechanism of KDA and GDN; subclasses define `_log_decay` and `_gate`."""

    kind: LayerKind

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.heads, self.head_dim = config.linear_heads, config.linear_head_dim
        self.chunk_size = config.chunk_size
        self.decay_log_min = config.decay_log_min
        inner = self.heads * self.head_dim
        self.qkv_proj = nn.Linear(config.d_model, 3 * inner, bias=False)
        self.conv = ShortConv(3 * inner, config.conv_kernel)
        self.beta_proj = nn.Linear(config.d_model, self.heads)
        self.gate_proj = nn.Linear(config.d_model, inner, bias=False)
        self.out_norm = RMSNorm(self.head_dim)
        self.o_proj = nn.Linear(inner, config.d_model, bias=False)

    def _log_decay(self, x: Tensor) -> Tensor:
        """x (b, t, d_model) -> log alpha, (b, h, t, dk) or (b, h, t, 1), in [decay_log_min, 0]."""
        raise NotImplementedError

    def _gate(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def _qkv(self, mixed: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Conv output (b, t, 3*h*d) -> q, k, v each (b, h, t, d); q/k L2-normalised, q scaled."""
        b, t, _ = mixed.shape
        mixed = mixed.view(b, t, 3, self.heads, self.head_dim)
        qk = F.normalize(mixed[:, :, :2], dim=-1)  # (b, t, 2, h, d): q and k in one pass, in memory order
        qk[:, :, 0] *= self.head_dim**-0.5
        q, k = qk.permute(2, 0, 3, 1, 4)  # (b, h, t, d) views; the chunk form lays them out once
        return q, k, mixed[:, :, 2].transpose(1, 2)

    def _output(self, o: Tensor, x: Tensor) -> Tensor:
        """o (b, h, t, dv) -> (b, t, d_model) through the per-head norm and the output gate."""
        b, _, t, _ = o.shape
        o = self.out_norm(o.transpose(1, 2))  # (b, t, h, dv)
        return self.o_proj(o.reshape(b, t, -1) * self._gate(x))

    def prefill(
        self, x: Tensor, cache: LayerCache | None, start: int, checkpoint_at: Sequence[int]
    ) -> tuple[Tensor, LayerCache, dict[int, LayerCache]]:
        """x (1, t, d_model) at positions start.. -> (y, final cache, checkpoints by position)."""
        b, t, _ = x.shape
        if cache is None:
            state = x.new_zeros(b, self.heads, self.head_dim, self.head_dim)
            conv_state = self.conv.empty_state(b, x)
        else:
            state, conv_state = (c.unsqueeze(0) for c in cache.tensors)
        mixed, padded = self.conv(self.qkv_proj(x), conv_state)
        q, k, v = self._qkv(mixed)
        beta = torch.sigmoid(self.beta_proj(x)).transpose(1, 2)  # (b, h, t)
        g = self._log_decay(x)
        kernel = self.conv.kernel
        cuts = sorted({p - start for p in checkpoint_at if 0 < p - start < t}) + [t]
        outputs, checkpoints, lo = [], {}, 0
        for hi in cuts:  # split at checkpoints so the state there is exact, not re-derived
            o, state = chunk_gated_delta_rule(
                q[:, :, lo:hi], k[:, :, lo:hi], v[:, :, lo:hi], g[:, :, lo:hi], beta[:, :, lo:hi],
                state, self.chunk_size,
            )
            outputs.append(o)
            conv_state = padded[0, hi : hi + kernel - 1].T.contiguous()  # (c, K-1), not a view of padded
            layer_state = LayerCache(self.kind, (state[0], conv_state))
            if hi < t:
                checkpoints[start + hi] = layer_state
            lo = hi
        return self._output(torch.cat(outputs, dim=2), x), layer_state, checkpoints

    def decode(self, x: Tensor, caches: Sequence[LayerCache], positions: Tensor) -> tuple[Tensor, list[LayerCache]]:
        """One token per request: x (b, 1, d_model); each request's state moves one step."""
        state = torch.stack([c.tensors[0] for c in caches])  # (b, h, dk, dv)
        conv_state = torch.stack([c.tensors[1] for c in caches])  # (b, c, K-1)
        mixed, conv_state = self.conv.step(self.qkv_proj(x[:, 0]), conv_state)
        q, k, v = self._qkv(mixed.unsqueeze(1))  # (b, h, 1, d)
        beta = torch.sigmoid(self.beta_proj(x)).transpose(1, 2)
        o, state = recurrent_gated_delta_rule(q, k, v, self._log_decay(x), beta, state)
        new = [LayerCache(self.kind, (s, cs)) for s, cs in zip(state, conv_state, strict=False)]
        return self._output(o, x), new


class KdaMixer(DeltaRuleMixer):
    """Kimi Delta Attention: a low-rank projection gives each key channel its own decay."""

    kind = LayerKind.KDA

    def __init__(self, config: ModelConfig, layer_index: int) -> None:
        super().__init__(config)
        inner = self.heads * self.head_dim
        self.decay_down = nn.Linear(config.d_model, self.head_dim, bias=False)
        self.decay_up = nn.Linear(self.head_dim, inner)
        with torch.no_grad():
            self.decay_up.weight.mul_(0.1)
            self.decay_up.bias.copy_(_slow_decay_bias((inner,), config.seed + layer_index))

    def _log_decay(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        f = self.decay_up(self.decay_down(x)).view(b, t, self.heads, self.head_dim)
        return (self.decay_log_min * torch.sigmoid(f)).transpose(1, 2)  # (b, h, t, dk)

    def _gate(self, x: Tensor) -> Tensor:
        return torch.sigmoid(self.gate_proj(x))


class GdnMixer(DeltaRuleMixer):
    """Gated DeltaNet: one scalar decay per head and step."""

    kind = LayerKind.GDN

    def __init__(self, config: ModelConfig, layer_index: int) -> None:
        super().__init__(config)
        self.decay_proj = nn.Linear(config.d_model, self.heads)
        with torch.no_grad():
            self.decay_proj.weight.mul_(0.1)
            self.decay_proj.bias.copy_(_slow_decay_bias((self.heads,), config.seed + layer_index))

    def _log_decay(self, x: Tensor) -> Tensor:
        g = self.decay_log_min * torch.sigmoid(self.decay_proj(x))  # (b, t, h)
        return g.transpose(1, 2).unsqueeze(-1)  # (b, h, t, 1)

    def _gate(self, x: Tensor) -> Tensor:
        return F.silu(self.gate_proj(x))

