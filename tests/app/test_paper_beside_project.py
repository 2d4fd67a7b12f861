"""The paper beside the project: the Threshold explorer's case-study table (the real optimizer
against the paper's figures), the KV explorer's Phi_kv comparisons, and a recorded run's table."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from app.kv_view import phi_kv_gbps
from app.paper_compare import (
    NONE,
    ProjectFigures,
    case_study_table,
    load_preset_bench,
    run_vs_paper_table,
)
from app.paper_figures import CASE_STUDY, PHI_KV_TABLE, PRESET_MIRRORS, TABLE5, phi_row
from app.table_fit import MIN_WRAP_PX, PAGE_PX, natural_px
from emulator.control.throughput_model import optimize
from emulator.plane.inputs import model_inputs
from emulator.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
PAGES = ROOT / "app" / "pages"
CASE_STUDY_FILE = ROOT / "scenarios" / "paper-case-study.yaml"


def _page(name: str) -> AppTest:
    app = AppTest.from_file(str(PAGES / name), default_timeout=30).run()
    assert not app.exception, [e.message for e in app.exception]
    return app


def _table_with(app: AppTest, column: str) -> pd.DataFrame:
    tables = [d.value for d in app.dataframe if column in d.value.columns]
    assert len(tables) == 1, f"{len(tables)} tables have a {column!r} column"
    return tables[0]


def _headers_fit(app: AppTest, column: str) -> None:
    """The table holding `column` labels every column in words and sizes it to its header and its
    cells (a wrapped column: to the page), measured with the grid's font."""
    element = next(d for d in app.dataframe if column in d.value.columns)
    config = json.loads(element.proto.columns)
    for name in element.value.columns:
        label = config[name]["label"]
        assert not re.fullmatch(r"[a-z0-9_]+", label), f"raw key {label!r}"
        needed = natural_px(label, element.value[name].tolist())
        assert config[name]["width"] >= min(needed, MIN_WRAP_PX), (label, config[name]["width"])
    assert sum(config[name]["width"] for name in element.value.columns) <= PAGE_PX


def _captions(app: AppTest) -> str:
    return " | ".join(c.value for c in app.caption)


def _no_raw_cells(table: pd.DataFrame) -> None:
    """Every cell is display text: no None, NaN or raw float."""
    assert all(isinstance(cell, str) and cell for cell in table.to_numpy().ravel())
    assert "None" not in table.to_string() and "nan" not in table.to_string()


def test_threshold_explorer_sets_the_optimizer_beside_the_paper() -> None:
    app = _page("4_Threshold_explorer.py")
    table = _table_with(app, "Figure").set_index("Figure")
    plan = optimize(model_inputs(load_scenario(CASE_STUDY_FILE))[0])
    best = plan.prfaas
    homogeneous = best.lambda_max / plan.homogeneous.lambda_max
    naive = best.lambda_max / plan.naive.lambda_max
    assert list(table.columns) == ["Paper", "Project", "Difference", "Paper source"]
    assert table.loc["Threshold t (tokens)"].tolist()[:3] == ["19,400", "19,620", "+1.1%"]
    assert best.t == 19_620 and (best.n_p, best.n_d) == (3, 5)
    assert table.loc["Split N_p:N_d"].tolist()[:3] == ["3:5", "3:5", "same"]
    row = table.loc["Throughput ÷ homogeneous PD"]
    assert row["Paper"] == "1.54x" and row["Project"] == f"{homogeneous:.2f}x"
    assert row["Difference"] == f"{homogeneous / 1.54 - 1:+.1%}"
    row = table.loc["Throughput ÷ naive heterogeneous"]
    assert row["Paper"] == "1.32x" and row["Project"] == f"{naive:.2f}x"
    assert row["Difference"] == f"{naive / 1.32 - 1:+.1%}"
    row = table.loc["Egress (Gbit/s)"]
    assert row["Paper"] == "13.0" and row["Project"] == f"{best.egress_gbps:.1f}"
    assert row["Difference"] == f"{best.egress_gbps / CASE_STUDY.egress_gbps - 1:+.1%}"
    assert table.loc["Egress share of the link", "Project"] == f"{best.egress_gbps / 100:.1%}"
    assert table.loc["TTFT no queue, mean (s)"].tolist()[:3] == [NONE, f"{best.ttft_noqueue_mean_s:.3g}", NONE]
    assert all("arXiv 2604.15039" in source for source in table["Paper source"])
    _no_raw_cells(table.reset_index())
    _headers_fit(app, "Figure")
    captions = _captions(app)
    assert "Table 6" in captions and "no queueing" in captions and "ttft_noqueue" in captions
    assert "not shown" in captions


