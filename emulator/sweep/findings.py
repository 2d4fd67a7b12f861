"""What the paper's sweeps show, read off their rows: Figure 5 (the throughput model's curves with
the simulation's points through one operating point, the optimum) and the bandwidth crossover
(where PrfaaS starts to beat homogeneous PD, per model). Each reader returns None for a sweep
that lacks its axes or metrics, so report.html and the Sweeps page draw what applies.

Pure: rows in, numbers and Plotly figures out. Failed points are left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from emulator.sweep.figures import HEIGHT, succeeded
from emulator.sweep.spec import Sweep, SweepSpec
from emulator.telemetry.palette import POOL_COLORS

THRESHOLD, SPLIT, BANDWIDTH = "router.threshold_tokens", "clusters.local.prefill_instances", "link.bandwidth_mbit"
ANALYTIC, VIRTUAL = "analytic", "virtual"
# Eq. 6's terms: (name, the model's columns -> value, the simulation's columns -> value)
TERMS = (
    ("Θ_prfaas / p", lambda r: r["configured_theta_prfaas"] / r["configured_p"],
     lambda r: r["measured_theta_prfaas"] / r["measured_p"]),
    ("Θ_pd-p / (1 − p)", lambda r: r["configured_theta_pd_p"] / (1 - r["configured_p"]),
     lambda r: r["measured_theta_pd_p"] / (1 - r["measured_p"])),
    ("Θ_pd-d", lambda r: r["configured_theta_pd_d"], lambda r: r["measured_theta_pd_d"]),
)
TERM_COLORS = (POOL_COLORS["prfaas"], POOL_COLORS["pd_p"], POOL_COLORS["pd_d"])  # each term its pool's colour
CONFIG_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c")
LAMBDA_COLOR = "#222222"
MEAN_T_NAME = "Λ_max, each request's own T (model)"
FIGURE5_METRICS = ("t", "n_p", "n_d", "configured_lambda_max", "configured_lambda_max_mean_t", "configured_p",
                   "configured_theta_prfaas", "configured_theta_pd_p", "configured_theta_pd_d", "measured_lambda_max",
                   "measured_p", "measured_theta_prfaas", "measured_theta_pd_p", "measured_theta_pd_d")


@dataclass(frozen=True, slots=True)
class Figure5:
    """The two panels' data: model and simulation at each level, and the optimum three ways.

    `by_t` and `by_split` hold one row per level with the model's `model_lambda` (Eq. 3-6),
    `mean_t_lambda` (the same with each path's mean service time, throughput_model.
    mean_service_lambda) and the simulation's `sim_lambda` (mean over seeds); `deviation` and
    `deviation_mean_t` = sim / each - 1; `saturated` where the offered rate is not below
    `mean_t_lambda` (the lower of the two models) there.
    """

    by_t: pd.DataFrame
    by_split: pd.DataFrame
    center_t: float
    center_split: int
    optimizer_t: float  # what optimize found, in every analytic row
    optimizer_split: int
    optimizer_n_d: int
    best_t_on_grid: float  # the t level with the largest model Lambda at the centre split
    crossing_t: float | None  # where Theta_prfaas / p meets Theta_pd-p / (1 - p) (Eq. 7), interpolated
    best_split: int  # the split with the largest model Lambda at the centre t
    offered_rate_per_s: float

    def below_saturation(self) -> pd.DataFrame:
        """Both panels' levels where the offered rate is below both models' Lambda_max."""
        both = pd.concat([self.by_t.assign(panel="t"), self.by_split.assign(panel="split")], ignore_index=True)
        return both[~both["saturated"]]


def figure5(rows: pd.DataFrame, spec: SweepSpec, offered_rate_per_s: float) -> Figure5 | None:
    """Figure 5's data from an `oat` sweep over the threshold and the split with both engines."""
    if spec.mode != "oat" or {THRESHOLD, SPLIT} - set(spec.axes) or set(FIGURE5_METRICS) - set(rows.columns):
        return None
    center_t, center_split = float(spec.axes[THRESHOLD].center), int(spec.axes[SPLIT].center)
    done = succeeded(rows)
    model, sim = done[done["engine"] == ANALYTIC], done[done["engine"] == VIRTUAL]
    if model.empty or sim.empty:
        return None

    def panel(axis: str, other: str, other_level: float) -> pd.DataFrame:
        m = model[model[other] == other_level].groupby(axis).mean(numeric_only=True)
        s = sim[sim[other] == other_level].groupby(axis).mean(numeric_only=True)
        table = pd.DataFrame({"model_lambda": m["configured_lambda_max"],
                              "mean_t_lambda": m["configured_lambda_max_mean_t"],
                              "sim_lambda": s["measured_lambda_max"]})
        for name, of_model, of_sim in TERMS:
            table[f"model {name}"], table[f"sim {name}"] = of_model(m), of_sim(s)
        table["deviation"] = table["sim_lambda"] / table["model_lambda"] - 1
        table["deviation_mean_t"] = table["sim_lambda"] / table["mean_t_lambda"] - 1
        table["saturated"] = ~(offered_rate_per_s < table["mean_t_lambda"])
        table = table.sort_index().reset_index()
        table["level"] = table[axis]
        return table

    by_t, by_split = panel(THRESHOLD, SPLIT, center_split), panel(SPLIT, THRESHOLD, center_t)
    return Figure5(
        by_t=by_t, by_split=by_split, center_t=center_t, center_split=center_split,
        optimizer_t=float(model["t"].iloc[0]), optimizer_split=int(model["n_p"].iloc[0]),
        optimizer_n_d=int(model["n_d"].iloc[0]),
        best_t_on_grid=float(by_t.loc[by_t["model_lambda"].idxmax(), THRESHOLD]),
        crossing_t=crossing(by_t[THRESHOLD].to_numpy(float),
                            (by_t[f"model {TERMS[0][0]}"] - by_t[f"model {TERMS[1][0]}"]).to_numpy(float)),
        best_split=int(by_split.loc[by_split["model_lambda"].idxmax(), SPLIT]),
        offered_rate_per_s=offered_rate_per_s,
    )


