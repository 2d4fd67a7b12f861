"""Live metrics arithmetic: windowed percentiles, request counters, egress rate from byte counters.

Pure and clock-free: every call is given the time. Percentiles interpolate linearly between order
statistics, as numpy's default (`method="linear"`), so the dashboard, the recorder's summary and
a notebook using numpy agree. Publishing and recording live in `bus.py` and `recorder.py`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence

from emulator.telemetry.schemas import RequestCounts


def percentile(values: Iterable[float], p: float) -> float | None:
    """The p-th percentile (0 <= p <= 100) by linear interpolation; None for no values.

    With the n values sorted as v[0..n-1], the rank is r = p/100 * (n-1) and the result is
    v[floor(r)] + (v[ceil(r)] - v[floor(r)]) * (r - floor(r)): numpy's default method.
    """
    if not 0 <= p <= 100:
        raise ValueError(f"percentile: p = {p} is outside [0, 100]")
    return sorted_percentile(sorted(values), p)


def sorted_percentile(ordered: Sequence[float], p: float) -> float | None:
    """`percentile` of values already in ascending order, without the copy and sort (hot loops)."""
    if not ordered:
        return None
    rank = p / 100 * (len(ordered) - 1)
    lo = math.floor(rank)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


class SlidingWindow:
    """(t, value) samples; queries see those with now - window_s < t <= now.

    Samples must be added in non-decreasing t (a live gateway's clock does that); older ones
    are evicted as time moves on, so memory stays bounded by the rate times the window.
    """

    def __init__(self, window_s: float = 30.0) -> None:
        if not window_s > 0:
            raise ValueError(f"window_s = {window_s} must be > 0")
        self.window_s = window_s
        self._samples: deque[tuple[float, float]] = deque()

    def add(self, t_s: float, value: float) -> None:
        if self._samples and t_s < self._samples[-1][0]:
            raise ValueError(f"sliding window: t = {t_s} is before the last sample "
                             f"{self._samples[-1][0]}; add samples in time order")
        self._samples.append((t_s, value))

    def values(self, now_s: float) -> list[float]:
        """The values inside the window ending at `now_s` (evicting the ones that left it)."""
        start = now_s - self.window_s
        while self._samples and self._samples[0][0] <= start:
            self._samples.popleft()
        return [v for t, v in self._samples if t <= now_s]

    def percentile(self, p: float, now_s: float) -> float | None:
        return percentile(self.values(now_s), p)

    def mean(self, now_s: float) -> float | None:
        vals = self.values(now_s)
        return sum(vals) / len(vals) if vals else None

    def __len__(self) -> int:
        return len(self._samples)


class RequestCounters:
    """Requests by status and route since the run began; `in_flight` is what has not ended."""

    def __init__(self) -> None:
        self.arrived = 0
        self.completed = 0
        self.failed = 0
        self.prfaas = 0
        self.local = 0

    def on_arrived(self) -> None:
        self.arrived += 1

    def on_routed(self, route: str) -> None:
        if route == "prfaas":
            self.prfaas += 1
        elif route == "local":
            self.local += 1
        else:
            raise ValueError(f"route {route!r} is unknown; use 'prfaas' or 'local'")

    def on_completed(self) -> None:
        self.completed += 1

    def on_failed(self) -> None:
        self.failed += 1

    @property
    def in_flight(self) -> int:
        return self.arrived - self.completed - self.failed

    def snapshot(self) -> RequestCounts:
        return RequestCounts(arrived=self.arrived, completed=self.completed, failed=self.failed,
                             in_flight=max(self.in_flight, 0), prfaas=self.prfaas, local=self.local)


class EgressRateEstimator:
    """bit/s from a monotonically growing byte counter (link or transport), sample to sample.

    `update` returns the rate between the previous sample and this one. A counter that went
    backwards (a restarted relay, a recreated qdisc) re-bases instead of reporting a negative
    rate; a sample at the same instant keeps the last rate.
    """

    def __init__(self) -> None:
        self._last: tuple[float, int] | None = None
        self.rate_bit_per_s = 0.0

    def update(self, t_s: float, total_bytes: int) -> float:
        last, self._last = self._last, (t_s, total_bytes)
        if last is None or total_bytes < last[1]:
            self.rate_bit_per_s = 0.0
        elif t_s > last[0]:
            self.rate_bit_per_s = (total_bytes - last[1]) * 8 / (t_s - last[0])
        else:
            self._last = last
        return self.rate_bit_per_s


def utilization(egress_bit_per_s: float, capacity_bit_per_s: float | None) -> float | None:
    """Egress as a fraction of the link's capacity, both in bit/s; None for an unshaped link."""
    return egress_bit_per_s / capacity_bit_per_s if capacity_bit_per_s else None
