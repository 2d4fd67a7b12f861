"""When the next request is due: the workload's own timeline, played at an adjustable speed.

Arrival times come from the scenario (seconds of workload time). An operator may change the arrival
rate or pause the run; that changes how fast workload time advances against the wall clock, so the
arrival process keeps its shape (burstiness, trace gaps) at the new rate.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class WorkloadClock:
    """Workload time = anchor + speed * (wall - wall_anchor); speed 0 while paused."""

    def __init__(self, base_rate_per_s: float | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.base_rate_per_s = base_rate_per_s  # the scenario's rate; None for a trace replay
        self._clock = clock
        self._wall_anchor, self._anchor = clock(), 0.0
        self._speed, self._is_paused = 1.0, False
        self._changed = asyncio.Event()

    def now(self) -> float:
        speed = 0.0 if self._is_paused else self._speed
        return self._anchor + speed * (self._clock() - self._wall_anchor)

    @property
    def is_paused(self) -> bool:
        return self._is_paused

    @property
    def speed(self) -> float:
        return self._speed

    def _rebase(self) -> None:
        self._anchor, self._wall_anchor = self.now(), self._clock()
        self._changed.set()

    def set_rate(self, rate_per_s: float) -> None:
        """Play the workload at `rate_per_s` (its base rate x speed); a trace replay scales its gaps."""
        base = self.base_rate_per_s or 1.0
        self._rebase()
        self._speed = rate_per_s / base

    def pause(self) -> None:
        self._rebase()
        self._is_paused = True

    def resume(self) -> None:
        self._rebase()
        self._is_paused = False

    async def wait_until(self, workload_s: float) -> None:
        """Sleep until workload time reaches `workload_s`, re-planning on every rate change."""
        while (left := workload_s - self.now()) > 0:
            self._changed.clear()
            timeout = None if self._is_paused else left / self._speed
            try:
                await asyncio.wait_for(self._changed.wait(), timeout)
            except TimeoutError:
                pass
