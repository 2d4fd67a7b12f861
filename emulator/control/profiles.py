"""Profiles the throughput model reads: piecewise-linear tables over input length (T_prefill, S_kv)
and a weighted sample of uncached input lengths with O(log n) tail probabilities and means.

Plain numpy; no fitting and no random draws (samples are quantiles, so results are deterministic).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field

import numpy as np

MIN_VALUE = 1e-9  # floor of every profile value: a time or a size is never zero or negative


@dataclass(frozen=True, slots=True)
class PiecewiseLinear:
    """y(x) through the points (xs, ys), extended linearly beyond both ends from the end segments.

    Profiles are measured at a few lengths (1K, 8K, 32K, 128K) and queried anywhere, so the ends
    must extrapolate rather than clamp; the floor keeps an extrapolated time or size positive.
    A Python number takes a scalar path (bisect over tuples, ~20x faster than numpy on one value)
    with the same segment choice and float operations as the array path, so both agree bit for bit.
    """

    xs: tuple[float, ...]
    ys: tuple[float, ...]
    _x: np.ndarray = field(init=False, repr=False, compare=False)
    _y: np.ndarray = field(init=False, repr=False, compare=False)
    _slope: np.ndarray = field(init=False, repr=False, compare=False)
    _slopes: tuple[float, ...] = field(init=False, repr=False, compare=False)  # _slope as floats

    def __post_init__(self) -> None:
        xs = np.asarray(self.xs, dtype=float)
        ys = np.asarray(self.ys, dtype=float)
        if xs.ndim != 1 or ys.ndim != 1 or xs.size != ys.size:
            raise ValueError(f"profile: {xs.size} xs but {ys.size} ys; give one y per x")
        if xs.size < 2:
            raise ValueError(f"profile: {xs.size} point(s); give at least 2 (x, y) points")
        if not (np.all(np.isfinite(xs)) and np.all(np.isfinite(ys))):
            raise ValueError("profile: xs and ys must be finite numbers (no NaN or inf)")
        if np.any(np.diff(xs) <= 0):
            raise ValueError(f"profile: xs {self.xs} are not strictly increasing; sort them")
        object.__setattr__(self, "xs", tuple(float(x) for x in xs))
        object.__setattr__(self, "ys", tuple(float(y) for y in ys))
        for name, arr in (("_x", xs), ("_y", ys), ("_slope", np.diff(ys) / np.diff(xs))):
            arr.flags.writeable = False
            object.__setattr__(self, name, arr)
        object.__setattr__(self, "_slopes", tuple(float(k) for k in self._slope))

    def __call__(self, x: float | np.ndarray) -> float | np.ndarray:
        if isinstance(x, (float, int)):
            return self.at(float(x))
        arr = np.asarray(x, dtype=float)
        # searchsorted(xs, side="right") - 1 clipped to 0..n-2 is searchsorted over the inner xs
        # (np.clip costs more than the search on the optimizer's few-hundred-point grids)
        seg = self._x[1:-1].searchsorted(arr, side="right")
        y = np.maximum(self._y[seg] + self._slope[seg] * (arr - self._x[seg]), MIN_VALUE)
        return float(y) if y.ndim == 0 else y

    def at(self, x: float) -> float:
        """y(x) for one float: searchsorted(side="right") - 1 clipped to a segment, then the
        segment's line and the floor, as `__call__` computes them on arrays."""
        xs, slopes = self.xs, self._slopes
        i = bisect_right(xs, x) - 1
        if i < 0:
            i = 0
        elif i >= len(slopes):
            i = len(slopes) - 1
        y = self.ys[i] + slopes[i] * (x - xs[i])
        return MIN_VALUE if y < MIN_VALUE else y  # np.maximum's rule: NaN stays NaN

    def scaled(self, factor: float) -> PiecewiseLinear:
        """The same curve times `factor` (a slower device: factor > 1 on a time profile)."""
        if not (math.isfinite(factor) and factor > 0):
            raise ValueError(f"profile scale factor: {factor} must be a positive finite number")
        if factor == 1.0:
            return self  # y * 1.0 == y: the same curve, and a frozen one can be shared
        return PiecewiseLinear(self.xs, tuple(y * factor for y in self.ys))


