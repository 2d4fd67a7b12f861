"""The hybrid decoder-only LM: blocks of (norm, mixer, norm, SwiGLU) over byte tokens.

Prefill runs one layer at a time over the whole prompt, so each layer's cache is final (and can be
shipped) before the next layer starts. Decode advances a batch of requests of different lengths by
one token each (continuous batching).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch
from torch import Tensor, nn

from model_stub.attention import MlaAttention, SoftmaxAttention
from model_stub.cache import HybridCache, LayerCache
from model_stub.config import LayerKind, ModelConfig
from model_stub.layers import RMSNorm, SwiGLU
from model_stub.linear_attention import GdnMixer, KdaMixer

LayerDone = Callable[[int, LayerCache], None]
TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """`auto` is CUDA when present, else CPU."""
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> str:
    """`auto` is bfloat16 on CUDA (half the bytes to compute and ship, and tensor-core speed) and
    float32 on CPU, where bfloat16 matmuls are slow on most cores."""
    if dtype == "auto":
        return "bfloat16" if device.type == "cuda" else "float32"
    if dtype not in TORCH_DTYPES:
        raise ValueError(f"dtype: {dtype!r} is not auto or one of {', '.join(TORCH_DTYPES)}")
    return dtype


def make_mixer(config: ModelConfig, kind: LayerKind, layer_index: int) -> nn.Module:
    if kind is LayerKind.KDA:
        return KdaMixer(config, layer_index)
    if kind is LayerKind.GDN:
        return GdnMixer(config, layer_index)
    if kind is LayerKind.MLA:
        return MlaAttention(config)
    return SoftmaxAttention(config, kind)


class HybridBlock(nn.Module):
    def __init__(self, config: ModelConfig, kind: LayerKind, layer_index: int) -> None:
        super().__init__()
        self.kind = kind
        self.mixer_norm = RMSNorm(config.d_model)
        self.mixer = make_mixer(config, kind, layer_index)
        self.mlp_norm = RMSNorm(config.d_model)
        self.mlp = SwiGLU(config.d_model, config.mlp_hidden)

    def prefill(
        self, x: Tensor, cache: LayerCache | None, start: int, checkpoint_at: Sequence[int]
    ) -> tuple[Tensor, LayerCache, dict[int, LayerCache]]:
        h, cache, checkpoints = self.mixer.prefill(self.mixer_norm(x), cache, start, checkpoint_at)
        x = x + h
        return x + self.mlp(self.mlp_norm(x)), cache, checkpoints

    def decode(self, x: Tensor, caches: Sequence[LayerCache], positions: Tensor) -> tuple[Tensor, list[LayerCache]]:
        h, caches = self.mixer.decode(self.mixer_norm(x), caches, positions)
        x = x + h
        return x + self.mlp(self.mlp_norm(x)), caches


class HybridModel(nn.Module):
    """Random weights from `config.seed`: the same config gives the same model on any device."""

    def __init__(self, config: ModelConfig, device: str | torch.device = "auto") -> None:
        super().__init__()
        self.config = config
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            self.embed = nn.Embedding(config.vocab_size, config.d_model)
            self.blocks = nn.ModuleList(
                HybridBlock(config, kind, i) for i, kind in enumerate(config.layer_kinds)
            )
            self.final_norm = RMSNorm(config.d_model)
            self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.to(device=resolve_device(device), dtype=TORCH_DTYPES[config.dtype]).eval()

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    def _tokens(self, tokens: Sequence[int] | Tensor) -> Tensor:
        ids = torch.as_tensor(tokens, dtype=torch.long, device=self.device).reshape(-1)
        if ids.numel() and (ids.min() < 0 or ids.max() >= self.config.vocab_size):
            raise ValueError(f"tokens: ids must be in [0, {self.config.vocab_size}); got {ids.min()}..{ids.max()}")
        return ids

    @torch.inference_mode()
    def prefill(
        self,
        tokens: Sequence[int] | Tensor,
        cache: HybridCache | None = None,
        on_layer_done: LayerDone | None = None,
        checkpoint_at: Iterable[int] = (),
        all_logits: bool = False,
    ) -> tuple[Tensor, HybridCache]:
        """Prefill `tokens` after `cache` (not modified); returns (logits, new cache).

        Logits are for the last token (vocab,), or every new token (t, vocab) with `all_logits`.
        `checkpoint_at` lists absolute positions where bounded layers' states are recorded for
        `HybridCache.snapshot`. `on_layer_done(i, layer_cache)` fires as soon as layer i is final.
        """
        ids = self._tokens(tokens)
        if ids.numel() == 0:
            raise ValueError("tokens: prefill needs at least one token")
        start = 0 if cache is None else cache.num_tokens
        checkpoint_at = sorted(set(checkpoint_at))
        x = self.embed(ids).unsqueeze(0)  # (1, t, d_model)
        layers, per_layer_checkpoints = [], []
        for i, block in enumerate(self.blocks):
            past = None if cache is None else cache.layers[i]
            x, layer_cache, checkpoints = block.prefill(x, past, start, checkpoint_at)
            layers.append(layer_cache)
            per_layer_checkpoints.append(checkpoints)
            if on_layer_done is not None:
                on_layer_done(i, layer_cache)
        new_cache = HybridCache(self.config, layers, start + ids.numel())
        if cache is not None:
            new_cache.checkpoints.update({p: c for p, c in cache.checkpoints.items() if p < start})
            if start in checkpoint_at:  # the resume point itself: the input's bounded layers
                new_cache.checkpoints[start] = tuple(None if c.kind.is_growing else c for c in cache.layers)
        for p in checkpoint_at:
            if start < p < new_cache.num_tokens:
                new_cache.checkpoints[p] = tuple(c.get(p) for c in per_layer_checkpoints)
        x = self.final_norm(x[0] if all_logits else x[0, -1])
        return self.lm_head(x), new_cache

    @torch.inference_mode()
    def decode_step(self, tokens: Sequence[int] | Tensor, caches: Sequence[HybridCache]) -> Tensor:
        """Feed one token per request; advances every cache in place. Returns logits (b, vocab)."""
        ids = self._tokens(tokens)
        if ids.numel() != len(caches) or not caches:
            raise ValueError(f"decode_step: {ids.numel()} tokens for {len(caches)} caches; need one each")
        positions = torch.tensor([c.num_tokens for c in caches], device=self.device)
        x = self.embed(ids).unsqueeze(1)  # (b, 1, d_model)
        for i, block in enumerate(self.blocks):
            x, layer_caches = block.decode(x, [c.layers[i] for c in caches], positions)
            for cache, layer_cache in zip(caches, layer_caches, strict=False):
                cache.layers[i] = layer_cache
        for cache in caches:
            cache.num_tokens += 1
        return self.lm_head(self.final_norm(x[:, 0]))

    def greedy_continue(self, cache: HybridCache, first_token: int, max_new_tokens: int) -> list[int]:
        """Greedy decoding after prefill: `first_token` came from the prefill logits."""
        out = [first_token]
        while len(out) < max_new_tokens:
            logits = self.decode_step([out[-1]], [cache])
            out.append(int(logits[0].argmax()))
        return out

    def generate(self, tokens: Sequence[int] | Tensor, max_new_tokens: int) -> list[int]:
        """Greedy generation in one process: the reference that shipped caches must match."""
        logits, cache = self.prefill(tokens)
        return self.greedy_continue(cache, int(logits.argmax()), max_new_tokens)
