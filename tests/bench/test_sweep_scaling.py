"""bench/sweep_scaling.py's pure pieces, without starting Ray: the generated sweep files validate and
expand to the point counts the bench reports, and the speedup, overhead, placement and --check
arithmetic on hand-made rows. No timing here (bench/ measures; tests check behaviour)."""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd
import pytest

from emulator.sweep import expand, load_sweep
from tests.bench.scripts import load_bench

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "sweep_scaling.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("sweep_scaling")


@pytest.mark.parametrize(("quick", "points"), [(False, 200), (True, 40)])
def test_the_generated_sweeps_validate_and_expand_to_the_point_count(bench: ModuleType, tmp_path: Path,
                                                                     quick: bool, points: int) -> None:
    paths = bench.write_sweeps(tmp_path, quick)
    measured, warmup = load_sweep(paths["measured"]), load_sweep(paths["warmup"])
    assert len(expand(measured.spec)) == points
    assert len(expand(warmup.spec)) == 4  # two points a worker at most: both workers import the engine
    assert measured.base_path == bench.BASE
    assert measured.spec.set == [f"duration_s={bench.DURATION_S}"]
    assert measured.spec.engines == ["virtual"]
    assert list(measured.spec.axes) == ["router.threshold_tokens", "workload.arrival.rate_per_s"]
    assert measured.base_scenario().duration_s == bench.DURATION_S
    ids = [p.point_id for p in expand(measured.spec)]
    assert len(set(ids)) == points


def test_overhead_is_the_extra_wall_time_per_point_over_the_median_point(bench: ModuleType) -> None:
    walls = [0.1, 0.1, 0.2, 0.2, 0.1]  # mean 0.14, median 0.1
    assert bench.per_task_overhead(0.8, walls) == pytest.approx((0.16 - 0.14) / 0.1)
    assert bench.per_task_overhead(0.7, walls) == pytest.approx(0.0)
    with pytest.raises(bench.BenchError, match="no point wall times"):
        bench.per_task_overhead(1.0, [])


def test_speedup_is_one_worker_over_two(bench: ModuleType) -> None:
    assert bench.speedup(10.0, 5.5) == pytest.approx(1.818, abs=1e-3)


def test_placement_counts_every_node_and_refuses_a_stranger(bench: ModuleType) -> None:
    rows = [{"point_id": str(i), "node_id": "a" if i % 3 else "b"} for i in range(9)]
    assert bench.placement(rows, ["a", "b", "c"]) == {"a": 6, "b": 3, "c": 0}
    with pytest.raises(bench.BenchError, match=r"point 9 ran on 'z'"):
        bench.placement([*rows, {"point_id": "9", "node_id": "z"}], ["a", "b"])


def local(workers: int, wall_s: float, point_walls: list[float]) -> dict[str, Any]:
    return {"workers": workers, "startup_s": 3.0, "warmup_s": 1.0, "wall_s": wall_s, "doc_wall_s": wall_s,
            "worker_build": "compiled", "point_wall_s": point_walls}


def rounds(wall_2: float, wall_1: float = 10.0) -> list[dict[int, dict[str, Any]]]:
    walls = [0.095] * 50 + [0.105] * 50  # mean and median 0.1: a 1-worker wall of 10.0 s is no overhead
    return [{1: local(1, wall_1, walls), 2: local(2, wall_2, walls)} for _ in range(3)]


def two_node(per_node: list[int]) -> dict[str, Any]:
    return {"startup_s": 4.0, "wall_s": 7.0, "points_per_node": per_node}


def test_summary_and_targets_on_hand_made_rounds(bench: ModuleType) -> None:
    good = bench.summarize(rounds(wall_2=5.5, wall_1=10.5), two_node([101, 99]), 100)
    assert good["speedup"] == pytest.approx(10.5 / 5.5)
    assert good["overhead_share"] == pytest.approx(0.05)
    assert good["overhead_per_point_ms"] == pytest.approx(5.0)
    assert good["point_slowdown_2_workers"] == pytest.approx(1.0)
    assert good["two_node_both_used"]
    assert bench.missed_targets(good, quick=False) == ([], [])

    slow = bench.summarize(rounds(wall_2=7.0, wall_1=11.5), two_node([200, 0]), 100)
    assert slow["overhead_share"] == pytest.approx(0.15)
    assert not slow["two_node_both_used"]
    assert bench.missed_targets(slow, quick=False) == (
        ["two-node placement", "speedup", "per-task overhead"], [])
    # --quick enforces the placement only; the timing targets are reported
    assert bench.missed_targets(slow, quick=True) == (["two-node placement"], ["speedup", "per-task overhead"])


def test_the_table_fits_in_ten_lines(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    results = {"config": {"quick": False}, "worker_build": "compiled (mypyc)",
               "machine": {"cpus": 2, "load_before": 0.5},
               "summary": bench.summarize(rounds(wall_2=5.5), two_node([100, 100]), 100)}
    assert bench.report(results, Path("out.json")) == ([], [])
    lines = capsys.readouterr().out.splitlines()
    assert 1 < len(lines) <= 10
    assert any("speedup" in line and "1.82" in line for line in lines)


def test_a_failed_point_makes_the_run_unmeasurable(bench: ModuleType, tmp_path: Path) -> None:
    rows = [{"point_id": "a", "status": "ok", "reason": None, "wall_s": 0.1},
            {"point_id": "b", "status": "failed", "reason": "ScenarioError: bad", "wall_s": 0.1}]
    pd.DataFrame(rows).to_parquet(tmp_path / "sweep.parquet")
    with pytest.raises(bench.BenchError, match=r"not whole \(1 failed\): ScenarioError: bad"):
        bench.read_rows(tmp_path, 2)
    pd.DataFrame(rows[:1]).to_parquet(tmp_path / "sweep.parquet")
    with pytest.raises(bench.BenchError, match="1 rows for 2 points"):
        bench.read_rows(tmp_path, 2)
    assert [r["point_id"] for r in bench.read_rows(tmp_path, 1)] == ["a"]


def test_a_bad_rounds_count_is_refused_in_one_line_before_ray(bench: ModuleType,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--rounds", "0", "--out", os.devnull]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == ["sweep_scaling: --rounds: 0 is out of range; give 1 to 20"]
    assert captured.out == ""
