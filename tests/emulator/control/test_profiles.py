"""Profiles: piecewise-linear tables against hand values, and the length sample's quantiles, tail
probabilities and conditional means against independent references (stdlib NormalDist, numerical
integration of the truncated log-normal density)."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest
from hypothesis import given, strategies as st

from emulator.control.profiles import (
    MIN_VALUE,
    LengthSamples,
    PiecewiseLinear,
    normal_ppf,
    weighted_quantile,
)

H200 = PiecewiseLinear((1024, 8192, 32768, 131072), (0.44, 0.72, 1.84, 7.40))


@pytest.mark.parametrize(
    ("x", "y"),
    [
        (1024, 0.44),  # a knot
        (4608, 0.58),  # halfway along the first segment
        (20480, 1.28),  # halfway along the second
        (131072, 7.40),  # the last knot
        (0, 0.40),  # below: the first segment extended, 0.44 - 1024 * 0.28 / 7168
        (229376, 12.96),  # above: the last segment extended, 7.40 + 98304 * 5.56 / 98304
    ],
)
def test_piecewise_linear_hand_values(x, y):
    assert H200(x) == pytest.approx(y, rel=1e-12)


def test_piecewise_linear_on_arrays_matches_scalars():
    xs = np.array([0.0, 1024, 4608, 20480, 131072, 229376])
    assert np.allclose(H200(xs), [H200(float(x)) for x in xs], rtol=0, atol=0)
    assert isinstance(H200(5.0), float)


def test_extrapolation_is_floored_positive():
    falling = PiecewiseLinear((0, 10), (5.0, 1.0))
    assert falling(10) == 1.0
    assert falling(20) == MIN_VALUE  # 1 - 0.4 * 10 = -3 would be a negative time
    assert falling(-5) == pytest.approx(7.0)


@pytest.mark.parametrize(
    ("xs", "ys", "message"),
    [
        ((1, 2, 3), (1, 2), "3 xs but 2 ys"),
        ((1,), (1,), "at least 2"),
        ((2, 1), (1, 1), "strictly increasing"),
        ((1, 1), (1, 1), "strictly increasing"),
        ((1, float("nan")), (1, 1), "finite"),
    ],
)
def test_piecewise_linear_rejects_bad_tables(xs, ys, message):
    with pytest.raises(ValueError, match=message):
        PiecewiseLinear(xs, ys)


def test_scaled_multiplies_every_value():
    slow = H200.scaled(2.0)
    assert slow(20480) == pytest.approx(2 * 1.28)
    with pytest.raises(ValueError, match="positive"):
        H200.scaled(0.0)


@given(st.floats(1024, 131072))
def test_between_knots_the_value_lies_between_neighbours(x):
    ys = H200(np.array([1024, 8192, 32768, 131072]))
    assert ys[0] - 1e-12 <= H200(x) <= ys[-1] + 1e-12


# ---- the normal inverse CDF ----

def test_normal_ppf_matches_stdlib():
    u = np.concatenate([np.linspace(1e-9, 1 - 1e-9, 2001), [1e-300, 0.02425, 0.5, 0.97575]])
    reference = np.array([NormalDist().inv_cdf(x) for x in u])
    assert np.max(np.abs(normal_ppf(u) - reference)) < 1e-12


def test_normal_ppf_rejects_out_of_range():
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        normal_ppf(np.array([0.0, 0.5]))


# ---- length samples ----

def test_hand_sample_tail_and_means():
    s = LengthSamples.from_samples([9000, 1000, 5000, 3000])  # unsorted on purpose
    assert s.values.tolist() == [1000, 3000, 5000, 9000]
    t = np.array([0, 1000, 4000, 9000])
    assert s.tail_prob(t).tolist() == [1.0, 0.75, 0.5, 0.0]
    assert s.head_prob(t).tolist() == [0.0, 0.25, 0.5, 1.0]
    assert s.mean_above(t).tolist() == [4500.0, pytest.approx(17000 / 3), 7000.0, 0.0]
    assert s.mean_below(t).tolist() == [0.0, 1000.0, 2000.0, 4500.0]
    assert s.mean == 4500.0


def test_weights_are_normalised():
    s = LengthSamples(np.array([10.0, 20.0]), np.array([3.0, 1.0]))
    assert s.tail_prob(15.0) == pytest.approx(0.25)
    assert s.mean == pytest.approx(12.5)
    assert weighted_quantile(s.values, s.weights, 0.5) == 10.0
    assert weighted_quantile(s.values, s.weights, 0.9) == 20.0
    assert (s.quantile(0.5), s.quantile(0.9)) == (10.0, 20.0)


@pytest.mark.parametrize(
    ("values", "weights", "message"),
    [([], [], "non-empty"), ([1.0, -2.0], [1, 1], ">= 0 tokens"), ([1.0], [0.0], "not all zero")],
)
def test_length_samples_reject_bad_input(values, weights, message):
    with pytest.raises(ValueError, match=message):
        LengthSamples(np.array(values, dtype=float), np.array(weights, dtype=float))


MU, SIGMA, LO, HI = 9.90, 1.00, 128.0, 131072.0


def _truncated_lognormal_integrals(t: float) -> tuple[float, float]:
    """(P(L > t), E[L; L > t]) of the truncated law by the trapezoid rule on y = ln l."""
    y = np.linspace(math.log(max(t, LO)), math.log(HI), 200_001)
    density = np.exp(-0.5 * ((y - MU) / SIGMA) ** 2) / (SIGMA * math.sqrt(2 * math.pi))
    total_y = np.linspace(math.log(LO), math.log(HI), 200_001)
    total = np.trapezoid(
        np.exp(-0.5 * ((total_y - MU) / SIGMA) ** 2) / (SIGMA * math.sqrt(2 * math.pi)), total_y
    )
    return np.trapezoid(density, y) / total, np.trapezoid(np.exp(y) * density, y) / total


def test_truncated_lognormal_quantiles_match_stdlib_inverse_cdf():
    n = 4096
    s = LengthSamples.truncated_lognormal(MU, SIGMA, LO, HI, n=n)
    law = NormalDist(MU, SIGMA)
    lo_cdf, hi_cdf = law.cdf(math.log(LO)), law.cdf(math.log(HI))
    for i in (0, 1, 100, 2048, 4000, n - 1):
        u = lo_cdf + (i + 0.5) / n * (hi_cdf - lo_cdf)
        assert s.values[i] == pytest.approx(math.exp(law.inv_cdf(u)), rel=1e-9)
    assert LO <= s.values[0] and s.values[-1] <= HI


def test_truncated_lognormal_moments_match_integration():
    s = LengthSamples.truncated_lognormal(MU, SIGMA, LO, HI)
    p_all, mean = _truncated_lognormal_integrals(0.0)
    assert p_all == pytest.approx(1.0, abs=1e-9)
    assert s.mean == pytest.approx(mean, rel=1e-3)
    assert 26_000 < s.mean < 29_000  # the paper: "mean about 27K"
    for t in (4096.0, 19_400.0, 65_536.0):
        p, partial = _truncated_lognormal_integrals(t)
        assert s.tail_prob(t) == pytest.approx(p, abs=1 / len(s))
        assert s.mean_above(t) == pytest.approx(partial / p, rel=2e-3)
        assert s.mean_below(t) == pytest.approx((mean - partial) / (1 - p), rel=2e-3)


def test_vector_queries_match_scalar_ones():
    s = LengthSamples.truncated_lognormal(MU, SIGMA, LO, HI, n=512)
    t = np.array([0.0, 500.0, 20_000.0, 1e6])
    for query in (s.tail_prob, s.mean_above, s.mean_below):
        assert query(t).tolist() == [float(query(float(x))) for x in t]
