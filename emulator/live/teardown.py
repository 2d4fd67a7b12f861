"""The ordered teardown of a live run: named steps, each with a time budget, recorded for summary.json.

Every way a live run ends (the scenario's end, Ctrl-C, SIGTERM, the dashboard's Stop) walks the
same steps (`Step`). A step that does not finish within its budget is cancelled and its `kill`
action runs (e.g. SIGKILL to the processes it waited on); what was killed or abandoned is named in
the step's record, and the teardown goes on. Nothing here waits without a bound: cancellation is
repeated until it lands (CPython 3.11's `asyncio.wait_for` swallows a cancellation that arrives as
its inner future completes, gh-86296, and aiomqtt's publish waits through it), and blocking calls
run in daemon threads, so an abandoned one neither blocks the loop nor the interpreter's exit.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")

RECANCEL_PERIOD_S = 0.05  # how often a task that has not ended yet is cancelled again
HURRY_BUDGET_S = 0.5  # a step's budget once a second stop signal has come


class Step(StrEnum):
    """The teardown's steps, in the order they run."""

    LOOPS = "stop arrivals and loops"
    FAIL_OPEN = "fail open requests"
    RECORD = "write the record"
    STATUS = "announce the end"
    WORKERS = "stop workers"
    CONNECTIONS = "close worker connections"
    LINK_COUNTERS = "read link counters"
    TELEMETRY = "close telemetry"
    BROKER = "stop broker"
    LINK = "restore and remove the link"
    STRAYS = "end stray tasks"


# Seconds each step may take before what it waits on is killed. Together they keep a stop well
# inside 10 s even when a worker ignores SIGTERM or the relay stops answering.
BUDGET_S: dict[Step, float] = {
    Step.LOOPS: 1.0, Step.FAIL_OPEN: 2.0, Step.RECORD: 30.0, Step.STATUS: 1.0, Step.WORKERS: 4.0, Step.CONNECTIONS: 1.0,
    Step.LINK_COUNTERS: 1.0, Step.TELEMETRY: 1.5, Step.BROKER: 2.0, Step.LINK: 3.0, Step.STRAYS: 1.0,
}
# Steps a hurry never cuts: the record is written whole first, whatever the signals (issue 25: a
# report takes over HURRY_BUDGET_S, and both writes were cut, the record lost); the hurry starts after.
UNHURRIED = frozenset({Step.RECORD})


class Outcome(StrEnum):
    OK = "ok"
    TIMED_OUT = "timed_out"  # over budget: cancelled, and its kill action ran
    FAILED = "failed"  # raised; the teardown went on


@dataclass(slots=True)
class StepRecord:
    step: Step
    seconds: float
    outcome: Outcome
    killed: list[str] = field(default_factory=list)
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"step": self.step.value, "seconds": round(self.seconds, 3), "outcome": self.outcome.value,
                "killed": list(self.killed), "note": self.note}


async def settle(tasks: Iterable[asyncio.Task], budget_s: float) -> list[asyncio.Task]:
    """Cancel `tasks` and wait for them, cancelling again every RECANCEL_PERIOD_S until `budget_s`
    passes; returns the ones that still had not ended (they are abandoned)."""
    pending = {t for t in tasks if not t.done()}
    deadline = time.monotonic() + budget_s
    while pending:
        for task in pending:
            task.cancel()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        _, pending = await asyncio.wait(pending, timeout=min(RECANCEL_PERIOD_S, remaining))
    return sorted(pending, key=lambda t: t.get_name())


