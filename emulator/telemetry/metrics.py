"""Metrics arithmetic: percentiles and the finite check (the egress rate and link utilization are
emulator.telemetry.egress's; the TTFT window and the request counts are the run core's: emulator.run).

Pure and clock-free: every call is given the time. Percentiles interpolate linearly between order
statistics, as numpy's default (`method="linear"`), so the dashboard, the recorder's summary and
a notebook using numpy agree. Publishing and recording live in `bus.py` and `recorder.py`.
A metric is never inf or NaN (issue 25): `check_finite` turns one into a one-line error where it
is computed, naming it and its inputs, rather than a crash in a schema far away.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Final

from emulator.errors import TelemetryError

_INF: Final = math.inf  # mypyc reads a Final float natively, math.isfinite by a call through the module


def check_finite(name: str, value: float | None, where: str = "") -> float | None:
    """`value` if it is a finite number or None; TelemetryError (one line naming the metric) if not."""
    if value is not None and not math.isfinite(value):
        raise TelemetryError(f"{where + ' ' if where else ''}{name}: {value} is not a finite number; "
                             "a metric's inputs must be finite (report this run's scenario as a bug)")
    return value


def check_row(row: dict[str, float | None], t_s: float) -> None:
    """Every value of a timeseries row finite (or None), else the error names the column and time.
    The time is formatted only for the error: formatting it per value cost a fifth of a case-study
    run on the virtual engine, and math.isfinite per value a twentieth (callgrind, issue 28)."""
    for name, value in row.items():
        if value is not None and not -_INF < value < _INF:  # not finite; compiled, a native compare
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
