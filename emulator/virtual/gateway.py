"""The simulated gateway: routes each request with the shared Router (simulated time, loads from the
instance queues), moves its KV over the fluid link or local RDMA, picks a decode instance, ends it
once (completed or failed with a reason), and handles kills, restarts and drain-then-flip.
Policy stays in the control plane; loops.py drives the scheduler and the timeline.
"""

from __future__ import annotations

import logging
from bisect import bisect_left, insort
from collections import deque
from typing import Final

from emulator.control.scheduler import DualTimescaleScheduler
from emulator.control.types import Cluster, FailReason, NodeId, RequestSpec, RequestStatus, Role
from emulator.plane import ControlPlane
from emulator.telemetry.records import RequestRecord
from emulator.virtual.core import Simulator
from emulator.virtual.costs import CostModel
from emulator.virtual.link import FluidLink
from emulator.virtual.nodes import AnyNode, DecodeNode, Journey, PrefillNode, role_of

log = logging.getLogger(__name__)
MAX_ATTEMPTS = 3  # as the live gateway: a request whose worker died is tried at most this often
TTFT_WINDOW_S = 30.0
_REMOTE, _LOCAL = Cluster.REMOTE, Cluster.LOCAL  # bound once: Enum class attributes are slow (3.11)


# How a request ended, as its record holds it: the enums' values, bound once (as _REMOTE above)
COMPLETED: Final = RequestStatus.COMPLETED.value
FAILED: Final = RequestStatus.FAILED.value
NO_PREFILL_NODE: Final = FailReason.NO_PREFILL_NODE.value
NO_DECODE_NODE: Final = FailReason.NO_DECODE_NODE.value
WORKER_LOST: Final = FailReason.WORKER_LOST.value
UNFINISHED: Final = FailReason.UNFINISHED.value  # still open when the simulation stopped (a bounded run)


