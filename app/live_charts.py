"""The Live page's Plotly figures, each built from `live_view.metrics_frame`'s columns.

Plain `graph_objects` (no plotly.express): the page redraws them every second, and express costs
tens of milliseconds per figure. Gaps (None) stay gaps: no data is not zero.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from app.palette import QUEUE_COLORS, ROUTE_COLORS
from emulator.control.types import Route
from emulator.telemetry.report import token_axis
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
# The queues in their pools' colours and the share routed remote in the PrfaaS route's (app.palette);
# the TTFT percentiles in neither, so red and blue keep meaning the routes on this page too.
COLORS = {"p50": "#9467bd", "p90": "#e377c2", "threshold": "#7f7f7f", "egress": "#ff7f0e",
          "capacity": "#222222", **QUEUE_COLORS, "share": ROUTE_COLORS[Route.PRFAAS.value],
          "recent": "#ff9896", "retrans": "#8c564b", "rtt": "#17becf"}


def _figure(y_title: str, traces: list[dict], *, y: dict | None = None, y2: str | None = None,
            y2_axis: dict | None = None) -> go.Figure:
    """One figure from trace dicts in a single constructor call: plotly validates the whole figure
    once, where update_layout/add_scatter calls validate and relayout one by one (21 ms against
    1.5 ms for the TTFT chart; the page redraws five charts every second)."""
    layout: dict = {
        "height": HEIGHT, "margin": {"t": 30, "b": 40, "l": 60, "r": 60}, "legend": LEGEND_TOP,
        "uirevision": "live", "hovermode": "x unified",  # uirevision: keep zoom across redraws
        "xaxis": {"title": {"text": "run time (s)"}},
        "yaxis": {"title": {"text": y_title}, "rangemode": "tozero", **(y or {})},
    }
    if y2 is not None:
        layout["yaxis2"] = {"title": {"text": y2}, "overlaying": "y", "side": "right", "rangemode": "tozero",
                            "showgrid": False, **(y2_axis or {})}
    return go.Figure(data=traces, layout=layout)


def _line(frame: pd.DataFrame, column: str, name: str, color: str, *, line: dict | None = None,
          **kwargs) -> dict:
    return {"type": "scatter", "x": frame["t_s"].to_numpy(), "y": frame[column].to_numpy(), "name": name,
            "mode": "lines", "line": {"color": color, **(line or {})}, "connectgaps": False, **kwargs}


def ttft_figure(frame: pd.DataFrame) -> go.Figure:
    """TTFT P50/P90 (left axis, s) with the routing threshold (right axis, whole tokens with
    thousands separators, as report.html's threshold axis)."""
    return _figure("TTFT (s)", [
        _line(frame, "ttft_p50_s", "TTFT P50", COLORS["p50"]),
        _line(frame, "ttft_p90_s", "TTFT P90", COLORS["p90"]),
        _line(frame, "threshold_tokens", "threshold", COLORS["threshold"], yaxis="y2",
              line={"dash": "dot", "shape": "hv"}),
    ], y2="threshold (tokens)", y2_axis=token_axis(frame["threshold_tokens"]))


def egress_figure(frame: pd.DataFrame) -> go.Figure:
    """Egress over the cross-datacenter link against the link's capacity: bit/s in the frame, shown
    in Mbit/s or Gbit/s (whichever suits the larger)."""
    unit, per_unit = frame_rate_unit(frame)
    scaled = frame.assign(egress=frame["egress_bit_per_s"] / per_unit,
                          capacity=frame["link_capacity_bit_per_s"].astype("float64") / per_unit)
    return _figure(unit, [
        _line(scaled, "egress", "egress", COLORS["egress"], fill="tozeroy"),
        _line(scaled, "capacity", "link capacity", COLORS["capacity"], line={"dash": "dash", "shape": "hv"}),
    ])


def queues_figure(frame: pd.DataFrame) -> go.Figure:
    """Requests waiting per pool."""
    return _figure("requests waiting", [
        _line(frame, column, name, COLORS[column], line={"shape": "hv"})
        for column, name in (("remote_prefill", "remote prefill"), ("local_prefill", "local prefill"),
                             ("decode", "decode"))])


def share_figure(frame: pd.DataFrame) -> go.Figure:
    """Share of requests routed to the PrfaaS cluster: since the start, and recently."""
    return _figure("share routed remote", [
        _line(frame, "remote_share", "since the start", COLORS["share"]),
        _line(frame, "recent_remote_share", "last 10 s", COLORS["recent"]),
    ], y={"range": [0, 1.05], "tickformat": ".0%", "rangemode": "normal"})


def link_health_figure(frame: pd.DataFrame) -> go.Figure:
    """TCP retransmission rate of the KV senders (left) and their RTT (right)."""
    return _figure("retransmission rate", [
        _line(frame, "retrans_rate", "retransmissions", COLORS["retrans"]),
        _line(frame, "rtt_ms", "RTT", COLORS["rtt"], yaxis="y2", line={"dash": "dot"}),
    ], y={"tickformat": ".1%"}, y2="RTT (ms)")
