"""The TTFTs of the last `window_s` seconds, the window both engines' metrics read (p50, p90).

A sample added at t stays while now - window_s < t. Kept sorted, so the sampler's percentiles are
an index away: an insert and an eviction are a bisect and a short memmove each, where sorting the
window at every sample costs more. Samples come in time order (both engines' clocks are monotonic).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import deque

from emulator.telemetry.metrics import sorted_percentile


class TtftWindow:
    __slots__ = ("window_s", "_times", "_values", "_sorted")

    def __init__(self, window_s: float) -> None:
        if not window_s > 0:
            raise ValueError(f"ttft window: window_s = {window_s} must be > 0")
        self.window_s = window_s
        self._times: deque[float] = deque()
        self._values: deque[float] = deque()  # in arrival order, to find what leaves
        self._sorted: list[float] = []

    def add(self, t_s: float, value: float) -> None:
        self._times.append(t_s)
        self._values.append(value)
        insort(self._sorted, value)

    def sorted_values(self, now_s: float) -> list[float]:
        """The values inside the window ending at `now_s`, ascending (every sample is <= now_s).
        The list is the window's own: read it, do not change it."""
        start, times, ordered = now_s - self.window_s, self._times, self._sorted
        while times and times[0] <= start:
            times.popleft()
            del ordered[bisect_left(ordered, self._values.popleft())]  # an equal value: the same
        return ordered

    def percentile(self, p: float, now_s: float) -> float | None:
        return sorted_percentile(self.sorted_values(now_s), p)

    def __len__(self) -> int:
        return len(self._times)
