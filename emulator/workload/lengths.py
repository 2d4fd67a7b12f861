"""Token-length distributions: fixed, uniform, truncated log-normal and empirical.

Each is a frozen value with `sample(n, rng)` (int64 tokens, each >= 1) and `mean()` (analytic where
one exists). Arrival times and trace files live in arrivals.py and traces.py.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist

import numpy as np

from emulator.errors import ScenarioError
from emulator.limits import MAX_TOKENS
from emulator.workload.lines import MAX_LINES, MAX_SHOWN, RowCheck, read_lines


def _check_tokens(field: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ScenarioError(f"{field}: {value!r} is not a whole number of tokens; use an integer")
    if not 1 <= value <= MAX_TOKENS:
        raise ScenarioError(f"{field}: {value} is outside 1..{MAX_TOKENS}; use a length in range")
    return int(value)


def _check_bounds(low: object, high: object) -> None:
    """min and max are token counts with min <= max."""
    low, high = _check_tokens("length.min", low), _check_tokens("length.max", high)
    if low > high:
        raise ScenarioError(f"length: min {low} is above max {high}; swap them")


@dataclass(frozen=True, slots=True)
class FixedLength:
    """Every request has exactly `tokens` tokens."""

    tokens: int

    def __post_init__(self) -> None:
        _check_tokens("length.tokens", self.tokens)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return np.full(n, self.tokens, dtype=np.int64)

    def mean(self) -> float:
        return float(self.tokens)


@dataclass(frozen=True, slots=True)
class UniformLength:
    """Whole numbers drawn uniformly from min..max, both included."""

    min: int
    max: int

    def __post_init__(self) -> None:
        _check_bounds(self.min, self.max)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(self.min, self.max, size=n, endpoint=True, dtype=np.int64)

    def mean(self) -> float:
        return (self.min + self.max) / 2


def _phi(x: float) -> float:
    """The standard normal CDF through erfc, which stays exact deep in the lower tail."""
    return 0.5 * math.erfc(-x / math.sqrt(2))


def _phi_mass(a: float, b: float) -> float:
    """P(a < Z < b) for a standard normal Z, from the tail that keeps precision."""
    if a > 0:
        return 0.5 * (math.erfc(a / math.sqrt(2)) - math.erfc(b / math.sqrt(2)))
    return 0.5 * (math.erfc(-b / math.sqrt(2)) - math.erfc(-a / math.sqrt(2)))


@dataclass(frozen=True, slots=True)
class LogNormalLength:
    """exp(N(mu, sigma^2)) truncated to [min, max], as the paper parameterises prompt lengths.

    Sampled by inverting the truncated CDF (no rejection, no clipping), so the sample mean tracks
    the analytic truncated mean.
    """

    mu: float
    sigma: float
    min: int
    max: int

    def __post_init__(self) -> None:
        for field, value, low, high in (("mu", self.mu, -100, 100), ("sigma", self.sigma, 0, 20)):
            ok = isinstance(value, int | float) and math.isfinite(value) and low <= value <= high
            if not ok or (field == "sigma" and value == 0):
                raise ScenarioError(
                    f"length.{field}: {value!r} is outside ({low}, {high}]; use a value in range"
                )
        _check_bounds(self.min, self.max)
        if _phi_mass(*self._window()) <= 0:
            raise ScenarioError(
                f"length: [{self.min}, {self.max}] holds no probability under mu {self.mu}, "
                f"sigma {self.sigma}; move mu towards log of the window"
            )

    def _window(self) -> tuple[float, float]:
        """The bounds in standard-normal units."""
        lo = (math.log(self.min) - self.mu) / self.sigma
        hi = (math.log(self.max) - self.mu) / self.sigma
        return lo, hi

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        lo, hi = self._window()
        flip = lo > 0  # draw from the lower tail, where the CDF keeps its precision
        a, b = (-hi, -lo) if flip else (lo, hi)
        dist = NormalDist()
        p_a, p_b = _phi(a), _phi(b)
        tiny, top = np.nextafter(0.0, 1.0), np.nextafter(1.0, 0.0)
        probs = np.clip(p_a + rng.random(n) * (p_b - p_a), tiny, top)
        z = np.clip(np.array([dist.inv_cdf(float(p)) for p in probs]), a, b)
        z = -z if flip else z
        tokens = np.rint(np.exp(self.mu + self.sigma * z))
        return np.clip(tokens, self.min, self.max).astype(np.int64)

    def mean(self) -> float:
        """The analytic truncated mean, with a, b the bounds in standard-normal units:

        E[X | min <= X <= max] = e^(mu + s^2/2) (Phi(b - s) - Phi(a - s)) / (Phi(b) - Phi(a)),
        with s = sigma.
        """
        lo, hi = self._window()
        shifted = _phi_mass(lo - self.sigma, hi - self.sigma) / _phi_mass(lo, hi)
        value = math.exp(self.mu + self.sigma**2 / 2) * shifted
        return min(max(value, float(self.min)), float(self.max))  # guards underflow far in a tail


@dataclass(frozen=True, slots=True)
class EmpiricalLength:
    """Lengths drawn uniformly, with replacement, from observed values (e.g. a trace's prompts)."""

    values: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.values:
            raise ScenarioError("length.values: empty; give at least one length")
        for value in self.values:
            _check_tokens("length.values", value)

    @classmethod
    def from_path(cls, path: str | Path, max_lines: int = MAX_LINES) -> EmpiricalLength:
        """Read one length per line; blank lines are skipped, anything else must be an integer."""
        values = []
        for where, value in _length_lines(path, max_lines):
            if value is None:
                raise ScenarioError(_not_a_length(where))
            values.append(value)
        if not values:
            raise ScenarioError(f"lengths {path}: no lengths found; write one integer per line")
        return cls(tuple(values))

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        pool = np.asarray(self.values, dtype=np.int64)
        return pool[rng.integers(0, len(pool), size=n)]

    def mean(self) -> float:
        return float(np.mean(np.asarray(self.values, dtype=np.float64)))


def check_lengths(path: str | Path) -> RowCheck:
    """Every line of a lengths file checked, the first problems listed (`validate`)."""
    num_rows, problems = 0, []
    for where, value in _length_lines(path, MAX_LINES):
        num_rows += 1
        if value is None:
            problems.append(_not_a_length(where))
    if not num_rows:
        problems.append(f"lengths {path}: no lengths found; write one integer per line")
    return RowCheck(num_rows, tuple(problems[:MAX_SHOWN]), len(problems))


def _length_lines(path: str | Path, max_lines: int) -> Iterator[tuple[str, int | None]]:
    """(where, tokens or None when the line is no length) for each non-blank line."""
    for lineno, text in read_lines(path, "lengths", max_lines=max_lines):
        if text := text.strip():
            yield f"lengths {path} line {lineno}", _line_tokens(text)


def _not_a_length(where: str) -> str:
    """The line is not quoted: the file may be anything a path names."""
    return f"{where}: not a whole number of tokens in 1..{MAX_TOKENS}; write one integer per line"


def _line_tokens(text: str) -> int | None:
    """A line's whole number of tokens in 1..MAX_TOKENS, or None (long digit strings are refused
    before int() sees them)."""
    if not (text.isascii() and text.isdigit() and len(text) <= len(str(MAX_TOKENS))):
        return None
    value = int(text)
    return value if 1 <= value <= MAX_TOKENS else None


LengthDist = FixedLength | UniformLength | LogNormalLength | EmpiricalLength
