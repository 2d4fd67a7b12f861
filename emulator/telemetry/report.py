"""The run's self-contained HTML report: a summary table and Plotly charts, plotly.js inlined once.

It opens offline (a classroom without network, a CI artifact). It reads the frames `load_run`
returns and computes nothing the summary does not already hold, beyond sorting for the CDF; the
summary's figures are named and rounded as `labels.py` says and shown as `figures.py` says (egress
in the link's unit, the per-node table); the decision timeline is `decision_log.py`'s; routes and
queues are coloured as `palette.py` says, as on the dashboard.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from emulator.control.types import RequestStatus
from emulator.telemetry.decision_log import LogEntry, log_entries
from emulator.telemetry.figures import (
    EGRESS_KEY,
    NODE_NOTE,
    NOQUEUE_NOTE,
    NodeFigures,
    egress_bit_per_s,
    format_rate,
    node_figures,
)
from emulator.telemetry.labels import format_number, label
from emulator.telemetry.outcome import ExpectStatus, ExpectVerdict, verdict_of
from emulator.telemetry.palette import queue_color, route_color
from emulator.telemetry.timeseries import BIT_PER_MBIT, frame_rate_unit

TITLES = {
    "ttft_time": "TTFT over time",
    "ttft_cdf": "TTFT CDF by route",
    "egress": "Egress vs link capacity",
    "queues": "Queue depths over time",
    "threshold": "Routing threshold over time",
}
NODES_TITLE = "Per node"
DECISIONS_TITLE = "Decisions and knob changes"
# Shown elsewhere: egress once, in its unit (EGRESS_KEY), the node tables and the decision log in
# their own sections.
_NOT_IN_TABLE = frozenset({"egress_gbps_mean", "prefill_nodes", "decode_nodes", "decisions", "knob_changes"})
RATE_LABELS = {"egress_bit_per_s": "egress", "link_capacity_bit_per_s": "link capacity"}
QUEUE_COLUMNS = {"queue_remote_prefill": "remote prefill", "queue_local_prefill": "local prefill",
                 "queue_decode": "decode"}
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; } td, th { padding: 2px 12px; border-bottom: 1px solid #ddd; }
th { text-align: left; font-weight: 600; } .fail { color: #b00020; } .nodata { color: #888; }
section { margin-top: 2em; }
"""


def write_report(path: str | Path, requests_df: pd.DataFrame, timeseries_df: pd.DataFrame,
                 summary: dict[str, Any]) -> None:
    """Write the page to `path`. `summary` is the summary.json document (or just its numbers)."""
    numbers = summary.get("summary", summary)
    sections = [
        _section("Summary", _summary_html(numbers, summary.get("meta", {}), verdict_of(summary))),
        _section(NODES_TITLE, _nodes_html(node_figures(numbers))),
        _chart(TITLES["ttft_time"], _ttft_over_time(requests_df), "arrival (s)", "TTFT (s)"),
        _chart(TITLES["ttft_cdf"], _ttft_cdf(requests_df), "TTFT (s)", "fraction of requests"),
        _egress_chart(timeseries_df),
        _chart(TITLES["queues"], _lines(timeseries_df, QUEUE_COLUMNS, colors=queue_color), "time (s)", "requests"),
        _chart(TITLES["threshold"], _lines(timeseries_df, {"threshold_tokens": "threshold"}, shape="hv"),
               "time (s)", "tokens", y_axis=token_axis(timeseries_df.get("threshold_tokens", ()))),
        _section(DECISIONS_TITLE, _decisions_html(log_entries(summary.get("meta", {})))),
    ]
    title = html.escape(f"PrfaaS run {summary.get('meta', {}).get('scenario', '')}".strip())
    page = (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{title}</title>"
            f"<style>{_STYLE}</style>\n<script type='text/javascript'>{get_plotlyjs()}</script>"
            f"</head>\n<body><h1>{title}</h1>\n{''.join(sections)}</body></html>\n")
    Path(path).write_text(page, encoding="utf-8")


def _section(title: str, body: str) -> str:
    return f"<section><h2>{html.escape(title)}</h2>\n{body}</section>\n"


def _chart(title: str, traces: list[go.Scatter], x_title: str, y_title: str,
           y_axis: Mapping[str, Any] | None = None) -> str:
    if not traces:
        return _section(title, "<p class='nodata'>no data</p>")
    figure = go.Figure(traces)
    figure.update_layout(xaxis_title=x_title, yaxis_title=y_title, height=380,
                         margin={"l": 60, "r": 20, "t": 20, "b": 50}, template="plotly_white")
    figure.update_yaxes(**(y_axis or {}))
    return _section(title, figure.to_html(full_html=False, include_plotlyjs=False))


def token_axis(values: Iterable[float]) -> dict[str, Any]:
    """Plotly y-axis settings for a token count such as the threshold: whole-number ticks with
    separators, and a flat line drawn within +-10% of its value (Plotly's own range for a flat
    line is +-1, ticked `2,047.5`)."""
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    axis: dict[str, Any] = {"tickformat": ",d"}
    if finite and max(finite) - min(finite) < 1:
        pad = max(10.0, abs(finite[0]) * 0.1)
        axis["range"] = [finite[0] - pad, finite[0] + pad]
    return axis


def _egress_chart(timeseries_df: pd.DataFrame) -> str:
    """Egress against link capacity, recorded in bit/s, shown in Mbit/s or Gbit/s (whichever suits
    the larger of the two)."""
    unit, per_unit = frame_rate_unit(timeseries_df)
    return _chart(TITLES["egress"], _lines(timeseries_df, RATE_LABELS, scale=1 / per_unit), "time (s)", unit)


