"""The simulated gateway: the virtual engine's mechanics around the run core (emulator.run). Heap
events (a prefill starting or ending at a simulated instance, KV arriving over the fluid link or
local RDMA, a decode joining or leaving its batch) become the core's events, and the core's actions
are carried out here: a prompt queued at its prefill instance, an attempt let go of, a node
flipped, killed or restarted. What a request does next is the core's to decide. loops.py drives
the arrivals, the scheduler and the timeline, and carries out the run-level actions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from emulator.control.router import RouteDecision
from emulator.control.types import Cluster, NodeId, RequestSpec
from emulator.plane import ControlPlane
from emulator.run import protocol as ev
from emulator.run.board import NodeBoard
from emulator.run.core import RunCore
from emulator.run.ending import EndPolicy
from emulator.run.journey import ENDED, PREFILLING, ROUTED, Journey
from emulator.run.protocol import Action, Actions, Dispatch, Ended, Publish, Release, SendDecode
from emulator.virtual.core import Simulator
from emulator.virtual.costs import CostModel
from emulator.virtual.link import FluidLink, Transfer
from emulator.virtual.nodes import AnyNode, DecodeNode, PrefillNode

log = logging.getLogger(__name__)
_REMOTE, _LOCAL = Cluster.REMOTE, Cluster.LOCAL  # bound once: Enum class attributes are slow (3.11)


class Gateway:
    """The simulated instances by slot (the run core's numbering: remote, then local) and the
    links; `core` holds every request and the records. `run_action` carries out what is not a
    request's or a node's (the link, the arrival rate, notes, the end: loops.py sets it)."""

    def __init__(self, sim: Simulator, plane: ControlPlane, costs: CostModel, link: FluidLink,
                 reverse_link: FluidLink, *, num_remote: int, num_local: int, n_p: int,
                 block_tokens: int, use_index: bool, ending: EndPolicy) -> None:
        self.sim, self.plane, self.costs, self.router = sim, plane, costs, plane.router
        self.link, self.reverse_link = link, reverse_link
        self.board = NodeBoard(num_remote, num_local, n_p)
        self.core = RunCore(plane.router, plane.index, plane.scheduler, self.board,
                            block_tokens=block_tokens, ending=ending, use_index=use_index, by_id=False)
        self.run_action: Callable[[Action], None] = _unexpected
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
        host = self.host_factor if self.costs.busy_slowdown else None
        return PrefillNode(self.sim, node, curve, self._on_prefill_start, self._on_prefill_end, host)

    def _decode(self, node: NodeId) -> DecodeNode:
        step_at = self.decode_step_at if self.costs.is_timed_by_batch else None
        return DecodeNode(self.sim, node, self.costs.max_decode_batch, self.costs.decode_s,
                          self.costs.decode_step_s, self._on_first_token, self._on_decode_finish, step_at)

    def num_busy(self) -> int:
        """Workers computing now, on every cluster: a prefill node with a prompt in service, a
        decode node with a non-empty batch (a live run places all of them on one machine)."""
        count = 0
        for prefill in self.remote:
            if prefill.busy is not None:
                count += 1
        for node in self.local:
            if isinstance(node, PrefillNode):
                if node.busy is not None:
                    count += 1
            elif node.active:
                count += 1
        return count

    def host_factor(self) -> float:
        """The shared host's slowdown for work starting now (the caller already counts as busy)."""
        return self.costs.slowdown(self.num_busy())

    def decode_step_at(self, batch_size: int, context_tokens: float) -> float:
        """A joining request's step: the batch table's at the batch's mean context, times the
        host's slowdown when shared."""
        step_s = self.costs.decode_step_at(batch_size, context_tokens)
        return step_s * self.host_factor() if self.costs.busy_slowdown else step_s

    def _reindex(self) -> None:
        self.local_prefill_nodes: list[PrefillNode] = [n for n in self.local if isinstance(n, PrefillNode)]
        self.decode_nodes: list[DecodeNode] = [n for n in self.local if isinstance(n, DecodeNode)]

    def node_at(self, slot: int) -> AnyNode:
        num_remote = self.board.num_remote
        return self.remote[slot] if slot < num_remote else self.local[slot - num_remote]

    @property
    def n_p(self) -> int:
        return len(self.local_prefill_nodes)

    # ---- the core's actions ----

    def execute(self, acts: Actions) -> None:
        for act in acts:
            if isinstance(act, Dispatch):
                self._dispatch(act.journey, act.decision)
            elif isinstance(act, (SendDecode, Ended, Publish)):
                pass  # a decode instance takes the request once its KV is in; the core keeps the records
            elif isinstance(act, Release):
                self._let_go(act)
            elif isinstance(act, ev.StartFlip):
                self._flip(act.slot)
            elif isinstance(act, (ev.KillNode, ev.RestartNode)):
                self._kill_or_restart(act.slot, isinstance(act, ev.KillNode))
            else:
                self.run_action(act)

    def arrive(self, spec: RequestSpec) -> None:
        self.execute(self.core.arrive(spec, self.sim.now))

    def arrivals_over(self) -> None:
        self.execute(self.core.end_arrivals(self.sim.now))

    def _dispatch(self, journey: Journey, decision: RouteDecision) -> None:
        """Queue a routed attempt at its prefill instance (after a cached-prefix transfer)."""
        node = self.node_at(journey.prefill_slot)
        assert isinstance(node, PrefillNode)
        move = decision.cache_transfer
        if move is None:
            node.enqueue(journey)
            return
        link = self.link if move.to_cluster is _LOCAL else self.reverse_link
        journey.handle = link.start(self.costs.kv_bytes(move.tokens), self._on_prefix_arrived,
                                    (journey, journey.attempt_id, node))

    def _let_go(self, release: Release) -> None:
        """Stop what a given-up attempt still has in motion: a transfer on either link direction,
        and its place at a prefill node that is still up (a killed node dropped its queues already)."""
        transfer = release.handle
        if isinstance(transfer, Transfer):
            self.link.cancel(transfer)
            self.reverse_link.cancel(transfer)
        if release.stage == ROUTED or release.stage == PREFILLING:
            node = self.node_at(release.prefill_slot)
            if isinstance(node, PrefillNode) and node.is_up:
                node.drop(release.journey)

    # ---- heap events -> the core's events ----

    def _on_prefix_arrived(self, event: tuple[Journey, int, PrefillNode]) -> None:
        journey, attempt, node = event
        if journey.attempt_id != attempt or journey.stage == ENDED:
            return  # its attempt was let go of while the prefix was on the way
        journey.handle = None
        node.enqueue(journey)

    def _on_prefill_start(self, node: PrefillNode, journey: Journey, service_s: float) -> None:
        """Layer-wise pipelining: the KV starts to flow when the prefill starts."""
        now = self.sim.now
        acts = self.core.prefill_started(journey, journey.attempt_id, now)
        if acts:
            self.execute(acts)
        if node.cluster is _REMOTE:
            tokens = journey.spec.input_len
            kv_bytes = int(self.costs.kv_bytes(tokens))
            link = self.link
            sends = self.costs.layer_sends(tokens, service_s, kv_bytes, link.newcomer_share())
            sender = kv_sender(journey.prefill_slot, journey.decode_slot, len(self.board.ids))
            journey.handle = link.start(kv_bytes, self._on_kv_arrived, (journey, journey.attempt_id), sends, sender)

    def _on_prefill_end(self, node: PrefillNode, journey: Journey, service_s: float) -> None:
        now, attempt = self.sim.now, journey.attempt_id
        transfer = journey.handle
        kv_bytes = int(transfer.num_bytes) if isinstance(transfer, Transfer) \
            else int(self.costs.kv_bytes(journey.spec.input_len))
        self.execute(self.core.prefill_done(journey, attempt, now, service_s, journey.cached_len, kv_bytes))
        if isinstance(transfer, Transfer):
            self.link.end_production(transfer)
        else:  # local RDMA at a fixed rate, pipelined the same way
            rate, start = self.local_rate_bytes_per_s, journey.prefill_start_s
            assert start is not None  # set when the prefill started
            tail = kv_bytes * self.costs.tail_fraction(journey.spec.input_len)
            done = max(now + tail / rate, start + kv_bytes / rate)
            self.sim.schedule(done, self._on_kv_arrived, (journey, attempt))

    def _on_kv_arrived(self, event: tuple[Journey, int]) -> None:
        journey, attempt = event
        if journey.attempt_id != attempt or journey.stage == ENDED:
            return
        journey.handle = None
        acts = self.core.transfer_done(journey, attempt, journey.prefill_start_s or 0.0, self.sim.now)
        if acts:
            self.execute(acts)
        node = self.local[journey.decode_slot - self.board.num_remote]
        assert isinstance(node, DecodeNode)
        node.admit(journey)

    def _on_first_token(self, node: DecodeNode, journey: Journey) -> None:
        acts = self.core.first_token(journey, journey.attempt_id, self.sim.now)
        if acts:
            self.execute(acts)

    def _on_decode_finish(self, node: DecodeNode, journey: Journey, tpot_s: float) -> None:
        self.execute(self.core.finished(journey, journey.attempt_id, self.sim.now, tpot_s))

    # ---- instances coming, going and flipping ----

    def _kill_or_restart(self, slot: int, kill: bool) -> None:
        """A kill takes an instance down (the core retries or fails what it held, KV it was still
        sending too); a restart brings it back with an empty cache."""
        node = self.node_at(slot)
        if kill and node.is_up:
            node.kill()
            self.execute(self.core.node_lost(slot, self.sim.now, "killed"))
        elif not kill:
            node.restart()
            self.execute(self.core.node_back(slot))

    def _flip(self, slot: int) -> None:
        """A drained local node takes its other role at once (a new, empty instance)."""
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
        """Requests waiting (not in service or a batch) at remote prefill, local prefill and decode
        (the scheduler's QueueDepths: a full batch is work, not a queue), and those in a batch."""
        remote = local = waiting = active = 0
        for node in self.remote:
            remote += len(node.queue)
        for node in self.local_prefill_nodes:
            local += len(node.queue)
        for decode in self.decode_nodes:
            waiting += len(decode.waiting)
            active += len(decode.active)
        return remote, local, waiting, active


def kv_sender(prefill_slot: int, decode_slot: int, num_slots: int) -> int:
    """The connections a remote cache goes on, as the fluid link's sender key: a live prefill worker
    keeps one sender, its connections and one chunk queue, per decode worker (worker/kv_links.py)."""
    return prefill_slot * num_slots + decode_slot


def _unexpected(act: Action) -> None:
    raise RuntimeError(f"{type(act).__name__}: RunLoops sets Gateway.run_action")