def sweep_figure5(rows: pd.DataFrame, sweep: Sweep) -> Figure5 | None:
    """figure5 at the offered rate of the sweep's base (after its `set:`); None without one (a trace,
    or `auto`, which each point resolves to its own rate)."""
    rate = getattr(sweep.base_scenario().workload.arrival, "rate_per_s", None)
    return figure5(rows, sweep.spec, float(rate)) if isinstance(rate, int | float) else None


def crossing(x: np.ndarray, y: np.ndarray, log_x: bool = True) -> float | None:
    """The first x where y changes sign from negative to non-negative, interpolated linearly in
    log x (or x); None if it never does. x ascends."""
    u = np.log(x) if log_x else x
    for i in range(1, len(x)):
        if np.isfinite(y[i - 1]) and np.isfinite(y[i]) and y[i - 1] < 0 <= y[i]:
            at = u[i - 1] + (u[i] - u[i - 1]) * (-y[i - 1]) / (y[i] - y[i - 1])
            return float(math.exp(at) if log_x else at)
    return None


def figure5_figures(f: Figure5) -> tuple[go.Figure, go.Figure]:
    """(a) Lambda_max against the split at the centre t, (b) Eq. 6's terms against t at the centre
    split: the model as lines, the simulation as markers, the optimum as a dotted line."""
    split = go.Figure(layout={"height": HEIGHT, "margin": {"t": 40}, "template": "plotly_white",
                              "title": {"text": f"(a) Λ_max against the local split, t = {f.center_t:,.0f}"},
                              "xaxis": {"title": {"text": "N_p (local prefill instances)"}, "dtick": 1},
                              "yaxis": {"title": {"text": "requests/s"}}})
    split.add_scatter(x=f.by_split[SPLIT], y=f.by_split["model_lambda"], mode="lines", name="Λ_max (model, Eq. 6)",
                      line={"color": LAMBDA_COLOR})
    split.add_scatter(x=f.by_split[SPLIT], y=f.by_split["mean_t_lambda"], mode="lines", name=MEAN_T_NAME,
                      line={"color": LAMBDA_COLOR, "dash": "dash", "width": 1})
    split.add_scatter(x=f.by_split[SPLIT], y=f.by_split["sim_lambda"], mode="markers", name="simulated Λ_max",
                      marker={"color": LAMBDA_COLOR, "symbol": "circle-open", "size": 10})
    _marker_line(split, f.optimizer_split, f"optimum {f.optimizer_split}:{f.optimizer_n_d}", "#888",
                 float(np.nanmax(f.by_split["model_lambda"])) * 1.1)
    curves = go.Figure(layout={"height": HEIGHT, "margin": {"t": 40}, "template": "plotly_white",
                               "title": {"text": f"(b) Eq. 6's terms against t at N_p = {f.center_split}"},
                               "xaxis": {"title": {"text": "threshold t (tokens)"}, "type": "log"},
                               "yaxis": {"title": {"text": "requests/s"}, "range": [0, _y_top(f.by_t)]}})
    for (name, _, _), color in zip(TERMS, TERM_COLORS, strict=True):
        curves.add_scatter(x=f.by_t[THRESHOLD], y=f.by_t[f"model {name}"], mode="lines", name=name,
                           line={"color": color}, legendgroup=name)
        curves.add_scatter(x=f.by_t[THRESHOLD], y=f.by_t[f"sim {name}"], mode="markers", showlegend=False,
                           marker={"color": color, "symbol": "circle-open", "size": 9}, legendgroup=name)
    curves.add_scatter(x=f.by_t[THRESHOLD], y=f.by_t["model_lambda"], mode="lines", name="Λ_max (model, Eq. 6)",
                       line={"color": LAMBDA_COLOR, "width": 3})
    curves.add_scatter(x=f.by_t[THRESHOLD], y=f.by_t["mean_t_lambda"], mode="lines", name=MEAN_T_NAME,
                       line={"color": LAMBDA_COLOR, "dash": "dash", "width": 1})
    curves.add_scatter(x=f.by_t[THRESHOLD], y=f.by_t["sim_lambda"], mode="markers", name="Λ_max (simulated)",
                       marker={"color": LAMBDA_COLOR, "symbol": "circle-open", "size": 10})
    _marker_line(curves, f.optimizer_t, f"t* = {f.optimizer_t:,.0f}", "#888", _y_top(f.by_t))
    return split, curves


