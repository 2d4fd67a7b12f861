"""The live gateway: the live engine's mechanics around the run core (emulator.run). The core
routes, places, retries, ends each request once and keeps the node board; this module turns its
answers into commands to the workers, and the workers' reports (over their control connections,
stamped on the shared monotonic clock) into the core's events.

Every attempt gets a fresh wire id (`rid`), so a late report from an attempt already given up on
is recognised and ignored.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from emulator.control.router import RouteDecision
from emulator.control.types import Cluster, FailReason, RequestSpec, Role
from emulator.errors import PrfaasError
from emulator.live.nodes import NodeState, NodeTable
from emulator.plane import ControlPlane
from emulator.run.core import RunCore
from emulator.run.journey import ENDED, TRANSFERRING, Journey
from emulator.telemetry.schemas import RequestCounts, RequestEvent
from emulator.wire import protocol as p
from emulator.workload.tokens import synthesize_tokens

log = logging.getLogger(__name__)
MIN_BLOCK = 64  # the model's snapshot granularity (model_stub BLOCK_TOKENS)


class EventSink(Protocol):
    async def publish_event(self, event: RequestEvent) -> bool: ...


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    run_id: str
    seed: int
    block_tokens: int
    transfer_deadline_s: float = 120.0


class Gateway:
    """Dispatch and bookkeeping. `kv_target(cluster, port)` says where a prefill worker in
    `cluster` connects to reach a decode worker's KV port; the launcher knows the topology."""

    def __init__(self, settings: GatewaySettings, plane: ControlPlane, nodes: NodeTable,
                 kv_target: Callable[[Cluster, int], tuple[str, int]], events: EventSink) -> None:
        self.settings, self.nodes, self.kv_target, self.events = settings, nodes, kv_target, events
        self.router, self.scheduler = plane.router, plane.scheduler
        self.board = nodes.board
        self.core = RunCore(plane.router, plane.index, plane.scheduler, self.board,
                            block_tokens=settings.block_tokens)
        for slot in self.board.slots:  # up once its worker has connected and proven who it is
            self.board.set_up(slot, False)
        self.by_rid: dict[int, Journey] = {}  # every attempt's wire id -> its journey
        self.tokens: dict[str, list[int]] = {}  # request id -> generated tokens, once completed
        self._next_rid = 1
        self.t0 = time.monotonic()
        self.changed = asyncio.Event()  # set whenever a request ends or a node comes or goes

    def now(self) -> float:
        return time.monotonic() - self.t0

    def rel(self, t_monotonic: float) -> float:
        """A worker's monotonic stamp as seconds since the run started (CLOCK_MONOTONIC is shared)."""
        return t_monotonic - self.t0

    def counts(self) -> RequestCounts:
        core = self.core
        return RequestCounts(arrived=core.num_arrived, completed=core.num_completed, failed=core.num_failed,
                             in_flight=core.in_flight, prfaas=core.num_prfaas, local=core.num_local)

    # ---- admission and dispatch ----

    async def admit(self, spec: RequestSpec) -> Journey:
        now = self.now()
        journey = self.core.arrive(spec, now)
        await self._event(journey, "arrived", detail={"input_len": spec.input_len})
        await self.dispatch(journey, self.core.route(journey, now))
        return journey

    async def dispatch(self, journey: Journey, decision: RouteDecision | None) -> None:
        """Hand a routed attempt out (the core placed its decode node too: the prefill worker
        streams the KV straight to it). A request nothing can take has ended failed."""
        if decision is None:
            await self._ended(journey)
            return
        prefill, decode = self.nodes.at(journey.prefill_slot), self.nodes.at(journey.decode_slot)
        rid, self._next_rid = self._next_rid, self._next_rid + 1
        journey.handle, self.by_rid[rid] = rid, journey
        try:
            command = self._prefill_command(journey, decision, rid, decode, prefill.cluster)
        except (ValueError, PrfaasError) as err:  # pydantic's ValidationError is a ValueError
            self.core.fail(journey, FailReason.REFUSED, f"prefill command: {err}".replace("\n", "; "), self.now())
            await self._ended(journey)
            return
        await self._event(journey, "routed", node=prefill.name, reason=decision.reason)
        if not await prefill.send(command):
            await self.node_lost(prefill, "its control connection is closed")

    def _prefill_command(self, journey: Journey, decision: RouteDecision, rid: int, decode: NodeState,
                         cluster: Cluster) -> p.Prefill:
        spec, block = journey.spec, self.settings.block_tokens
        if decode.kv_port is None:
            raise PrfaasError(f"{decode.name} has no KV port")
        tokens = synthesize_tokens(spec, block, self.settings.seed)
        cached = decision.cached_len
        resume = cached if 0 < cached < spec.input_len and cached % MIN_BLOCK == 0 and cached % block == 0 else 0
        full_blocks = min(spec.input_len // block, len(spec.block_hashes))
        store = ([(full_blocks * block, _key(spec.block_hashes[full_blocks - 1]))]
                 if full_blocks and (full_blocks * block) % MIN_BLOCK == 0 else [])
        return p.Prefill(
            rid=rid, prompt=p.encode_prompt(tokens.tobytes()), decode_node=decode.name,
            kv_target=self.kv_target(cluster, decode.kv_port), output_len=spec.output_len,
            resume_tokens=resume, resume_key=_key(spec.block_hashes[resume // block - 1]) if resume else "",
            store=store, deadline_s=self.settings.transfer_deadline_s,
        )

    # ---- what workers report ----

    async def on_message(self, node: NodeState, msg: p.Message) -> None:
        if isinstance(msg, p.Stats):
            node.stats = msg
            return
        if isinstance(msg, p.RoleSet):
            self._on_role_set(node, Role(msg.role))
            return
        rid = getattr(msg, "rid", -1)
        journey = self.by_rid.get(rid)
        if journey is None or journey.handle != rid:
            return  # not an attempt of this run, or a retried one: nothing to update
        if journey.stage == ENDED:
            if isinstance(msg, p.TransferDone):  # DONE often comes after the decode side finished
                self.core.late_transfer(journey, self.rel(msg.t_start), self.rel(msg.t_end))
            return
        handler = {p.PrefillStarted: self._on_prefill_started, p.PrefillDone: self._on_prefill_done,
                   p.TransferDone: self._on_transfer_done, p.FirstToken: self._on_first_token,
                   p.Completed: self._on_completed, p.Failed: self._on_failed}.get(type(msg))
        if handler is not None:
            await handler(node, journey, msg)

    async def _on_prefill_started(self, node: NodeState, journey: Journey, msg: p.PrefillStarted) -> None:
        self.core.prefill_started(journey, self.rel(msg.t))
        await self._event(journey, "prefill_start", node=node.name)

    async def _on_prefill_done(self, node: NodeState, journey: Journey, msg: p.PrefillDone) -> None:
        journey.cached_len, journey.kv_bytes = msg.cached_len, msg.kv_bytes  # what the worker really did
        self.core.prefill_finished(journey, self.now(), msg.t_end - msg.t_start)
        journey.prefill_end_s = self.rel(msg.t_end)
        await self._event(journey, "prefill_end", node=node.name,
                          detail={"kv_bytes": msg.kv_bytes, "cached_len": msg.cached_len})
        spec, decode = journey.spec, self.nodes.at(journey.decode_slot)
        command = p.Decode(rid=msg.rid, first_token=msg.first_token, output_len=spec.output_len,
                           prompt_len=spec.input_len)
        if not await decode.send(command):
            await self.retry_or_fail(journey, FailReason.WORKER_LOST, f"decode node {decode.name} is gone")
        await self._flip_due()

    async def _on_transfer_done(self, node: NodeState, journey: Journey, msg: p.TransferDone) -> None:
        if msg.status == "failed":
            journey.transfer_start_s, journey.transfer_end_s = self.rel(msg.t_start), self.rel(msg.t_end)
            await self.retry_or_fail(journey, msg.reason or FailReason.TRANSFER_FAILED,
                                     f"transfer from {node.name}: {msg.detail}")
            return
        if journey.stage == TRANSFERRING:
            self.core.kv_arrived(journey, self.rel(msg.t_end))
        journey.transfer_start_s, journey.transfer_end_s = self.rel(msg.t_start), self.rel(msg.t_end)
        await self._event(journey, "transfer_end", node=node.name)

    async def _on_first_token(self, node: NodeState, journey: Journey, msg: p.FirstToken) -> None:
        t = self.rel(msg.t)
        if journey.stage == TRANSFERRING:  # the decode side has the KV before its sender said DONE
            self.core.kv_arrived(journey, t)
        self.core.first_token(journey, t)
        await self._event(journey, "first_token", node=node.name, detail={"ttft_s": t - journey.arrival_s})

    async def _on_completed(self, node: NodeState, journey: Journey, msg: p.Completed) -> None:
        # the gateway's clock ends it: workers' stamps may arrive out of order for the TTFT window
        record = self.core.completed(journey, self.now(), msg.tpot_s)
        if record is not None:
            self.tokens[journey.spec.id] = list(msg.tokens)
            await self._event(journey, "completed", node=node.name, detail={"ttft_s": record.ttft_s or 0.0})
        self.changed.set()
        await self._flip_due()

    async def _on_failed(self, node: NodeState, journey: Journey, msg: p.Failed) -> None:
        await self.retry_or_fail(journey, msg.reason, f"{msg.stage} on {node.name}: {msg.detail}")

    def _on_role_set(self, node: NodeState, role: Role) -> None:
        if role is not node.role:
            self.core.flipped(node.slot)
        log.info("%s now serves as %s", node.spawn_name, role.value)
        self.changed.set()

    # ---- failures ----

    async def retry_or_fail(self, journey: Journey, reason: FailReason, detail: str) -> None:
        """Give the request another attempt elsewhere, or end it failed with `reason` (and `detail`)."""
        if journey.stage == ENDED:
            return
        await self._let_go(journey)
        decision = self.core.retry_or_fail(journey, reason, detail, self.now())
        if journey.stage == ENDED:
            await self._ended(journey)
        else:
            log.info("request %s: %s; retrying (attempt %d)", journey.spec.id, detail, journey.attempts)
            await self.dispatch(journey, decision)

    async def _let_go(self, journey: Journey) -> None:
        """The decode node drops whatever it holds for the attempt."""
        rid, slot = journey.handle, journey.decode_slot
        if isinstance(rid, int) and slot >= 0:
            decode = self.nodes.at(slot)
            if decode.is_up:
                await decode.send(p.Cancel(rid=rid))

    async def _ended(self, journey: Journey) -> None:
        record = journey.record
        if record is not None and record.fail_reason is not None:
            await self._event(journey, "failed", reason=f"{record.fail_reason}: {record.fail_detail}")
        self.changed.set()

    async def node_joined(self, node: NodeState) -> None:
        """A worker connected and proved who it is: it takes work again."""
        node.is_up = True
        self.core.node_up(node.slot)
        self.changed.set()

    async def node_lost(self, node: NodeState, why: str) -> None:
        """A worker went away: everything it held is retried elsewhere or failed."""
        if not node.is_up:
            return
        (log.info if self.core.is_stopping else log.warning)("%s lost: %s", node.name, why)
        node.is_up, node.writer = False, None
        for journey in self.core.node_down(node.slot):
            await self.retry_or_fail(journey, FailReason.WORKER_LOST, f"worker lost: {node.name} ({why})")
        self.changed.set()

    async def fail_open(self, reason: FailReason, detail: str) -> None:
        """End every request still open (the run is over or interrupted)."""
        for journey in self.core.fail_open(reason, detail, self.now()):
            await self._let_go(journey)
            await self._ended(journey)

    # ---- role flips: the core drains, the worker flips ----

    async def request_flip(self, slot: int, role: Role) -> bool:
        asked = self.core.request_flip(slot, role)
        await self._flip_due()
        return asked

    async def set_split(self, target: int) -> str:
        words = self.core.set_split(target)
        await self._flip_due()
        return words

    async def _flip_due(self) -> None:
        """Tell each drained node to take its new role; it answers RoleSet (then `flipped`)."""
        for slot in self.board.take_flips():
            node = self.nodes.at(slot)
            to_role = Role.DECODE if node.role is Role.PREFILL else Role.PREFILL
            if not await node.send(p.SetRole(role=to_role.value)):
                await self.node_lost(node, "its control connection is closed")

    async def _event(self, journey: Journey, event: str, node: str | None = None,
                     reason: str | None = None, detail: dict[str, float] | None = None) -> None:
        await self.events.publish_event(RequestEvent(
            run_id=self.settings.run_id, t_s=max(self.now(), 0.0), request_id=journey.spec.id, event=event,
            route=journey.route, node=node, reason=reason, detail=detail or {}))


def _key(block_hash: int) -> str:
    """The worker's prefix-store key for the state at the end of the block with this chained hash."""
    return f"{block_hash:016x}"
