"""KV calculator: real-model bytes checked against hand arithmetic on their config.json values."""

from __future__ import annotations

import dataclasses
import json

import pytest

from model_stub.config import LayerKind, get_preset
from model_stub.kv_calculator import REAL_MODELS, RealModelSpec, get_real_model, kv_report, main
from model_stub.real_models import AttentionLayers

BF16, FP32 = 2, 4
DENSE = ("minimax-m2.5", "qwen3-235b", "llama-3-70b")
HYBRID = ("kimi-linear-48b", "qwen3-next-80b", "qwen3.5-397b", "mimo-v2-flash")

# layers * (K + V) * kv_heads * head_dim * bf16, from each config.json
LLAMA3_70B = 80 * 2 * 8 * 128 * BF16
QWEN3_235B = 94 * 2 * 4 * 128 * BF16
MINIMAX_M25 = 62 * 2 * 8 * 128 * BF16
# Kimi Linear: 7 MLA layers * (kv_lora_rank 512 + qk_rope_head_dim 64) * bf16
KIMI_KV = 7 * (512 + 64) * BF16
# 20 KDA layers: fp32 state of 32 heads * 128 * 128, bf16 conv of q, k, v: 3 * 32 * 128 * (4 - 1)
KIMI_FIXED = 20 * (32 * 128 * 128 * FP32 + 3 * 32 * 128 * 3 * BF16)
# MiMo-V2-Flash: 9 global layers * 4 kv heads * (k 192 + v 128); 39 SWA layers * 8 kv heads
MIMO_KV = 9 * 4 * (192 + 128) * BF16
MIMO_SWA_PER_TOKEN = 39 * 8 * (192 + 128) * BF16
# Qwen3-Next: 12 full layers * 2 kv heads * 256; 36 GDN layers: 32 v-heads * 128 * 128 fp32 state,
# bf16 conv over q, k (16 heads * 128 each) and v (32 heads * 128), 3 past columns
QWEN3_NEXT_KV = 12 * 2 * 2 * 256 * BF16
QWEN3_NEXT_FIXED = 36 * (32 * 128 * 128 * FP32 + (2 * 16 * 128 + 32 * 128) * 3 * BF16)


@pytest.mark.parametrize(
    ("name", "kv_per_token"),
    [
        ("llama-3-70b", 327_680),
        ("llama-3-70b", LLAMA3_70B),
        ("qwen3-235b", QWEN3_235B),
        ("minimax-m2.5", MINIMAX_M25),
        ("kimi-linear-48b", KIMI_KV),
        ("mimo-v2-flash", MIMO_KV),
        ("qwen3-next-80b", QWEN3_NEXT_KV),
        ("qwen3.5-397b", 15 * 2 * 2 * 256 * BF16),
    ],
)
def test_kv_bytes_per_token_matches_hand_arithmetic(name: str, kv_per_token: int) -> None:
    assert REAL_MODELS[name].kv_bytes_per_token() == kv_per_token


def test_dense_models_have_no_fixed_state() -> None:
    for name in DENSE:
        spec = REAL_MODELS[name]
        assert spec.fixed_bytes(100_000) == 0
        assert spec.cache_bytes(100_000) == 100_000 * spec.kv_bytes_per_token()


def test_kimi_linear_fixed_state_is_kda_recurrent_plus_conv() -> None:
    spec = REAL_MODELS["kimi-linear-48b"]
    assert spec.layer_counts == {"mla": 7, "kda": 20}
    assert KIMI_FIXED == 43_417_600
    assert spec.fixed_bytes(1) == spec.fixed_bytes(1_000_000) == KIMI_FIXED
    assert spec.cache_bytes(32_768) == 32_768 * KIMI_KV + KIMI_FIXED


def test_qwen3_next_fixed_state_counts_gdn_conv_over_q_k_v() -> None:
    assert REAL_MODELS["qwen3-next-80b"].fixed_bytes(4096) == QWEN3_NEXT_FIXED


def test_state_dtype_is_a_field() -> None:
    bf16_state = dataclasses.replace(REAL_MODELS["kimi-linear-48b"], state_dtype_bytes=BF16)
    assert bf16_state.fixed_bytes(0) == 20 * (32 * 128 * 128 * BF16 + 3 * 32 * 128 * 3 * BF16)
    assert bf16_state.kv_bytes_per_token() == KIMI_KV


def test_sliding_window_kv_is_bounded_by_the_window() -> None:
    spec = REAL_MODELS["mimo-v2-flash"]
    assert spec.fixed_bytes(0) == 0
    assert spec.fixed_bytes(64) == 64 * MIMO_SWA_PER_TOKEN
    assert spec.fixed_bytes(128) == spec.fixed_bytes(1_000_000) == 128 * MIMO_SWA_PER_TOKEN
    assert spec.cache_bytes(32_768) == 32_768 * MIMO_KV + 128 * MIMO_SWA_PER_TOKEN


