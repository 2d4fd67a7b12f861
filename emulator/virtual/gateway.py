"""The simulated gateway: the virtual engine's mechanics around the run core (emulator.run). The
core routes, places, retries, ends each request once and keeps the node board; this module moves
the requests through the simulated instances, moves their KV over the fluid link or local RDMA, and
carries out kills, restarts and role flips. loops.py drives the scheduler and the timeline.
"""

from __future__ import annotations

import logging

from emulator.control.router import RouteDecision
from emulator.control.types import Cluster, FailReason, NodeId, RequestSpec, Role
from emulator.plane import ControlPlane
from emulator.run.board import NodeBoard
from emulator.run.core import RunCore
from emulator.run.journey import ENDED, PREFILLING, ROUTED, Journey
from emulator.virtual.core import Simulator
from emulator.virtual.costs import CostModel
from emulator.virtual.link import FluidLink, Transfer
from emulator.virtual.nodes import AnyNode, DecodeNode, PrefillNode

log = logging.getLogger(__name__)
_REMOTE, _LOCAL = Cluster.REMOTE, Cluster.LOCAL  # bound once: Enum class attributes are slow (3.11)
_WORKER_LOST = FailReason.WORKER_LOST


class Gateway:
    """The simulated instances by slot (the run core's numbering: remote, then local) and the
    links; `core` holds every request and the records."""

    def __init__(self, sim: Simulator, plane: ControlPlane, costs: CostModel, link: FluidLink,
                 reverse_link: FluidLink, *, num_remote: int, num_local: int, n_p: int,
                 block_tokens: int, use_index: bool) -> None:
        self.sim, self.plane, self.costs = sim, plane, costs
        self.router, self.scheduler = plane.router, plane.scheduler
        self.link, self.reverse_link = link, reverse_link
        self.board = NodeBoard(num_remote, num_local, n_p)
        self.core = RunCore(plane.router, plane.index, plane.scheduler, self.board,
                            block_tokens=block_tokens, use_index=use_index)
        self.tail_fraction = costs.tail_fraction  # read per request: kept, not recomputed
        self.local_rate_bytes_per_s = costs.local_rate_bytes_per_s
        board = self.board
        self.remote = [self._prefill(board.ids[slot]) for slot in range(num_remote)]
        self.local: list[AnyNode] = [
            self._prefill(board.ids[slot]) if board.is_prefill[slot] else self._decode(board.ids[slot])
            for slot in range(num_remote, num_remote + num_local)]
        self._reindex()

    # ---- instances ----

    def _prefill(self, node: NodeId) -> PrefillNode:
        curve = self.costs.prefill_s[node.cluster]
        return PrefillNode(self.sim, node, curve, self._on_prefill_start, self._on_prefill_end)

    def _decode(self, node: NodeId) -> DecodeNode:
        return DecodeNode(self.sim, node, self.costs.max_decode_batch, self.costs.decode_s,
                          self.costs.decode_step_s, self._on_decode_finish, self._on_decode_idle)

    def _reindex(self) -> None:
        self.local_prefill_nodes: list[PrefillNode] = [n for n in self.local if isinstance(n, PrefillNode)]
        self.decode_nodes: list[DecodeNode] = [n for n in self.local if isinstance(n, DecodeNode)]

    def node_at(self, slot: int) -> AnyNode:
        num_remote = self.board.num_remote
        return self.remote[slot] if slot < num_remote else self.local[slot - num_remote]

    @property
    def n_p(self) -> int:
        return len(self.local_prefill_nodes)

    # ---- the request path ----

    def arrive(self, spec: RequestSpec) -> None:
        core, now = self.core, self.sim.now
        journey = core.arrive(spec, now)
        self.dispatch(journey, core.route(journey, now))

    def dispatch(self, journey: Journey, decision: RouteDecision | None) -> None:
        """Hand a routed attempt to its prefill instance (after a cached-prefix transfer)."""
        if decision is None:
            return  # the core ended it: no prefill or no decode node was up
        node = self.node_at(journey.prefill_slot)
        assert isinstance(node, PrefillNode)
        journey.kv_bytes = int(self.costs.kv_bytes(journey.spec.input_len))
        move = decision.cache_transfer
        if move is None:
            node.enqueue(journey)
            return
        link = self.link if move.to_cluster is _LOCAL else self.reverse_link
        journey.handle = link.start(self.costs.kv_bytes(move.tokens), self._on_prefix_arrived,
                                    (journey, journey.attempts, node))

    def _on_prefix_arrived(self, event: tuple[Journey, int, PrefillNode]) -> None:
        journey, attempt, node = event
        if journey.stage == ENDED or journey.attempts != attempt:
            return  # a lost node's journeys were let go of and retried already
        journey.handle = None
        node.enqueue(journey)

    def _on_prefill_start(self, node: PrefillNode, journey: Journey, service_s: float) -> None:
        """Layer-wise pipelining: the KV starts to flow when the prefill starts."""
        now = self.sim.now
        self.core.prefill_started(journey, now)
        journey.transfer_start_s = now
        if node.cluster is _REMOTE:
            journey.handle = self.link.start(journey.kv_bytes or 0, self._on_kv_arrived,
                                             (journey, journey.attempts), service_s, self.tail_fraction)

    def _on_prefill_end(self, node: PrefillNode, journey: Journey, service_s: float) -> None:
        now = self.sim.now
        self.core.prefill_finished(journey, now, service_s)
        transfer = journey.handle
        if isinstance(transfer, Transfer):
            self.link.end_production(transfer)
        else:  # local RDMA at a fixed rate, pipelined the same way
            rate, size, start = self.local_rate_bytes_per_s, journey.kv_bytes or 0, journey.prefill_start_s
            assert start is not None  # set when the prefill started
            done = max(now + size * self.tail_fraction / rate, start + size / rate)
            self.sim.schedule(done, self._on_kv_arrived, (journey, journey.attempts))
        if self.board.flips_due:
            self._flip_due()

    def _on_kv_arrived(self, event: tuple[Journey, int]) -> None:
        journey, attempt = event
        if journey.stage == ENDED or journey.attempts != attempt:
            return
        journey.handle = None
        node = self.local[self.core.kv_arrived(journey, self.sim.now) - self.board.num_remote]
        assert isinstance(node, DecodeNode)
        node.admit(journey)

    def _on_decode_finish(self, node: DecodeNode, journey: Journey, tpot_s: float) -> None:
        self.core.completed(journey, self.sim.now, tpot_s)

    def _on_decode_idle(self, node: DecodeNode) -> None:
        if self.board.flips_due:
            self._flip_due()

    def _let_go(self, journey: Journey) -> None:
        """Stop what the attempt still has in motion: a transfer on either link direction, and
        its place at a prefill node that is still up (a killed node dropped its queues already)."""
        transfer = journey.handle
        if isinstance(transfer, Transfer):
            self.link.cancel(transfer)
            self.reverse_link.cancel(transfer)
        journey.handle = None
        if journey.stage == ROUTED or journey.stage == PREFILLING:
            node = self.node_at(journey.prefill_slot)
            if isinstance(node, PrefillNode) and node.is_up:
                node.drop(journey)

    def fail_open(self, reason: FailReason = FailReason.UNFINISHED,
                  detail: str = "still open when the simulation stopped") -> None:
        """End every request still open: the simulation stopped (or was stopped) before they did."""
        for journey in self.core.fail_open(reason, detail, self.sim.now):
            self._let_go(journey)

    # ---- instances coming, going and flipping ----

    def kill(self, node_id: NodeId) -> str:
        """Take an instance down; what it held (and KV it was still sending) is retried or failed."""
        slot = self.board.slot_of(node_id)
        node = self.node_at(slot)
        if not node.is_up:
            return f"{node.name} is already down"
        node.kill()
        held = self.core.node_down(slot)
        detail, now = f"worker lost: {node.name} (killed)", self.sim.now
        for journey in held:
            self._let_go(journey)
            self.dispatch(journey, self.core.retry_or_fail(journey, _WORKER_LOST, detail, now))
        self._flip_due()
        return f"killed {node.name}: {len(held)} requests retried or failed"

    def restart(self, node_id: NodeId) -> str:
        slot = self.board.slot_of(node_id)
        node = self.node_at(slot)
        node.restart()
        self.core.node_up(slot)
        return f"restarted {node.name} (empty cache)"

    def request_flip(self, index: int, to_role: Role) -> bool:
        """Drain local node `index`, then flip it to `to_role` (the core's drain-then-flip)."""
        asked = self.core.request_flip(self.board.num_remote + index, to_role)
        self._flip_due()
        return asked

    def set_split(self, target: int) -> str:
        words = self.core.set_split(target)
        self._flip_due()
        return words

    def _flip_due(self) -> None:
        for slot in self.board.take_flips():
            index = slot - self.board.num_remote
            old = self.local[index]
            self.core.flipped(slot)
            node_id = self.board.ids[slot]
            new: AnyNode = self._prefill(node_id) if isinstance(old, DecodeNode) else self._decode(node_id)
            new.is_up = old.is_up
            self.local[index] = new
            self._reindex()
            log.debug("%.1f s: %s now serves as %s", self.sim.now, old.name, new.name)

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
