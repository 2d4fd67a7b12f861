"""How a run ends, on both engines (README, "How a run ends").

Arrivals stop at the scenario's duration. The requests still open then get a drain (the
scenario's `drain_s`, by default max(duration_s, MIN_DRAIN_S)) to end on their own; when the drain
is over, each one still open fails `unfinished`, its detail naming the drain. A run whose requests
have all ended after the arrivals stopped ends at once. The operator's stop (the Live page's Stop,
a signal, a stop callback) ends it before: what is open fails `interrupted`. The policy reads no
clock: the live engine measures the drain on the wall clock, the virtual one in simulated seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

MIN_DRAIN_S: Final = 120.0


@dataclass(frozen=True, slots=True)
class EndPolicy:
    duration_s: float
    drain_s: float

    @classmethod
    def of(cls, duration_s: float, drain_s: float | None = None) -> EndPolicy:
        return cls(duration_s, max(duration_s, MIN_DRAIN_S) if drain_s is None else drain_s)

    @property
    def end_s(self) -> float:
        """When the drain is over: what is open then fails `unfinished`."""
        return self.duration_s + self.drain_s

    def unfinished_detail(self) -> str:
        return f"still open {self.drain_s:g} s after the scenario's {self.duration_s:g} s (the run's drain)"

    def words(self, num_unfinished: int) -> str:
        """summary.json's `meta.end_reason` of a run that ended by this policy."""
        if not num_unfinished:
            return "run ended"
        return (f"run ended: {num_unfinished} requests still open {self.drain_s:g} s after the scenario's "
                f"{self.duration_s:g} s failed unfinished")
