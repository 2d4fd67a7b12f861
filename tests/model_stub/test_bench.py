"""The bench runs end to end at CI size and records measured cache bytes that match the config."""

import json

from model_stub import bench
from model_stub.config import PRESET_NAMES, get_preset


def test_bench_writes_results_and_table(tmp_path, capsys):
    out = tmp_path / "bench.json"
    argv = ["--size", "tiny", "--lengths", "64,192", "--repeats", "1", "--threads", "1", "--out", str(out)]
    assert bench.main(argv) == 0
    result = json.loads(out.read_text())
    assert set(result["presets"]) == set(PRESET_NAMES)
    for name, preset in result["presets"].items():
        config = get_preset(name, "tiny")
        for tokens, row in preset["prefill"].items():
            assert row["s_kv_bytes"] == config.cache_bytes(int(tokens))
            assert row["phi_kv_mbit_s"] > 0 and 0 < row["efficiency"]
        assert set(preset["decode_ms_per_step"]) == {"1", "8"}
    ratios = result["summary"]["s_kv_ratio_vs_dense_at_192"]
    assert ratios["dense-gqa-mini"] == 1.0
    assert all(ratios[n] < 0.5 for n in PRESET_NAMES if n != "dense-gqa-mini")
    assert bench.check(result) == []  # byte accounting targets hold at any size
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) <= 11 and printed[0].startswith("gemm")


def test_bench_rejects_unknown_preset(capsys):
    assert bench.main(["--presets", "nope", "--size", "tiny"]) == 2
    assert "unknown presets" in capsys.readouterr().err
