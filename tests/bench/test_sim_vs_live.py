"""bench/sim_vs_live.py: the matrix's scenario documents (exactly N arrivals, events at shares of the
window, valid on both engines), the error and goal arithmetic on hand-made figures, and the metrics
read back from a real (virtual) run. The reduced end-to-end form (2 configurations, live and
virtual) runs as root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pandas as pd
import pytest

from emulator.scenario import parse_scenario
from emulator.scenario.model_section import ProfileFile, read_profile_file, write_profile_file
from emulator.virtual.engine import run_virtual
from emulator.workload.build import build_requests
from tests.bench.scripts import BENCH, load_bench

ROOT = BENCH.parent
PROFILE = {"name": "hand", "lengths_tokens": [128, 2048], "kv_mib": [0.5, 3.0],
           "prefill_s": {"cpu": [0.05, 0.9]}, "decode_step_ms": {"cpu": 30.0}}


@pytest.fixture(scope="module")
def matrix() -> ModuleType:
    return load_bench("fidelity_matrix")


@pytest.fixture(scope="module")
def report() -> ModuleType:
    return load_bench("fidelity_report")


def test_every_configuration_holds_exactly_n_arrivals_on_both_engines(matrix: ModuleType) -> None:
    assert len(matrix.MATRIX) >= 8 and set(matrix.QUICK) <= {c.name for c in matrix.MATRIX}
    for config in matrix.MATRIX:
        doc = config.document(1.7, 150)
        live = parse_scenario(doc, ROOT)
        virtual = parse_scenario({**doc, "engine": "virtual", "model": {"profile": PROFILE}}, ROOT)
        arrivals = [r.arrival_s for r in build_requests(virtual)]
        assert len(arrivals) == 150 and arrivals[-1] < live.duration_s <= arrivals[-1] + 0.15
        for event, planned in zip(live.timeline, config.timeline, strict=True):
            assert event.at_s == pytest.approx(planned["at"] * live.duration_s, abs=0.05)


def test_errors_and_missed_goals_on_hand_made_figures(report: ModuleType) -> None:
    live = {"ttft_mean_s": 2.0, "ttft_p90_s": 4.0, "throughput_rps": 1.0, "remote_share": 0.5, "tpot_mean_s": None}
    virtual = {"ttft_mean_s": 2.2, "ttft_p90_s": 4.2, "throughput_rps": 0.98, "remote_share": 0.5, "tpot_mean_s": 0.03}
    error = report.errors_of(live, virtual)
    assert error["ttft_mean_s"] == pytest.approx(0.1) and error["ttft_p90_s"] == pytest.approx(0.05)
    assert error["throughput_rps"] == pytest.approx(-0.02) and error["remote_share"] == 0.0
    assert error["tpot_mean_s"] is None  # missing on one engine
    assert report.missed_goals([{"name": "a", "error": error}]) == ["a: ttft_mean_s error +10.0% (goal within 5%)"]


def test_two_agreeing_references_give_their_mean_and_a_disagreeing_pair_a_third_and_the_median(
        monkeypatch: pytest.MonkeyPatch) -> None:
    bench = load_bench("sim_vs_live")
    monkeypatch.setattr(bench, "SETTLE_S", 0.0)
    readings = iter([0.185, 0.147])
    assert bench.speed_across(0.143, lambda: next(readings)) == (0.147, [0.143, 0.185, 0.147])  # 0.185 disturbed
    readings = iter([0.145])
    reference_s, taken = bench.speed_across(0.140, lambda: next(readings))  # within 10 %: two readings
    assert reference_s == pytest.approx(0.1425) and taken == [0.140, 0.145]


def test_the_virtual_side_charges_the_machines_mean_speed_across_the_matrix(tmp_path: Path) -> None:
    """As the host's compute factor: the tables stay the live runs' (their scheduler's model), the
    virtual engine charges them at the mean reading over the stack run's."""
    bench = load_bench("sim_vs_live")
    measured = {"kind": "machine", "preset": "kimi-linear-mini", "size": "small", "busy_op_tokens": 512,
                "reference_prefill_s": 0.16, "speed_scale": 1.25}  # the tables stand for a 0.2 s reference
    profile = {**PROFILE, "host": {"cores": 2, "busy_slowdown": [1.0, 1.1]}}
    stacked = write_profile_file(ProfileFile.model_validate({"measured": measured, "model": {"profile": profile}}),
                                 tmp_path / "profile-stack.yaml", "a test's")
    rows = [{"reference_s": [0.2, 0.24]}, {"reference_s": [0.25, 0.21, 0.26]}, {"reference_s": []}]
    charged = bench.matrix_speed(stacked, rows)  # readings 0.22 and 0.25 (the disturbed 0.21 set aside)
    assert charged == tmp_path / "profile-matrix.yaml"
    before, after = read_profile_file(stacked).model.profile, read_profile_file(charged).model.profile
    assert after.host is not None and after.host.compute_factor == pytest.approx(0.235 / 0.2)
    assert after.prefill_s == before.prefill_s and after.decode_step_ms == before.decode_step_ms
    assert after.kv_mib == before.kv_mib and after.host.busy_slowdown == before.host.busy_slowdown
    assert "charged at x1.175 its tables' compute time" in charged.read_text()
    assert bench.matrix_speed(stacked, [{"reference_s": []}, {"name": "quick"}]) == stacked  # --quick reads none


def test_metrics_of_a_virtual_run_of_a_matrix_scenario(matrix: ModuleType, tmp_path: Path) -> None:
    doc = {**matrix.MATRIX[1].document(2.0, 40), "engine": "virtual", "model": {"profile": PROFILE}}
    run_virtual(parse_scenario(doc, ROOT), tmp_path / "run")
    figures = matrix.metrics(tmp_path / "run")
    rows = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    span_s = rows["finish_s"].max() - rows["arrival_s"].min()
    assert figures["requests"] == figures["completed"] == 40
    assert figures["throughput_rps"] == pytest.approx(40 / span_s)
    assert figures["remote_share"] == pytest.approx((rows["input_len"] > matrix.THRESHOLD).mean())
    assert figures["ttft_mean_s"] == pytest.approx(rows["ttft_s"].mean())
    assert figures["ttft_p90_s"] == pytest.approx(rows["ttft_s"].quantile(0.9))
    assert figures["tpot_mean_s"] == pytest.approx(0.030)


def test_the_stack_runs_are_compared_by_their_mean_prefill(tmp_path: Path) -> None:
    # Two runs of the same seed: the one whose prefills took less on average is the machine's usual
    # speed. A request that failed before its prefill has no times and does not count.
    sim_vs_live = load_bench("sim_vs_live")
    for name, prefills in (("slow", [(0.0, 0.30), (1.0, 1.12)]), ("fast", [(0.0, 0.25), (1.0, 1.10)])):
        (tmp_path / name).mkdir()
        rows = [*prefills, (None, None)]
        pd.DataFrame(rows, columns=["prefill_start_s", "prefill_end_s"]).to_parquet(tmp_path / name / "requests.parquet")
    assert sim_vs_live.mean_prefill_s(tmp_path / "slow") == pytest.approx(0.21)
    assert sim_vs_live.mean_prefill_s(tmp_path / "fast") == pytest.approx(0.175)


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.timeout(900)  # calibration, a 20-request stack run and 2 x 2 runs: about 5 minutes quiet
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the live runs use namespaces and the tun link")
def test_the_reduced_matrix_runs_both_engines_and_stays_near_live(tmp_path: Path) -> None:
    """CI's form: calibrate this machine, fold in the live stack's factors from a 20-request live
    run, then 2 configurations x 40 requests on both engines. Both engines route the same prompts
    the same way (the same seed and threshold), throughput agrees within 3 %, and the virtual TTFT
    mean is within 50 % of live. That bound is loose on purpose: 40 requests on a shared CI machine,
    and the lossy configuration, whose loss the fluid draws per cache (-10.3 to +8.2 % on the mean
    over seven full matrices, +8.2 % in bench/results/sim_vs_live.json; the goals are sim_vs_live.py
    --check's). Before issue 29 it was off by +63 %, which this fails."""
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, str(BENCH / "sim_vs_live.py"), "--quick", "--out", str(out),
                           "--work", str(tmp_path / "work")], cwd=ROOT, capture_output=True, text=True, timeout=840)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert [row["name"] for row in result["configs"]] == list(load_bench("fidelity_matrix").QUICK)
    for row in result["configs"]:
        for engine in ("live", "virtual"):
            assert row[engine]["requests"] == row[engine]["completed"] == 40, (row["name"], engine)
        assert row["error"]["remote_share"] == 0.0, row["name"]
        assert abs(row["error"]["throughput_rps"]) <= 0.03, (row["name"], row["error"])
        assert abs(row["error"]["ttft_mean_s"]) <= 0.50, (row["name"], row["error"])
    assert out.with_suffix(".html").read_text().count("<svg") == 2