def _marker_line(fig: go.Figure, x: float, text: str, color: str, top: float, bottom: float = 0.0) -> None:
    """A dotted vertical line at `x` with its label on top, as a trace in data units (a layout
    shape's x on a log axis is read differently by Plotly's Python and JS sides)."""
    fig.add_scatter(x=[x, x], y=[bottom, top], mode="lines+text", text=["", text], textposition="top center",
                    line={"dash": "dot", "color": color}, showlegend=False, hoverinfo="skip", cliponaxis=False)


def _y_top(by_t: pd.DataFrame) -> float:
    """Room for Lambda_max and a little more: the limits rise without bound where a path empties."""
    return float(np.nanmax(by_t["model_lambda"])) * 2.0


@dataclass(frozen=True, slots=True)
class Crossover:
    """Gain over homogeneous PD against link bandwidth, per configuration (model), and the
    bandwidth (Gbit/s) at which the gain first reaches zero (None: never in the range)."""

    gains: pd.DataFrame  # configuration, gbps, gain (fraction: 0.5 = 50 % more)
    crossover_gbps: dict[str, float | None]


def crossover(rows: pd.DataFrame) -> Crossover | None:
    """The crossover from a sweep with a link-bandwidth axis and the analytic gain."""
    if BANDWIDTH not in rows.columns or "gain_vs_homogeneous" not in rows.columns:
        return None
    done = succeeded(rows)
    done = done[done["engine"] == ANALYTIC].dropna(subset=["gain_vs_homogeneous"])
    if done.empty:
        return None
    by = "configuration" if "configuration" in done.columns else None
    groups = done.groupby(by, sort=False) if by else [("all", done)]
    frames, points = [], {}
    for name, part in groups:
        mean = part.groupby(BANDWIDTH)["gain_vs_homogeneous"].mean().sort_index()
        gbps = mean.index.to_numpy(float) / 1e3
        points[str(name)] = crossing(gbps, mean.to_numpy(float))
        frames.append(pd.DataFrame({"configuration": str(name), "gbps": gbps, "gain": mean.to_numpy(float)}))
    return Crossover(pd.concat(frames, ignore_index=True), points)


def crossover_figure(c: Crossover) -> go.Figure:
    fig = go.Figure(layout={"height": HEIGHT, "margin": {"t": 40}, "template": "plotly_white",
                            "title": {"text": "Throughput gain over homogeneous PD against link bandwidth"},
                            "xaxis": {"title": {"text": "cross-datacenter link (Gbit/s)"}, "type": "log"},
                            "yaxis": {"title": {"text": "gain over homogeneous PD"}, "tickformat": "+.0%"}})
    for (name, part), color in zip(c.gains.groupby("configuration", sort=False), CONFIG_COLORS * 4, strict=False):
        fig.add_scatter(x=part["gbps"], y=part["gain"], mode="lines+markers", name=str(name), line={"color": color})
        at = c.crossover_gbps.get(str(name))
        if at is not None:
            _marker_line(fig, at, f"{name}: {at:.3g} Gbit/s", color, float(c.gains["gain"].max()) * 1.1,
                         float(c.gains["gain"].min()))
    fig.add_hline(y=0, line={"color": "#888"})
    return fig


def crossover_sentence(c: Crossover) -> str:
    """The result in one sentence, e.g. `PrfaaS beats homogeneous PD from 4.3 Gbit/s (hybrid) and
    from 26 Gbit/s (dense)`."""
    parts = [f"{at:.2g} Gbit/s ({name})" if at is not None else f"never in range ({name})"
             for name, at in c.crossover_gbps.items()]
    return "PrfaaS beats homogeneous PD from " + " and from ".join(parts)