async def in_thread(fn: Callable[[], T]) -> T:
    """`fn()` in a daemon thread of its own: unlike `asyncio.to_thread`, one that never returns
    is left behind at exit instead of being joined by `asyncio.run`."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def deliver(setter: Callable[[Any], None], value: Any) -> None:
        if not future.done():
            setter(value)

    def target() -> None:
        try:
            value = fn()
        except BaseException as err:  # handed to the awaiting task
            loop.call_soon_threadsafe(deliver, future.set_exception, err)
        else:
            loop.call_soon_threadsafe(deliver, future.set_result, value)

    threading.Thread(target=target, name=f"teardown-{getattr(fn, '__name__', 'call')}", daemon=True).start()
    return await future


class Teardown:
    """Runs the steps and keeps their records. `hurry` (set by a second stop signal) cuts every
    remaining budget to HURRY_BUDGET_S, but for the UNHURRIED steps (the record's writes)."""

    def __init__(self) -> None:
        self.records: list[StepRecord] = []
        self.hurry = asyncio.Event()
        self._killed: list[str] | None = None  # what the running step's own work killed

    def as_list(self) -> list[dict[str, Any]]:
        return [r.as_dict() for r in self.records]

    def killed(self) -> list[str]:
        return [name for r in self.records for name in r.killed]

    def add_killed(self, names: list[str]) -> None:
        """Name parts the running step (else the last one) had to kill or abandon."""
        if self._killed is not None:
            self._killed.extend(names)
        elif names and self.records:
            self.records[-1].killed.extend(names)

    async def step(self, step: Step, work: Awaitable[T], kill: Callable[[], list[str]] | None = None,
                   budget_s: float | None = None) -> T | None:
        """Run `work` within the step's budget; None when it timed out or failed (both recorded)."""
        budget = BUDGET_S.get(step, 5.0) if budget_s is None else budget_s
        if self.hurry.is_set() and step not in UNHURRIED:
            budget = min(budget, HURRY_BUDGET_S)
        started, self._killed = time.monotonic(), []
        try:
            return await self._run(step, work, kill, budget, started)
        finally:
            self._killed = None

    async def _run(self, step: Step, work: Awaitable[T], kill: Callable[[], list[str]] | None, budget: float,
                   started: float) -> T | None:
        task = asyncio.ensure_future(work)
        hurry = asyncio.ensure_future(self.hurry.wait() if step not in UNHURRIED else asyncio.Event().wait())
        try:
            await asyncio.wait({task, hurry}, timeout=budget, return_when=asyncio.FIRST_COMPLETED)
            if not task.done() and hurry.done():  # a second signal: what is left gets a short budget
                await asyncio.wait({task}, timeout=max(0.0, min(budget, HURRY_BUDGET_S) -
                                                       (time.monotonic() - started)))
        finally:
            hurry.cancel()
        if task.done():
            return self._finish(step, started, task)
        killed = self._killed + _run_kill(kill)
        abandoned = await settle([task], HURRY_BUDGET_S)
        if abandoned:
            killed.append(f"task {abandoned[0].get_name()} (abandoned: did not end when cancelled)")
        record = StepRecord(step, time.monotonic() - started, Outcome.TIMED_OUT, killed,
                            f"not done within {budget:g} s")
        log.warning("teardown: %s: %s; killed %s", step.value, record.note, ", ".join(killed) or "nothing")
        self.records.append(record)
        return None

    def _finish(self, step: Step, started: float, task: asyncio.Future[T]) -> T | None:
        seconds = time.monotonic() - started
        if task.cancelled() or task.exception() is not None:
            err = "cancelled" if task.cancelled() else f"{type(task.exception()).__name__}: {task.exception()}"
            log.warning("teardown: %s failed: %s", step.value, err)
            self.records.append(StepRecord(step, seconds, Outcome.FAILED, list(self._killed or []),
                                           " ".join(err.split())[:300]))
            return None
        self.records.append(StepRecord(step, seconds, Outcome.OK, list(self._killed or [])))
        return task.result()


def _run_kill(kill: Callable[[], list[str]] | None) -> list[str]:
    if kill is None:
        return []
    try:
        return list(kill())
    except Exception as err:  # the kill itself failing must not stop the teardown
        log.warning("teardown: kill failed: %s", err)
        return [f"kill failed: {err}"]
