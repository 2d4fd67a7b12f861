"""The decision timeline's table and chart markers, from a summary's meta."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from app.decisions_view import TABLE_COLUMNS, decision_details, decision_rows
from app.figures import add_decision_markers
from app.recorded_meta import RecordedMeta

META = {"decisions": ["t=125.0s scheduler: window mean 24431 tokens: t 19620 -> 17140 (model: 3.58 req/s)"],
        "knob_changes": ["t=20.0s timeline: link -> 10 Mbit/s, 10 ms, 0 % loss", "unstamped line"]}


def _rows(meta: dict) -> pd.DataFrame:
    return decision_rows(RecordedMeta.from_json(meta))


def test_rows_have_time_what_why_in_time_order() -> None:
    rows = _rows(META)
    assert list(rows[list(TABLE_COLUMNS)].columns) == ["time (s)", "what", "why"]
    assert rows["time (s)"].tolist()[:2] == [20.0, 125.0]
    assert rows["what"].tolist() == ["link -> 10 Mbit/s, 10 ms, 0 % loss", "threshold 19620 -> 17140 tokens",
                                     "unstamped line"]
    assert rows["why"].tolist()[:2] == ["the scenario's timeline", "window mean 24431 tokens; model: 3.58 req/s"]
    assert _rows({}).empty and list(_rows({}).columns)[:3] == list(TABLE_COLUMNS)


def test_markers_are_vertical_lines_at_each_timed_row() -> None:
    fig = add_decision_markers(go.Figure(go.Scatter(x=[0, 200], y=[1, 2])), _rows(META))
    assert [shape.x0 for shape in fig.layout.shapes] == [20.0, 125.0]  # the unstamped line has no place
    texts = [a.text for a in fig.layout.annotations]
    assert texts == ["link→10 Mbit/s", "t 19,620→17,140"]  # short: they stand along the plot's height
    assert "why: the scenario's timeline" in fig.layout.annotations[0].hovertext


def test_many_markers_are_numbered() -> None:
    meta = {"decisions": [f"t={t}.0s scheduler: x: t 100 -> 200" for t in range(20)]}
    fig = add_decision_markers(go.Figure(), _rows(meta))
    assert [a.text for a in fig.layout.annotations] == [str(i) for i in range(1, 21)]


def test_the_detail_view_has_every_decision_whole() -> None:
    """The table wraps its reasons and the chart shortens its markers: the detail view says it all."""
    meta = {**META, "decisions": [*META["decisions"],
                                  "t=130.0s scheduler: queue surge (local_prefill 9 >= 8): t 17140 -> 19620 "
                                  "(model: 1.67 req/s, p 0.40, bottleneck prfaas-compute)"]}
    lines = decision_details(_rows(meta))
    assert len(lines) == 4 and lines[-1] == "- **no time** unstamped line"
    assert lines[0] == r"- **t = 20.0 s** (timeline) link -\> 10 Mbit/s, 10 ms, 0 % loss: the scenario's timeline"
    assert lines[2].endswith(r"queue surge (local\_prefill 9 \>= 8); model: 1.67 req/s, p 0.40, "
                             "bottleneck: PrfaaS compute")  # whole, its code named, markdown kept literal
