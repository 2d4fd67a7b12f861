"""Length distributions: the truncated log-normal against its analytic mean, the others exactly."""

from __future__ import annotations

import math
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pytest

from emulator.errors import ScenarioError
from emulator.workload.lengths import (
    EmpiricalLength,
    FixedLength,
    LogNormalLength,
    UniformLength,
)


def normal_cdf(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def truncated_lognormal_mean(mu: float, sigma: float, low: float, high: float) -> float:
    """E[X | low <= X <= high] for ln X ~ N(mu, sigma^2), written out independently of the code."""
    a = (math.log(low) - mu) / sigma
    b = (math.log(high) - mu) / sigma
    numerator = normal_cdf(b - sigma) - normal_cdf(a - sigma)
    return math.exp(mu + sigma**2 / 2) * numerator / (normal_cdf(b) - normal_cdf(a))


PAPER = (9.90, 1.00, 128, 131072)  # the paper's input-length distribution


def test_paper_distribution_mean_is_about_27k_tokens() -> None:
    reference = truncated_lognormal_mean(*PAPER)
    assert 27_000 < reference < 28_000
    assert LogNormalLength(*PAPER).mean() == pytest.approx(reference, rel=1e-9)


@pytest.mark.parametrize(
    "params",
    [PAPER, (8.0, 1.5, 128, 32768), (5.0, 1.0, 1000, 2000)],
    ids=["paper", "wide", "upper-tail"],
)
def test_sample_mean_matches_the_analytic_truncated_mean(params) -> None:
    dist = LogNormalLength(*params)
    samples = dist.sample(20_000, np.random.default_rng(1))
    assert samples.dtype == np.int64
    assert samples.min() >= params[2] and samples.max() <= params[3]
    standard_error = samples.std() / math.sqrt(len(samples))
    assert abs(samples.mean() - truncated_lognormal_mean(*params)) < 4 * standard_error


def test_truncation_inverts_the_cdf_instead_of_clipping() -> None:
    """Window [1000, 2000] lies above e^5 ~ 148: clipping would pile nearly all mass on 1000."""
    mu, sigma, low, high = 5.0, 1.0, 1000, 2000
    samples = LogNormalLength(mu, sigma, low, high).sample(20_000, np.random.default_rng(2))
    assert np.mean(samples == low) < 0.01
    a, b = ((math.log(v) - mu) / sigma for v in (low, high))
    median = math.exp(mu + sigma * NormalDist().inv_cdf((normal_cdf(a) + normal_cdf(b)) / 2))
    assert np.mean(samples <= median) == pytest.approx(0.5, abs=0.02)


def test_fixed_and_uniform() -> None:
    rng = np.random.default_rng(3)
    np.testing.assert_array_equal(FixedLength(1024).sample(5, rng), [1024] * 5)
    assert FixedLength(1024).mean() == 1024.0
    samples = UniformLength(10, 13).sample(20_000, rng)
    assert set(samples.tolist()) == {10, 11, 12, 13}
    assert samples.mean() == pytest.approx(UniformLength(10, 13).mean(), abs=0.05)
    assert UniformLength(10, 13).mean() == 11.5


def test_empirical_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "lengths.txt"
    path.write_text("100\n\n300\n 200 \n300\n")
    dist = EmpiricalLength.from_path(path)
    assert dist.values == (100, 300, 200, 300)
    assert dist.mean() == 225.0
    samples = dist.sample(20_000, np.random.default_rng(4))
    assert set(samples.tolist()) == {100, 200, 300}
    assert np.mean(samples == 300) == pytest.approx(0.5, abs=0.02)  # with replacement


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("100\n2.5\n", "line 2: not a whole number of tokens"),
        ("100\n\nabc\n", "line 3"),
        ("100\n0\n", "line 2: not a whole number of tokens in 1..1048576"),
        ("\n\n", "no lengths"),
    ],
)
def test_empirical_file_errors_name_the_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "lengths.txt"
    path.write_text(text)
    with pytest.raises(ScenarioError, match=message):
        EmpiricalLength.from_path(path)


def test_empirical_file_reads_are_bounded(tmp_path: Path) -> None:
    path = tmp_path / "lengths.txt"
    path.write_text("1\n" * 11)
    with pytest.raises(ScenarioError, match="more than 10 lines"):
        EmpiricalLength.from_path(path, max_lines=10)
    with pytest.raises(ScenarioError, match="cannot open"):
        EmpiricalLength.from_path(tmp_path / "missing.txt")


def test_same_seed_same_samples() -> None:
    dist = LogNormalLength(*PAPER)
    first = dist.sample(100, np.random.default_rng(5))
    np.testing.assert_array_equal(first, dist.sample(100, np.random.default_rng(5)))
    assert not np.array_equal(first, dist.sample(100, np.random.default_rng(6)))


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: FixedLength(0), "length.tokens"),
        (lambda: FixedLength(2.5), "length.tokens"),
        (lambda: UniformLength(10, 5), "min 10 is above max 5"),
        (lambda: LogNormalLength(9.9, 0.0, 128, 1024), "length.sigma"),
        (lambda: LogNormalLength(float("nan"), 1.0, 128, 1024), "length.mu"),
        (lambda: LogNormalLength(0.0, 0.1, 100_000, 131_072), "no probability"),
        (lambda: EmpiricalLength(()), "length.values"),
    ],
)
def test_bad_parameters_name_the_field(make, field: str) -> None:
    with pytest.raises(ScenarioError, match=field.replace(".", r"\.")):
        make()
