"""The Sweeps page headless (AppTest) on a real sweep: progress, figures, the points table read
plainly, and a point saved as a scenario that replays the sweep's own numbers."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from app.sweeps_view import default_metric, points_table
from emulator.paths import REPO_ROOT
from emulator.scenario.export import replay_yaml
from emulator.sweep.points import point_scenario
from emulator.sweep.spec import ANALYTIC_METRICS, CAPACITY_METRICS, VIRTUAL_METRICS, load_sweep
from emulator.sweep.store import read_results
from emulator.telemetry.labels import FIGURE_LABELS, META_LABELS, SWEEP_LABELS, label

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


@pytest.mark.live
def test_a_finished_sweep_shows_its_progress_figures_and_points(swept) -> None:
    _, out = swept
    app = _page(out)
    charts = {c.proto.id.split("-", 2)[2] for c in app.get("plotly_chart")}
    assert charts == {"sweeps_heatmap", "sweeps_lines", "sweeps_pareto"}
    assert "8 of 8 points, 0 failed · complete" in [p.proto.text for p in app.get("progress")]
    # the charts open on a metric that varies (TTFT P90), named, and so do the axes' pickers
    assert app.selectbox(key="sweeps_metric").value == "ttft_p90_s"
    assert "TTFT P90 (s)" in app.selectbox(key="sweeps_metric").options
    assert "threshold t (tokens)" in app.selectbox(key="sweeps_along").options
    points = next(d.value for d in app.dataframe if "point" in d.value.columns)
    assert len(points) == 8 and set(points["status"]) == {"ok"}
    # Read as the Runs page's tables: human names (axes too), the charted metric, 3 significant digits.
    assert list(points.columns) == ["point", "threshold t (tokens)", "arrival rate (req/s)", "seed", "engine",
                                    "TTFT P90 (s)", "status"]
    assert sorted(set(points["threshold t (tokens)"])) == ["40000", "8000"]
    app.toggle(key="sweeps_every_metric").set_value(True).run()
    points = next(d.value for d in app.dataframe if "point" in d.value.columns)
    assert list(points.columns) == ["point", "threshold t (tokens)", "arrival rate (req/s)", "seed",
                                    "engine", "TTFT P50 (s)", "TTFT P90 (s)", "throughput (req/s)",
                                    "egress mean (Gbit/s)", "status", "reason", "wall (s)"]
    assert set(points["reason"]) == {"-"}
    cells = points.to_numpy().ravel().tolist()
    assert all(isinstance(c, str) for c in cells) and not {"None", "nan", "NaN", "<NA>"} & set(cells)
    fractions = [c for c in cells if re.fullmatch(r"-?[\d,]*\.\d+", c)]
    assert fractions and all(len(re.sub(r"\D", "", c).lstrip("0")) <= 3 for c in fractions), fractions
    assert [b.proto.label for b in app.get("download_button")] == ["Download the point as a scenario (YAML)"]


def test_a_directory_without_a_sweep_says_so(tmp_path: Path) -> None:
    app = _page(tmp_path)
    assert any("no sweep.json and sweep.parquet yet" in i.value for i in app.info)


def test_a_sweep_just_started_says_it_is_starting(live_env: str, tmp_path: Path) -> None:
    """Between Start and its first point (Ray starting: 14 s on a 2-core machine) the page says the
    sweep is starting and how long it has been, not that the directory holds no sweep."""
    app = AppTest.from_file(str(PAGE), default_timeout=60).run()
    app.selectbox(key="sweeps_file").set_value("bandwidth-crossover.yaml").run()
    app.button(key="sweeps_start").click().run()
    assert not app.exception and not app.error
    try:
        texts = [p.proto.text for p in app.get("progress")]
        assert any(t.startswith("Starting bandwidth-crossover: ") for t in texts), texts
        assert not [i.value for i in app.info if "no sweep.json" in i.value]
    finally:  # Stop is offered while it starts and while it runs; it may have ended by now
        for stop in [b for b in app.button if b.key == "sweeps_stop"]:
            stop.click().run()
    assert not app.exception


@pytest.mark.live
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


@pytest.mark.live
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


@pytest.mark.live
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


AXES = ["router.threshold_tokens", "link.bandwidth_mbit"]


def test_the_points_and_failed_points_read_plainly() -> None:
    rows = pd.DataFrame({
        "point_id": ["p0", "p1"], "router.threshold_tokens": [40000.0, 8000.0], "link.bandwidth_mbit": [100.0, 12.5],
        "seed": [0, 1], "engine": ["virtual", "virtual"], "ttft_p90_s": [1.23456, None],
        "measured_theta_pd_p": [3.14159, None], "capacity_rps": [12345.6, None], "status": ["ok", "failed"],
        "reason": [None, "ScenarioError: link.bandwidth_mbit: 12.5 is below 100"], "wall_s": [0.618034, 0.01],
        "node_id": ["abc", None]})
    table = points_table(rows, AXES)
    named = ["threshold t (tokens)", "link bandwidth (Mbit/s)"]  # the axes by name, not `router.threshold_tokens`
    assert list(table.columns) == ["point", *named, "seed", "engine", "TTFT P90 (s)", "Θ_pd-p measured (req/s)",
                                   "capacity (req/s)", "status", "reason", "wall (s)"]
    assert table.iloc[0].tolist() == ["p0", "40000", "100", "0", "virtual", "1.23", "3.14", "12,346", "ok", "-",
                                      "0.618"]
    assert table.iloc[1].tolist()[1:8] == ["8000", "12.5", "1", "virtual", "-", "-", "-"]
    failed = points_table(rows.loc[rows["status"] != "ok", ["point_id", *AXES, "seed", "reason"]], AXES)
    assert list(failed.columns) == ["point", *named, "seed", "reason"]
    assert failed.iloc[0].tolist() == ["p1", "8000", "12.5", "1", rows.loc[1, "reason"]]


def test_every_metric_a_sweep_keeps_has_a_human_name() -> None:
    named = {**FIGURE_LABELS, **META_LABELS, **SWEEP_LABELS}
    assert not [m for m in (*VIRTUAL_METRICS, *ANALYTIC_METRICS, *CAPACITY_METRICS) if m not in named]
    assert label("configured_theta_pd_p") == "Θ_pd-p as configured (req/s)"


def test_the_charts_open_on_a_metric_that_moves() -> None:
    """A constant metric (the analytic `t` of a sweep that does not move it) draws a flat line: the
    charts open on TTFT P90 when kept, else on the first metric that varies."""
    rows = pd.DataFrame({"status": ["ok"] * 3, "t": [19620.0] * 3, "lambda_max": [1.0, 2.0, 3.0],
                         "ttft_p90_s": [0.5, 0.5, 0.7], "n_p": [3, 3, 3]})
    assert default_metric(rows, ["t", "n_p", "lambda_max", "ttft_p90_s"]) == 3
    assert default_metric(rows, ["t", "n_p", "lambda_max"]) == 2
    assert default_metric(rows, ["t", "n_p"]) == 0  # nothing varies: the first, as the sweep listed it
