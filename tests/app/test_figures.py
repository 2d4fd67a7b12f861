"""The pages' Plotly figures (app.figures) from recorded runs and the pages' own tables: the traces,
colours, markers and legend each one draws."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from app import figures
from app.decisions_view import decision_rows
from app.figures import LEGEND_TOP, tokens_label
from app.kv_view import make_egress_table, make_phi_table, make_skv_curves
from app.palette import DECISION_COLORS, STAGE_COLORS, route_color
from app.presets_view import CURVE_TOKENS, make_cache_curves
from app.recorded_meta import RecordedMeta
from app.runs_view import SEGMENTS, first_tokens, gantt_segments, list_runs, timeseries_lines, ttft_cdf
from app.threshold_view import CASE_STUDY, SCENARIOS_DIR, explore, load_base
from model_stub.config import PRESET_NAMES

APP = Path(__file__).resolve().parents[2] / "app"


def _legend(fig) -> dict:
    return {key: fig.layout.legend[key] for key in LEGEND_TOP}


@pytest.mark.parametrize(("tokens", "text"), [
    (512, "512"), (1024, "1K"), (1448, "1.41406K"), (131_072, "128K"), (1 << 20, "1M"), (1 << 21, "2M"),
])
def test_tokens_label(tokens: int, text: str) -> None:
    assert tokens_label(tokens) == text


def test_the_cdf_draws_one_step_line_per_route_in_its_colour(runs_dir: Path) -> None:
    run = list_runs(runs_dir).by_name()["fast-live"]
    fig = figures.ttft_cdf_figure(ttft_cdf(run.requests), "route")
    assert {t.name: t.line.color for t in fig.data} == {"local": route_color("local"), "prfaas": route_color("prfaas")}
    assert {t.line.shape for t in fig.data} == {"hv"}
    assert _legend(fig) == LEGEND_TOP and fig.layout.margin.t == 40


def test_the_gantt_has_a_bar_per_stage_and_a_tick_per_first_token(runs_dir: Path) -> None:
    run = list_runs(runs_dir).by_name()["fast-live"]
    segments = gantt_segments(run.requests)
    fig = figures.gantt_figure(segments, first_tokens(run.requests))
    assert [t.name for t in fig.data] == [*SEGMENTS, "first token"]
    bars = {t.name: t for t in fig.data[:len(SEGMENTS)]}
    assert {name: bar.marker.color for name, bar in bars.items()} == STAGE_COLORS
    assert bars["transfer"].width == 0.35 and bars["prefill"].width == 0.8  # thin: it overlaps prefill
    assert list(fig.layout.yaxis.categoryarray) == ["r1", "r2", "r3", "r4", "r5", "r6"]  # first started on top
    assert fig.layout.height == 160 + 14 * 6 and _legend(fig) == LEGEND_TOP


def test_the_threshold_line_marks_the_runs_decisions_on_a_token_axis(runs_dir: Path) -> None:
    run = list_runs(runs_dir).by_name()["fast-live"]
    decisions = decision_rows(RecordedMeta.from_json({
        "decisions": ["t=1.5s scheduler: egress 1.00 of 12.5 Mbit/s: t 2048 -> 4096 (model: 1.67 req/s)"]}))
    lines = timeseries_lines(run.timeseries, {"threshold_tokens": "threshold"})
    fig = figures.lines_figure(lines, "tokens", "hv", decisions)
    assert [t.name for t in fig.data] == ["threshold"] and fig.data[0].line.shape == "hv"
    assert [(s.x0, s.line.color) for s in fig.layout.shapes] == [(1.5, DECISION_COLORS["scheduler"])]
    assert fig.layout.yaxis.tickformat == ",d"  # whole tokens
    assert _legend(fig) == LEGEND_TOP


def test_the_cache_chart_marks_the_chosen_length_only_on_its_axis() -> None:
    curves = make_cache_curves("small")
    fig = figures.cache_figure(curves, 32_768, log_y=False)
    assert sorted({t.name for t in fig.data}) == sorted(PRESET_NAMES)
    assert [s.x0 for s in fig.layout.shapes] == [32_768]
    assert list(fig.layout.xaxis.ticktext) == ["1K", "2K", "4K", "8K", "16K", "32K", "64K", "128K"]
    assert not figures.cache_figure(curves, CURVE_TOKENS[-1] * 2, log_y=True).layout.shapes
    assert _legend(fig) == LEGEND_TOP


def test_the_kv_explorer_figures() -> None:
    chosen = ["Kimi-Linear-48B-A3B", "Llama-3-70B"]
    skv = figures.skv_figure(make_skv_curves(chosen, "small"), chosen, log_y=True)
    assert {t.name for t in skv.data} == {f"{m}, {kind}" for m, kind in (("Kimi-Linear-48B-A3B", "hybrid"),
                                                                          ("Llama-3-70B", "dense"))}
    assert skv.layout.yaxis.dtick == 1 and list(skv.layout.xaxis.ticktext)[-1] == "1M"
    phi = make_phi_table()
    phi_fig = figures.phi_figure(phi)
    assert list(phi_fig.layout.xaxis.ticktext) == ["1K", "8K", "32K", "128K"]
    assert all(list(t.x) == [1024, 8192, 32768, 131072] for t in phi_fig.data)  # every length placed
    egress = figures.egress_figure(make_egress_table(32, 8, 27_648.0, 100.0), 100.0)
    assert [(s.y0, s.line.dash) for s in egress.layout.shapes] == [(100.0, "dot")]
    assert egress.layout.annotations[0].text == "link 100 Gbit/s"
    for fig in (skv, phi_fig, egress):
        assert _legend(fig) == LEGEND_TOP


def test_the_threshold_explorer_figures_mark_the_optimum_and_the_baselines() -> None:
    found = explore(load_base(SCENARIOS_DIR / CASE_STUDY).inputs)
    best = found.plan.prfaas
    fig = figures.threshold_figure(found)
    assert [t.name for t in fig.data] == ["Θ_prfaas / p", "Θ_pd_p / (1 − p)", "Θ_pd_d", "Λ_max(t)"]
    shapes = fig.layout.shapes
    assert sum(s.type == "rect" for s in shapes) == len(found.shaded_ranges)
    assert [s.y0 for s in shapes if s.type == "line" and s.y0 == s.y1] == [
        found.plan.homogeneous.lambda_max, found.plan.naive.lambda_max]
    assert [s.x0 for s in shapes if s.type == "line" and s.x0 == s.x1] == [best.t]
    assert fig.layout.xaxis.type == "log" and _legend(fig) == LEGEND_TOP
    split = figures.split_figure(found)
    colors = dict(zip(found.split["n_p"], split.data[0].marker.color, strict=True))
    assert colors[best.n_p] == figures.THRESHOLD_COLORS["prfaas"]
    assert {c for n_p, c in colors.items() if n_p != best.n_p} <= {figures.SPLIT_OTHER}
    assert split.layout.showlegend is False


def test_no_page_builds_a_plotly_figure_itself() -> None:
    """The pages call app.figures (or emulator.sweep's figures): none imports plotly."""
    pages = [APP / "Home.py", *sorted((APP / "pages").glob("*.py"))]
    for page in pages:
        imported = {alias.name for node in ast.walk(ast.parse(page.read_text())) if isinstance(node, ast.Import)
                    for alias in node.names}
        imported |= {node.module or "" for node in ast.walk(ast.parse(page.read_text()))
                     if isinstance(node, ast.ImportFrom)}
        assert not {name for name in imported if name.split(".")[0] == "plotly"}, page.name
