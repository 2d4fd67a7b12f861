"""Primitives shared by the mixers: RMSNorm, SwiGLU MLP, rotary embeddings, short causal conv.

Nothing here holds a cache; the mixers decide what to keep.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class SwiGLU(nn.Module):
    def __init__(self, d_model: int, hidden: int) -> None:
        super().__init__()
        self.gate_up = nn.Linear(d_model, 2 * hidden, bias=False)
        self.down = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate).mul_(up))  # in place: one (t, hidden) temporary fewer


def rope_cos_sin(positions: Tensor, dim: int, theta: float, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """cos/sin tables for integer `positions` of any shape -> (*positions.shape, dim)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2, device=positions.device, dtype=torch.float64) / dim)
    angles = positions.to(torch.float64).unsqueeze(-1) * inv_freq  # (..., dim/2)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate-half RoPE; cos/sin broadcast against x (..., dim)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class ShortConv(nn.Module):
    """Depthwise causal conv (kernel K) whose cache is the last K-1 inputs, shape (channels, K-1)."""

    def __init__(self, channels: int, kernel: int) -> None:
        super().__init__()
        self.kernel = kernel
        self.weight = nn.Parameter(torch.randn(channels, 1, kernel) / kernel**0.5)

    def empty_state(self, batch: int, like: Tensor) -> Tensor:
        return like.new_zeros(batch, self.weight.shape[0], self.kernel - 1)

    def forward(self, x: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """x: (b, t, c); state: (b, c, K-1). Returns (silu(conv(x)): (b, t, c), padded input).

        The padded input (b, K-1+t, c) lets callers read the conv state at any position p
        (relative to the start of x): padded[:, p : p + K - 1].transpose(1, 2).
        K shifted multiply-adds in the (b, t, c) layout: no transposes of the activations, and the
        mixer's output stays contiguous (768 channels x 4K tokens on one CPU thread, with the cat and
        silu: 22 ms against 33 ms for F.conv1d on the transposed input; issue 28).
        """
        t = x.shape[1]
        padded = torch.cat([state.transpose(1, 2), x], dim=1)  # (b, K-1+t, c)
        taps = self.weight[:, 0]  # (c, K)
        y = padded[:, :t] * taps[:, 0]
        for j in range(1, self.kernel):
            y.addcmul_(padded[:, j : j + t], taps[:, j])
        return F.silu(y, inplace=True), padded

    def step(self, x: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """One token: x (b, c), state (b, c, K-1) -> (silu(conv): (b, c), new state)."""
        window = torch.cat([state, x.unsqueeze(-1)], dim=-1)  # (b, c, K)
        y = (window * self.weight.squeeze(1)).sum(-1)
        return F.silu(y), window[..., 1:]
