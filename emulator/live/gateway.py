"""The live gateway: the live engine's mechanics around the run core (emulator.run). The workers'
reports (over their control connections, stamped on the shared monotonic clock) become the core's
events; the core's actions become commands to the workers and events on the bus. What a request
does next is the core's to decide: nothing about its stages is decided here.

The core's attempt id is the wire id (`rid`) of each attempt, so a late report from an attempt
already given up on is the core's to recognise.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from emulator.control.types import Cluster, FailReason, RequestSpec, Role
from emulator.errors import PrfaasError
from emulator.live.nodes import NodeState, NodeTable
from emulator.plane import ControlPlane
from emulator.run import protocol as ev
from emulator.run.core import RunCore
from emulator.run.ending import EndPolicy
from emulator.run.journey import Journey
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
    `cluster` connects to reach a decode worker's KV port; the launcher knows the topology.
    `run_action` carries out what is not a request's or a node's (the link, the arrival clock,
    kills, notes, the end: the run's loops set it)."""

    def __init__(self, settings: GatewaySettings, plane: ControlPlane, nodes: NodeTable,
                 kv_target: Callable[[Cluster, int], tuple[str, int]], events: EventSink, ending: EndPolicy) -> None:
        self.settings, self.nodes, self.kv_target, self.events = settings, nodes, kv_target, events
        self.router, self.scheduler = plane.router, plane.scheduler
        self.board = nodes.board
        self.core = RunCore(plane.router, plane.index, plane.scheduler, self.board,
                            block_tokens=settings.block_tokens, ending=ending, publishes=True)
        for slot in self.board.slots:  # up once its worker has connected and proven who it is
            self.board.set_up(slot, False)
        self.run_action: Callable[[ev.Action], Awaitable[None]] = _no_hands
        self.tokens: dict[str, list[int]] = {}  # request id -> generated tokens, once completed
        self._first_tokens: dict[int, int] = {}  # attempt -> its first token, from prefill to decode
        self.t0 = time.monotonic()
        self.changed = asyncio.Event()  # set whenever a request ends, a node comes or goes, the run ends

    def now(self) -> float:
        return time.monotonic() - self.t0

    def rel(self, t_monotonic: float) -> float:
        """A worker's monotonic stamp as seconds since the run started (CLOCK_MONOTONIC is shared)."""
        return t_monotonic - self.t0

    def counts(self) -> RequestCounts:
        core = self.core
        return RequestCounts(arrived=core.num_arrived, completed=core.num_completed, failed=core.num_failed,
                             in_flight=core.in_flight, prfaas=core.num_prfaas, local=core.num_local)

    # ---- events in ----

    async def admit(self, spec: RequestSpec) -> None:
        await self.execute(self.core.arrive(spec, self.now()))

    async def on_message(self, node: NodeState, msg: p.Message) -> None:
        """A worker's report: the core's event, then its actions. A report the request's stage
        cannot take (a confused or hostile worker) is refused and logged; the run goes on."""
        if isinstance(msg, p.Stats):
            node.stats = msg
            return
        try:
            if isinstance(msg, p.RoleSet):
                role = Role(msg.role)
                if role is not node.role:
                    await self.execute(self.core.flipped(node.slot))
                log.info("%s now serves as %s", node.spawn_name, role.value)
                self.changed.set()
                return
            event = self._event_of(node, msg)
            if event is None:
                return
            if isinstance(msg, p.PrefillDone):
                self._first_tokens[msg.rid] = msg.first_token
            acts = self.core.handle(event)
        except ev.IllegalEvent as err:
            log.warning("%s: %s", node.name, err)
            return
        if isinstance(msg, p.Completed):
            for act in acts:
                if isinstance(act, ev.Ended) and act.record.fail_reason is None:
                    self.tokens[act.record.id] = list(msg.tokens)
        await self.execute(acts)

    def _event_of(self, node: NodeState, msg: p.Message) -> ev.Event | None:
        rel = self.rel
        if isinstance(msg, p.PrefillStarted):
            return ev.PrefillStarted(msg.rid, rel(msg.t))
        if isinstance(msg, p.PrefillDone):
            return ev.PrefillDone(msg.rid, rel(msg.t_end), msg.t_end - msg.t_start, msg.cached_len, msg.kv_bytes)
        if isinstance(msg, p.TransferDone):
            if msg.status == "delivered":
                return ev.TransferDone(msg.rid, rel(msg.t_start), rel(msg.t_end))
            return ev.AttemptFailed(msg.rid, self.now(), msg.reason or FailReason.TRANSFER_FAILED,
                                    f"transfer from {node.name}: {msg.detail}", (rel(msg.t_start), rel(msg.t_end)))
        if isinstance(msg, p.FirstToken):
            return ev.FirstToken(msg.rid, rel(msg.t))
        if isinstance(msg, p.Completed):  # the gateway's clock ends it: the TTFT window takes times in order
            return ev.Finished(msg.rid, self.now(), msg.tpot_s)
        if isinstance(msg, p.Failed):
            return ev.AttemptFailed(msg.rid, self.now(), msg.reason, f"{msg.stage} on {node.name}: {msg.detail}")
        return None

    async def node_joined(self, node: NodeState) -> None:
        """A worker connected and proved who it is: it takes work again."""
        node.is_up = True
        await self.execute(self.core.node_back(node.slot))
        self.changed.set()

    async def node_lost(self, node: NodeState, why: str) -> None:
        """A worker went away: the core retries or fails everything it held."""
        if not node.is_up:
            return
        (log.info if self.core.is_stopping else log.warning)("%s lost: %s", node.name, why)
        node.is_up, node.writer = False, None
        await self.execute(self.core.node_lost(node.slot, self.now(), why))
        self.changed.set()

    async def stop(self, reason: FailReason, detail: str) -> None:
        """End every request still open (the run is stopped, failed or torn down)."""
        await self.execute(self.core.stop(reason, detail, self.now()))

    # ---- actions out ----

    async def execute(self, acts: ev.Actions) -> None:
        for act in acts:
            if isinstance(act, ev.Dispatch):
                await self._dispatch(act)
            elif isinstance(act, ev.SendDecode):
                await self._send_decode(act.journey)
            elif isinstance(act, ev.Publish):
                await self._publish(act.journey, act.event, act.node, act.reason, act.detail)
            elif isinstance(act, ev.Release):
                await self._let_go(act)
            elif isinstance(act, ev.Ended):
                await self._ended(act)
            elif isinstance(act, ev.StartFlip):
                node = self.nodes.at(act.slot)
                if not await node.send(p.SetRole(role=act.role.value)):  # it answers RoleSet
                    await self.node_lost(node, "its control connection is closed")
            else:
                await self.run_action(act)

    async def _dispatch(self, act: ev.Dispatch) -> None:
        """Hand the attempt's prompt to its prefill worker (which streams the KV straight to the
        decode worker the core placed it on)."""
        journey = act.journey
        prefill, decode = self.nodes.at(journey.prefill_slot), self.nodes.at(journey.decode_slot)
        try:
            command = self._prefill_command(journey, act.decision.cached_len, decode, prefill.cluster)
        except (ValueError, PrfaasError) as err:  # pydantic's ValidationError is a ValueError
            await self.execute(self.core.attempt_failed(
                journey, journey.attempt_id, self.now(), FailReason.REFUSED,
                f"prefill command: {err}".replace("\n", "; ")))
            return
        if not await prefill.send(command):
            await self.node_lost(prefill, "its control connection is closed")

    def _prefill_command(self, journey: Journey, cached: int, decode: NodeState, cluster: Cluster) -> p.Prefill:
        spec, block = journey.spec, self.settings.block_tokens
        if decode.kv_port is None:
            raise PrfaasError(f"{decode.name} has no KV port")
        tokens = synthesize_tokens(spec, block, self.settings.seed)
        resume = cached if 0 < cached < spec.input_len and cached % MIN_BLOCK == 0 and cached % block == 0 else 0
        full_blocks = min(spec.input_len // block, len(spec.block_hashes))
        store = ([(full_blocks * block, _key(spec.block_hashes[full_blocks - 1]))]
                 if full_blocks and (full_blocks * block) % MIN_BLOCK == 0 else [])
        return p.Prefill(
            rid=journey.attempt_id, prompt=p.encode_prompt(tokens.tobytes()), decode_node=decode.name,
            kv_target=self.kv_target(cluster, decode.kv_port), output_len=spec.output_len,
            resume_tokens=resume, resume_key=_key(spec.block_hashes[resume // block - 1]) if resume else "",
            store=store, deadline_s=self.settings.transfer_deadline_s,
        )

    async def _send_decode(self, journey: Journey) -> None:
        attempt, spec = journey.attempt_id, journey.spec
        decode = self.nodes.at(journey.decode_slot)
        command = p.Decode(rid=attempt, first_token=self._first_tokens.pop(attempt, 0),
                           output_len=spec.output_len, prompt_len=spec.input_len)
        if not await decode.send(command):
            await self.execute(self.core.attempt_failed(journey, attempt, self.now(), FailReason.WORKER_LOST,
                                                        f"decode node {decode.name} is gone"))

    async def _let_go(self, release: ev.Release) -> None:
        """The decode worker drops whatever it holds for the attempt given up on."""
        self._first_tokens.pop(release.attempt, None)
        if release.decode_slot >= 0:
            decode = self.nodes.at(release.decode_slot)
            if decode.is_up:
                await decode.send(p.Cancel(rid=release.attempt))

    async def _ended(self, act: ev.Ended) -> None:
        record = act.record
        if record.fail_reason is not None:
            await self._publish(act.journey, "failed", reason=f"{record.fail_reason}: {record.fail_detail}")
        else:
            await self._publish(act.journey, "completed", node=record.decode_node,
                                 detail={"ttft_s": record.ttft_s or 0.0})
        self.changed.set()

    async def _publish(self, journey: Journey, event: str, node: str | None = None,
                       reason: str | None = None, detail: dict[str, float] | None = None) -> None:
        await self.events.publish_event(RequestEvent(
            run_id=self.settings.run_id, t_s=max(self.now(), 0.0), request_id=journey.spec.id, event=event,
            route=journey.route, node=node, reason=reason, detail=detail or {}))


async def _no_hands(act: ev.Action) -> None:
    raise RuntimeError(f"no run-level hands for {type(act).__name__}: RunLoops sets Gateway.run_action")


def _key(block_hash: int) -> str:
    """The worker's prefix-store key for the state at the end of the block with this chained hash."""
    return f"{block_hash:016x}"
