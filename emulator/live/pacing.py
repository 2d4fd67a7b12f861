"""When the next request is due, on the wall clock: the run core's workload time
(emulator.run.workload_clock) read against time.monotonic, and an asyncio wait that re-plans
whenever the operator changes the rate, pauses or resumes.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable

from emulator.run.workload_clock import WorkloadTime


class WorkloadClock:
    """Workload time on the wall clock (WorkloadTime holds the arithmetic); `wait_until` sleeps
    until an arrival is due and wakes at every change to re-plan."""

    def __init__(self, base_rate_per_s: float | None, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._time = WorkloadTime(base_rate_per_s, clock())
        self._changed = asyncio.Event()

    @property
    def base_rate_per_s(self) -> float | None:
        return self._time.base_rate_per_s

    def now(self) -> float:
        return self._time.workload_at(self._clock())

    @property
    def is_paused(self) -> bool:
        return self._time.is_paused

    @property
    def speed(self) -> float:
        return self._time.speed

    def set_rate(self, rate_per_s: float) -> None:
        """Play the workload at `rate_per_s` (its base rate x speed); a trace replay scales its gaps."""
        self._time.set_rate(rate_per_s, self._clock())
        self._changed.set()

    def pause(self) -> None:
        self._time.pause(self._clock())
        self._changed.set()

    def resume(self) -> None:
        self._time.resume(self._clock())
        self._changed.set()

    async def wait_until(self, workload_s: float) -> None:
        """Sleep until workload time reaches `workload_s`, re-planning on every change."""
        while (left := self._time.due_at(workload_s, now := self._clock()) - now) > 0:
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), None if left == math.inf else left)
            except TimeoutError:
                pass