class Gateway:
    """Dispatch and bookkeeping for every request; `records` holds each request's one ending.

    Local instances keep their slot index through role flips (local-prefill-2 becomes
    local-decode-2), as the scheduler's RoleChange and the live gateway name them.
    """

    def __init__(self, sim: Simulator, plane: ControlPlane, costs: CostModel, link: FluidLink,
                 reverse_link: FluidLink, *, num_remote: int, num_local: int, n_p: int,
                 block_tokens: int, use_index: bool) -> None:
        self.sim, self.plane, self.costs = sim, plane, costs
        self.router, self.index, self.scheduler = plane.router, plane.index, plane.scheduler
        self.link, self.reverse_link = link, reverse_link
        self.block_tokens = block_tokens
        self.tail_fraction = costs.tail_fraction  # read per request: kept, not recomputed
        self.local_rate_bytes_per_s = costs.local_rate_bytes_per_s
        self.use_index = use_index  # False only when no lookup can hit (engine.needs_index)
        self.fed_scheduler: DualTimescaleScheduler | None = self.scheduler  # None while no loop runs
        self.remote = [self._prefill(NodeId(Cluster.REMOTE, Role.PREFILL, i)) for i in range(num_remote)]
        self.local: list[AnyNode] = [
            self._prefill(NodeId(Cluster.LOCAL, Role.PREFILL, i)) if i < n_p
            else self._decode(NodeId(Cluster.LOCAL, Role.DECODE, i)) for i in range(num_local)]
        self._reindex()
        self.records: list[RequestRecord] = []
        self.ttft = TtftWindow(TTFT_WINDOW_S)
        self.in_transit: dict[str, Journey] = {}  # prefill ended, KV not yet at a decode node
        self.open: dict[str, Journey] = {}  # arrived and not ended, by request id
        self.num_arrived = self.num_completed = self.num_failed = 0

    # ---- instances ----

    def _prefill(self, node: NodeId) -> PrefillNode:
        curve = self.costs.prefill_s[node.cluster]
        return PrefillNode(self.sim, node, curve, self._on_prefill_start, self._on_prefill_end)

    def _decode(self, node: NodeId) -> DecodeNode:
        return DecodeNode(self.sim, node, self.costs.max_decode_batch, self.costs.decode_s,
                          self.costs.decode_step_s, self._on_decode_finish, self._on_decode_idle)

    def _reindex(self) -> None:
        prefill_local = [n for n in self.local if isinstance(n, PrefillNode)]
        self.prefill_nodes: list[PrefillNode] = self.remote + prefill_local
        self.loads = [n.load for n in self.prefill_nodes]  # what the router sees, kept by the nodes
        for seat, node in enumerate(self.prefill_nodes):
            node.board, node.seat = self.loads, seat
        self.decode_nodes: list[DecodeNode] = [n for n in self.local if isinstance(n, DecodeNode)]
        self.n_p = len(prefill_local)
        self.local_prefill_nodes = prefill_local

    def slot(self, node: NodeId) -> AnyNode:
        """The instance a NodeId names, current role or not (local nodes by slot)."""
        return self.remote[node.index] if node.cluster is Cluster.REMOTE else self.local[node.index]

    @property
    def in_flight(self) -> int:
        return self.num_arrived - self.num_completed - self.num_failed

    # ---- the request path ----

    def arrive(self, spec: RequestSpec) -> None:
        self.num_arrived += 1
        now = self.sim.now
        if self.fed_scheduler is not None:
            self.fed_scheduler.observe_arrival(now, spec.input_len)
        journey = Journey(spec, now)
        self.open[spec.id] = journey
        self.dispatch(journey)

    def dispatch(self, journey: Journey) -> None:
        """Route one attempt and hand it to its prefill instance (after a cached-prefix transfer)."""
        journey.attempts += 1
        spec = journey.spec
        decision = self.router.decide(spec, self.loads, self.sim.now)
        chosen, route = decision.node, decision.route
        if chosen is None or route is None:
            log.debug("request %s: %s", spec.id, decision.reason)
            self._fail(journey, NO_PREFILL_NODE, decision.reason)
            return
        # the decision names one of prefill_nodes: its slot finds it without hashing a NodeId
        node = self.remote[chosen.index] if chosen.cluster is _REMOTE else self.local[chosen.index]
        assert isinstance(node, PrefillNode)
        journey.route, journey.prefill_node = route._value_, node.name
        journey.cached_len, journey.incremental_len = decision.cached_len, decision.incremental_len
        journey.kv_bytes = int(self.costs.kv_bytes(spec.input_len))
        move = decision.cache_transfer
        if move is None:
            node.enqueue(journey)
            return
        link = self.link if move.to_cluster is _LOCAL else self.reverse_link
        journey.transfer = link.start(self.costs.kv_bytes(move.tokens), self._on_prefix_arrived,
                                      (journey, journey.attempts, node))

    def _on_prefix_arrived(self, event: tuple[Journey, int, PrefillNode]) -> None:
        journey, attempt, node = event
        if journey.is_done or journey.attempts != attempt:
            return
        journey.transfer = None
        if node.is_up and not node.is_draining:
            node.enqueue(journey)
        else:
            self._retry_or_fail(journey, WORKER_LOST, f"worker lost: {node.name} (down or draining when a "
                                "cached prefix reached it)")

    def _on_prefill_start(self, node: PrefillNode, journey: Journey, service_s: float) -> None:
        """Layer-wise pipelining: the KV starts to flow when the prefill starts."""
        journey.transfer_start_s = self.sim.now
        if node.cluster is _REMOTE:
            journey.transfer = self.link.start(journey.kv_bytes or 0, self._on_kv_arrived,
                                               (journey, journey.attempts), service_s,
                                               self.tail_fraction)

    def _on_prefill_end(self, node: PrefillNode, journey: Journey, service_s: float) -> None:
        now, spec = self.sim.now, journey.spec
        if self.use_index:
            full_blocks = min(spec.input_len // self.block_tokens, len(spec.block_hashes))
            if full_blocks:
                self.index.insert(node.node, spec.block_hashes[:full_blocks], now)
        if self.fed_scheduler is not None:
            self.fed_scheduler.observe_prefill(node.cluster, journey.incremental_len, service_s, now)
        self.in_transit[spec.id] = journey
        if journey.transfer is not None:
            self.link.end_production(journey.transfer)
        else:  # local RDMA at a fixed rate, pipelined the same way
            rate, size, start = self.local_rate_bytes_per_s, journey.kv_bytes or 0, journey.prefill_start_s
            assert start is not None  # set when the prefill started
            done = max(now + size * self.tail_fraction / rate, start + size / rate)
            self.sim.schedule(done, self._on_kv_arrived, (journey, journey.attempts))
        if node.is_draining and node.is_idle:
            self._flip(node)

    def _on_kv_arrived(self, event: tuple[Journey, int]) -> None:
        journey, attempt = event
        if journey.is_done or journey.attempts != attempt:
            return
        journey.transfer_end_s, journey.transfer = self.sim.now, None
        del self.in_transit[journey.spec.id]
        decode = self._pick_decode()
        if decode is None:
            self._fail(journey, NO_DECODE_NODE, "no decode node is up")
        else:
            decode.admit(journey)

    def _pick_decode(self) -> DecodeNode | None:
        """The up instance holding the fewest requests (draining ones last, lowest slot on ties):
        the first minimum of (is_draining, held), compared without building key tuples."""
        best, best_draining, best_held = None, True, 0
        for node in self.decode_nodes:
            if node.is_up:
                draining, held = node.is_draining, len(node.active) + len(node.waiting)
                if best is None or (draining < best_draining
                                    or (draining == best_draining and held < best_held)):
                    best, best_draining, best_held = node, draining, held
        return best

    def _on_decode_finish(self, node: DecodeNode, journey: Journey, tpot_s: float) -> None:
        self._end(journey, COMPLETED, tpot_s, None, None)

    def _on_decode_idle(self, node: DecodeNode) -> None:
        if node.is_draining:
            self._flip(node)

    # ---- endings ----

    def _fail(self, journey: Journey, reason: str, detail: str) -> None:
        """End the request failed: `reason` a FailReason value, `detail` the words."""
        self._let_go(journey)
        self._end(journey, FAILED, None, reason, detail)

    def _retry_or_fail(self, journey: Journey, reason: str, detail: str) -> None:
        if journey.attempts >= MAX_ATTEMPTS:
            self._fail(journey, reason, detail)
            return
        self._let_go(journey)
        journey.reset()
        self.dispatch(journey)

    def _let_go(self, journey: Journey) -> None:
        """Stop what the attempt still has in motion (a transfer on either link direction)."""
        if journey.transfer is not None:
            self.link.cancel(journey.transfer)
            self.reverse_link.cancel(journey.transfer)
            journey.transfer = None
        self.in_transit.pop(journey.spec.id, None)

    def _end(self, journey: Journey, status: str, tpot_s: float | None, reason: str | None,
             detail: str | None) -> None:
        journey.is_done = True
        del self.open[journey.spec.id]
        spec, now, first = journey.spec, self.sim.now, journey.first_token_s
        start, arrival = journey.prefill_start_s, journey.arrival_s
        self.records.append(RequestRecord(
            id=spec.id, arrival_s=arrival, input_len=spec.input_len,
            cached_len=journey.cached_len, incremental_len=journey.incremental_len,
            route=journey.route, prefill_node=journey.prefill_node, decode_node=journey.decode_node,
            queue_s=None if start is None else start - arrival, prefill_start_s=start,
            prefill_end_s=journey.prefill_end_s, transfer_start_s=journey.transfer_start_s,
            transfer_end_s=journey.transfer_end_s, kv_bytes=journey.kv_bytes, first_token_s=first,
            ttft_s=None if first is None else first - arrival, tpot_s=tpot_s,
            output_len=spec.output_len, finish_s=now, status=status, fail_reason=reason,
            fail_detail=detail))
        if first is not None and status == COMPLETED:
            self.num_completed += 1
            self.ttft.add(now, first - arrival)  # the record's ttft_s, computed alike
        else:
            self.num_failed += 1

    def fail_open(self) -> None:
        """End every request still open: the simulation stopped before they did."""
        for journey in list(self.open.values()):
            self._fail(journey, UNFINISHED, "still open when the simulation stopped")

    # ---- instances coming, going and flipping ----

    def kill(self, node_id: NodeId) -> str:
        """Take an instance down; what it held (and KV it was still sending) is retried or failed."""
        node = self.slot(node_id)
        if not node.is_up:
            return f"{node.name} is already down"
        held = node.kill()
        if isinstance(node, PrefillNode):
            self.index.drop_node(node.node)
            held += [j for j in self.in_transit.values() if j.prefill_node == node.name]
        detail = f"worker lost: {node.name} (killed)"
        for journey in held:
            self._retry_or_fail(journey, WORKER_LOST, detail)
        if node.is_draining:
            self._flip(node)
        return f"killed {node.name}: {len(held)} requests retried or failed"

    def restart(self, node_id: NodeId) -> str:
        node = self.slot(node_id)
        node.restart()
        return f"restarted {node.name} (empty cache)"

    def request_flip(self, slot: int, to_role: Role) -> bool:
        """Drain local slot `slot` (it takes no new work), then flip it to `to_role`. As the live
        gateway, a node that is down or already in that role is left alone (returns False)."""
        node = self.local[slot]
        if role_of(node) is to_role or not node.is_up:
            return False
        if isinstance(node, PrefillNode):
            node.set_draining(True)
        else:
            node.is_draining = True
        if node.is_idle:
            self._flip(node)
        return True

    def set_split(self, target: int) -> str:
        """Flip local nodes toward `target` prefill instances: the lowest decode slots become
        prefill, the highest prefill slots become decode (the live engine's rule)."""
        prefill = [n.node.index for n in self.local if isinstance(n, PrefillNode)]
        decode = [n.node.index for n in self.local if isinstance(n, DecodeNode)]
        flips = ([(slot, Role.PREFILL) for slot in decode[: max(0, target - len(prefill))]]
                 + [(slot, Role.DECODE) for slot in reversed(prefill)][: max(0, len(prefill) - target)])
        done = sum(self.request_flip(slot, role) for slot, role in flips)
        return f"local prefill instances {len(prefill)} -> {target} ({done} flips, drained first)"

    def _flip(self, node: AnyNode) -> None:
        slot = node.node.index
        if isinstance(node, PrefillNode):
            self.index.drop_node(node.node)
            new: AnyNode = self._decode(NodeId(Cluster.LOCAL, Role.DECODE, slot))
        else:
            new = self._prefill(NodeId(Cluster.LOCAL, Role.PREFILL, slot))
        new.is_up = node.is_up
        if isinstance(new, PrefillNode):
            new.refresh()
        self.local[slot] = new
        self._reindex()
        log.debug("%.1f s: %s now serves as %s", self.sim.now, node.name, new.name)

    def queue_depths(self) -> tuple[int, int, int, int]:
        """Requests waiting (not in service, not in a decode batch) at remote prefill, local
        prefill and decode, and those in a decode batch: the first three are what the scheduler's
        QueueDepths means, and what its surge trigger should compare (a full batch is work, not a
        queue). Plain loops: the sampler asks every simulated second."""
        remote = local = waiting = active = 0
        for node in self.remote:
            remote += len(node.queue)
        for node in self.local_prefill_nodes:
            local += len(node.queue)
        for decode in self.decode_nodes:
            waiting += len(decode.waiting)
            active += len(decode.active)
        return remote, local, waiting, active


class TtftWindow:
    """The TTFTs of the last `window_s` seconds, as telemetry's SlidingWindow(window_s) keeps them
    (a sample at t stays while now - window_s < t), kept sorted for the 1 s sampler's percentiles:
    an insert and an eviction are a bisect and a short memmove each, where sorting the window at
    every sample costs more. No order check: simulated time never goes back.
    """

    __slots__ = ("window_s", "_times", "_values", "_sorted")

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._times: deque[float] = deque()
        self._values: deque[float] = deque()  # in arrival order, to find what leaves
        self._sorted: list[float] = []

    def add(self, t_s: float, value: float) -> None:
        self._times.append(t_s)
        self._values.append(value)
        insort(self._sorted, value)

    def sorted_values(self, now_s: float) -> list[float]:
        """The values inside the window ending at `now_s`, ascending (every sample is <= now_s).
        The list is the window's own: read it, do not change it."""
        start, times, ordered = now_s - self.window_s, self._times, self._sorted
        while times and times[0] <= start:
            times.popleft()
            del ordered[bisect_left(ordered, self._values.popleft())]  # an equal value: the same
        return ordered

    def __len__(self) -> int:
        return len(self._times)
