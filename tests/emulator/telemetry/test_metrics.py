"""Sliding-window percentiles (against numpy), request counters and the egress-rate estimator."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from emulator.errors import TelemetryError
from emulator.telemetry.metrics import (
    EgressRateEstimator,
    check_finite,
    check_row,
    percentile,
    utilization,
)


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


def test_egress_rate_between_samples() -> None:
    egress = EgressRateEstimator()
    assert egress.update(0.0, 0) == 0.0  # one sample: no rate yet
    assert egress.update(2.0, 25_000_000) == pytest.approx(100e6)  # 200 Mbit over 2 s, in bit/s
    assert egress.update(2.0, 26_000_000) == pytest.approx(100e6)  # same instant: keep the last
    assert egress.update(3.0, 26_250_000) == pytest.approx(10e6)  # counted from t = 2.0
    assert egress.update(4.0, 1_000) == 0.0  # counter reset: re-base, never negative
    assert egress.update(5.0, 126_000) == pytest.approx(1e6)


def test_utilization_takes_bit_per_s() -> None:
    assert utilization(250e6, 1e9) == 0.25
    assert utilization(250e6, None) is None


def test_egress_rate_over_a_subnormal_interval_stays_finite() -> None:
    """Was: 8,000 bit / 1e-310 s = inf. An interval under 1 ms keeps the last rate, and the next
    sample is counted over the whole interval."""
    egress = EgressRateEstimator()
    egress.update(0.0, 0)
    assert egress.update(1e-310, 1_000) == 0.0
    assert egress.update(5e-4, 2_000) == 0.0
    assert egress.update(1.0, 125_000) == pytest.approx(1e6)  # counted from t = 0


def test_utilization_is_finite_or_a_one_line_error_naming_it() -> None:
    assert utilization(1e3, 1e3) == 1.0  # the slowest link a spec allows: 0.001 Mbit/s
    with pytest.raises(TelemetryError, match=r"^link_utilization: 1e\+06 bit/s over a capacity of 1e-304 bit/s "
                                             r"is not finite \(inf\)"):
        utilization(1e6, 1e-304)  # was: inf, and a live run died on MetricsSnapshot far from here
    with pytest.raises(TelemetryError, match="^egress_bit_per_s: nan is not a finite number"):
        utilization(math.nan, 1e9)


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
