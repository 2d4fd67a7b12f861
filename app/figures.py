"""The Plotly figures of the Home, Runs, KV explorer and Threshold explorer pages, each built from
the frames their view modules give, with one legend placement for all. No Streamlit here: a page
says so when there is nothing to draw, and hands the figure to `st.plotly_chart`.

Not here: the Live page's charts, Vega-Lite specs (`app.live_charts` says why), and the Sweeps
page's, which report.html shares (`emulator.sweep.figures`, `.findings`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

from app import kv_view, presets_view
from app.decisions_view import SOURCE, TIME, WHAT, WHY, marker_labels, timed_rows
from app.palette import (
    DECISION_COLORS,
    POOL_COLORS,
    PRESET_DASHES,
    PRESET_SYMBOLS,
    STAGE_COLORS,
    color_map,
    route_color,
)
from app.runs_view import SEGMENTS
from emulator.telemetry.report import token_axis
from model_stub.config import PRESET_NAMES

if TYPE_CHECKING:
    from app.threshold_view import Exploration

# Above the plot, left-aligned, in one row: a legend over the lines hides them.
LEGEND_TOP = {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"}
MARGIN = {"t": 40}
THRESHOLD_COLORS = {**POOL_COLORS, "lambda": "#222222"}
SPLIT_OTHER = "#9ecae1"  # the local splits other than the optimum's


def _legend_on_top(fig: go.Figure) -> go.Figure:
    return fig.update_layout(legend=LEGEND_TOP, margin=MARGIN)


def tokens_label(tokens: float) -> str:
    """A token count as a tick: `512`, `1K`, `1.5K`, `128K`, `1M`."""
    if tokens >= 1 << 20:
        return f"{tokens / (1 << 20):g}M"
    return f"{tokens / 1024:g}K" if tokens >= 1024 else f"{tokens:g}"


def _octave_ticks(fig: go.Figure, grid: Sequence[int]) -> None:
    octaves = [t for t in grid if t & (t - 1) == 0]  # the powers of two: 1K, 2K, ...
    fig.update_xaxes(tickvals=octaves, ticktext=[tokens_label(t) for t in octaves])


# Home


def cache_figure(curves: pd.DataFrame, tokens: int, log_y: bool) -> go.Figure:
    """Cache size against context length (`presets_view.make_cache_curves`), one line per preset,
    the chosen length marked. Each preset has its palette colour plus its own dash and marker:
    presets with the same KV bytes per token draw almost the same line, and colour alone would let
    the later one hide the other."""
    curves = curves.assign(cache_mb=curves["cache_bytes"] / 1e6)  # decimal MB, as the table's byte format
    fig = px.line(
        curves, x="tokens", y="cache_mb", color="preset", line_dash="preset", symbol="preset",
        log_x=True, log_y=log_y, color_discrete_map=color_map(PRESET_NAMES),
        line_dash_map=PRESET_DASHES, symbol_map=PRESET_SYMBOLS,
        labels={"tokens": "context length (tokens)", "cache_mb": "cache (MB)", "preset": ""},
    )
    _octave_ticks(fig, presets_view.CURVE_TOKENS)
    if presets_view.CURVE_TOKENS[0] <= tokens <= presets_view.CURVE_TOKENS[-1]:
        fig.add_vline(x=tokens, line_dash="dot", line_color="gray")
    return _legend_on_top(fig)


# Runs


def ttft_cdf_figure(cdf: pd.DataFrame, color_title: str, colors: dict[str, str] | None = None) -> go.Figure:
    """TTFT CDFs (`runs_view.ttft_cdf`), one per group: by route in the routes' colours when
    `color_title` is "route", else in `colors`."""
    by_route = {group: route_color(group) for group in cdf["group"].unique()} if color_title == "route" else colors
    fig = px.line(cdf, x="ttft_s", y="fraction", color="group", line_shape="hv", color_discrete_map=by_route,
                  labels={"ttft_s": "TTFT (s)", "fraction": "fraction of requests", "group": color_title})
    return _legend_on_top(fig)


def gantt_figure(segments: pd.DataFrame, first_tokens: pd.DataFrame) -> go.Figure:
    """One row per request (`runs_view.gantt_segments`), first started on top: a bar per stage in
    its colour, the KV transfer thin since it may overlap the prefill, and a tick at the first token."""
    order = list(dict.fromkeys(segments.sort_values("start_s")["id"]))
    fig = go.Figure()
    for segment in SEGMENTS:
        part = segments[segments["segment"] == segment]
        fig.add_bar(y=part["id"], x=part["duration_s"], base=part["start_s"], orientation="h",
                    name=segment, marker_color=STAGE_COLORS[segment],
                    width=0.35 if segment == "transfer" else 0.8,  # thin: it overlaps prefill
                    customdata=part[["route"]], hovertemplate="%{y} (%{customdata[0]}): "
                    f"{segment} " "%{base:.3f}s + %{x:.3f}s<extra></extra>")
    fig.add_scatter(y=first_tokens["id"], x=first_tokens["first_token_s"], mode="markers", name="first token",
                    marker={"symbol": "line-ns-open", "size": 8, "color": "black"})
    fig.update_layout(barmode="overlay", height=min(1000, 160 + 14 * len(order)), xaxis_title="time since start (s)")
    fig.update_yaxes(categoryorder="array", categoryarray=order, autorange="reversed", title="request")
    return _legend_on_top(fig)


def lines_figure(lines: pd.DataFrame, y_title: str, shape: str, decisions: pd.DataFrame | None = None,
                 color: str = "series", colors: dict[str, str] | None = None) -> go.Figure:
    """Lines over run time (`runs_view.timeseries_lines`' long form), one colour per `color` value
    (`colors` where given), the run's decisions marked; a token axis gets whole-number ticks."""
    fig = px.line(lines, x="t_s", y="value", color=color, line_shape=shape, color_discrete_map=colors,
                  labels={"t_s": "time (s)", "value": y_title, color: ""})
    _legend_on_top(fig)
    if y_title == "tokens":
        fig.update_yaxes(**token_axis(lines["value"]))
    if decisions is not None:
        add_decision_markers(fig, decisions)
    return fig


def add_decision_markers(fig: go.Figure, rows: pd.DataFrame) -> go.Figure:
    """A dotted vertical line at each timed row of `decisions_view.decision_rows`, in its source's
    colour, labelled at the top with what happened (numbered, as the table's order, when there are
    many); hovering the label shows the time, what and why. Returns `fig`, changed in place."""
    timed = timed_rows(rows)
    for (_, row), text in zip(timed.iterrows(), marker_labels(timed), strict=True):
        fig.add_vline(
            x=float(row[TIME]), line_dash="dot", line_width=1,
            line_color=DECISION_COLORS.get(str(row.get(SOURCE, "")), "#555555"),
            annotation_text=text, annotation_position="top left", annotation_textangle=-90,
            annotation_font_size=10,
            annotation_hovertext=f"t = {row[TIME]:.1f} s: {row[WHAT]}<br>why: {row[WHY]}",
        )
    return fig


# KV explorer


def skv_figure(curves: pd.DataFrame, models: Sequence[str], log_y: bool) -> go.Figure:
    """S_kv(l) against context length (`kv_view.make_skv_curves` of `models`), dashed by kind; a
    log y axis ticks decades only."""
    curves = curves.assign(cache_gb=curves["cache_bytes"] / 1e9)
    fig = px.line(curves, x="tokens", y="cache_gb", color="model", line_dash="kind", log_x=True,
                  log_y=log_y, color_discrete_map=color_map(models),
                  labels={"tokens": "context length (tokens)", "cache_gb": "cache (GB)"})
    _octave_ticks(fig, kv_view.CURVE_TOKENS)
    if log_y:
        fig.update_yaxes(dtick=1)  # decades only
    return _legend_on_top(fig)


def phi_figure(phi: pd.DataFrame) -> go.Figure:
    """The paper's Phi_kv (`kv_view.make_phi_table`: one column per length) against input length."""
    long = phi.melt(id_vars=["model", "layers", "kind"], var_name="length", value_name="gbps")
    long["tokens"] = long["length"].map({tokens_label(n): n for n in kv_view.PHI_LENGTHS})
    fig = px.line(long, x="tokens", y="gbps", color="model", line_dash="kind", markers=True,
                  log_x=True, color_discrete_map=color_map(phi["model"]),
                  labels={"tokens": "input length (tokens)", "gbps": "Φ_kv (Gbit/s)"})
    fig.update_xaxes(tickvals=list(kv_view.PHI_LENGTHS), ticktext=[tokens_label(n) for n in kv_view.PHI_LENGTHS])
    return _legend_on_top(fig)


def egress_figure(table: pd.DataFrame, link_gbps: float) -> go.Figure:
    """Eq. 2's egress per model (`kv_view.make_egress_table`), patterned by kind, under the link."""
    fig = px.bar(table, x="model", y="egress_gbps", color="model", pattern_shape="kind",
                 color_discrete_map=color_map(table["model"]),
                 labels={"egress_gbps": "egress B_out (Gbit/s)"})
    fig.update_xaxes(title_text="")
    fig.add_hline(y=link_gbps, line_dash="dot", line_color="gray", annotation_text=f"link {link_gbps:g} Gbit/s")
    return _legend_on_top(fig)


# Threshold explorer


def _baseline_lines(fig: go.Figure, found: Exploration) -> None:
    for name, point, dash, where in (
        ("homogeneous PD", found.plan.homogeneous, "dash", "bottom right"),
        ("naive", found.plan.naive, "dot", "top right"),
    ):
        fig.add_hline(y=point.lambda_max, line_dash=dash, line_color="gray",
                      annotation_text=f"{name} {point.lambda_max:.2f}", annotation_position=where)


def threshold_figure(found: Exploration) -> go.Figure:
    """Eq. 6's terms and Λ_max against t on a log axis, the link-bound thresholds shaded, both
    baselines and the optimum t* marked."""
    curves, best = found.curves, found.plan.prfaas
    fig = go.Figure()
    for column, name, color, width in (
        ("prfaas_limit", "Θ_prfaas / p", THRESHOLD_COLORS["prfaas"], 2),
        ("pd_p_limit", "Θ_pd_p / (1 − p)", THRESHOLD_COLORS["pd_p"], 2),
        ("pd_d_limit", "Θ_pd_d", THRESHOLD_COLORS["pd_d"], 2),
        ("lambda_max", "Λ_max(t)", THRESHOLD_COLORS["lambda"], 4),
    ):
        fig.add_scatter(x=curves["t"], y=curves[column], name=name, mode="lines",
                        line={"color": color, "width": width}, opacity=0.6 if width > 2 else 1.0)
    ceiling = 2.5 * max(best.lambda_max, found.plan.homogeneous.lambda_max, found.plan.naive.lambda_max, 1e-9)
    for lo, hi in found.shaded_ranges:
        fig.add_vrect(x0=lo, x1=hi, fillcolor="orange", opacity=0.15, line_width=0)
        # Annotations on a log axis take log10(x); shapes take x itself.
        fig.add_annotation(x=math.log10(lo), y=ceiling * 0.03, xanchor="left", yanchor="bottom",
                           text="link-bound", showarrow=False, font={"color": "#b35900"})
    _baseline_lines(fig, found)
    if best.p > 0:
        fig.add_vline(x=best.t, line_dash="dash", line_color=THRESHOLD_COLORS["lambda"])
        fig.add_annotation(x=math.log10(best.t), y=ceiling * 0.97, xanchor="left", yanchor="top",
                           showarrow=False, align="left",
                           text=f" t* = {best.t:,.0f}<br> Λ_max = {best.lambda_max:.3f} req/s")
    x_lo, x_hi = float(curves["t"].min()), float(curves["t"].max())
    ticks = [2.0**k for k in range(math.floor(math.log2(x_lo)), math.ceil(math.log2(x_hi)) + 1)]
    fig.update_xaxes(type="log", title="threshold t (tokens)", tickvals=ticks,
                     ticktext=[tokens_label(t) for t in ticks])
    fig.update_yaxes(range=[0, ceiling], title="requests per second")
    return _legend_on_top(fig)


def split_figure(found: Exploration) -> go.Figure:
    """Λ_max at each local split n_p:n_d (at its best t), the optimum's bar in the PrfaaS colour."""
    split, best = found.split, found.plan.prfaas
    colors = [THRESHOLD_COLORS["prfaas"] if n_p == best.n_p else SPLIT_OTHER for n_p in split["n_p"]]
    fig = go.Figure(go.Bar(x=split["split"], y=split["lambda_max"], marker_color=colors,
                           customdata=split[["t", "bottleneck"]], name="PrfaaS at best t",
                           hovertemplate="n_p:n_d %{x}<br>Λ_max %{y:.3f} req/s<br>t %{customdata[0]:,.0f}"
                                         "<br>%{customdata[1]}<extra></extra>"))
    _baseline_lines(fig, found)
    fig.update_xaxes(title="local split n_p:n_d", type="category")
    fig.update_yaxes(title="Λ_max (req/s)")
    return fig.update_layout(margin=MARGIN, showlegend=False)
