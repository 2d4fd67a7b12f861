"""The speed-ups' fast paths against the general code they shortcut (same values, bit for bit):
PiecewiseLinear's scalar path, LengthSamples.split_stats, split_capacities, default_t_grid,
chain_hashes, the virtual engine's TTFT window and sorted percentile."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from emulator.control.profiles import LengthSamples, PiecewiseLinear
from emulator.control.throughput_model import (
    ModelInputs,
    SplitSearch,
    default_t_grid,
    optimize_threshold,
    split_capacities,
)
from emulator.run.ttft_window import TtftWindow
from emulator.telemetry.metrics import percentile, sorted_percentile
from emulator.workload.tokens import chain_hashes, stable_hash

XS = (1024.0, 8192.0, 32768.0, 131072.0)


def test_scalar_profile_path_matches_the_array_path_bit_for_bit() -> None:
    rng = random.Random(1)
    for _ in range(50):
        xs = sorted(rng.sample(range(1, 200_000), rng.randint(2, 6)))
        curve = PiecewiseLinear(tuple(map(float, xs)), tuple(rng.uniform(-5, 100) for _ in xs))
        points = [rng.uniform(-1e5, 5e5) for _ in range(100)] + [float(x) for x in xs] + [0.0, math.inf]
        for x, y in zip(points, curve(np.array(points)), strict=True):
            assert curve(x) == y and curve(int(x) if math.isfinite(x) else x) == curve(np.asarray(
                int(x) if math.isfinite(x) else x, dtype=float))
    assert math.isnan(PiecewiseLinear((0.0, 1.0), (0.0, 1.0))(math.nan))  # as np.maximum


def test_split_stats_and_grid_match_the_general_calls() -> None:
    rng = np.random.default_rng(2)
    for _ in range(20):
        values = np.round(np.exp(rng.normal(9.9, 1.0, int(rng.integers(1, 3000)))), 1)
        lengths = LengthSamples(values, rng.random(values.size))
        grid = default_t_grid(lengths)
        assert np.array_equal(grid, np.unique(np.concatenate(([0.0], np.ceil(lengths.values)))))
        t = np.concatenate((grid, rng.uniform(0, 2e5, 20), [np.inf]))
        expected = (lengths.tail_prob(t), lengths.head_prob(t), lengths.mean_above(t), lengths.mean_below(t))
        for got, want in zip(lengths.split_stats(t), expected, strict=True):
            assert np.array_equal(got, want)


@pytest.mark.parametrize("num_local", [2, 5, 8, 11])
def test_split_capacities_are_optimize_thresholds_lambda_max(num_local: int) -> None:
    rng = np.random.default_rng(num_local)
    inputs = ModelInputs(
        PiecewiseLinear(XS, (2.0e8, 3.2e8, 7.4e8, 2.4e9)), PiecewiseLinear(XS, (0.44, 0.72, 1.84, 7.4)),
        PiecewiseLinear(XS, (1.0, 1.543, 5.017, 21.0)), 0.025, 20, 1024.0, 4, num_local, 12, 1.25e10,
        LengthSamples.from_samples(np.exp(rng.normal(9.9, 1.0, 600))))
    splits = range(1, num_local)
    assert split_capacities(inputs, splits) == [optimize_threshold(inputs, n).lambda_max for n in splits]
    search = SplitSearch.run(inputs, splits)
    for n_p in splits:
        assert search.point(n_p) == optimize_threshold(inputs, n_p)
        assert search.best_t(n_p) == optimize_threshold(inputs, n_p).t


def test_chain_hashes_is_stable_hash_chained() -> None:
    rng = random.Random(3)
    edges = [0, 1, -1, 2**63 - 1, 2**63, -(2**63) - 1, 2**64, 2**100, 2**127 - 1, -(2**127)]
    for _ in range(300):
        ids = [rng.choice(edges + [rng.randrange(10**9)]) for _ in range(rng.randrange(8))]
        root = rng.choice([0, rng.randrange(2**63), 2**100])
        expected, previous = [], root
        for block_id in ids:
            previous = stable_hash(previous, block_id)
            expected.append(previous)
        assert chain_hashes(ids, root) == tuple(expected)
    with pytest.raises(OverflowError):
        chain_hashes([2**127])


def test_ttft_window_and_sorted_percentile_match_a_plain_filter_and_numpy_percentiles() -> None:
    """The window keeps exactly the samples with now - 30 s < t <= now (checked against filtering
    every sample ever added), and its percentiles are numpy's linear ones."""
    rng = random.Random(4)
    everything: list[tuple[float, float]] = []
    window, now = TtftWindow(30.0), 0.0
    for _ in range(3000):
        now += rng.choice([0.0, rng.expovariate(2.0), rng.expovariate(0.05)])
        if rng.random() < 0.7:
            value = rng.choice([rng.expovariate(1.0), 0.0, 1.5])
            everything.append((now, value))
            window.add(now, value)
        if rng.random() < 0.3:
            values = [v for t, v in everything if now - 30.0 < t <= now]
            assert window.sorted_values(now) == sorted(values)
            for p in (0, 37.5, 50, 90, 100):
                assert sorted_percentile(window.sorted_values(now), p) == percentile(values, p)
                expected = pytest.approx(float(np.percentile(values, p))) if values else None
                assert window.percentile(p, now) == expected
