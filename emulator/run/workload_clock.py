"""Workload time against run time: the arithmetic of playing a workload at an adjustable speed, for
both engines (the live engine's wall clock wraps it in emulator/live/pacing.py, the virtual engine's
arrivals read it against simulated time). Pure: run time comes in as `now`; no clock, no waiting.

A workload's arrival times are seconds of workload time. The rate knob changes how fast workload
time runs, so the arrival pattern (burstiness, a trace's gaps) keeps its shape at the new rate;
a pause stops it, and a resume goes on from where it stopped.
"""

from __future__ import annotations

import math


class WorkloadTime:
    """workload = anchor + speed * (now - run_anchor), with speed 0 while paused. Each change
    re-anchors at the workload time reached, so no change moves workload time already played."""

    __slots__ = ("base_rate_per_s", "speed", "is_paused", "_anchor_s", "_run_anchor_s")

    def __init__(self, base_rate_per_s: float | None, now: float = 0.0) -> None:
        if base_rate_per_s is not None and not base_rate_per_s > 0:
            raise ValueError(f"workload clock: base rate {base_rate_per_s} must be > 0, or None for a trace")
        self.base_rate_per_s = base_rate_per_s  # the scenario's rate; None for a trace replay
        self.speed = 1.0  # workload seconds per run second while playing
        self.is_paused = False
        self._anchor_s = 0.0
        self._run_anchor_s = now

    def workload_at(self, now: float) -> float:
        if self.is_paused:
            return self._anchor_s
        return self._anchor_s + self.speed * (now - self._run_anchor_s)

    def due_at(self, workload_s: float, now: float) -> float:
        """The run time at which workload time reaches `workload_s`: `now` if it has already,
        math.inf while paused (a resume or rate change re-plans)."""
        if self.is_paused:
            return now if workload_s <= self._anchor_s else math.inf
        at = self._run_anchor_s + (workload_s - self._anchor_s) / self.speed
        return now if now > at else at

    def set_rate(self, rate_per_s: float, now: float) -> None:
        """Play at `rate_per_s` (speed = rate / the base rate); a trace replay (no base rate) takes
        it as a factor on its pace. A paused workload stays paused and resumes at this speed."""
        if not rate_per_s > 0:
            raise ValueError(f"workload clock: rate {rate_per_s} must be > 0; pause to stop arrivals")
        self._rebase(now)
        self.speed = rate_per_s / (self.base_rate_per_s or 1.0)

    def pause(self, now: float) -> None:
        self._rebase(now)
        self.is_paused = True

    def resume(self, now: float) -> None:
        self._rebase(now)
        self.is_paused = False

    def _rebase(self, now: float) -> None:
        self._anchor_s = self.workload_at(now)
        self._run_anchor_s = now
