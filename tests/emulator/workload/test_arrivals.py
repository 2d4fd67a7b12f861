"""Arrival processes: mean rates within statistical bands, burstiness, on/off, rate changes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from emulator.errors import ScenarioError
from emulator.workload.arrivals import (
    Burst,
    GammaArrivals,
    OnOffArrivals,
    PoissonArrivals,
    RateChange,
    arrival_times,
    burst,
)


def draw(spec, duration_s, seed=0, rate_changes=(), max_count=None) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return arrival_times(spec, duration_s, rng, rate_changes, max_count)


def count_between(times: np.ndarray, start: float, end: float) -> int:
    return int(np.sum((times >= start) & (times < end)))


def assert_count_near(count: int, expected: float, cv: float = 1.0) -> None:
    """Within 5 standard deviations; a renewal process's count variance is about cv^2 * mean."""
    assert abs(count - expected) <= 5 * cv * math.sqrt(expected), (count, expected)


def assert_sorted_in_range(times: np.ndarray, duration_s: float) -> None:
    assert np.all(np.diff(times) >= 0)
    assert times.min() >= 0 and times.max() < duration_s


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_poisson_rate_and_exponential_gaps(seed: int) -> None:
    times = draw(PoissonArrivals(rate_per_s=100.0), 200.0, seed)  # 20K expected
    assert_sorted_in_range(times, 200.0)
    assert_count_near(len(times), 20_000)
    gaps = np.diff(times)
    assert gaps.mean() == pytest.approx(0.01, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)


@pytest.mark.parametrize(("cv", "seed"), [(0.5, 3), (1.0, 4), (2.0, 5), (3.0, 6)])
def test_gamma_rate_and_measured_cv(cv: float, seed: int) -> None:
    times = draw(GammaArrivals(rate_per_s=100.0, cv=cv), 200.0, seed)
    assert_sorted_in_range(times, 200.0)
    assert_count_near(len(times), 20_000, cv)
    gaps = np.diff(times)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.1)


def test_on_off_arrives_only_in_on_windows_at_the_on_rate() -> None:
    spec = OnOffArrivals(rate_per_s=100.0, on_s=5.0, off_s=15.0)
    times = draw(spec, 800.0, seed=7)  # 40 windows of 5 s at 100/s: 20K expected
    assert_sorted_in_range(times, 800.0)
    assert np.all(np.mod(times, 20.0) < 5.0)
    assert_count_near(len(times), 20_000)
    assert_count_near(count_between(times, 0.0, 5.0), 500)


def test_on_off_without_off_time_is_poisson() -> None:
    times = draw(OnOffArrivals(rate_per_s=100.0, on_s=5.0, off_s=0.0), 200.0, seed=8)
    assert_count_near(len(times), 20_000)


@pytest.mark.parametrize(
    "spec", [PoissonArrivals(100.0), GammaArrivals(100.0, cv=2.0)], ids=["poisson", "gamma"]
)
def test_rate_changes_give_each_segment_its_count(spec) -> None:
    changes = [RateChange(at_s=100.0, rate_per_s=20.0), RateChange(at_s=150.0, rate_per_s=300.0)]
    times = draw(spec, 200.0, seed=9, rate_changes=changes)
    cv = getattr(spec, "cv", 1.0)
    assert_count_near(count_between(times, 0.0, 100.0), 10_000, cv)
    assert_count_near(count_between(times, 100.0, 150.0), 1_000, cv)
    assert_count_near(count_between(times, 150.0, 200.0), 15_000, cv)


def test_zero_rate_pauses_and_a_change_at_zero_replaces_the_base() -> None:
    changes = [RateChange(0.0, 50.0), RateChange(100.0, 0.0), RateChange(150.0, 200.0)]
    times = draw(PoissonArrivals(1.0), 200.0, seed=10, rate_changes=changes)
    assert_count_near(count_between(times, 0.0, 100.0), 5_000)
    assert count_between(times, 100.0, 150.0) == 0
    assert_count_near(count_between(times, 150.0, 200.0), 10_000)


def test_rate_change_sets_the_on_rate_of_on_off() -> None:
    spec = OnOffArrivals(rate_per_s=100.0, on_s=5.0, off_s=5.0)
    times = draw(spec, 400.0, seed=11, rate_changes=[RateChange(200.0, 300.0)])
    assert np.all(np.mod(times, 10.0) < 5.0)
    assert_count_near(count_between(times, 0.0, 200.0), 10_000)
    assert_count_near(count_between(times, 200.0, 400.0), 30_000)


def test_changes_past_the_end_do_nothing() -> None:
    plain = draw(PoissonArrivals(10.0), 100.0, seed=12)
    late = draw(PoissonArrivals(10.0), 100.0, seed=12, rate_changes=[RateChange(100.0, 99.0)])
    np.testing.assert_array_equal(plain, late)


def test_same_seed_same_times_and_a_cap_keeps_the_earliest() -> None:
    spec = GammaArrivals(50.0, cv=1.5)
    first, again = draw(spec, 100.0, seed=13), draw(spec, 100.0, seed=13)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first[:100], draw(spec, 100.0, seed=14)[:100])
    np.testing.assert_array_equal(draw(spec, 100.0, seed=13, max_count=25), first[:25])


def test_burst_is_evenly_spaced() -> None:
    np.testing.assert_allclose(burst(10.0, 4, 2.0), [10.0, 10.5, 11.0, 11.5])
    np.testing.assert_array_equal(burst(3.0, 3, 0.0), [3.0, 3.0, 3.0])


UNSORTED = [RateChange(5.0, 1.0), RateChange(2.0, 1.0)]


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: PoissonArrivals(-1.0), "arrival.rate_per_s"),
        (lambda: PoissonArrivals(float("nan")), "arrival.rate_per_s"),
        (lambda: GammaArrivals(1.0, cv=0.0), "arrival.cv"),
        (lambda: OnOffArrivals(1.0, on_s=0.0, off_s=1.0), "arrival.on_s"),
        (lambda: OnOffArrivals(1.0, on_s=1.0, off_s=-1.0), "arrival.off_s"),
        (lambda: RateChange(-1.0, 1.0), "rate_changes.at_s"),
        (lambda: Burst(1.0, 0, 1.0), "burst.requests"),
        (lambda: draw(PoissonArrivals(1.0), 0.0), "duration_s"),
        (lambda: draw(PoissonArrivals(1.0), 10.0, rate_changes=UNSORTED), "rate_changes"),
        (lambda: draw(PoissonArrivals(1e6), 1e6), "max_requests"),
    ],
)
def test_bad_parameters_name_the_field(make, field: str) -> None:
    with pytest.raises(ScenarioError, match=field.replace(".", r"\.")):
        make()
