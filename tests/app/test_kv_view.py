"""The KV explorer's tables against the KV calculator, Table 3 and Eq. 2 worked by hand."""

from __future__ import annotations

import pytest

from app.kv_view import (
    PHI_KV_TABLE,
    PHI_LENGTHS,
    egress_gbps,
    kind_of,
    make_egress_table,
    make_kv_table,
    make_phi_table,
    make_skv_curves,
    phi_kv_gbps,
)
from model_stub.config import PRESET_NAMES
from model_stub.kv_calculator import REAL_MODELS, kv_report

KIMI = PHI_KV_TABLE[0]


def test_kv_table_equals_the_calculator() -> None:
    table = make_kv_table(32_768, "small").set_index("model")
    assert table.loc["Kimi-Linear-48B-A3B", "kv_bytes_per_token"] == 8_064
    assert table.loc["Llama-3-70B", "kv_bytes_per_token"] == 327_680
    for key, spec in REAL_MODELS.items():
        report = kv_report(key, 32_768)
        row = table.loc[spec.name]
        assert row["kv_bytes_per_token"] == report["kv_bytes_per_token"]
        assert row["fixed_bytes"] == report["fixed_bytes"]
        assert row["cache_bytes"] == report["total_bytes"]
    for name in PRESET_NAMES:
        report = kv_report(name, 32_768, "small")
        assert table.loc[f"{name} (small)", "cache_bytes"] == report["total_bytes"]


def test_dense_and_hybrid_are_told_apart() -> None:
    table = make_kv_table(0, "tiny").set_index("model")
    assert table.loc["Kimi-Linear-48B-A3B", "kind"] == "hybrid"
    assert table.loc["MiMo-V2-Flash (309B)", "kind"] == "hybrid"  # SWA layers keep a window
    assert table.loc["Qwen3-235B-A22B", "kind"] == "dense"
    assert table.loc["dense-gqa-mini (tiny)", "kind"] == "dense"
    assert kind_of(("full", "mla")) == "dense" and kind_of(("kda", "mla")) == "hybrid"


def test_bad_table_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="tokens: -1 is negative"):
        make_kv_table(-1)
    with pytest.raises(ValueError, match="size: 'huge' is unknown"):
        make_kv_table(10, "huge")
    with pytest.raises(ValueError, match="unknown"):
        make_skv_curves(["GPT-9"])


def test_skv_curves_are_the_cache_at_each_length() -> None:
    curves = make_skv_curves(["Llama-3-70B", "kimi-linear-mini (tiny)"], "tiny", (1024, 4096))
    llama = curves[curves["model"] == "Llama-3-70B"]["cache_bytes"].tolist()
    assert llama == [1024 * 327_680, 4096 * 327_680]
    assert set(curves["kind"]) == {"dense", "hybrid"}


def test_phi_table_is_table_3() -> None:
    table = make_phi_table().set_index("model")
    assert table.loc["Kimi Linear 48B", ["1K", "8K", "32K", "128K"]].tolist() == [1.19, 2.29, 3.87, 4.88]
    assert table.loc["MiniMax-M2.5 229B", "32K"] == 59.93
    assert (table["kind"] == "dense").sum() == 2 and len(table) == 6


def test_phi_interpolates_between_the_measured_lengths() -> None:
    assert phi_kv_gbps(KIMI, 8192) == pytest.approx(2.29)
    assert phi_kv_gbps(KIMI, 20_480) == pytest.approx((2.29 + 3.87) / 2)  # halfway 8K..32K
    assert phi_kv_gbps(KIMI, PHI_LENGTHS[-1]) == pytest.approx(4.88)
    with pytest.raises(ValueError, match="outside the measured"):
        phi_kv_gbps(KIMI, 512)


def test_eq2_by_hand() -> None:
    # 64 GPUs in 8-GPU instances at L_avg = 20K tokens: 8 instances x 3.08 Gbit/s.
    assert egress_gbps(64, 8, 20_480, KIMI) == pytest.approx(8 * 3.08)
    table = make_egress_table(64, 8, 20_480, link_gbps=100).set_index("model")
    assert table.loc["Kimi Linear 48B", "egress_gbps"] == pytest.approx(24.64)
    assert table.loc["Kimi Linear 48B", "link_share"] == pytest.approx(0.2464)
    # Dense MiniMax at 32K: 8 x 59.93 Gbit/s, almost five 100 Gbit/s links.
    assert make_egress_table(64, 8, 32_768).set_index("model").loc[
        "MiniMax-M2.5 229B", "egress_gbps"] == pytest.approx(479.44)


@pytest.mark.parametrize(("args", "message"), [
    ((0, 8, 8192), "N: 0 GPUs"), ((64, 0, 8192), "P: 0 GPUs per instance"),
    ((64, 8, 200_000), "outside the measured"),
])
def test_eq2_refuses_bad_values(args: tuple[int, int, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        egress_gbps(*args, KIMI)


def test_a_non_positive_link_is_refused() -> None:
    with pytest.raises(ValueError, match="link: 0.0 Gbit/s"):
        make_egress_table(64, 8, 8192, link_gbps=0.0)
