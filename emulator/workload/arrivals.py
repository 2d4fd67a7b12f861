"""Arrival processes over [0, duration_s): Poisson, Gamma-bursty, on/off and piecewise rate changes.

Each process is drawn as a unit-rate process in operational time and mapped back through the
inverse of its cumulative rate (time rescaling), so every rate segment and on-window gets exactly
its mean rate. Lengths, ids and tokens live elsewhere (lengths.py, generator.py, tokens.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from emulator.errors import ScenarioError

MAX_ARRIVALS = 10_000_000  # refuse to draw more; a request cap (max_count) stops earlier
MAX_PIECES = 1_000_000  # rate segments plus on/off edges
_CHUNK = 1 << 16  # draws per round: fixed, so a cap never changes the arrivals before it


def _check_finite(field: str, value: float, low: float, strict: bool, fix: str) -> None:
    bad = not isinstance(value, int | float) or not math.isfinite(value)
    if bad or value < low or (strict and value == low):
        relation = ">" if strict else ">="
        raise ScenarioError(f"{field}: {value!r} must be a finite number {relation} {low}; {fix}")


@dataclass(frozen=True, slots=True)
class PoissonArrivals:
    """Memoryless arrivals: exponential gaps with mean 1/rate_per_s."""

    rate_per_s: float

    def __post_init__(self) -> None:
        _check_finite("arrival.rate_per_s", self.rate_per_s, 0, True, "use a positive rate")


@dataclass(frozen=True, slots=True)
class GammaArrivals:
    """A renewal process with Gamma gaps of shape 1/cv^2: cv=1 is Poisson, cv>1 is bursty."""

    rate_per_s: float
    cv: float

    def __post_init__(self) -> None:
        _check_finite("arrival.rate_per_s", self.rate_per_s, 0, True, "use a positive rate")
        _check_finite("arrival.cv", self.cv, 0, True, "use 1 for Poisson, > 1 for bursts")
        if self.cv > 100:
            raise ScenarioError(f"arrival.cv: {self.cv!r} is above 100; use a cv of at most 100")


@dataclass(frozen=True, slots=True)
class OnOffArrivals:
    """Poisson at rate_per_s for on_s seconds, then silence for off_s, repeating; on at t=0."""

    rate_per_s: float
    on_s: float
    off_s: float

    def __post_init__(self) -> None:
        _check_finite("arrival.rate_per_s", self.rate_per_s, 0, True, "use a positive rate")
        _check_finite("arrival.on_s", self.on_s, 0, True, "use a positive on period")
        _check_finite("arrival.off_s", self.off_s, 0, False, "use 0 for always on")


@dataclass(frozen=True, slots=True)
class RateChange:
    """From at_s on, the process runs at rate_per_s (the on-rate for on/off); 0 pauses it."""

    at_s: float
    rate_per_s: float

    def __post_init__(self) -> None:
        _check_finite("rate_changes.at_s", self.at_s, 0, False, "use a time >= 0")
        _check_finite("rate_changes.rate_per_s", self.rate_per_s, 0, False, "use 0 to pause")


@dataclass(frozen=True, slots=True)
class Burst:
    """A timeline burst: `requests` extra arrivals spread evenly over [at_s, at_s + over_s)."""

    at_s: float
    requests: int
    over_s: float

    def __post_init__(self) -> None:
        _check_finite("burst.at_s", self.at_s, 0, False, "use a time >= 0")
        _check_finite("burst.over_s", self.over_s, 0, False, "use 0 for all at once")
        if isinstance(self.requests, bool) or not isinstance(self.requests, int):
            raise ScenarioError(f"burst.requests: {self.requests!r} is not a whole number")
        if not 1 <= self.requests <= MAX_ARRIVALS:
            raise ScenarioError(f"burst.requests: {self.requests} must lie in 1..{MAX_ARRIVALS}")


ArrivalSpec = PoissonArrivals | GammaArrivals | OnOffArrivals


def burst(at_s: float, requests: int, over_s: float) -> np.ndarray:
    """Times of a timeline burst, evenly spaced (deterministic: a burst is a scripted event)."""
    spec = Burst(at_s, requests, over_s)
    return spec.at_s + spec.over_s * np.arange(spec.requests, dtype=np.float64) / spec.requests


def rate_pieces(
    spec: ArrivalSpec, duration_s: float, rate_changes: Sequence[RateChange] = ()
) -> tuple[np.ndarray, np.ndarray]:
    """The rate as a step function on [0, duration_s): (piece start times, rate of each piece)."""
    _check_finite("duration_s", duration_s, 0, True, "use a positive duration")
    changes = [(float(c.at_s), float(c.rate_per_s)) for c in rate_changes]
    if any(b[0] <= a[0] for a, b in zip(changes, changes[1:], strict=False)):
        raise ScenarioError("rate_changes: at_s values must be strictly increasing; sort them")
    pairs = [(0.0, float(spec.rate_per_s)), *changes]
    if len(pairs) > 1 and pairs[1][0] == 0.0:
        pairs = pairs[1:]  # a change at 0 replaces the base rate
    pairs = [p for p in pairs if p[0] < duration_s]  # changes at or past the end never act
    starts = np.array([p[0] for p in pairs])
    rates = np.array([p[1] for p in pairs])
    if len(starts) > MAX_PIECES:
        raise ScenarioError(f"rate_changes: more than {MAX_PIECES} changes; merge some")
    if isinstance(spec, OnOffArrivals) and spec.off_s > 0:
        return _gate_on_off(starts, rates, spec, duration_s)
    return starts, rates


def _gate_on_off(
    starts: np.ndarray, rates: np.ndarray, spec: OnOffArrivals, duration_s: float
) -> tuple[np.ndarray, np.ndarray]:
    """Multiply the step function by the on/off window indicator."""
    cycle_s = spec.on_s + spec.off_s
    num_cycles = math.ceil(duration_s / cycle_s)
    if num_cycles * 2 + len(starts) > MAX_PIECES:
        raise ScenarioError(
            f"arrival.on_s/off_s: {num_cycles} on/off cycles in duration_s; use longer periods"
        )
    on_starts = np.arange(num_cycles, dtype=np.float64) * cycle_s
    on_ends = on_starts + spec.on_s  # computed once, so an edge compares equal to itself below
    edges = np.unique(np.concatenate([starts, on_starts, on_ends]))
    edges = edges[edges < duration_s]
    level = rates[np.searchsorted(starts, edges, side="right") - 1]
    window = np.searchsorted(on_starts, edges, side="right") - 1
    is_on = edges < on_ends[window]
    return edges, np.where(is_on, level, 0.0)


def arrival_times(
    spec: ArrivalSpec,
    duration_s: float,
    rng: np.random.Generator,
    rate_changes: Sequence[RateChange] = (),
    max_count: int | None = None,
) -> np.ndarray:
    """Sorted arrival times in [0, duration_s); at most max_count (the earliest ones).

    The same rng state gives the same leading arrivals whatever max_count is.
    """
    starts, rates = rate_pieces(spec, duration_s, rate_changes)
    ends = np.append(starts[1:], duration_s)
    cum = np.concatenate([[0.0], np.cumsum(rates * (ends - starts))])
    total = float(cum[-1])
    limit = MAX_ARRIVALS if max_count is None else min(max_count, MAX_ARRIVALS)
    if max_count is None and total > MAX_ARRIVALS:
        raise ScenarioError(
            f"arrival: about {total:.0f} arrivals expected, above {MAX_ARRIVALS}; "
            "lower the rate or duration_s, or set max_requests"
        )
    ops = _unit_process(spec, total, limit, rng)
    piece = np.searchsorted(cum[:-1], ops, side="right") - 1
    safe_rates = np.where(rates > 0, rates, 1.0)  # a zero-rate piece never receives a point
    times = starts[piece] + (ops - cum[piece]) / safe_rates[piece]
    times = np.maximum.accumulate(times) if len(times) else times  # rounding at piece edges
    return times[times < duration_s]


def _unit_process(
    spec: ArrivalSpec, total: float, limit: int, rng: np.random.Generator
) -> np.ndarray:
    """Points of a unit-rate process (mean gap 1) in operational time [0, total), at most limit."""
    chunks: list[np.ndarray] = []
    offset, count = 0.0, 0
    while offset < total and count < limit:
        if isinstance(spec, GammaArrivals):
            shape = 1.0 / spec.cv**2
            gaps = rng.gamma(shape, 1.0 / shape, _CHUNK)
        else:
            gaps = rng.exponential(1.0, _CHUNK)
        points = offset + np.cumsum(gaps)
        offset = float(points[-1])
        points = points[points < total][: limit - count]
        chunks.append(points)
        count += len(points)
    return np.concatenate(chunks) if chunks else np.empty(0)
