"""Cache layouts of the real models the PrfaaS paper discusses, copied from their public configs.

Holds plain numbers (one frozen spec per model, each naming its config.json fields) and the byte
arithmetic on them. It loads no weights and reads no files; the CLI lives in `kv_calculator.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

from model_stub.config import LayerKind

# Serving defaults that the configs do not fix (per-model caveats are in RealModelSpec.note).
# KV and conv states: the checkpoints' torch_dtype; engines keep KV in it unless asked for FP8.
BF16_BYTES = 2
# Recurrent states: SGLang's --mamba-ssm-dtype defaults to float32 (docs/basic_usage/qwen3.md), and
# vLLM keeps KDA's recurrent state in float32 (MambaStateDtypeCalculator.kda_state_dtype).
FP32_BYTES = 4
DTYPE_NAMES = {1: "fp8", 2: "bf16", 4: "fp32"}


@dataclass(frozen=True, slots=True)
class AttentionLayers:
    """Softmax attention (GQA) layers: FULL ones grow with context, SWA ones keep `window`."""

    kind: LayerKind  # FULL or SWA
    num_layers: int
    num_kv_heads: int
    head_dim: int  # K head dim
    v_head_dim: int  # V head dim (differs from K in MiMo-V2-Flash)
    window: int = 0  # SWA only

    def bytes_per_token(self, kv_bytes: int) -> int:
        return self.num_layers * self.num_kv_heads * (self.head_dim + self.v_head_dim) * kv_bytes


@dataclass(frozen=True, slots=True)
class MlaLayers:
    """Multi-head latent attention: one shared latent plus the decoupled RoPE key per token."""

    num_layers: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    kind: LayerKind = LayerKind.MLA

    def bytes_per_token(self, kv_bytes: int) -> int:
        return self.num_layers * (self.kv_lora_rank + self.qk_rope_head_dim) * kv_bytes


@dataclass(frozen=True, slots=True)
class LinearLayers:
    """Delta-rule layers (KDA, GDN): a (v_heads, d_k, d_v) state plus a short conv over q, k, v.

    Shapes follow vLLM's MambaStateShapeCalculator.{kda,gated_delta_net}_state_shape: the conv keeps
    `conv_kernel - 1` past columns of q and k (num_k_heads * d_k each) and of v (num_v_heads * d_v).
    """

    kind: LayerKind  # KDA or GDN
    num_layers: int
    num_k_heads: int
    num_v_heads: int
    k_head_dim: int
    v_head_dim: int
    conv_kernel: int

    def recurrent_elems(self) -> int:
        return self.num_v_heads * self.k_head_dim * self.v_head_dim

    def conv_elems(self) -> int:
        channels = 2 * self.num_k_heads * self.k_head_dim + self.num_v_heads * self.v_head_dim
        return channels * (self.conv_kernel - 1)

    def state_bytes(self, state_bytes: int, conv_bytes: int) -> int:
        per_layer = self.recurrent_elems() * state_bytes + self.conv_elems() * conv_bytes
        return self.num_layers * per_layer


LayerGroup = AttentionLayers | MlaLayers | LinearLayers


@dataclass(frozen=True, slots=True)
class RealModelSpec:
    """One real model's cache: growing KV (FULL, MLA) plus fixed state (linear layers, SWA)."""

    name: str
    hf_repo: str
    num_layers: int  # config.json num_hidden_layers (MTP/nextn layers excluded)
    groups: tuple[LayerGroup, ...]
    source: str
    note: str = ""
    kv_dtype_bytes: int = BF16_BYTES
    state_dtype_bytes: int = FP32_BYTES
    conv_dtype_bytes: int = BF16_BYTES

    def __post_init__(self) -> None:
        counted = sum(g.num_layers for g in self.groups)
        if counted != self.num_layers:
            raise ValueError(
                f"{self.name}: layer groups sum to {counted}, num_layers is {self.num_layers}"
            )
        kinds = [g.kind for g in self.groups]
        if len(set(kinds)) != len(kinds):
            raise ValueError(f"{self.name}: each layer kind may appear in one group only")

    @property
    def layer_counts(self) -> dict[str, int]:
        return {g.kind.value: g.num_layers for g in self.groups}

    def kv_bytes_per_token(self) -> int:
        """Bytes one more token adds to the cache: what a prefill node must ship per token."""
        growing = [g for g in self.groups if not isinstance(g, LinearLayers) and g.kind.is_growing]
        return sum(g.bytes_per_token(self.kv_dtype_bytes) for g in growing)

    def fixed_bytes(self, tokens: int) -> int:
        """Bounded part of a request's cache: linear-layer states, SWA KV of min(tokens, window)."""
        _check_tokens(tokens)
        total = 0
        for g in self.groups:
            if isinstance(g, LinearLayers):
                total += g.state_bytes(self.state_dtype_bytes, self.conv_dtype_bytes)
            elif g.kind is LayerKind.SWA:
                total += min(tokens, g.window) * g.bytes_per_token(self.kv_dtype_bytes)
        return total

    def cache_bytes(self, tokens: int) -> int:
        _check_tokens(tokens)
        return tokens * self.kv_bytes_per_token() + self.fixed_bytes(tokens)


