"""The shipped paper sweeps on a local Ray: `paper-figure5.yaml` finds the paper's optimum (t about
19.4K, split 3:5) as closely as `optimize` does, and its simulated points sit on the model's curves
below saturation; `bandwidth-crossover.yaml`'s crossover is where the gain changes sign, later for
the dense profile. Both write report.html with their findings."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from app.paper_figures import CASE_STUDY
from emulator.analytic import optimize_scenario
from emulator.scenario import apply_overrides
from emulator.sweep import load_sweep, run_sweep
from emulator.sweep.findings import SPLIT, THRESHOLD, crossover, crossover_figure, figure5, figure5_figures
from emulator.sweep.store import read_results
from model_stub.config import get_preset

pytestmark = pytest.mark.usefixtures("local_ray")
SWEEPS = Path(__file__).resolve().parents[3] / "scenarios" / "sweeps"
# optimize lands 1.1 % from the paper's t (19,620 against about 19.4K); the sweep must do as well
PAPER_T_TOLERANCE = 0.015
EXACT_TOLERANCE = 0.04  # simulated Lambda_max against the model with each request's own T_prefill (~3 sigma)


@pytest.fixture(scope="module")
def figure5_run(tmp_path_factory: pytest.TempPathFactory):
    sweep = load_sweep(SWEEPS / "paper-figure5.yaml")
    out = tmp_path_factory.mktemp("figure5")
    result = run_sweep(sweep, out)
    assert result.num_failed == 0 and result.num_ran == result.num_points
    rows = read_results(out)[0]
    return sweep, out, figure5(rows, sweep.spec, sweep.base_scenario().workload.arrival.rate_per_s)


def test_figure5_centre_is_what_optimize_finds_on_its_base(figure5_run) -> None:
    sweep, _, _ = figure5_run
    plan = optimize_scenario(sweep.base_scenario())
    assert sweep.spec.axes[THRESHOLD].center == plan["t"] and sweep.spec.axes[SPLIT].center == plan["n_p"]


def test_figure5_reproduces_the_papers_optimum_as_closely_as_optimize(figure5_run) -> None:
    _, out, f = figure5_run
    assert f is not None
    for t in (f.optimizer_t, f.best_t_on_grid, f.crossing_t):
        assert t is not None and abs(t / CASE_STUDY.threshold_tokens - 1) <= PAPER_T_TOLERANCE, t
    assert f.crossing_t == pytest.approx(f.optimizer_t, rel=0.005)  # Eq. 7 holds at the optimum
    assert (f.optimizer_split, f.optimizer_n_d) == (CASE_STUDY.num_prefill, CASE_STUDY.num_decode)
    assert f.best_split == CASE_STUDY.num_prefill
    curves = figure5_figures(f)[1]  # the optimum's line, at t* on the log t axis
    assert [tuple(trace.x) for trace in curves.data if trace.line.dash == "dot"] == [(f.optimizer_t,) * 2]
    report = (out / "report.html").read_text()
    assert "Figure 5" in report and f"{f.crossing_t:,.0f}" in report and "deviation" in report


def test_figure5_simulated_points_sit_on_the_model_below_saturation(figure5_run) -> None:
    """The simulation charges each request its own T_prefill. So its points sit on the model's
    curve that does the same (mean_service_lambda) within sampling, 4 % (2.7 % measured); Eq. 6's own curve takes
    T_prefill at the mean length and, T_prefill being convex, reads 0-6 % higher: within 5 % of the
    points wherever that gap is under 2 %."""
    _, _, f = figure5_run
    below = f.below_saturation()
    assert len(below) >= 20  # all but the two levels whose Lambda_max is under the offered 1 req/s
    assert (below["deviation_mean_t"].abs() <= EXACT_TOLERANCE).all(), below[["panel", "level", "deviation_mean_t"]]
    gaps = below["model_lambda"] / below["mean_t_lambda"] - 1
    assert gaps.min() >= 0 and gaps.max() <= 0.06
    small = below[gaps < 0.02]
    assert len(small) >= 3 and (small["deviation"].abs() <= 0.05).all(), small[["panel", "level", "deviation"]]


def test_the_dense_profile_is_the_presets_kv_ratio_applied_to_the_case_study() -> None:
    sweep = load_sweep(SWEEPS / "bandwidth-crossover.yaml")
    hybrid, dense = get_preset("kimi-linear-mini", "small"), get_preset("dense-gqa-mini", "small")
    base = sweep.base_scenario()
    profile = base.model.profile
    dense_scenario = apply_overrides(base, list(sweep.spec.configurations["dense"]))
    expected = [mib * dense.cache_bytes(n) / hybrid.cache_bytes(n)
                for mib, n in zip(profile.kv_mib, profile.lengths_tokens, strict=True)]
    assert dense_scenario.model.profile.kv_mib == pytest.approx(expected, abs=0.05)
    assert dense_scenario.model.profile.prefill_s == profile.prefill_s  # same size: same compute


def test_bandwidth_crossover_is_where_the_gain_changes_sign(tmp_path: Path) -> None:
    sweep = load_sweep(SWEEPS / "bandwidth-crossover.yaml")
    run_sweep(sweep, tmp_path)
    rows = read_results(tmp_path)[0]
    c = crossover(rows)
    assert c is not None and set(c.crossover_gbps) == {"hybrid", "dense"}
    for name, at in c.crossover_gbps.items():
        gains = c.gains[c.gains["configuration"] == name]
        assert at is not None
        assert (gains[gains["gbps"] < at * 0.999]["gain"] < 0).all()
        assert (gains[gains["gbps"] > at * 1.001]["gain"] >= 0).all()
        check = apply_overrides(sweep.base_scenario(), [*_bundle(sweep, name), f"link.bandwidth_mbit={at * 1e3}"])
        assert optimize_scenario(check)["gain_vs_homogeneous"] == pytest.approx(0.0, abs=0.03)
    assert c.crossover_gbps["dense"] > 3 * c.crossover_gbps["hybrid"]
    lines = sorted(tuple(trace.x) for trace in crossover_figure(c).data if trace.line.dash == "dot")
    assert lines == sorted((at, at) for at in c.crossover_gbps.values())
    top = c.gains[c.gains["gbps"] == c.gains["gbps"].max()]
    assert pd.Series(top["gain"]).nunique() == 1  # at 400 Gbit/s the link binds neither model
    assert "Bandwidth crossover" in (tmp_path / "report.html").read_text()


def _bundle(sweep, name: str) -> list[str]:
    return list(sweep.spec.configurations[name])


def test_measured_throughputs_need_the_split_fixed() -> None:
    from emulator.sweep.point import measured_throughputs
    from emulator.virtual.engine import simulate

    base = apply_overrides(load_sweep(SWEEPS / "paper-figure5.yaml").base_scenario(), ["duration_s=120"])
    fixed = apply_overrides(base, ["clusters.local.prefill_instances=3", "router.threshold_tokens=19620"])
    free = apply_overrides(base, ["router.threshold_tokens=19620"])  # the split is the scheduler's
    got = measured_throughputs(simulate(fixed).records, fixed)
    assert 0 < got["measured_p"] < 1 and got["measured_lambda_max"] == pytest.approx(min(
        got["measured_theta_prfaas"] / got["measured_p"], got["measured_theta_pd_p"] / (1 - got["measured_p"]),
        got["measured_theta_pd_d"]))
    unknown = measured_throughputs(simulate(free).records, free)
    assert unknown["measured_theta_prfaas"] > 0 and unknown["measured_lambda_max"] is None
