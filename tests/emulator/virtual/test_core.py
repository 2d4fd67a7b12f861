"""The heap event loop: time order, FIFO among equal times, bounded runs, refused past times."""

from __future__ import annotations

import math

import pytest

from emulator.virtual.core import Simulator


def test_events_run_in_time_order_and_ties_in_scheduling_order() -> None:
    sim, log = Simulator(), []
    for t, name in ((2.0, "c"), (1.0, "a"), (2.0, "d"), (1.0, "b"), (0.0, "start")):
        sim.schedule(t, lambda n: log.append((sim.now, n)), name)
    assert sim.run() == 5
    assert log == [(0.0, "start"), (1.0, "a"), (1.0, "b"), (2.0, "c"), (2.0, "d")]


def test_callbacks_schedule_more_events_including_at_now() -> None:
    sim, log = Simulator(), []

    def tick(n: int) -> None:
        log.append((sim.now, n))
        if n < 3:
            sim.schedule_in(0.5 if n % 2 else 0.0, tick, n + 1)

    sim.schedule(1.0, tick, 0)
    sim.run()
    assert log == [(1.0, 0), (1.0, 1), (1.5, 2), (1.5, 3)]
    assert sim.num_events == 4


def test_run_until_stops_before_later_events_and_resumes() -> None:
    sim, log = Simulator(), []
    for t in (1.0, 2.0, 3.0):
        sim.schedule(t, log.append, t)
    assert sim.run(until=2.0) == 2
    assert (log, sim.now, sim.next_time(), len(sim)) == ([1.0, 2.0], 2.0, 3.0, 1)
    sim.run(until=10.0)
    assert (log, sim.now, sim.next_time()) == ([1.0, 2.0, 3.0], 10.0, math.inf)


@pytest.mark.parametrize("t", [0.5, math.nan])
def test_an_event_in_the_past_or_at_nan_is_refused(t: float) -> None:
    sim = Simulator(start_s=1.0)
    with pytest.raises(ValueError, match="before now"):
        sim.schedule(t, print)


def test_an_event_cap_stops_the_loop_and_leaves_the_clock_at_the_last_event() -> None:
    """The engine's event budget: a callback that keeps scheduling at `now` cannot run forever."""
    sim = Simulator()

    def again(_: object) -> None:
        sim.schedule(sim.now, again)

    sim.schedule(1.0, again)
    assert sim.run(until=5.0, max_events=100) == 100
    assert (sim.now, sim.num_events, len(sim)) == (1.0, 100, 1)


def test_a_horizon_leaves_later_events_and_the_clock_where_the_last_one_ran() -> None:
    sim, log = Simulator(), []
    for t in (1.0, 2.0, 3.0):
        sim.schedule(t, log.append, t)
    assert sim.run(until=10.0, horizon_s=2.5) == 2
    assert (log, sim.now, sim.next_time()) == ([1.0, 2.0], 2.0, 3.0)
    assert sim.run(horizon_s=2.5) == 0 and sim.now == 2.0
