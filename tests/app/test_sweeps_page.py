"""The Sweeps page headless (AppTest) on a real sweep: progress, figures, the points table, and a
point saved as a scenario that replays the sweep's own numbers."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from emulator.paths import REPO_ROOT
from emulator.scenario.export import replay_yaml
from emulator.sweep.points import point_scenario
from emulator.sweep.spec import load_sweep
from emulator.sweep.store import read_results

PAGE = REPO_ROOT / "app" / "pages" / "6_Sweeps.py"
SWEEP = """name: page-sweep
base: {base}
set: [duration_s=30]
axes:
  router.threshold_tokens: {{values: [8000, 40000]}}
  workload.arrival.rate_per_s: {{values: [1.0, 2.0]}}
seeds: [0, 1]
engines: [virtual]
metrics: [ttft_p50_s, ttft_p90_s, throughput_rps, egress_gbps_mean]
"""


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(sweep file, its --out directory) after `python -m emulator sweep` ran it (8 points)."""
    root = tmp_path_factory.mktemp("sweep")
    sweep_file = root / "page-sweep.yaml"
    sweep_file.write_text(SWEEP.format(base=REPO_ROOT / "scenarios" / "paper-case-study.yaml"))
    out = root / "out"
    done = subprocess.run([sys.executable, "-m", "emulator", "sweep", str(sweep_file), "--out", str(out),
                           "--workers", "2"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return sweep_file, out


def _page(out: Path) -> AppTest:
    app = AppTest.from_file(str(PAGE), default_timeout=60).run()
    app.text_input(key="sweeps_dir").set_value(str(out)).run()
    assert not app.exception, [e.message for e in app.exception]
    return app


def test_a_finished_sweep_shows_its_progress_figures_and_points(swept) -> None:
    _, out = swept
    app = _page(out)
    charts = {c.proto.id.split("-", 2)[2] for c in app.get("plotly_chart")}
    assert charts == {"sweeps_heatmap", "sweeps_lines", "sweeps_pareto"}
    assert "8 of 8 points, 0 failed · complete" in [p.proto.text for p in app.get("progress")]
    points = next(d.value for d in app.dataframe if "point_id" in d.value.columns)
    assert len(points) == 8 and set(points["status"]) == {"ok"}
    assert [b.proto.label for b in app.get("download_button")] == ["Download the point as a scenario (YAML)"]


def test_a_directory_without_a_sweep_says_so(tmp_path: Path) -> None:
    app = _page(tmp_path)
    assert any("no sweep.json and sweep.parquet yet" in i.value for i in app.info)


def test_a_point_saved_as_a_scenario_replays_its_row(swept, tmp_path: Path) -> None:
    sweep_file, out = swept
    rows, _ = read_results(out)
    row = rows.iloc[3]
    saved = tmp_path / "point.yaml"
    saved.write_text(replay_yaml(point_scenario(load_sweep(sweep_file), row["point_id"])))
    done = subprocess.run([sys.executable, "-m", "emulator", "run", str(saved), "--out", str(tmp_path / "run")],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())["summary"]
    assert summary["ttft_p50_s"] == pytest.approx(row["ttft_p50_s"], rel=1e-9)
    assert summary["throughput_rps"] == pytest.approx(row["throughput_rps"], rel=1e-9)


FIGURE5 = """name: page-figure5
base: {base}
set: [duration_s=300, workload.arrival.rate_per_s=1.0, scheduler.short_term.enabled=false,
      scheduler.long_term.enabled=false]
mode: oat
axes:
  clusters.local.prefill_instances: {{values: [2, 3, 4], center: 3}}
  router.threshold_tokens: {{values: [8000, 40000], center: 19620}}
engines: [analytic, virtual]
metrics: [t, n_p, n_d, configured_lambda_max, configured_lambda_max_mean_t, configured_p, configured_theta_prfaas,
          configured_theta_pd_p, configured_theta_pd_d, measured_lambda_max, measured_p, measured_theta_prfaas,
          measured_theta_pd_p, measured_theta_pd_d]
"""


def test_a_figure5_sweep_shows_the_optimum_beside_the_paper_and_both_panels(tmp_path: Path) -> None:
    sweep_file = tmp_path / "page-figure5.yaml"
    sweep_file.write_text(FIGURE5.format(base=REPO_ROOT / "scenarios" / "paper-case-study.yaml"))
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "emulator", "sweep", str(sweep_file), "--out", str(out)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    app = _page(out)
    charts = {c.proto.id.split("-", 2)[2] for c in app.get("plotly_chart")}
    assert {"sweeps_figure5a", "sweeps_figure5b", "sweeps_lines"} <= charts and "sweeps_heatmap" not in charts
    optimum = next(d.value for d in app.dataframe if "Paper" in d.value.columns).set_index("Figure")
    assert optimum.loc["t* by the optimizer"].tolist() == ["19,620", "19,400", "+1.1%"]
    assert optimum.loc["split N_p:N_d by the optimizer"].tolist() == ["3:5", "3:5", "same"]
    assert (out / "report.html").stat().st_size > 0


def test_the_crossover_sweep_states_its_result(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "emulator", "sweep", "scenarios/sweeps/bandwidth-crossover.yaml",
                           "--out", str(out)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    app = _page(out)
    assert "sweeps_crossover" in {c.proto.id.split("-", 2)[2] for c in app.get("plotly_chart")}
    sentence = next(m.value for m in app.markdown if "Bandwidth crossover" in m.value)
    assert "(hybrid)" in sentence and "(dense)" in sentence


def test_a_point_replays_on_the_live_page_with_its_rows_numbers(swept, live_env: str, tmp_path: Path) -> None:
    _, out = swept
    rows, _ = read_results(out)
    app = _page(out)
    row = rows[rows["point_id"] == app.selectbox(key="sweeps_point").value].iloc[0]
    app.button(key="sweeps_point_replay").click().run()
    assert not app.exception and not app.error
    assert len(app.success) == 1 and app.session_state["live_focus"] in app.success[0].value
    assert "[Watch it on the Live page](/Live)" in " ".join(m.value for m in app.markdown)
    run_dirs = [p for p in (tmp_path / "runs").iterdir() if p.is_dir() and p.name != "sweep-points"]
    assert len(run_dirs) == 1
    deadline = time.monotonic() + 120
    while not (run_dirs[0] / "summary.json").exists():
        assert time.monotonic() < deadline, (run_dirs[0] / "run.log").read_text()
        time.sleep(0.2)
    summary = json.loads((run_dirs[0] / "summary.json").read_text())["summary"]
    assert summary["ttft_p50_s"] == pytest.approx(row["ttft_p50_s"], rel=1e-9)
    assert summary["throughput_rps"] == pytest.approx(row["throughput_rps"], rel=1e-9)
