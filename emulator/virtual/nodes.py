"""The simulated instances: a request's mutable journey (`Journey`), FIFO prefill instances and
continuously batching decode instances. They keep time and queues; the gateway decides routes,
retries and role flips, and hears back through the callbacks it gives each node.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from emulator.control.router import NodeLoad
from emulator.control.types import NodeId, RequestSpec, Role
from emulator.virtual.core import Simulator
from emulator.virtual.costs import Curve
from emulator.virtual.link import Transfer


class Journey:
    """One request's progress through the current attempt; the gateway turns it into a record."""

    __slots__ = ("spec", "arrival_s", "attempts", "route", "prefill_node", "decode_node", "cached_len",
                 "incremental_len", "prefill_start_s", "prefill_end_s", "transfer_start_s",
                 "transfer_end_s", "kv_bytes", "first_token_s", "transfer", "is_done")

    route: str | None
    prefill_node: str | None
    decode_node: str | None
    prefill_start_s: float | None
    prefill_end_s: float | None
    transfer_start_s: float | None
    transfer_end_s: float | None
    kv_bytes: int | None
    first_token_s: float | None
    transfer: Transfer | None

    def __init__(self, spec: RequestSpec, arrival_s: float) -> None:
        self.spec = spec
        self.arrival_s = arrival_s  # at the gateway: the workload's time played at the knob's rate
        self.attempts = 0
        self.is_done = False
        self.reset()

    def reset(self) -> None:
        """Forget what the previous attempt reached (arrival and attempts stay)."""
        self.route = self.prefill_node = self.decode_node = None
        self.cached_len = 0
        self.incremental_len = self.spec.input_len
        self.prefill_start_s = self.prefill_end_s = self.transfer_start_s = None
        self.transfer_end_s = self.first_token_s = None
        self.kv_bytes = None
        self.transfer = None


class PrefillNode:
    """A FIFO prefill instance: one prompt at a time, T_prefill(incremental length) each.

    `on_start(node, journey, service_s)` and `on_end(node, journey, service_s)` tell the gateway;
    `epoch` grows at every kill, so a completion scheduled before it is recognised as stale.
    `load` is what the router sees; every change writes it to `board[seat]` too, the gateway's
    list of all prefill loads, so a dispatch hands the router that list as it stands.
    """

    def __init__(self, sim: Simulator, node: NodeId, prefill_s: Curve,
                 on_start: Callable[[PrefillNode, Journey, float], None],
                 on_end: Callable[[PrefillNode, Journey, float], None]) -> None:
        self.sim, self.node, self.name = sim, node, str(node)
        self.cluster = node.cluster
        self.prefill_s = prefill_s
        self.on_start, self.on_end = on_start, on_end
        self.queue: deque[Journey] = deque()
        self.busy: Journey | None = None
        self.queued_tokens = 0  # incremental tokens handed to this node and not yet prefilled
        self.is_up = True
        self.is_draining = False
        self.epoch = 0
        self._idle_load = self.load = NodeLoad(node, 0, 0, True)  # up and empty: the usual load
        self.board: list[NodeLoad] = [self.load]  # its own until the gateway seats it
        self.seat = 0

    def refresh(self) -> None:
        """Rebuild `load` after a change. A draining node is not up for routing: it finishes what
        it holds, then flips."""
        is_up, num_queued = self.is_up and not self.is_draining, len(self.queue) + (self.busy is not None)
        if is_up and not num_queued and not self.queued_tokens:
            load = self._idle_load
        else:
            load = NodeLoad(self.node, self.queued_tokens, num_queued, is_up)
        self.load = self.board[self.seat] = load

    @property
    def is_idle(self) -> bool:
        return self.busy is None and not self.queue

    def enqueue(self, journey: Journey) -> None:
        self.queued_tokens += journey.incremental_len
        if self.busy is None:
            self._start(journey)
        else:
            self.queue.append(journey)
        self.refresh()

    def _start(self, journey: Journey) -> None:
        service_s = self.prefill_s(journey.incremental_len)
        self.busy = journey
        now = journey.prefill_start_s = self.sim.now
        self.on_start(self, journey, service_s)  # starts a transfer; time does not move
        self.sim.schedule(now + service_s, self._end, (journey, self.epoch, service_s))

    def _end(self, event: tuple[Journey, int, float]) -> None:
        journey, epoch, service_s = event
        if epoch != self.epoch:
            return
        self.busy = None
        self.queued_tokens -= journey.incremental_len
        journey.prefill_end_s = self.sim.now
        self.on_end(self, journey, service_s)  # routes nothing: the load may wait for the refresh
        if self.queue and self.busy is None:
            self._start(self.queue.popleft())
        self.refresh()

    def kill(self) -> list[Journey]:
        """Go down; return what it held (in service first, then the queue in order)."""
        held = ([self.busy] if self.busy is not None else []) + list(self.queue)
        self.busy, self.queue, self.queued_tokens = None, deque(), 0
        self.is_up = False
        self.epoch += 1
        self.refresh()
        return held

    def restart(self) -> None:
        self.is_up = True
        self.refresh()

    def set_draining(self, draining: bool) -> None:
        self.is_draining = draining
        self.refresh()


