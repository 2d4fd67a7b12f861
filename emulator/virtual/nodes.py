"""The simulated instances: FIFO prefill instances and continuously batching decode instances.
They keep time and queues; the run core (emulator.run) decides routes, retries and role flips and
keeps the loads the router sees, and the gateway hears back (a prefill started or ended, a first
token, a request finished) through the callbacks it gives each node.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

from emulator.control.types import NodeId
from emulator.run.journey import Journey
from emulator.virtual.core import Simulator
from emulator.virtual.costs import Curve


class PrefillNode:
    """A FIFO prefill instance: one prompt at a time, T_prefill(incremental length) each.

    `on_start(node, journey, service_s)` and `on_end(node, journey, service_s)` tell the gateway;
    `epoch` grows at every kill or drop, so a completion scheduled before it is recognised as stale.
    `host_factor()`, when given (a profile's shared host), is asked as a prompt starts, with this
    node already counted busy, and multiplies its T_prefill: the share of the host when it starts,
    kept to its end (work starting or ending meanwhile does not re-time it).
    """

    def __init__(self, sim: Simulator, node: NodeId, prefill_s: Curve,
                 on_start: Callable[[PrefillNode, Journey, float], None],
                 on_end: Callable[[PrefillNode, Journey, float], None],
                 host_factor: Callable[[], float] | None = None) -> None:
        self.sim, self.node, self.name = sim, node, str(node)
        self.cluster = node.cluster
        self.prefill_s = prefill_s
        self.host_factor = host_factor
        self.on_start, self.on_end = on_start, on_end
        self.queue: deque[Journey] = deque()
        self.busy: Journey | None = None
        self.is_up = True
        self.epoch = 0

    @property
    def is_idle(self) -> bool:
        return self.busy is None and not self.queue

    def enqueue(self, journey: Journey) -> None:
        if self.busy is None:
            self._start(journey)
        else:
            self.queue.append(journey)

    def _start(self, journey: Journey) -> None:
        service_s = self.prefill_s(journey.incremental_len)
        self.busy = journey
        if self.host_factor is not None:
            service_s *= self.host_factor()
        now = self.sim.now
        self.on_start(self, journey, service_s)  # stamps the start, starts a transfer; time does not move
        self.sim.schedule(now + service_s, self._end, (journey, self.epoch, service_s))

    def _end(self, event: tuple[Journey, int, float]) -> None:
        journey, epoch, service_s = event
        if epoch != self.epoch:
            return
        self.busy = None
        self.on_end(self, journey, service_s)
        if self.queue and self.busy is None:
            self._start(self.queue.popleft())

    def drop(self, journey: Journey) -> None:
        """Let go of one request given up on elsewhere (its decode node was lost): out of the
        queue, or out of service (its scheduled end goes stale) with the next one started."""
        if self.busy is journey:
            self.busy = None
            self.epoch += 1
            if self.queue:
                self._start(self.queue.popleft())
        elif journey in self.queue:
            self.queue.remove(journey)

    def kill(self) -> None:
        """Go down, dropping what it held (the run core says which requests that was)."""
        self.busy, self.queue = None, deque()
        self.is_up = False
        self.epoch += 1

    def restart(self) -> None:
        self.is_up = True


class DecodeNode:
    """A decode instance with continuous batching: at most `max_batch` requests active, the rest
    wait FIFO. A request joins when its KV has arrived and a slot is free; its first token is
    delivered then, and it leaves after `decode_s(output_len)` (steps are not aligned to a batch
    clock: a join waits for no step boundary, so the slot count is the only coupling).

    With `step_at` (a profile's step by batch size and context, or a shared host), a joining
    request's step is `step_at(batch size with it, the batch's mean prompt length)`, asked once as
    it joins and kept for all its tokens: a batch that grows or shrinks later does not re-time the
    requests already in it. There the batch also keeps
    a step clock, as the live decode role does: a request joining a batch that is stepping waits for
    the step in progress to end before its first token is delivered (`_clock_s` is when the current
    run of steps began, `_clock_step_s` its step).
    """

    def __init__(self, sim: Simulator, node: NodeId, max_batch: int,
                 decode_s: Callable[[int], float], step_s: float,
                 on_first_token: Callable[[DecodeNode, Journey], None],
                 on_finish: Callable[[DecodeNode, Journey, float], None],
                 step_at: Callable[[int, float], float] | None = None) -> None:
        self.sim, self.node, self.name = sim, node, str(node)
        self.max_batch = max_batch
        self.decode_s, self.step_s = decode_s, step_s
        self.step_at = step_at
        self.on_first_token, self.on_finish = on_first_token, on_finish
        self.active: dict[str, Journey] = {}  # by request id, in join order (deterministic)
        self.waiting: deque[Journey] = deque()
        self.peak_active = 0
        self.is_up = True
        self.epoch = 0
        self._clock_s = 0.0
        self._clock_step_s = 0.0
        self._context_sum = 0  # prompt tokens of the active requests: the batch's caches

    @property
    def num_held(self) -> int:
        return len(self.active) + len(self.waiting)

    @property
    def is_idle(self) -> bool:
        return not self.active and not self.waiting

    def admit(self, journey: Journey) -> None:
        if len(self.active) < self.max_batch:
            self._enter(journey)
        else:
            self.waiting.append(journey)

    def _enter(self, journey: Journey) -> None:
        if self.step_at is None:
            self._join(journey)
        else:
            self._join_stepping(journey)

    def _join(self, journey: Journey) -> None:
        active, spec = self.active, journey.spec
        active[spec.id] = journey
        if len(active) > self.peak_active:
            self.peak_active = len(active)
        now = self.sim.now
        self.on_first_token(self, journey)  # delivered as it joins
        self.sim.schedule(now + self.decode_s(spec.output_len), self._finish, (journey, self.epoch, self.step_s))

    def _join_stepping(self, journey: Journey) -> None:
        """_join with a step clock: the first token waits for the step in progress, if any."""
        active = self.active
        was_stepping = len(active) > 0
        active[journey.spec.id] = journey
        self._context_sum += journey.spec.input_len
        if len(active) > self.peak_active:
            self.peak_active = len(active)
        now = self.sim.now
        num_active = len(active)
        step_s = self.step_at(num_active, self._context_sum / num_active) if self.step_at is not None else self.step_s
        start_s = now  # when its first token is delivered: now, or the end of the step in progress
        if was_stepping and self._clock_step_s > 0:
            steps_done = math.ceil((now - self._clock_s) / self._clock_step_s - 1e-9)
            start_s = self._clock_s + steps_done * self._clock_step_s
        else:
            self._clock_s, self._clock_step_s = now, step_s
        if start_s > now:
            self.sim.schedule(start_s, self._begin, (journey, self.epoch, step_s))
        else:
            self._begin((journey, self.epoch, step_s))

    def _begin(self, event: tuple[Journey, int, float]) -> None:
        journey, epoch, step_s = event
        if epoch != self.epoch or journey.spec.id not in self.active:
            return
        self.on_first_token(self, journey)
        output_len = journey.spec.output_len
        num_steps = output_len - 1 if output_len > 1 else 0
        self.sim.schedule(self.sim.now + num_steps * step_s, self._finish, (journey, self.epoch, step_s))

    def _finish(self, event: tuple[Journey, int, float]) -> None:
        journey, epoch, step_s = event
        if epoch != self.epoch:
            return
        spec = journey.spec
        del self.active[spec.id]
        if self.step_at is not None:
            self._context_sum -= spec.input_len
        self.on_finish(self, journey, step_s if spec.output_len > 1 else 0.0)
        waiting = self.waiting
        while waiting and len(self.active) < self.max_batch:
            self._enter(waiting.popleft())

    def kill(self) -> None:
        """Go down, dropping what it held (the run core says which requests that was)."""
        self.active, self.waiting = {}, deque()
        self._context_sum = 0
        self.is_up = False
        self.epoch += 1

    def restart(self) -> None:
        self.is_up = True


AnyNode = PrefillNode | DecodeNode
