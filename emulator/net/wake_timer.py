"""How late this process wakes from a timed sleep, learned online, so relays can aim early.

A sleep of 40 ms ends 50-200 us late, more on VMs whose idle vCPUs halt (the wake-up latency grows
with the idle time). Relays sleep `aim(wait_s)` instead of `wait_s` and spin the remainder with
zero-length sleeps that yield the GIL, so packets leave within tens of microseconds of their time.
No clock of its own: callers pass what they asked for and what they measured.
"""

from __future__ import annotations

INITIAL_LATE_S = 100e-6
MAX_LATE_S = 1e-3
ALPHA = 0.2  # weight of the newest oversleep in the running estimate


class WakeEstimator:
    """An exponentially weighted estimate of oversleep, clipped to [0, MAX_LATE_S]."""

    __slots__ = ("late_s",)

    def __init__(self, initial_s: float = INITIAL_LATE_S) -> None:
        self.late_s = initial_s

    def aim(self, wait_s: float) -> float:
        """How long to sleep to wake near `wait_s` from now; <= 0 means spin instead."""
        return wait_s - self.late_s

    def observe(self, asked_s: float, slept_s: float) -> None:
        late = min(max(slept_s - asked_s, 0.0), MAX_LATE_S)
        self.late_s += ALPHA * (late - self.late_s)
