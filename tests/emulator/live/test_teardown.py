"""The teardown's step runner: budgets hold even against a task that swallows its cancellation (as
CPython 3.11's asyncio.wait_for does when the cancel lands as its inner future completes), and what
had to be killed is named."""

from __future__ import annotations

import asyncio
import time

import pytest

from emulator.live.teardown import HURRY_BUDGET_S, Outcome, Step, Teardown, in_thread, settle


async def _swallows_once(ran: list[str]) -> None:
    """Loops forever; the first cancellation is swallowed, as aiomqtt's publish does on 3.11."""
    swallowed = False
    while True:
        try:
            await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            if swallowed:
                raise
            swallowed = True
        ran.append("tick")


def test_settle_ends_a_task_that_swallowed_its_first_cancellation() -> None:
    async def main() -> tuple[list[asyncio.Task], asyncio.Task]:
        task = asyncio.create_task(_swallows_once([]))
        await asyncio.sleep(0.02)
        return await settle([task], budget_s=2.0), task

    left, task = asyncio.run(main())
    assert left == [] and task.cancelled()


def test_a_step_over_budget_is_killed_named_and_the_teardown_goes_on() -> None:
    killed_pids: list[int] = []

    async def main() -> Teardown:
        teardown = Teardown()
        never = asyncio.get_running_loop().create_future()
        await teardown.step(Step.WORKERS, never, kill=lambda: killed_pids.append(42) or ["worker w (pid 42)"],
                            budget_s=0.1)
        assert await teardown.step(Step.LINK, in_thread(lambda: "down")) == "down"
        return teardown

    teardown = asyncio.run(main())
    workers, link = teardown.records
    assert workers.outcome is Outcome.TIMED_OUT and workers.killed == ["worker w (pid 42)"] and killed_pids == [42]
    assert link.outcome is Outcome.OK and teardown.killed() == ["worker w (pid 42)"]
    assert [entry["step"] for entry in teardown.as_list()] == ["stop workers", "restore and remove the link"]


def test_a_second_signal_cuts_the_remaining_budget() -> None:
    async def main() -> Teardown:
        teardown = Teardown()
        teardown.hurry.set()
        await teardown.step(Step.WORKERS, asyncio.sleep(30), budget_s=30.0)
        return teardown

    (record,) = asyncio.run(main()).records
    assert record.outcome is Outcome.TIMED_OUT and record.seconds < 30


def test_a_failing_step_is_recorded_and_returns_none() -> None:
    async def boom() -> None:
        raise OSError("relay gone")

    async def main() -> tuple[Teardown, object]:
        teardown = Teardown()
        return teardown, await teardown.step(Step.LINK_COUNTERS, boom())

    teardown, result = asyncio.run(main())
    assert result is None and teardown.records[0].outcome is Outcome.FAILED
    assert "relay gone" in teardown.records[0].note


@pytest.mark.slow
def test_a_hurry_never_cuts_the_record_write() -> None:
    """Issue 25: the record (a report takes seconds) was cut to the hurry's 0.5 s, twice, and lost.
    A hurry set before the write, and one set during it, both leave the write to finish."""
    async def main() -> tuple[Teardown, list[object]]:
        teardown = Teardown()
        teardown.hurry.set()
        first = await teardown.step(Step.RECORD, in_thread(lambda: time.sleep(HURRY_BUDGET_S * 3) or "first"))
        teardown.hurry.clear()
        asyncio.get_running_loop().call_later(0.1, teardown.hurry.set)
        second = await teardown.step(Step.RECORD, in_thread(lambda: time.sleep(HURRY_BUDGET_S * 3) or "second"))
        return teardown, [first, second]

    teardown, docs = asyncio.run(main())
    assert docs == ["first", "second"]
    assert [r.outcome for r in teardown.records] == [Outcome.OK, Outcome.OK]
