"""Metrics arithmetic: percentiles, link utilization, the egress rate from byte counters (the TTFT
window and the request counts are the run core's: emulator.run).

Pure and clock-free: every call is given the time. Percentiles interpolate linearly between order
statistics, as numpy's default (`method="linear"`), so the dashboard, the recorder's summary and
a notebook using numpy agree. Publishing and recording live in `bus.py` and `recorder.py`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


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
