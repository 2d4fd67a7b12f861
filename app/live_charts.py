"""The Live page's Plotly figures, each built from `live_view.metrics_frame`'s columns.

Plain `graph_objects` (no plotly.express): the page redraws them every second, and express costs
tens of milliseconds per figure. Gaps (None) stay gaps: no data is not zero.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from emulator.telemetry.timeseries import frame_rate_unit

# The Live page's panels by key, titled as the page shows them (the Classroom tour names them too).
CHART_TITLES = {
    "live_ttft": "TTFT P50/P90, threshold on the right axis",
    "live_egress": "Egress vs link capacity",
    "live_queues": "Queue depth per pool",
    "live_share": "Share routed remote",
    "live_link": "KV senders: retransmission rate and RTT",
}
TABLE_TITLES = ("Node roles", "Last requests", "Decisions")
HEIGHT = 270
LEGEND_TOP = {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"}
COLORS = {"p50": "#1f77b4", "p90": "#d62728", "threshold": "#7f7f7f", "egress": "#ff7f0e",
          "capacity": "#222222", "remote_prefill": "#d62728", "local_prefill": "#1f77b4",
          "decode": "#2ca02c", "share": "#9467bd", "recent": "#c5b0d5", "retrans": "#8c564b",
          "rtt": "#17becf"}


def _figure(y_title: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(height=HEIGHT, margin={"t": 30, "b": 40, "l": 60, "r": 60}, legend=LEGEND_TOP,
                      uirevision="live", hovermode="x unified")  # uirevision: keep zoom across redraws
    fig.update_xaxes(title="run time (s)")
    fig.update_yaxes(title=y_title, rangemode="tozero")
    return fig


def _line(fig: go.Figure, frame: pd.DataFrame, column: str, name: str, color: str, **kwargs) -> None:
    fig.add_scatter(x=frame["t_s"], y=frame[column], name=name, mode="lines",
                    line={"color": color, **kwargs.pop("line", {})}, connectgaps=False, **kwargs)


def ttft_figure(frame: pd.DataFrame) -> go.Figure:
    """TTFT P50/P90 (left axis, s) with the routing threshold (right axis, tokens)."""
    fig = _figure("TTFT (s)")
    _line(fig, frame, "ttft_p50_s", "TTFT P50", COLORS["p50"])
    _line(fig, frame, "ttft_p90_s", "TTFT P90", COLORS["p90"])
    _line(fig, frame, "threshold_tokens", "threshold", COLORS["threshold"], yaxis="y2",
          line={"dash": "dot", "shape": "hv"})
    fig.update_layout(yaxis2={"title": "threshold (tokens)", "overlaying": "y", "side": "right",
                              "rangemode": "tozero", "showgrid": False})
    return fig


def egress_figure(frame: pd.DataFrame) -> go.Figure:
    """Egress over the cross-datacenter link against the link's capacity: bit/s in the frame, shown
    in Mbit/s or Gbit/s (whichever suits the larger)."""
    unit, per_unit = frame_rate_unit(frame)
    scaled = frame.assign(egress=frame["egress_bit_per_s"] / per_unit,
                          capacity=frame["link_capacity_bit_per_s"].astype("float64") / per_unit)
    fig = _figure(unit)
    _line(fig, scaled, "egress", "egress", COLORS["egress"], fill="tozeroy")
    _line(fig, scaled, "capacity", "link capacity", COLORS["capacity"], line={"dash": "dash", "shape": "hv"})
    return fig


def queues_figure(frame: pd.DataFrame) -> go.Figure:
    """Requests waiting per pool."""
    fig = _figure("requests waiting")
    for column, name in (("remote_prefill", "remote prefill"), ("local_prefill", "local prefill"),
                         ("decode", "decode")):
        _line(fig, frame, column, name, COLORS[column], line={"shape": "hv"})
    return fig


def share_figure(frame: pd.DataFrame) -> go.Figure:
    """Share of requests routed to the PrfaaS cluster: since the start, and recently."""
    fig = _figure("share routed remote")
    _line(fig, frame, "remote_share", "since the start", COLORS["share"])
    _line(fig, frame, "recent_remote_share", "last 10 s", COLORS["recent"])
    fig.update_yaxes(range=[0, 1.05], tickformat=".0%", rangemode="normal")
    return fig


def link_health_figure(frame: pd.DataFrame) -> go.Figure:
    """TCP retransmission rate of the KV senders (left) and their RTT (right)."""
    fig = _figure("retransmission rate")
    _line(fig, frame, "retrans_rate", "retransmissions", COLORS["retrans"])
    _line(fig, frame, "rtt_ms", "RTT", COLORS["rtt"], yaxis="y2", line={"dash": "dot"})
    fig.update_yaxes(tickformat=".1%")
    fig.update_layout(yaxis2={"title": "RTT (ms)", "overlaying": "y", "side": "right",
                              "rangemode": "tozero", "showgrid": False})
    return fig
