"""When a virtual run ends, whatever its inputs: the run's end policy (emulator.run.ending, alike on
both engines) in simulated seconds, an event budget, and the reason the run ended, which
summary.json records (`meta.end_reason` in words, `meta.engine_details.sim` as `end`,
`time_budget_s` and `event_budget`).

A virtual run ends at the first of:
  1. no event left: every request has ended (`all_ended`);
  2. the caller's `until` (a saturation run measures a window and leaves the rest open: `until`);
  3. the end of the drain: the scenario's duration_s plus its drain_s, by default max(duration_s,
     120 s) (`time_budget`). Arrivals stop at duration_s, so this is how long requests may take to end;
     what is open then fails `unfinished`, as on the live engine (RunCore.drain_over);
  4. the event budget: 1,000,000 + 1,000 per request + 10 per second of the time budget
     (`event_budget`), a backstop against events that keep scheduling each other at one instant;
     what is open then fails `unfinished`, its detail naming the budget.
Neither budget depends on a knob's value, so no value (a link at 1 kbit/s, a cut link) can postpone
the end. Its user may stop it before (a signal, the Live page's Stop, a stop callback: `stopped`): what is open
then fails `interrupted`, and the run's outcome is `stopped` (emulator.telemetry.outcome).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from emulator.run.ending import EndPolicy

BASE_EVENTS = 1_000_000
EVENTS_PER_REQUEST = 1_000  # a case-study run takes ~6; a congested fluid link re-times every transfer
EVENTS_PER_SIM_S = 10  # the 1 s sampler, timeline events and scheduler ticks


class SimEnd(StrEnum):
    ALL_ENDED = "all_ended"
    UNTIL = "until"
    TIME_BUDGET = "time_budget"
    EVENT_BUDGET = "event_budget"
    STOPPED = "stopped"  # its user stopped it: a signal or a stop callback (emulator.virtual.loops.RunStopped)


@dataclass(frozen=True, slots=True)
class EndBudget:
    """How far one virtual run may go: simulated seconds (`end_s`) and events (`max_events`)."""

    end_s: float
    max_events: int
    drain_s: float = 0.0

    @classmethod
    def of(cls, duration_s: float, num_requests: int, drain_s: float | None = None) -> EndBudget:
        """The budgets of a run of `duration_s` arrivals over at most `num_requests` requests."""
        ending = EndPolicy.of(duration_s, drain_s)
        events = BASE_EVENTS + EVENTS_PER_REQUEST * num_requests + EVENTS_PER_SIM_S * math.ceil(ending.end_s)
        return cls(ending.end_s, events, ending.drain_s)

    def end(self, *, num_run: int, num_left: int, next_s: float, until: float | None) -> SimEnd:
        """Why the event loop returned, from what it did (`num_run` events, `num_left` still queued,
        the next at `next_s`)."""
        if num_left == 0:
            return SimEnd.ALL_ENDED
        if num_run == self.max_events:
            return SimEnd.EVENT_BUDGET
        if until is not None and until <= self.end_s and next_s > until:
            return SimEnd.UNTIL
        return SimEnd.TIME_BUDGET

    def detail(self, end: SimEnd, now_s: float) -> str:
        """A failed request's `fail_detail` at this end."""
        if end is SimEnd.EVENT_BUDGET:
            return f"still open when the run's event budget ({self.max_events:,} events) ran out at t={now_s:.1f} s"
        if end is SimEnd.TIME_BUDGET:
            return (f"still open at the run's simulated-time budget ({self.end_s:g} s: the duration "
                    f"and a {self.drain_s:g} s drain)")
        return "still open when the simulation stopped"

    def words(self, end: SimEnd, num_failed: int) -> str:
        """summary.json's `meta.end_reason`."""
        if end is SimEnd.ALL_ENDED:
            return f"run ended: {num_failed} requests still open when the events ran out failed unfinished" \
                if num_failed else "run ended"
        if end is SimEnd.UNTIL:
            return "run ended: requests still open when the simulation stopped"
        spent = (f"event budget of {self.max_events:,} events" if end is SimEnd.EVENT_BUDGET
                 else f"simulated-time budget of {self.end_s:g} s (duration + {self.drain_s:g} s drain)")
        return f"run ended: {spent} spent; {num_failed} requests still open failed unfinished"

    def as_meta(self, end: SimEnd) -> dict[str, object]:
        return {"end": end.value, "time_budget_s": self.end_s, "event_budget": self.max_events}
