"""The Live page's charts as Vega-Lite specs, each built from `live_view.metrics_frame`'s columns.

Vega-Lite, not Plotly, because the page redraws every second: Streamlit gives a Plotly chart whose
figure changed a new element id, so the browser throws the chart away and draws it anew each time
(and a zoom is lost with it), while a Vega-Lite chart under a fixed key and spec keeps its view and
only its datasets change. Five charts redrawn every second, side by side in one chromium: 65 % of a
core with Plotly, 31 % with Vega-Lite, 9 % with no charts (bench/dashboard_live.py measures the page).

A spec holds its data as named datasets (`SERIES`: long form t_s/series/value; `DECISIONS`: the
timed rows of `decisions_view.decision_rows`), which Streamlit sends as Arrow beside the spec.
Gaps (None) stay gaps: no data is not zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from app.decisions_view import SOURCE, TIME, WHAT, WHY, marker_labels, timed_rows
from app.palette import DECISION_COLORS, QUEUE_COLORS, ROUTE_COLORS
from emulator.control.types import Route
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
HEIGHT = 230
SERIES, DECISIONS = "series", "decisions"  # the datasets' names
X_TITLE = "run time (s)"
# The queues in their pools' colours and the share routed remote in the PrfaaS route's (app.palette);
# the TTFT percentiles in neither, so red and blue keep meaning the routes on this page too.
COLORS = {"p50": "#9467bd", "p90": "#e377c2", "threshold": "#7f7f7f", "egress": "#ff7f0e",
          "capacity": "#222222", **QUEUE_COLORS, "share": ROUTE_COLORS[Route.PRFAAS.value],
          "recent": "#ff9896", "retrans": "#8c564b", "rtt": "#17becf"}
DOT, DASH = [2, 3], [6, 4]


@dataclass(frozen=True)
class Line:
    """One series: a frame column drawn under a legend name, in a colour and style."""

    column: str
    name: str
    color: str
    dash: list[int] | None = None
    step: bool = False  # a level held until the next sample (threshold, capacity, queue depth)
    area: bool = False  # filled down to zero
    right: bool = False  # on the right-hand y axis
    format: str = ".3~f"  # in the tooltip


def ttft_spec(frame: pd.DataFrame, decisions: pd.DataFrame | None = None) -> dict[str, Any]:
    """TTFT P50/P90 (left axis, s) with the routing threshold (right axis, whole tokens with
    thousands separators, as report.html's threshold axis)."""
    return _spec(frame, [Line("ttft_p50_s", "TTFT P50", COLORS["p50"]),
                         Line("ttft_p90_s", "TTFT P90", COLORS["p90"]),
                         Line("threshold_tokens", "threshold", COLORS["threshold"], dash=DOT, step=True,
                              right=True, format=",d")],
                 left={"title": "TTFT (s)"},
                 right={"title": "threshold (tokens)", "format": ",d", "tickMinStep": 1}, decisions=decisions)


def egress_spec(frame: pd.DataFrame, decisions: pd.DataFrame | None = None) -> dict[str, Any]:
    """Egress over the cross-datacenter link against the link's capacity: bit/s in the frame, shown
    in Mbit/s or Gbit/s (whichever suits the larger)."""
    unit, per_unit = frame_rate_unit(frame)
    scaled = frame.assign(egress=frame["egress_bit_per_s"].astype("float64") / per_unit,
                          capacity=frame["link_capacity_bit_per_s"].astype("float64") / per_unit)
    return _spec(scaled, [Line("egress", "egress", COLORS["egress"], area=True),
                          Line("capacity", "link capacity", COLORS["capacity"], dash=DASH, step=True)],
                 left={"title": unit}, decisions=decisions)


def queues_spec(frame: pd.DataFrame) -> dict[str, Any]:
    """Requests waiting per pool."""
    return _spec(frame, [Line(column, name, COLORS[column], step=True, format="d")
                         for column, name in (("remote_prefill", "remote prefill"),
                                              ("local_prefill", "local prefill"), ("decode", "decode"))],
                 left={"title": "requests waiting", "tickMinStep": 1})


def share_spec(frame: pd.DataFrame) -> dict[str, Any]:
    """Share of requests routed to the PrfaaS cluster: since the start, and recently."""
    return _spec(frame, [Line("remote_share", "since the start", COLORS["share"], format=".0%"),
                         Line("recent_remote_share", "last 10 s", COLORS["recent"], format=".0%")],
                 left={"title": "share routed remote", "format": ".0%"}, left_domain=[0, 1.05])


def link_health_spec(frame: pd.DataFrame) -> dict[str, Any]:
    """TCP retransmission rate of the KV senders (left) and their RTT (right)."""
    return _spec(frame, [Line("retrans_rate", "retransmissions", COLORS["retrans"], format=".2%"),
                         Line("rtt_ms", "RTT", COLORS["rtt"], dash=DOT, right=True, format=".1f")],
                 left={"title": "retransmission rate", "format": ".1%"}, right={"title": "RTT (ms)"})


def series_frame(frame: pd.DataFrame, lines: list[Line]) -> pd.DataFrame:
    """The lines' columns in long form (t_s, series, value), the series in legend order."""
    t = frame["t_s"].to_numpy(dtype="float64")
    return pd.DataFrame({
        "t_s": np.tile(t, len(lines)),
        "series": np.repeat([line.name for line in lines], len(t)),
        "value": np.concatenate([frame[line.column].to_numpy(dtype="float64", na_value=np.nan)
                                 for line in lines]) if lines else np.array([], dtype="float64"),
    })


def decision_frame(decisions: pd.DataFrame) -> pd.DataFrame:
    """The timed rows of `decision_rows` as the markers draw them: t_s, a short label, what, why,
    and who decided (the marker's colour)."""
    columns = ["t_s", "label", "what", "why", "source"]
    if decisions.empty:
        return pd.DataFrame({c: pd.Series(dtype="float64" if c == "t_s" else "object") for c in columns})
    timed = timed_rows(decisions)
    return pd.DataFrame({"t_s": timed[TIME].astype("float64"),
                         "label": marker_labels(timed), "what": timed[WHAT].astype(str),
                         "why": timed[WHY].astype(str), "source": timed[SOURCE].astype(str)},
                        columns=columns)


def _spec(frame: pd.DataFrame, lines: list[Line], *, left: dict, right: dict | None = None,
          left_domain: list[float] | None = None, decisions: pd.DataFrame | None = None) -> dict[str, Any]:
    """One chart: the lines on a left (and maybe a right) y axis over run time, a legend on top,
    a hover rule that lists every series at the nearest sample, and the decision markers."""
    color = {"field": "series", "type": "nominal", "title": None,
             "scale": {"domain": [line.name for line in lines], "range": [line.color for line in lines]},
             "legend": {"orient": "top", "direction": "horizontal", "symbolType": "stroke"}}
    groups: list[dict[str, Any]] = [{"layer": [*(_line_layer(line, left, left_domain, color)
                                                 for line in lines if not line.right),
                                               _hover_layer(lines)]}]
    if right is not None:
        groups.append({"layer": [_line_layer(line, {"orient": "right", "grid": False, **right}, None, color)
                                 for line in lines if line.right]})
    datasets = {SERIES: series_frame(frame, lines)}
    if decisions is not None:  # the layers even with no decision yet: the spec must not change
        groups[0]["layer"] += _decision_layers()
        datasets[DECISIONS] = decision_frame(decisions)
    return {"height": HEIGHT, "datasets": datasets, "layer": groups, "resolve": {"scale": {"y": "independent"}},
            "config": {"axis": {"titleFontWeight": "normal"}}}


def _x() -> dict[str, Any]:
    return {"field": "t_s", "type": "quantitative", "title": X_TITLE}


def _line_layer(line: Line, axis: dict, domain: list[float] | None, color: dict) -> dict[str, Any]:
    mark: dict[str, Any] = {"type": "area" if line.area else "line", "invalid": "break-paths-show-domains",
                            "interpolate": "step-after" if line.step else "linear", "strokeWidth": 1.5}
    if line.area:
        mark |= {"opacity": 0.35, "line": {"strokeWidth": 1.5}}
    if line.dash:
        mark["strokeDash"] = line.dash
    y: dict[str, Any] = {"field": "value", "type": "quantitative", "title": axis.get("title"),
                         "axis": {k: v for k, v in axis.items() if k != "title"}, "scale": {"zero": True}}
    if domain is not None:
        y["scale"] = {"domain": domain}
    return {"data": {"name": SERIES}, "transform": [{"filter": {"field": "series", "equal": line.name}}],
            "mark": mark, "encoding": {"x": _x(), "y": y, "color": color}}


def _zoom() -> dict[str, Any]:
    """Wheel or drag to zoom and pan run time, double-click to undo; the zoom stays while the data
    grow, as the view does."""
    return {"name": "zoom", "select": {"type": "interval", "encodings": ["x"]}, "bind": "scales"}


def _hover_layer(lines: list[Line]) -> dict[str, Any]:
    """A grey rule at the sample nearest the pointer, its tooltip every series' value there."""
    tooltip = [{"field": "t_s", "type": "quantitative", "title": X_TITLE, "format": ".1f"}]
    tooltip += [{"field": line.name, "type": "quantitative", "format": line.format} for line in lines]
    return {"data": {"name": SERIES}, "transform": [{"pivot": "series", "value": "value", "groupby": ["t_s"]}],
            "mark": {"type": "rule", "color": "#888888"},
            "params": [{"name": "hover", "select": {"type": "point", "fields": ["t_s"], "nearest": True,
                                                    "on": "pointerover", "clear": "pointerout"}}, _zoom()],
            "encoding": {"x": _x(), "opacity": {"condition": {"param": "hover", "value": 0.5, "empty": False},
                                                "value": 0},
                         "tooltip": tooltip}}


def _decision_layers() -> list[dict[str, Any]]:
    """A dotted vertical line at each decision, in its source's colour, labelled at the top with
    what happened; its tooltip has the time, what and why."""
    stroke = {"field": "source", "type": "nominal", "legend": None,
              "scale": {"domain": list(DECISION_COLORS), "range": list(DECISION_COLORS.values())}}
    tooltip = [{"field": "t_s", "type": "quantitative", "title": "t (s)", "format": ".1f"},
               {"field": "what", "type": "nominal"}, {"field": "why", "type": "nominal"}]
    return [
        {"data": {"name": DECISIONS}, "mark": {"type": "rule", "strokeDash": DOT, "strokeWidth": 1},
         "encoding": {"x": _x(), "stroke": stroke, "tooltip": tooltip}},
        {"data": {"name": DECISIONS},
         # to the right of its line (a marker at t = 0 would put a label on its left under the axis),
         # reading upwards from the top of the plot
         "mark": {"type": "text", "angle": 270, "align": "right", "baseline": "top", "fontSize": 10,
                  "dx": -4, "dy": 2, "color": "#555555"},
         "encoding": {"x": _x(), "y": {"value": 0}, "text": {"field": "label"}, "tooltip": tooltip}},
    ]
