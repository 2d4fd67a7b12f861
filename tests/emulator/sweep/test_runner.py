"""Sweeps on a local Ray: one row per point and seed, numbers equal to `run` one point at a time,
resuming skips done points, and a point the scenario refuses is a failed row while the rest finish."""

from __future__ import annotations

import html
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from emulator.sweep import load_sweep, run_sweep
from tests.emulator.sweep.conftest import BASE

pytestmark = pytest.mark.usefixtures("local_ray")
GRID = ("axes:\n  router.threshold_tokens: {values: [8000, 40000]}\n"
        "  workload.arrival.rate_per_s: {values: [1.0, 2.5]}\nseeds: [0, 1]\n"
        "metrics: [ttft_p50_s, throughput_rps, completed_fraction]\n")


def test_grid_rows_equal_single_runs_and_resume_runs_nothing(write_sweep: Callable[..., Path],
                                                             tmp_path: Path) -> None:
    sweep = load_sweep(write_sweep(GRID))
    first = run_sweep(sweep, tmp_path / "out")
    assert (first.num_points, first.num_ran, first.num_failed) == (8, 8, 0)
    rows = pd.read_parquet(tmp_path / "out" / "sweep.parquet")
    assert len(rows) == 8 and rows["point_id"].is_unique and set(rows["status"]) == {"ok"}
    assert sorted(rows.groupby(["router.threshold_tokens", "workload.arrival.rate_per_s"]).size()) == [2] * 4
    for t, rate, seed in ((8000, 2.5, 1), (40000, 1.0, 0)):
        row = rows[(rows["router.threshold_tokens"] == t) & (rows["workload.arrival.rate_per_s"] == rate)
                   & (rows["seed"] == seed)].iloc[0]
        summary = run_cli(tmp_path / f"run-{t}-{seed}", "duration_s=20", f"router.threshold_tokens={t}",
                          f"workload.arrival.rate_per_s={rate}", f"seed={seed}")
        assert row["ttft_p50_s"] == summary["ttft_p50_s"]
        assert row["throughput_rps"] == summary["throughput_rps"]
    doc = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert doc["status"] == "complete" and doc["counts"]["ran"] == 8
    assert doc["rows"] == {"total": 8, "ok": 8, "failed": 0}
    again = run_sweep(load_sweep(sweep.path), tmp_path / "out")
    assert (again.num_before, again.num_ran) == (8, 0)
    assert len(pd.read_parquet(tmp_path / "out" / "sweep.parquet")) == 8


def run_cli(out: Path, *overrides: str) -> dict:
    sets = [arg for item in overrides for arg in ("--set", item)]
    subprocess.run([sys.executable, "-m", "emulator", "run", str(BASE), "--engine", "virtual", "--out", str(out),
                    *sets], check=True, capture_output=True)
    return json.loads((out / "summary.json").read_text())["summary"]


def test_refused_point_is_a_failed_row_and_the_rest_finish(write_sweep: Callable[..., Path], tmp_path: Path) -> None:
    sweep = load_sweep(write_sweep("axes:\n  router.threshold_tokens: {values: [8000, -5]}\n"
                                   "engines: [virtual, analytic]\nmetrics: [throughput_rps, lambda_max]\n"))
    result = run_sweep(sweep, tmp_path / "out")
    assert (result.num_ran, result.num_failed) == (4, 2)
    rows = pd.read_parquet(tmp_path / "out" / "sweep.parquet").set_index(["router.threshold_tokens", "engine"])
    for engine in ("virtual", "analytic"):
        bad = rows.loc[(-5, engine)]
        assert bad["status"] == "failed" and "router.threshold_tokens" in bad["reason"]
        assert "\n" not in bad["reason"] and pd.isna(bad["throughput_rps"])
    assert rows.loc[(8000, "virtual"), "throughput_rps"] > 0
    assert rows.loc[(8000, "analytic"), "lambda_max"] > 0 and pd.isna(rows.loc[(8000, "analytic"), "throughput_rps"])
    report = (tmp_path / "out" / "report.html").read_text()  # the failures with their reasons, offline
    assert "Failed points" in report and html.escape(bad["reason"], quote=False) in report
    assert "throughput (req/s) along threshold t (tokens)" in report and "<script src" not in report


def test_out_dir_of_another_sweep_is_refused(write_sweep: Callable[..., Path], tmp_path: Path) -> None:
    from emulator.errors import ScenarioError

    axes = "axes:\n  router.threshold_tokens: {values: [8000]}\n"
    run_sweep(load_sweep(write_sweep(axes)), tmp_path / "out")
    other = load_sweep(write_sweep(axes + "metrics: [ttft_p90_s]\n", name="other"))
    with pytest.raises(ScenarioError, match="holds another sweep"):
        run_sweep(other, tmp_path / "out")


def test_capacity_mode_rows_equal_find_capacity_on_the_point_scenario(write_sweep: Callable[..., Path],
                                                                      tmp_path: Path) -> None:
    from emulator.sweep.capacity import CapacitySlo, find_capacity
    from emulator.sweep.points import point_scenario

    sweep = load_sweep(write_sweep("configurations: {prfaas: paper, naive: paper}\nengines: [virtual, analytic]\n"
                                   "capacity: {ttft_p90_s: 5.0, num_requests: 300, max_probes: 4}\n"))
    result = run_sweep(sweep, tmp_path / "out")
    assert (result.num_ran, result.num_failed) == (4, 0)
    rows = pd.read_parquet(tmp_path / "out" / "sweep.parquet").set_index(["configuration", "engine"])
    for config in ("prfaas", "naive"):
        row = rows.loc[(config, "virtual")]
        direct = find_capacity(point_scenario(sweep, row["point_id"]), CapacitySlo(5.0), num_requests=300,
                               max_probes=4)
        assert row["capacity_rps"] == direct.rate_per_s > 0
        assert row["lambda_max_model"] == direct.lambda_max_model
        assert row["capacity_ratio"] == pytest.approx(direct.rate_per_s / direct.lambda_max_model)
        assert (row["capacity_probes"], row["capacity_converged"]) == (len(direct.probes), float(direct.converged))
        assert pd.isna(row["lambda_max"])
        analytic = rows.loc[(config, "analytic")]
        assert analytic["lambda_max"] > 0 and pd.isna(analytic["capacity_rps"])
    doc = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert doc["columns"]["axes"] == ["configuration"] and doc["sweep"]["capacity"]["ttft_p90_s"] == 5.0