def test_the_table_follows_the_scenario_not_the_knobs() -> None:
    app = _page("4_Threshold_explorer.py")
    app.slider(key="te_b_out_gbps").set_value(5.0).run()
    assert _table_with(app, "Figure").set_index("Figure").loc["Threshold t (tokens)", "Project"] == "19,620"
    app.selectbox(key="te_scenario").set_value("classroom-basic.yaml").run()
    assert not app.exception
    assert not [d for d in app.dataframe if "Figure" in d.value.columns]  # case study only


def test_kv_explorer_sets_the_profile_phi_beside_table_5() -> None:
    app = _page("3_KV_explorer.py")
    table = _table_with(app, "Project Φ_kv (Gbit/s)")
    profile = load_scenario(CASE_STUDY_FILE).model.profile
    assert table["Input (tokens)"].tolist() == [f"{p.tokens:,}" for p in TABLE5]
    for i, point in enumerate(TABLE5):
        phi = profile.kv_mib[i] * 8 * 2**20 / profile.prefill_s["h200"][i] / 1e9
        assert table.loc[i, "Paper Φ_kv (Gbit/s)"] == f"{point.phi_kv_gbps:.2f}"
        assert float(table.loc[i, "Project Φ_kv (Gbit/s)"]) == pytest.approx(phi, abs=0.005)
        assert table.loc[i, "Difference"] == f"{(phi - point.phi_kv_gbps) / point.phi_kv_gbps:+.1%}"
    # by hand: 190.8 MiB in 0.44 s is 3.64 Gbit/s (Table 5 prints 3.61), 308.9 MiB in 0.72 s 3.60
    assert table["Project Φ_kv (Gbit/s)"].tolist() == ["3.64", "3.60", "3.20", "2.63"]
    assert table["Difference"].tolist() == ["+0.8%", "+0.2%", "+0.2%", "+0.2%"]
    _no_raw_cells(table)
    _headers_fit(app, "Project Φ_kv (Gbit/s)")


def test_kv_explorer_sets_the_presets_phi_beside_table_3() -> None:
    app = _page("3_KV_explorer.py")
    table = _table_with(app, "Preset Φ_kv (Gbit/s)")
    bench = load_preset_bench()
    assert bench is not None
    expected_pairs = [(preset, model) for preset, models in PRESET_MIRRORS.items() for model in models]
    assert list(dict.fromkeys(zip(table["Preset"], table["Paper model"], strict=True))) == expected_pairs
    kimi = table[table["Preset"] == "kimi-linear-mini"].set_index("Input (tokens)")
    measured = bench["presets"]["kimi-linear-mini"]["prefill"]
    for tokens, point in measured.items():
        ours = point["phi_kv_mbit_s"] / 1e3
        paper = phi_kv_gbps(phi_row("Kimi Linear 48B"), float(tokens))
        row = kimi.loc[f"{int(tokens):,}"]
        assert row["Paper Φ_kv (Gbit/s)"] == f"{paper:#.3g}".rstrip(".")
        assert row["Preset Φ_kv (Gbit/s)"] == f"{ours:#.3g}".rstrip(".")
        assert row["Preset ÷ paper"] == f"{ours / paper * 100:.3g}%"  # a few percent, never "0.0"
    assert kimi.loc["1,024", "Paper Φ_kv (Gbit/s)"] == "1.19"  # Table 3 as printed at 1K
    assert {model for models in PRESET_MIRRORS.values() for model in models} <= {
        r.model for r in PHI_KV_TABLE}
    _no_raw_cells(table)
    _headers_fit(app, "Preset Φ_kv (Gbit/s)")


