"""A sweep's figures, from its rows (one per point and seed), for report.html and the dashboard's
Sweeps page alike: a heatmap of a metric over two axes, a metric along one axis with a band over
the seeds, and the Pareto front of throughput against TTFT P90 coloured by egress (in Mbit/s or
Gbit/s, whichever suits the sweep's egress).

Pure: a DataFrame in, a DataFrame or a Plotly figure out. Failed points are left out of every
figure (the page and the report list them). Axes and metrics are titled by their human names
(labels.py), never by their keys.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from emulator.sweep.spec import SweepSpec
from emulator.telemetry.figures import rate_label
from emulator.telemetry.labels import label, setting_label

OK = "ok"
THROUGHPUT, LATENCY = "throughput_rps", "ttft_p90_s"
EGRESS_BIT_PER_S = {"egress_bit_per_s_mean": 1.0, "egress_gbps_mean": 1e9}  # a kept egress column -> bit/s
HEIGHT = 380


def succeeded(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows of points that ran to the end."""
    return rows[rows["status"] == OK] if "status" in rows.columns else rows


def level_text(value: object) -> str:
    """An axis level as a label: 40000, not 40000.0 (numeric axes are stored as floats)."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def along_axis(rows: pd.DataFrame, spec: SweepSpec, axis: str) -> pd.DataFrame:
    """The rows a chart along `axis` draws: all of them, or in mode oat those with every other axis
    at its centre (the other axes' rows would fold into one level)."""
    if spec.mode != "oat":
        return rows
    keep = pd.Series(True, index=rows.index)
    for other, spec_axis in spec.axes.items():
        if other != axis and other in rows.columns:
            keep &= rows[other] == spec_axis.center
    return rows[keep]


def over_seeds(rows: pd.DataFrame, axes: Sequence[str], metric: str) -> pd.DataFrame:
    """Per combination of `axes`: the metric's mean, min and max over seeds, and how many."""
    done = succeeded(rows).dropna(subset=[metric])
    if done.empty:
        return pd.DataFrame(columns=[*axes, "mean", "low", "high", "seeds"])
    grouped = done.groupby(list(axes), sort=True)[metric]
    return grouped.agg(mean="mean", low="min", high="max", seeds="count").reset_index()


def heatmap_figure(rows: pd.DataFrame, x: str, y: str, metric: str) -> go.Figure:
    """The metric's mean over seeds on the (x, y) grid of two axes; a missing cell stays empty."""
    table = over_seeds(rows, (x, y), metric).pivot(index=y, columns=x, values="mean")
    x_name, y_name, metric_name = setting_label(x), setting_label(y), label(metric)
    fig = go.Figure(data=[{
        "type": "heatmap", "x": [level_text(v) for v in table.columns], "y": [level_text(v) for v in table.index],
        "z": table.to_numpy(), "colorscale": "Viridis", "colorbar": {"title": {"text": metric_name}},
        "hovertemplate": f"{x_name} = %{{x}}<br>{y_name} = %{{y}}<br>{metric_name} = %{{z:.3g}}<extra></extra>",
    }], layout={"height": HEIGHT, "xaxis": {"title": {"text": x_name}, "type": "category"},
                "yaxis": {"title": {"text": y_name}, "type": "category"}, "margin": {"t": 30}})
    return fig


def lines_figure(rows: pd.DataFrame, x: str, metric: str, by: str | None = None) -> go.Figure:
    """The metric's mean along axis `x`, one line per value of axis `by`, with a band from the
    lowest to the highest seed."""
    groups = [(None, rows)] if by is None else list(succeeded(rows).groupby(by, sort=True))
    traces: list[dict] = []
    for value, part in groups:
        stats = over_seeds(part, (x,), metric)
        name = label(metric) if value is None else f"{setting_label(by)} = {level_text(value)}"
        xs = stats[x].tolist()
        traces.append({"type": "scatter", "x": xs + xs[::-1], "y": stats["high"].tolist() + stats["low"].tolist()[::-1],
                       "fill": "toself", "opacity": 0.2, "line": {"width": 0}, "hoverinfo": "skip",
                       "showlegend": False, "legendgroup": name})
        traces.append({"type": "scatter", "x": xs, "y": stats["mean"].tolist(), "mode": "lines+markers",
                       "name": name, "legendgroup": name})
    return go.Figure(data=traces, layout={"height": HEIGHT, "xaxis": {"title": {"text": setting_label(x)}},
                                          "yaxis": {"title": {"text": label(metric)}}, "margin": {"t": 30}})


def pareto_mask(throughput: np.ndarray, latency: np.ndarray) -> np.ndarray:
    """True where no other point has at least the throughput and at most the latency, and is
    better in one of them (more served, sooner first tokens)."""
    order = np.lexsort((latency, -throughput))  # by throughput down, then latency up
    mask = np.zeros(len(throughput), dtype=bool)
    best_latency = np.inf
    for i in order:
        if latency[i] < best_latency:
            mask[i] = True
            best_latency = latency[i]
    return mask


def pareto_figure(rows: pd.DataFrame, hover: Sequence[str] = ()) -> go.Figure:
    """Every successful point as throughput against TTFT P90, coloured by egress, the front drawn
    through the points no other point beats on both."""
    done = succeeded(rows).dropna(subset=[THROUGHPUT, LATENCY]).reset_index(drop=True)
    on_front = pareto_mask(done[THROUGHPUT].to_numpy(float), done[LATENCY].to_numpy(float))
    front = done[on_front].sort_values(THROUGHPUT)
    text = done[list(hover)].astype(str).agg(", ".join, axis=1) if hover else None
    egress, unit = _egress(done)
    points = {"type": "scatter", "x": done[THROUGHPUT], "y": done[LATENCY], "mode": "markers", "name": "points",
              "marker": {"size": 8, "color": egress, "colorscale": "Plasma", "showscale": egress is not None,
                         "colorbar": {"title": {"text": f"egress ({unit})"}}}, "text": text,
              "hovertemplate": "%{text}<br>%{x:.3g} req/s, TTFT P90 %{y:.3g} s<extra></extra>"}
    line = {"type": "scatter", "x": front[THROUGHPUT], "y": front[LATENCY], "mode": "lines", "name": "Pareto front",
            "line": {"color": "#222222", "dash": "dot"}}
    return go.Figure(data=[points, line], layout={
        "height": HEIGHT, "xaxis": {"title": {"text": "throughput (req/s)"}},
        "yaxis": {"title": {"text": "TTFT P90 (s)"}, "type": "log"}, "margin": {"t": 30},
        "legend": {"orientation": "h", "y": 1.05, "yanchor": "bottom"}})


def _egress(done: pd.DataFrame) -> tuple[pd.Series | None, str]:
    """The kept egress column in the unit that suits its largest value (Mbit/s or Gbit/s, as
    report.html and the Runs page show egress), and that unit; (None, Gbit/s) when none was kept."""
    column = next((c for c in EGRESS_BIT_PER_S if c in done.columns), None)
    if column is None:
        return None, "Gbit/s"
    bit_per_s = done[column].astype("float64") * EGRESS_BIT_PER_S[column]
    unit, per_unit = rate_label(bit_per_s.dropna().tolist())
    return bit_per_s / per_unit, unit
