"""Percentiles (against numpy) and the finite checks (the egress rate: test_egress.py)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from emulator.errors import TelemetryError
from emulator.telemetry.metrics import check_finite, check_row, percentile


@pytest.mark.parametrize("n", [1, 2, 3, 10, 101, 1000])
@pytest.mark.parametrize("p", [0, 1, 25, 50, 90, 99, 100])
def test_percentile_matches_numpy_linear(n: int, p: float) -> None:
    values = [random.Random(n * 7 + i).lognormvariate(0, 1) for i in range(n)]
    assert percentile(values, p) == pytest.approx(float(np.percentile(values, p)), rel=1e-12)


def test_percentile_by_hand_and_edge_cases() -> None:
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5  # rank 1.5 between 2 and 3
    assert percentile([10.0, 20.0], 90) == 19.0
    assert percentile([], 50) is None
    with pytest.raises(ValueError, match="outside"):
        percentile([1.0], 101)


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_check_finite_names_the_metric_and_where(value: float) -> None:
    assert check_finite("ttft_p50_s", 1.5, "t=3.0s") == 1.5
    assert check_finite("ttft_p50_s", None, "t=3.0s") is None
    with pytest.raises(TelemetryError, match=r"^t=3.0s ttft_p50_s: .* is not a finite number") as caught:
        check_finite("ttft_p50_s", value, "t=3.0s")
    assert "\n" not in str(caught.value)


def test_check_row_names_the_column_and_the_time() -> None:
    check_row({"t_s": 2.0, "egress_bit_per_s": None, "link_utilization": 0.5}, 2.0)
    with pytest.raises(TelemetryError, match=r"^t=2.0s link_utilization: inf is not a finite number"):
        check_row({"t_s": 2.0, "link_utilization": math.inf}, 2.0)
