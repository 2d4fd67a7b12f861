"""The Live page's charts as a reader sees them: the threshold axis in whole tokens with thousands
separators (as report.html's), gaps kept as gaps, the decisions marked, and a spec that does not
change from one redraw to the next (the browser then keeps the chart and swaps only its data)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from app.decisions_view import MAX_LABELLED, decision_rows
from app.live_charts import (
    DECISIONS,
    SERIES,
    egress_spec,
    link_health_spec,
    queues_spec,
    share_spec,
    ttft_spec,
)
from app.live_view import metrics_frame
from app.recorded_meta import RecordedMeta

from .conftest import snap


def _frame(thresholds: list[float | None]) -> pd.DataFrame:
    return pd.DataFrame({"t_s": [float(i) for i in range(len(thresholds))],
                         "ttft_p50_s": [0.5] * len(thresholds), "ttft_p90_s": [0.9] * len(thresholds),
                         "threshold_tokens": pd.Series(thresholds, dtype="float64")})


def _layers(spec: dict) -> list[dict]:
    """Every unit layer of a spec, left axis first."""
    return [layer for group in spec["layer"] for layer in group["layer"]]


def _knob_rows(lines: list[str]) -> pd.DataFrame:
    """decision_rows of a record whose knob changes are `lines`."""
    return decision_rows(RecordedMeta.from_json({"knob_changes": lines}))


def _series_layer(spec: dict, name: str) -> dict:
    return next(layer for layer in _layers(spec)
                if layer.get("transform", [{}])[0].get("filter", {}).get("equal") == name)


@pytest.mark.parametrize("thresholds", [[19_620.0, 17_140.0, 17_140.0], [1_441.0, None, 961.0], [2_047.0] * 4, []])
def test_the_threshold_axis_ticks_whole_tokens_with_separators(thresholds: list[float | None]) -> None:
    y = _series_layer(ttft_spec(_frame(thresholds)), "threshold")["encoding"]["y"]
    assert y["title"] == "threshold (tokens)" and y["axis"]["orient"] == "right"
    assert y["axis"]["format"] == ",d" and y["axis"]["tickMinStep"] == 1  # never 2,047.5
    assert y["scale"] == {"zero": True}  # a flat threshold is a line inside the axis, not its edge


def test_a_missing_value_is_a_gap_not_zero() -> None:
    series = ttft_spec(_frame([1_441.0, None, 961.0]))["datasets"][SERIES]
    threshold = series[series["series"] == "threshold"]
    assert threshold["t_s"].tolist() == [0.0, 1.0, 2.0]
    assert threshold["value"].isna().tolist() == [False, True, False]
    assert all(layer["mark"]["invalid"] == "break-paths-show-domains"
               for layer in _layers(ttft_spec(_frame([1.0]))) if layer["mark"]["type"] in ("line", "area"))


def test_every_chart_keeps_its_spec_while_its_data_grow() -> None:
    """The spec (datasets aside) is the same at 1 and at 3 snapshots: Streamlit's Vega-Lite chart
    then updates the data of the view it has instead of drawing a new one."""
    small = metrics_frame([snap(1.0, egress_bit_per_s=4e6)])
    large = metrics_frame([snap(t, egress_bit_per_s=4e6 * t) for t in (1.0, 2.0, 3.0)])
    rows = _knob_rows(["t=1.5s control: threshold -> 4096 tokens"])
    for build in (lambda f: ttft_spec(f, rows), lambda f: egress_spec(f, rows), queues_spec, share_spec,
                  link_health_spec):
        before, after = build(small), build(large)
        assert len(after["datasets"][SERIES]) == 3 * len(before["datasets"][SERIES])
        del before["datasets"], after["datasets"]
        assert json.dumps(before, sort_keys=True) == json.dumps(after, sort_keys=True)


def test_decisions_are_marked_with_what_happened_and_why() -> None:
    rows = _knob_rows(["t=1.5s control: threshold -> 4096 tokens", "no time: ignored"])
    marks = ttft_spec(_frame([2048.0, 4096.0]), rows)["datasets"][DECISIONS]
    # the label stands along the plot's ~100 px height; the tooltip has the words whole
    assert marks[["t_s", "label", "what"]].values.tolist() == [[1.5, "t→4,096", "threshold -> 4096 tokens"]]
    assert marks["source"].tolist() == ["control"]
    rules = [layer for layer in _layers(ttft_spec(_frame([1.0]), rows)) if layer["data"]["name"] == DECISIONS]
    assert {layer["mark"]["type"] for layer in rules} == {"rule", "text"}
    assert all([f["field"] for f in layer["encoding"]["tooltip"]] == ["t_s", "what", "why"] for layer in rules)


def test_many_decisions_are_numbered_in_table_order() -> None:
    lines = [f"t={i}.0s control: threshold -> {1000 + i} tokens" for i in range(MAX_LABELLED + 1)]
    marks = egress_spec(metrics_frame([snap(1.0)]), _knob_rows(lines))["datasets"][DECISIONS]
    assert marks["label"].tolist() == [str(i + 1) for i in range(MAX_LABELLED + 1)]


def test_every_chart_zooms_run_time_and_lists_every_series_on_hover() -> None:
    frame = metrics_frame([snap(1.0, egress_bit_per_s=4e6)])
    for spec in (ttft_spec(frame), egress_spec(frame), queues_spec(frame), share_spec(frame), link_health_spec(frame)):
        params = {p["name"]: p for layer in _layers(spec) for p in layer.get("params", [])}
        assert params["zoom"]["bind"] == "scales" and params["zoom"]["select"]["encodings"] == ["x"]
        hover = next(layer for layer in _layers(spec) if "hover" in {p["name"] for p in layer.get("params", [])})
        shown = [field["field"] for field in hover["encoding"]["tooltip"]]
        assert shown == ["t_s", *spec["layer"][0]["layer"][0]["encoding"]["color"]["scale"]["domain"]]
