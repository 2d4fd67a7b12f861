"""Metrics arithmetic: percentiles, link utilization, the egress rate from byte counters (the TTFT
window and the request counts are the run core's: emulator.run).

Pure and clock-free: every call is given the time. Percentiles interpolate linearly between order
statistics, as numpy's default (`method="linear"`), so the dashboard, the recorder's summary and
a notebook using numpy agree. Publishing and recording live in `bus.py` and `recorder.py`.
A metric is never inf or NaN (issue 25): `check_finite` turns one into a one-line error where it
is computed, naming it and its inputs, rather than a crash in a schema far away.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from emulator.errors import TelemetryError

MIN_RATE_INTERVAL_S = 1e-3  # a rate over a shorter interval is noise (and over 1e-310 s, infinite)


def check_finite(name: str, value: float | None, where: str = "") -> float | None:
    """`value` if it is a finite number or None; TelemetryError (one line naming the metric) if not."""
    if value is not None and not math.isfinite(value):
        raise TelemetryError(f"{where + ' ' if where else ''}{name}: {value} is not a finite number; "
                             "a metric's inputs must be finite (report this run's scenario as a bug)")
    return value


def check_row(row: dict[str, float | None], t_s: float) -> None:
    """Every value of a timeseries row finite (or None), else the error names the column and time."""
    for name, value in row.items():
        check_finite(name, value, f"t={t_s:.1f}s")


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
    rate; a sample less than MIN_RATE_INTERVAL_S after the previous one keeps the last rate (the
    next is counted from the previous), so the rate is finite whatever the clock hands in.
    """

    def __init__(self) -> None:
        self._last: tuple[float, int] | None = None
        self.rate_bit_per_s = 0.0

    def update(self, t_s: float, total_bytes: int) -> float:
        check_finite("egress sample time", t_s)
        last, self._last = self._last, (t_s, total_bytes)
        if last is None or total_bytes < last[1]:
            self.rate_bit_per_s = 0.0
        elif t_s - last[0] >= MIN_RATE_INTERVAL_S:
            self.rate_bit_per_s = (total_bytes - last[1]) * 8 / (t_s - last[0])
        else:
            self._last = last
        return self.rate_bit_per_s


def utilization(egress_bit_per_s: float, capacity_bit_per_s: float | None) -> float | None:
    """Egress as a fraction of the link's capacity, both in bit/s; None for an unshaped link. The
    capacity is at least 1,000 bit/s (emulator.net.spec's MIN_BANDWIDTH_MBIT), so the fraction is
    finite; if it were not, the error says so here."""
    check_finite("egress_bit_per_s", egress_bit_per_s)
    if not capacity_bit_per_s:
        return None
    fraction = egress_bit_per_s / capacity_bit_per_s
    if not math.isfinite(fraction):
        raise TelemetryError(f"link_utilization: {egress_bit_per_s:g} bit/s over a capacity of "
                             f"{capacity_bit_per_s:g} bit/s is not finite ({fraction}); the link's "
                             "bandwidth_mbit must be at least 0.001")
    return fraction
