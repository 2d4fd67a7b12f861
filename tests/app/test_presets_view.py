"""The Home page's tables against sizes computed by hand from the preset dimensions."""

from __future__ import annotations

import pytest

from app.presets_view import CURVE_TOKENS, TABLE_COLUMNS, compact_pattern, make_cache_curves, make_presets_table
from model_stub.config import PRESET_NAMES


def _row(size: str, tokens: int, preset: str) -> dict[str, object]:
    table = make_presets_table(size, tokens)
    return table.set_index("preset").loc[preset].to_dict()


def test_kimi_linear_small_by_hand() -> None:
    # 8 layers: kda,kda,kda,mla x2; d_model 256, 4 linear heads of 64, conv kernel 4, float32.
    mla_per_token = (128 + 32) * 4  # (kv_lora_rank + qk_rope_dim) * itemsize
    kda_state = (4 * 64 * 64 + 3 * 4 * 64 * (4 - 1)) * 4  # (heads*dk*dv + conv q,k,v) * itemsize
    row = _row("small", 1000, "kimi-linear-mini")
    assert row["layers"] == 8
    assert row["pattern"] == "(3 kda, mla) × 2"  # kda,kda,kda,mla,kda,kda,kda,mla
    assert row["d_model"] == 256
    assert row["kv_bytes_per_token"] == 2 * mla_per_token == 1280
    assert row["fixed_bytes"] == 6 * kda_state == 448_512
    assert row["cache_bytes"] == 448_512 + 1000 * 1280


@pytest.mark.parametrize(
    ("tokens", "fixed", "total"),
    [
        (10, 5 * 10 * 256, 5 * 10 * 256 + 10 * 256),  # inside the 16-token window
        (1000, 5 * 16 * 256, 5 * 16 * 256 + 1000 * 256),  # window full: SWA stops growing
    ],
)
def test_mimo_tiny_window_by_hand(tokens: int, fixed: int, total: int) -> None:
    # tiny: 5 SWA + 1 full layer, 1 KV head of 32 dims, float32: K and V = 2*1*32*4 = 256 B/token.
    row = _row("tiny", tokens, "mimo-v2-flash-mini")
    assert row["kv_bytes_per_token"] == 256
    assert row["fixed_bytes"] == fixed
    assert row["cache_bytes"] == total


def test_table_lists_every_preset_once() -> None:
    table = make_presets_table("small", 0)
    assert tuple(table.columns) == TABLE_COLUMNS
    assert tuple(table["preset"]) == PRESET_NAMES
    assert (table["cache_bytes"] == table["fixed_bytes"]).all()  # no tokens, no growing KV


def test_negative_tokens_refused() -> None:
    with pytest.raises(ValueError, match="tokens: -1 is negative"):
        make_presets_table("small", -1)


def test_curves_span_1k_to_128k_and_agree_with_table() -> None:
    assert CURVE_TOKENS[0] == 1024 and CURVE_TOKENS[-1] == 128 * 1024
    assert list(CURVE_TOKENS) == sorted(set(CURVE_TOKENS))
    curves = make_cache_curves("tiny")
    assert len(curves) == len(PRESET_NAMES) * len(CURVE_TOKENS)
    at_4k = curves[curves["tokens"] == 4096].set_index("preset")["cache_bytes"]
    table = make_presets_table("tiny", 4096).set_index("preset")["cache_bytes"]
    assert at_4k.to_dict() == table.to_dict()


@pytest.mark.parametrize(("pattern", "compact"), [
    ("kda,kda,kda,mla,kda,kda,kda,mla", "(3 kda, mla) × 2"),
    ("swa,swa,swa,swa,swa,full,swa,swa,swa,swa,swa,full", "(5 swa, full) × 2"),
    ("full,full,full,full", "4 full"),
    ("gdn,full", "gdn, full"),
    ("kda,mla,kda", "kda, mla, kda"),  # no repeating unit: written whole
])
def test_a_pattern_is_written_by_its_repeating_unit(pattern: str, compact: str) -> None:
    assert compact_pattern(pattern) == compact
