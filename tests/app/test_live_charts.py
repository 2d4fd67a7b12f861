"""The Live page's figures as a reader sees them: the threshold axis in whole tokens with thousands
separators (as report.html's), never 480/961/1441."""

from __future__ import annotations

import pandas as pd
import pytest

from app.live_charts import ttft_figure
from emulator.telemetry.report import token_axis


def _frame(thresholds: list[float | None]) -> pd.DataFrame:
    return pd.DataFrame({"t_s": [float(i) for i in range(len(thresholds))],
                         "ttft_p50_s": [0.5] * len(thresholds), "ttft_p90_s": [0.9] * len(thresholds),
                         "threshold_tokens": pd.Series(thresholds, dtype="float64")})


@pytest.mark.parametrize("thresholds", [[19_620.0, 17_140.0, 17_140.0], [1_441.0, None, 961.0], []])
def test_the_threshold_axis_ticks_whole_tokens_with_separators(thresholds: list[float | None]) -> None:
    axis = ttft_figure(_frame(thresholds)).layout.yaxis2
    assert axis.tickformat == ",d" and axis.title.text == "threshold (tokens)"
    assert axis.range is None  # a moving threshold (or none yet) keeps Plotly's range from zero
    assert axis.overlaying == "y" and axis.side == "right"


def test_a_flat_threshold_is_drawn_inside_whole_token_ticks() -> None:
    axis = ttft_figure(_frame([2_047.0] * 4)).layout.yaxis2
    assert axis.tickformat == ",d"
    assert list(axis.range) == token_axis([2_047.0])["range"]  # report.html's axis, not a copy
    low, high = axis.range
    assert low < 2_047 - 100 and high > 2_047 + 100  # Plotly's own range would tick 2,046.5
