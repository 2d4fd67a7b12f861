"""The virtual engine's clock: a heap of (t, seq, callback, arg) events run in time order; `seq`
breaks ties FIFO, so a run is deterministic. It knows no requests, nodes or links, and cancels
nothing: an entity ignores a stale event by an epoch or generation it checks when the event fires.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from heapq import heappop, heappush
from typing import Any

Callback = Callable[[Any], None]


class Simulator:
    """A synchronous event loop over simulated seconds.

    A heap of tuples beats SimPy's process/generator machinery for this engine: an event is one
    tuple push and pop and one plain call, with no generator resumption or event objects
    (bench/virtual_speed.py measures the rate). Callbacks take one argument, so no closure or
    tuple unpacking is built per event.
    """

    __slots__ = ("now", "num_events", "_heap", "_seq")

    def __init__(self, start_s: float = 0.0) -> None:
        self.now = float(start_s)
        self.num_events = 0
        self._heap: list[tuple[float, int, Callback, Any]] = []
        self._seq = 0

    def schedule(self, t: float, callback: Callback, arg: Any = None) -> None:
        """Run `callback(arg)` at simulated time `t` (not before now; not NaN)."""
        if not t >= self.now:
            raise ValueError(f"event time {t} is before now ({self.now}) or not a number; "
                             "schedule at now or later")
        self._seq = seq = self._seq + 1
        heappush(self._heap, (t, seq, callback, arg))

    def schedule_in(self, delay_s: float, callback: Callback, arg: Any = None) -> None:
        self.schedule(self.now + delay_s, callback, arg)

    def run(self, until: float | None = None, *, horizon_s: float = math.inf, max_events: int = -1) -> int:
        """Run events in order until none is left, the next one lies after `until` or `horizon_s`,
        or `max_events` have run (-1: no cap); returns the number of events run. The clock ends at
        `until` when every event up to it ran, even if it was idle; a horizon or an event cap leaves
        it at the last event run (the engine's budgets: emulator.virtual.budget)."""
        heap, pop = self._heap, heappop
        limit = min(math.inf if until is None else until, horizon_s)
        count = 0
        while heap and heap[0][0] <= limit and count != max_events:
            t, _, callback, arg = pop(heap)
            self.now = t
            callback(arg)
            count += 1
        if until is not None and until > self.now and count != max_events and until <= horizon_s:
            self.now = until
        self.num_events += count
        return count

    def next_time(self) -> float:
        """The time of the next event, inf when none is scheduled."""
        return self._heap[0][0] if self._heap else math.inf

    def __len__(self) -> int:
        return len(self._heap)
