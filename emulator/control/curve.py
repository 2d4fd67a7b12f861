"""Scalar evaluation of profile tables for code that runs per event: `Curve` (one table) and
`ClusterCurves` (one per cluster, the router's prefill estimate). Compiled with the hot path
(emulator/virtual/accel.py); the tables themselves stay PiecewiseLinear (profiles.py).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from emulator.control.profiles import MIN_VALUE, PiecewiseLinear
from emulator.control.types import Cluster

_REMOTE = Cluster.REMOTE


@dataclass(frozen=True, slots=True)
class Curve:
    """Scalar evaluation of a PiecewiseLinear with the same arithmetic (same segment choice, same
    float operations, same floor), so the engine and the throughput model agree to the last bit."""

    xs: tuple[float, ...]
    ys: tuple[float, ...]
    slopes: tuple[float, ...]

    @classmethod
    def from_table(cls, table: PiecewiseLinear) -> Curve:
        xs, ys = table.xs, table.ys
        slopes = tuple((ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i]) for i in range(len(xs) - 1))
        return cls(xs, ys, slopes)

    def __call__(self, x: float) -> float:
        i = bisect_right(self.xs, x) - 1
        last = len(self.slopes) - 1
        i = 0 if i < 0 else (last if i > last else i)
        y = self.ys[i] + self.slopes[i] * (x - self.xs[i])
        return y if y > MIN_VALUE else MIN_VALUE


@dataclass(frozen=True, slots=True)
class ClusterCurves:
    """T(tokens) of one instance of each cluster: called as `(cluster, tokens)`, the router's
    PrefillEstimate. A compiled call where a closure over PiecewiseLinear.at ran interpreted per
    candidate node (5 % of a whole-trace replay, issue 15); the same values to the bit."""

    remote: Curve
    local: Curve

    def __call__(self, cluster: Cluster, tokens: int) -> float:
        return self.remote(tokens) if cluster is _REMOTE else self.local(tokens)