class DecodeNode:
    """A decode instance with continuous batching: at most `max_batch` requests active, the rest
    wait FIFO. A request joins when its KV has arrived and a slot is free; its first token is
    delivered then, and it leaves after `decode_s(output_len)` (steps are not aligned to a batch
    clock: a join waits for no step boundary, so the slot count is the only coupling).
    """

    def __init__(self, sim: Simulator, node: NodeId, max_batch: int,
                 decode_s: Callable[[int], float], step_s: float,
                 on_finish: Callable[[DecodeNode, Journey, float], None],
                 on_idle: Callable[[DecodeNode], None]) -> None:
        self.sim, self.node, self.name = sim, node, str(node)
        self.max_batch = max_batch
        self.decode_s, self.step_s = decode_s, step_s
        self.on_finish, self.on_idle = on_finish, on_idle
        self.active: dict[str, Journey] = {}  # by request id, in join order (deterministic)
        self.waiting: deque[Journey] = deque()
        self.peak_active = 0
        self.is_up = True
        self.is_draining = False
        self.epoch = 0

    @property
    def num_held(self) -> int:
        return len(self.active) + len(self.waiting)

    @property
    def is_idle(self) -> bool:
        return not self.active and not self.waiting

    def admit(self, journey: Journey) -> None:
        journey.decode_node = self.name
        if len(self.active) < self.max_batch:
            self._join(journey)
        else:
            self.waiting.append(journey)

    def _join(self, journey: Journey) -> None:
        active, spec = self.active, journey.spec
        active[spec.id] = journey
        if len(active) > self.peak_active:
            self.peak_active = len(active)
        now = journey.first_token_s = self.sim.now
        self.sim.schedule(now + self.decode_s(spec.output_len), self._finish, (journey, self.epoch))

    def _finish(self, event: tuple[Journey, int]) -> None:
        journey, epoch = event
        if epoch != self.epoch:
            return
        spec = journey.spec
        del self.active[spec.id]
        self.on_finish(self, journey, self.step_s if spec.output_len > 1 else 0.0)
        waiting = self.waiting
        while waiting and len(self.active) < self.max_batch:
            self._join(waiting.popleft())
        if not self.active and not waiting:  # is_idle
            self.on_idle(self)

    def kill(self) -> list[Journey]:
        """Go down; return the active requests, then the waiting ones in order."""
        held = list(self.active.values()) + list(self.waiting)
        self.active, self.waiting = {}, deque()
        self.is_up = False
        self.epoch += 1
        return held

    def restart(self) -> None:
        self.is_up = True


AnyNode = PrefillNode | DecodeNode


def role_of(node: AnyNode) -> Role:
    return Role.PREFILL if isinstance(node, PrefillNode) else Role.DECODE