def _summary_html(numbers: dict[str, Any], meta: dict[str, Any], verdict: ExpectVerdict) -> str:
    rows = [(label(k), format_rate(egress_bit_per_s(numbers)) if k == EGRESS_KEY else _shown(v))
            for k, v in numbers.items() if k not in _NOT_IN_TABLE]
    rows += [(label(k), _meta_shown(k, v)) for k, v in meta.items() if k not in _NOT_IN_TABLE]
    cells = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(text)}</td></tr>"
                    for k, text in rows)
    css = " class='fail'" if verdict.status is ExpectStatus.FAILED else ""
    shown = f"<p{css}>expect: {html.escape(verdict.note)}</p>" + "".join(
        f"<p class='fail'>expect failed: {html.escape(f)}</p>" for f in verdict.failures)
    return f"<p>{html.escape(NOQUEUE_NOTE)}</p>\n<table>{cells}</table>\n{shown}"


def _decisions_html(entries: tuple[LogEntry, ...]) -> str:
    """The scheduler's decisions and the knob changes, in time order: time, what, why."""
    if not entries:
        return "<p class='nodata'>none recorded</p>"
    head = "<tr><th>time (s)</th><th>what</th><th>why</th></tr>"
    cells = "".join(f"<tr><td>{format_number(e.t_s)}</td><td>{html.escape(e.what)}</td>"
                    f"<td>{html.escape(e.why)}</td></tr>" for e in entries)
    return f"<table>{head}{cells}</table>"


def _nodes_html(nodes: tuple[NodeFigures, ...]) -> str:
    """One row per node: role, requests served, a prefill node's busy fraction and mean queue."""
    if not nodes:
        return "<p class='nodata'>no data</p>"
    head = "<tr><th>node</th><th>role</th><th>requests</th><th>busy</th><th>mean queue</th></tr>"
    cells = "".join(
        f"<tr><td>{html.escape(n.node)}</td><td>{n.role}</td><td>{_shown(n.requests)}</td>"
        f"<td>{'' if n.role == 'decode' else _percent(n.busy_fraction)}</td>"
        f"<td>{'' if n.role == 'decode' else _shown(n.queue_mean)}</td></tr>" for n in nodes)
    return f"<p>{html.escape(NODE_NOTE)}</p>\n<table>{head}{cells}</table>"


def _percent(value: float | None) -> str:
    return "no data" if value is None else f"{value:.1%}"


def _shown(value: Any) -> str:
    """A figure's value: three significant digits, a mapping as `name value` pairs, `no data`."""
    if value is None:
        return "no data"
    if isinstance(value, Mapping):
        return ", ".join(f"{label(str(k))} {_shown(v)}" for k, v in value.items()) or "-"
    if isinstance(value, list | tuple):
        return "; ".join(_shown(v) for v in value) or "-"
    return format_number(value)


def _meta_shown(key: str, value: Any) -> str:
    """A meta value; the link as `100 Mbit/s, 10 ms, 0% loss`, the workload as its statement."""
    if key == "link" and isinstance(value, Mapping) and isinstance(value.get("bandwidth_mbit"), int | float):
        loss = value.get("loss_pct")
        return (f"{format_rate(value['bandwidth_mbit'] * BIT_PER_MBIT)}, {format_number(value.get('delay_ms'))} ms, "
                f"{format_number(loss if loss is not None else 0)}% loss")
    if key == "workload" and isinstance(value, Mapping) and isinstance(value.get("statement"), str):
        return value["statement"]
    return _shown(value)


def _completed(requests_df: pd.DataFrame) -> pd.DataFrame:
    if requests_df.empty or "ttft_s" not in requests_df:
        return requests_df.iloc[0:0]
    return requests_df[(requests_df["status"] == RequestStatus.COMPLETED.value) & requests_df["ttft_s"].notna()]


def _ttft_over_time(requests_df: pd.DataFrame) -> list[go.Scatter]:
    done = _completed(requests_df)
    return [go.Scatter(x=group["arrival_s"], y=group["ttft_s"], mode="markers", name=str(route),
                       marker_color=route_color(route))
            for route, group in done.groupby("route", sort=True)]


def _ttft_cdf(requests_df: pd.DataFrame) -> list[go.Scatter]:
    traces = []
    for route, group in _completed(requests_df).groupby("route", sort=True):
        ttfts = group["ttft_s"].sort_values().to_numpy()
        fractions = [(i + 1) / len(ttfts) for i in range(len(ttfts))]
        traces.append(go.Scatter(x=ttfts, y=fractions, mode="lines", name=str(route),
                                 line_shape="hv", line_color=route_color(route)))
    return traces


def _lines(timeseries_df: pd.DataFrame, columns: dict[str, str], shape: str = "linear", scale: float = 1.0,
           colors: Callable[[str], str] | None = None) -> list[go.Scatter]:
    """One line per column that holds at least one value, times `scale`; `colors` gives a column's
    colour (Plotly's own sequence without it)."""
    traces = []
    for column, name in columns.items():
        if column in timeseries_df and timeseries_df[column].notna().any():
            rows = timeseries_df[timeseries_df[column].notna()]
            traces.append(go.Scatter(x=rows["t_s"], y=rows[column] * scale, mode="lines", name=name,
                                     line_shape=shape, line_color=colors(column) if colors else None))
    return traces