def test_hybrids_grow_far_slower_than_dense_models() -> None:
    slowest_dense = min(REAL_MODELS[name].kv_bytes_per_token() for name in DENSE)
    for name in HYBRID:
        assert REAL_MODELS[name].kv_bytes_per_token() * 6 < slowest_dense, name


def test_every_spec_names_its_source_and_sums_its_layers() -> None:
    assert set(REAL_MODELS) == set(DENSE) | set(HYBRID)
    for spec in REAL_MODELS.values():
        org = spec.hf_repo.split("/")[0]
        assert "config.json" in spec.source and f"hf {org}/" in spec.source, spec.name
        assert sum(spec.layer_counts.values()) == spec.num_layers


def test_spec_rejects_layer_groups_that_miss_layers() -> None:
    group = AttentionLayers(LayerKind.FULL, 10, num_kv_heads=8, head_dim=128, v_head_dim=128)
    with pytest.raises(ValueError, match="sum to 10"):
        RealModelSpec(name="bad", hf_repo="x/y", num_layers=12, groups=(group,), source="test")


def test_lookup_is_case_insensitive_and_accepts_full_names() -> None:
    assert get_real_model("LLAMA-3-70B") is REAL_MODELS["llama-3-70b"]
    assert get_real_model("Kimi-Linear-48B-A3B") is REAL_MODELS["kimi-linear-48b"]
    with pytest.raises(KeyError, match="llama-3-70b"):
        get_real_model("gpt-5")


def test_report_fields() -> None:
    report = kv_report("kimi-linear-48b", 32_768)
    assert report["model"] == "Kimi-Linear-48B-A3B"
    assert report["num_layers"] == 27
    assert report["layer_counts"] == {"mla": 7, "kda": 20}
    assert report["kv_bytes_per_token"] == KIMI_KV
    assert report["fixed_bytes"] == KIMI_FIXED
    assert report["total_bytes"] == 32_768 * KIMI_KV + KIMI_FIXED
    assert report["total_mib"] == round((32_768 * KIMI_KV + KIMI_FIXED) / 2**20, 3)
    assert report["dtype"]["kv_bytes"] == BF16 and report["dtype"]["state_bytes"] == FP32
    assert report["source"] and report["note"]
    with pytest.raises(ValueError, match="--tokens"):
        kv_report("kimi-linear-48b", -1)


def test_cli_prints_json_for_a_real_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["Llama-3-70B", "--tokens", "1000"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["kv_bytes_per_token"] == 327_680
    assert report["total_bytes"] == 327_680_000
    assert report["tokens"] == 1000


def test_cli_all_lists_every_real_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--all", "--tokens", "8192"]) == 0
    reports = json.loads(capsys.readouterr().out)
    by_model = {r["model"]: r for r in reports}
    assert len(reports) == len(REAL_MODELS)
    assert by_model["Qwen3-235B-A22B"]["total_bytes"] == 8192 * QWEN3_235B
    assert by_model["MiniMax-M2.5 (229B)"]["kv_bytes_per_token"] == MINIMAX_M25


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["gpt-5", "--tokens", "10"], "llama-3-70b"),  # lists the valid names
        (["llama-3-70b", "--tokens", "-5"], "--tokens"),
        (["llama-3-70b"], "--tokens"),
        (["llama-3-70b", "--tokens", "ten"], "--tokens"),
        (["--tokens", "10"], "--all"),
        (["llama-3-70b", "--tokens", "10", "--size", "tiny"], "--size"),
        (["kimi-linear-mini", "--tokens", "10", "--size", "huge"], "--size"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and needle in captured.err
    assert "Traceback" not in captured.err


@pytest.mark.parametrize("size", ["small", "tiny"])
def test_cli_accepts_project_presets(size: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kimi-linear-mini", "--tokens", "300", "--size", size]) == 0
    report = json.loads(capsys.readouterr().out)
    config = get_preset("kimi-linear-mini", size)
    num_mla = config.layer_kinds.count(LayerKind.MLA)
    assert report["layer_counts"] == {"kda": 3 * num_mla, "mla": num_mla}
    assert report["kv_bytes_per_token"] == config.kv_bytes_per_token()
    assert (
        report["kv_bytes_per_token"]
        == num_mla * (config.kv_lora_rank + config.qk_rope_dim) * config.itemsize
    )
    assert report["fixed_bytes"] == config.fixed_bytes(300)
    assert report["total_bytes"] == config.cache_bytes(300)


def test_presets_default_to_small() -> None:
    report = kv_report("Kimi-Linear-Mini", 10)
    assert report["model"] == "kimi-linear-mini (small)"
    assert report["num_layers"] == get_preset("kimi-linear-mini").num_layers