@dataclass(frozen=True, slots=True, eq=False)
class LengthSamples:
    """Uncached input lengths as sorted values with weights (summing to 1) and prefix sums.

    The optimizer asks p(t) = P(L > t), E[L | L > t] and E[L | L <= t] for thousands of thresholds
    at once; prefix sums over the sorted values answer each with one searchsorted.
    """

    values: np.ndarray  # sorted ascending, tokens
    weights: np.ndarray  # same order, sum 1
    _cum_w: np.ndarray = field(init=False, repr=False, compare=False)  # cum_w[k] = sum w[:k]
    _cum_wl: np.ndarray = field(init=False, repr=False, compare=False)  # sum (w * value)[:k]

    def __post_init__(self) -> None:
        values = np.asarray(self.values, dtype=float)
        weights = np.asarray(self.weights, dtype=float)
        if values.ndim != 1 or values.size == 0 or weights.shape != values.shape:
            raise ValueError(f"lengths: need a non-empty 1-D sample with one weight per value, "
                             f"got {values.shape} values and {weights.shape} weights")
        # array methods rather than np.all(...) and friends: the scheduler builds one sample per
        # long-term interval, and numpy's Python-level wrappers cost more than the work here
        if not (np.isfinite(values).all() and (values >= 0).all()):
            raise ValueError("lengths: values must be finite and >= 0 tokens")
        total = weights.sum()
        if not (np.isfinite(weights).all() and (weights >= 0).all() and total > 0):
            raise ValueError("lengths: weights must be finite, >= 0 and not all zero")
        order = values.argsort(kind="stable")
        values, weights = values[order], weights[order] / total
        arrays = {"values": values, "weights": weights,
                  "_cum_w": np.concatenate(([0.0], weights.cumsum())),
                  "_cum_wl": np.concatenate(([0.0], (weights * values).cumsum()))}
        for name, arr in arrays.items():
            arr.flags.writeable = False  # frozen means frozen: no caller edits the prefix sums
            object.__setattr__(self, name, arr)

    @classmethod
    def from_samples(cls, samples: np.ndarray | list[float] | tuple[float, ...]) -> LengthSamples:
        """Equal weights on observed lengths (a trace, the scheduler's arrival window)."""
        arr = np.asarray(samples, dtype=float).ravel()
        return cls(arr, np.ones_like(arr))

    @classmethod
    def truncated_lognormal(
        cls, mu: float, sigma: float, lo: float, hi: float, n: int = 4096
    ) -> LengthSamples:
        """n equal-weight quantiles of log-normal(mu, sigma) truncated to [lo, hi].

        Quantile i is the inverse CDF at (i + 0.5) / n of the truncated law, so the sample is
        deterministic and its moments converge to the distribution's as n grows.
        """
        if not (sigma > 0 and 0 < lo < hi and n >= 2 and math.isfinite(mu) and math.isfinite(hi)):
            raise ValueError(f"lognormal lengths: need sigma > 0, 0 < lo < hi, n >= 2; got "
                             f"mu={mu}, sigma={sigma}, lo={lo}, hi={hi}, n={n}")
        cdf_lo = normal_cdf((math.log(lo) - mu) / sigma)
        cdf_hi = normal_cdf((math.log(hi) - mu) / sigma)
        u = cdf_lo + (np.arange(n) + 0.5) / n * (cdf_hi - cdf_lo)
        values = np.clip(np.exp(mu + sigma * normal_ppf(u)), lo, hi)
        return cls(values, np.ones(n))

    def __len__(self) -> int:
        return int(self.values.size)

    @property
    def mean(self) -> float:
        return float(self._cum_wl[-1])

    def _split(self, t: float | np.ndarray) -> np.ndarray:
        """Number of samples <= t: samples [0, k) stay short, [k, n) are long."""
        return np.searchsorted(self.values, np.asarray(t, dtype=float), side="right")

    def tail_prob(self, t: float | np.ndarray) -> np.ndarray:
        """p(t) = P(L > t); exactly 0 when no sample exceeds t."""
        return self._cum_w[-1] - self._cum_w[self._split(t)]

    def head_prob(self, t: float | np.ndarray) -> np.ndarray:
        """1 - p(t) = P(L <= t), from the prefix sum so it is exactly 0 when no sample is <= t."""
        return self._cum_w[self._split(t)]

    def mean_above(self, t: float | np.ndarray) -> np.ndarray:
        """E[L | L > t]; 0 where no weight lies above t (an empty path has no mean)."""
        k = self._split(t)
        mass = self._cum_w[-1] - self._cum_w[k]
        part = self._cum_wl[-1] - self._cum_wl[k]
        return np.where(mass > 0, part / np.where(mass > 0, mass, 1.0), 0.0)

    def mean_below(self, t: float | np.ndarray) -> np.ndarray:
        """E[L | L <= t]; 0 where no weight lies at or below t."""
        k = self._split(t)
        mass = self._cum_w[k]
        return np.where(mass > 0, self._cum_wl[k] / np.where(mass > 0, mass, 1.0), 0.0)

    def split_stats(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(tail_prob, head_prob, mean_above, mean_below) at t from one search: the same values
        as the four calls, for the optimizer, which needs all four at thousands of thresholds."""
        k = self._split(t)
        cum_w, cum_wl = self._cum_w, self._cum_wl
        head = cum_w[k]
        tail = cum_w[-1] - head
        above = np.where(tail > 0, (cum_wl[-1] - cum_wl[k]) / np.where(tail > 0, tail, 1.0), 0.0)
        below = np.where(head > 0, cum_wl[k] / np.where(head > 0, head, 1.0), 0.0)
        return tail, head, above, below

    def quantile(self, q: float) -> float:
        """The smallest sample whose cumulative weight reaches q (a weighted lower quantile)."""
        k = int(np.searchsorted(self._cum_w[1:], q * self._cum_w[-1] - 1e-12, side="left"))
        return float(self.values[min(k, self.values.size - 1)])


def weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """The smallest value whose cumulative weight reaches q of the total (values in any order)."""
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    k = int(np.searchsorted(cum, q * cum[-1] - 1e-12, side="left"))
    return float(values[order][min(k, values.size - 1)])


def normal_cdf(z: float) -> float:
    """Phi(z), through erfc so the lower tail keeps its relative precision."""
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


# Acklam's rational approximation of the normal inverse CDF (relative error < 1.2e-9 before the
# refinement step below): coefficients of the central and tail regions.
_A = (-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02,
      1.383577518672690e02, -3.066479806614716e01, 2.506628277459239e00)
_B = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02,
      6.680131188771972e01, -1.328068155288572e01)
_C = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00,
      -2.549671010229297e00, 4.374664141464968e00, 2.938163982698783e00)
_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)
_P_LOW = 0.02425


def _tail(q: np.ndarray) -> np.ndarray:
    num = ((((_C[0] * q + _C[1]) * q + _C[2]) * q + _C[3]) * q + _C[4]) * q + _C[5]
    return num / ((((_D[0] * q + _D[1]) * q + _D[2]) * q + _D[3]) * q + 1.0)


def normal_ppf(u: np.ndarray) -> np.ndarray:
    """Phi^-1(u) for u in (0, 1): Acklam's approximation, then one Halley step with erfc.

    Works on the lower half (u or 1 - u, whichever is smaller) and mirrors, so the refinement
    never subtracts two probabilities close to 1.
    """
    u = np.asarray(u, dtype=float)
    if np.any((u <= 0) | (u >= 1)):
        raise ValueError("normal_ppf: probabilities must lie strictly between 0 and 1")
    q = np.minimum(u, 1.0 - u)
    z = np.empty_like(q)
    low = q < _P_LOW
    z[low] = _tail(np.sqrt(-2 * np.log(q[low])))
    c = q[~low] - 0.5
    r = c * c
    num = (((((_A[0] * r + _A[1]) * r + _A[2]) * r + _A[3]) * r + _A[4]) * r + _A[5]) * c
    z[~low] = num / (((((_B[0] * r + _B[1]) * r + _B[2]) * r + _B[3]) * r + _B[4]) * r + 1.0)
    cdf = np.array([normal_cdf(v) for v in z.ravel()]).reshape(z.shape)
    e = (cdf - q) * math.sqrt(2 * math.pi) * np.exp(z * z / 2)
    z = z - e / (1 + z * e / 2)
    return np.where(u > 0.5, -z, z)