def _check_tokens(tokens: int) -> None:
    if tokens < 0:
        raise ValueError(f"tokens: {tokens} is negative; use 0 or more")


def _full(layers: int, kv_heads: int, head_dim: int, v_head_dim: int = 0) -> AttentionLayers:
    return AttentionLayers(LayerKind.FULL, layers, kv_heads, head_dim, v_head_dim or head_dim)


def _linear(kind: LayerKind, layers: int, k_heads: int, v_heads: int) -> LinearLayers:
    """All four hybrids use 128-dim K and V heads and a kernel-4 short conv."""
    return LinearLayers(
        kind, layers, k_heads, v_heads, k_head_dim=128, v_head_dim=128, conv_kernel=4
    )


_GDN_FIELDS = (
    "num_hidden_layers, full_attention_interval=4 (every 4th layer is full attention), "
    "num_key_value_heads, head_dim, linear_num_key_heads, linear_num_value_heads, "
    "linear_key_head_dim, linear_value_head_dim, linear_conv_kernel_dim"
)

REAL_MODELS: dict[str, RealModelSpec] = {
    "kimi-linear-48b": RealModelSpec(
        name="Kimi-Linear-48B-A3B",
        hf_repo="moonshotai/Kimi-Linear-48B-A3B-Instruct",
        num_layers=27,
        groups=(
            # linear_attn_config.full_attn_layers = [4, 8, 12, 16, 20, 24, 27] (1-based)
            MlaLayers(num_layers=7, kv_lora_rank=512, qk_rope_head_dim=64),
            # linear_attn_config: kda_layers (the other 20), num_heads=32, head_dim=128,
            # short_conv_kernel_size=4
            _linear(LayerKind.KDA, 20, k_heads=32, v_heads=32),
        ),
        source="hf moonshotai/Kimi-Linear-48B-A3B-Instruct config.json: num_hidden_layers, "
        "linear_attn_config.{full_attn_layers, kda_layers, num_heads, head_dim, "
        "short_conv_kernel_size}, kv_lora_rank, qk_rope_head_dim",
        note="config values from public copies of config.json; mla_use_nope=true, yet the MLA "
        "cache still holds the 64-dim k_rot (kv_a_proj_with_mqa emits kv_lora_rank + "
        "qk_rope_head_dim); KDA recurrent state fp32 (vLLM kda_state_dtype, SGLang default), "
        "conv states bf16",
    ),
    "qwen3-next-80b": RealModelSpec(
        name="Qwen3-Next-80B-A3B",
        hf_repo="Qwen/Qwen3-Next-80B-A3B-Instruct",
        num_layers=48,
        groups=(
            _full(12, kv_heads=2, head_dim=256),  # 48 / full_attention_interval 4
            _linear(LayerKind.GDN, 36, k_heads=16, v_heads=32),
        ),
        source=f"hf Qwen/Qwen3-Next-80B-A3B-Instruct config.json: {_GDN_FIELDS}",
        note="GDN recurrent state fp32 (SGLang's --mamba-ssm-dtype default); vLLM's default "
        "'auto' keeps it in bf16, halving the recurrent part; the MTP layer is excluded",
    ),
    "qwen3.5-397b": RealModelSpec(
        name="Qwen3.5-397B-A17B",
        hf_repo="Qwen/Qwen3.5-397B-A17B",
        num_layers=60,
        groups=(
            _full(15, kv_heads=2, head_dim=256),  # 60 / full_attention_interval 4
            _linear(LayerKind.GDN, 45, k_heads=16, v_heads=64),
        ),
        source=f"hf Qwen/Qwen3.5-397B-A17B config.json (text_config): {_GDN_FIELDS}",
        note="values from public copies of config.json (e.g. a Megatron-Bridge test fixture), "
        "not the hub file itself; recurrent state fp32 because Qwen3.5 configs set "
        "mamba_ssm_dtype=float32 (seen in smaller Qwen3.5 configs, assumed for this one); "
        "the MTP layer is excluded",
    ),
    "mimo-v2-flash": RealModelSpec(
        name="MiMo-V2-Flash (309B)",
        hf_repo="XiaomiMiMo/MiMo-V2-Flash",
        num_layers=48,
        groups=(
            # hybrid_layer_pattern == 0 at layers 0, 5, 11, 17, ..., 47: num_key_value_heads,
            # head_dim, v_head_dim
            _full(9, kv_heads=4, head_dim=192, v_head_dim=128),
            # hybrid_layer_pattern == 1: swa_num_key_value_heads, swa_head_dim, swa_v_head_dim,
            # sliding_window
            AttentionLayers(LayerKind.SWA, 39, 8, head_dim=192, v_head_dim=128, window=128),
        ),
        source="hf XiaomiMiMo/MiMo-V2-Flash config.json: num_hidden_layers, hybrid_layer_pattern, "
        "num_key_value_heads, head_dim, v_head_dim, swa_num_key_value_heads, swa_head_dim, "
        "swa_v_head_dim, sliding_window (128, as the README says)",
        note="SWA KV counted as exactly min(tokens, 128) per layer (engines may round up to a "
        "page); the learnable attention-sink bias adds no cache; the 3 MTP (SWA) layers are "
        "excluded",
    ),
    "minimax-m2.5": RealModelSpec(
        name="MiniMax-M2.5 (229B)",
        hf_repo="MiniMaxAI/MiniMax-M2.5",
        num_layers=62,
        groups=(_full(62, kv_heads=8, head_dim=128),),
        source="hf MiniMaxAI/MiniMax-M2 config.json: num_hidden_layers=62, "
        "num_key_value_heads=8, head_dim=128",
        note="M2.5's own config.json could not be read; these are MiniMax-M2's values, which "
        "public write-ups say M2.5 keeps (dense GQA, 248 KiB/token); MTP modules excluded",
    ),
    "qwen3-235b": RealModelSpec(
        name="Qwen3-235B-A22B",
        hf_repo="Qwen/Qwen3-235B-A22B",
        num_layers=94,
        groups=(_full(94, kv_heads=4, head_dim=128),),
        source="hf Qwen/Qwen3-235B-A22B config.json: num_hidden_layers=94, "
        "num_key_value_heads=4, head_dim=128",
    ),
    "llama-3-70b": RealModelSpec(
        name="Llama-3-70B",
        hf_repo="meta-llama/Meta-Llama-3-70B",
        num_layers=80,
        groups=(_full(80, kv_heads=8, head_dim=128),),
        source="hf meta-llama/Meta-Llama-3-70B config.json: num_hidden_layers=80, "
        "num_key_value_heads=8, head_dim = hidden_size / num_attention_heads = 8192 / 64",
    ),
}
