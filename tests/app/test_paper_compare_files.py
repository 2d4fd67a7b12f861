"""The committed bench result the KV explorer sets beside the paper, read through the run-folder
reader: a nested or linked file is "no bench", never a RecursionError or another file's content."""

from __future__ import annotations

import json
from pathlib import Path

from app.paper_compare import PRESET_BENCH, load_preset_bench


def test_the_committed_bench_reads() -> None:
    assert load_preset_bench() == json.loads(PRESET_BENCH.read_text())


def test_a_nested_bench_file_is_no_bench(tmp_path: Path) -> None:
    (tmp_path / "bench.json").write_text("[" * 100_000 + "]" * 100_000)
    assert load_preset_bench(tmp_path / "bench.json") is None


def test_a_linked_bench_file_is_no_bench(tmp_path: Path) -> None:
    (tmp_path / "other.json").write_text('{"presets": {"token": "TOPSECRET-11aa"}}')
    (tmp_path / "bench.json").symlink_to(tmp_path / "other.json")
    assert load_preset_bench(tmp_path / "bench.json") is None