def _run_doc(egress_bit_per_s: float | None, throughput_rps: float) -> dict:
    """A summary.json document as the recorder writes it, reduced to what the table reads."""
    return {"summary": {"egress_bit_per_s_mean": egress_bit_per_s, "throughput_rps": throughput_rps,
                        "ttft_noqueue_mean_s": 2.5, "ttft_noqueue_p90_s": None},
            "meta": {"threshold_start": 19_620, "n_p_start": 3,
                     "link": {"bandwidth_mbit": 100_000.0, "delay_ms": 5.0, "loss_pct": 0.0}}}


def test_a_recorded_run_sets_its_figures_beside_the_paper() -> None:
    run = _run_doc(12.5e9, 3.0)
    table = run_vs_paper_table(run, homogeneous=_run_doc(0.0, 2.0), naive=_run_doc(20e9, 2.5))
    table = table.set_index("Figure")
    assert table.loc["Threshold t (tokens)", "Project"] == "19,620"
    assert table.loc["Split N_p:N_d"].tolist()[1:3] == ["3:5", "same"]
    assert table.loc["Throughput ÷ homogeneous PD"].tolist()[1:3] == ["1.50x", "-2.6%"]
    assert table.loc["Throughput ÷ naive heterogeneous", "Project"] == "1.20x"
    assert table.loc["Egress (Gbit/s)"].tolist()[1:3] == ["12.5", "-3.8%"]
    assert table.loc["Egress share of the link"].tolist()[1:3] == ["12.5%", "-0.5 points"]
    assert table.loc["TTFT no queue, mean (s)", "Project"] == "2.50"
    assert table.loc["TTFT no queue, P90 (s)", "Project"] == NONE
    alone = run_vs_paper_table(_run_doc(None, 3.0)).set_index("Figure")  # no baselines, no egress
    assert alone.loc["Throughput ÷ homogeneous PD", "Project"] == NONE
    assert alone.loc["Egress (Gbit/s)"].tolist()[1:3] == [NONE, NONE]
    _no_raw_cells(alone.reset_index())


def test_show_run_vs_paper_renders_the_same_table() -> None:
    def script() -> None:
        from app.paper_view import show_run_vs_paper

        show_run_vs_paper({"summary": {"egress_bit_per_s_mean": 12.5e9, "throughput_rps": 3.0},
                           "meta": {"threshold_start": 19_620, "n_p_start": 3,
                                    "link": {"bandwidth_mbit": 100_000.0}}})

    app = AppTest.from_function(script, default_timeout=30).run()
    assert not app.exception, [e.message for e in app.exception]
    shown = app.dataframe[0].value
    run = {"summary": {"egress_bit_per_s_mean": 12.5e9, "throughput_rps": 3.0},
           "meta": {"threshold_start": 19_620, "n_p_start": 3, "link": {"bandwidth_mbit": 100_000.0}}}
    assert shown.equals(run_vs_paper_table(run))
    assert "Table 6" in _captions(app) and "baselines" in _captions(app)


@pytest.mark.parametrize(("figures", "row", "project", "difference"), [
    (ProjectFigures(19_620, 4, 4, None, None, None, None), "Split N_p:N_d", "4:4", "differs"),
    (ProjectFigures(float("inf"), 0, 8, None, None, 0.0, 100.0), "Threshold t (tokens)", NONE, NONE),
])
def test_missing_or_unlike_figures_read_plainly(figures: ProjectFigures, row: str, project: str,
                                                difference: str) -> None:
    table = case_study_table(figures).set_index("Figure")
    assert table.loc[row, "Project"] == project and table.loc[row, "Difference"] == difference
