"""Sliding-window percentiles (against numpy), request counters and the egress-rate estimator."""

from __future__ import annotations

import random

import numpy as np
import pytest

from emulator.telemetry.metrics import (
    EgressRateEstimator,
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
