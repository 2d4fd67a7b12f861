"""Workload time against run time (emulator.run.workload_clock), by scripted times: a rate change
keeps the arrival pattern's shape, a pause holds arrivals, a resume goes on where it stopped, a
trace scales its gaps. Then the same arithmetic under both engines' clocks: the virtual engine's
arrivals on simulated time, the live WorkloadClock on a settable wall clock."""

from __future__ import annotations

import asyncio
import copy
import math

import pytest

from emulator.live.pacing import WorkloadClock
from emulator.run.workload_clock import WorkloadTime
from emulator.scenario import parse_scenario
from emulator.virtual.engine import simulate
from tests.emulator.run.core_case import DOC, ROOT

ARRIVALS = [0.5, 1.0, 1.25, 3.0]  # a workload's arrival times (workload seconds), bursty on purpose


def due(clock: WorkloadTime, now: float) -> list[float]:
    return [clock.due_at(workload_s, now) for workload_s in ARRIVALS]


def test_at_the_base_rate_workload_time_is_run_time_from_the_start() -> None:
    clock = WorkloadTime(2.0, now=10.0)
    assert (clock.workload_at(10.0), clock.workload_at(12.5), clock.speed) == (0.0, 2.5, 1.0)
    assert due(clock, 10.0) == [10.5, 11.0, 11.25, 13.0]


def test_a_rate_change_keeps_the_pattern_and_what_was_played() -> None:
    clock = WorkloadTime(2.0)
    clock.set_rate(4.0, now=1.0)  # twice the base rate: the rest plays twice as fast
    assert clock.speed == 2.0 and clock.workload_at(1.0) == 1.0
    assert due(clock, 1.0) == [1.0, 1.0, 1.125, 2.0]  # the gaps halve; what is due is due now
    clock.set_rate(1.0, now=2.0)  # half the base rate
    assert clock.workload_at(2.0) == 3.0 and clock.workload_at(4.0) == 4.0
    assert clock.due_at(5.0, 2.0) == 6.0


def test_a_pause_holds_workload_time_and_a_resume_goes_on_where_it_stopped() -> None:
    clock = WorkloadTime(2.0)
    clock.pause(now=1.1)
    assert clock.is_paused and clock.workload_at(1.1) == clock.workload_at(50.0) == pytest.approx(1.1)
    assert due(clock, 20.0) == [20.0, 20.0, math.inf, math.inf]  # already due: now; the rest: never
    clock.set_rate(4.0, now=30.0)  # a rate change while paused stays paused
    assert clock.is_paused and clock.due_at(3.0, 30.0) == math.inf
    clock.resume(now=40.0)
    assert not clock.is_paused and clock.workload_at(40.0) == pytest.approx(1.1)
    assert clock.due_at(1.25, 40.0) == pytest.approx(40.075)  # at the rate set while paused
    assert clock.due_at(3.0, 40.0) == pytest.approx(40.95)


def test_a_trace_has_no_base_rate_and_the_rate_scales_its_gaps() -> None:
    clock = WorkloadTime(None)
    assert due(clock, 0.0) == ARRIVALS
    clock.set_rate(2.0, now=0.0)
    assert due(clock, 0.0) == [0.25, 0.5, 0.625, 1.5]


@pytest.mark.parametrize(("base", "rate", "words"), [
    (0.0, 1.0, "base rate 0.0 must be > 0"), (2.0, 0.0, "rate 0.0 must be > 0"),
    (2.0, -1.0, "rate -1.0 must be > 0"), (2.0, math.nan, "rate nan must be > 0")])
def test_a_rate_that_is_not_positive_is_refused(base: float, rate: float, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        WorkloadTime(base).set_rate(rate, 0.0)


# ---- the virtual engine's arrivals ----

def test_virtual_arrivals_play_the_workload_at_the_rate_a_knob_sets() -> None:
    """At 4 s the rate doubles: every later arrival comes at 4 s + its workload gap / 2."""
    doc = copy.deepcopy(DOC) | {"timeline": [{"at_s": 4.0, "set": {"workload.arrival.rate_per_s": 2.0}}]}
    doc["workload"] |= {"arrival": {"kind": "poisson", "rate_per_s": 1.0}, "max_requests": 12}
    run = simulate(parse_scenario(doc, ROOT))
    workload = {spec.id: spec.arrival_s for spec in run.loops.arrivals.requests}
    assert len(run.gateway.core.records) == 12 and any(w > 4.0 for w in workload.values())
    for record in run.gateway.core.records:
        w = workload[record.id]
        assert record.arrival_s == pytest.approx(w if w <= 4.0 else 4.0 + (w - 4.0) / 2.0)


# ---- the live engine's wall clock ----


class WallClock:
    """A settable stand-in for time.monotonic."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_the_live_clock_reads_workload_time_off_its_wall_clock() -> None:
    wall = WallClock()
    clock = WorkloadClock(2.0, clock=wall)
    wall.t = 101.0
    clock.set_rate(4.0)
    wall.t = 102.0
    assert (clock.now(), clock.speed, clock.base_rate_per_s) == (3.0, 2.0, 2.0)
    clock.pause()
    wall.t = 150.0
    assert clock.is_paused and clock.now() == 3.0
    clock.resume()
    wall.t = 150.5
    assert not clock.is_paused and clock.now() == 4.0


def test_the_live_wait_returns_once_due_and_wakes_on_every_change() -> None:
    async def scenario() -> None:
        wall = WallClock()
        clock = WorkloadClock(1.0, clock=wall)
        await asyncio.wait_for(clock.wait_until(0.0), 1.0)  # due already: no wait
        clock.pause()
        waiter = asyncio.create_task(clock.wait_until(5.0))
        await asyncio.sleep(0)
        wall.t = 500.0
        clock.set_rate(2.0)  # wakes it; still paused, so it waits on
        await asyncio.sleep(0)
        assert not waiter.done()
        clock.resume()
        wall.t = 502.5  # 0 + 2 x 2.5 s: due
        clock.set_rate(2.0)
        await asyncio.wait_for(waiter, 1.0)

    asyncio.run(scenario())
