"""The live gateway: admits each request, asks the control plane where it goes, hands it to workers,
and follows it to its end over the workers' control connections.

Policy lives in the control plane (router, prefix index, scheduler); this module is the mechanism:
wire ids, retries, node loss, lifecycle events. Every request ends `completed` or `failed` once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from emulator.control.prefix_cache import PrefixCacheIndex
from emulator.control.router import Router
from emulator.control.scheduler import DualTimescaleScheduler
from emulator.control.types import Cluster, FailReason, RequestSpec, Role
from emulator.errors import PrfaasError
from emulator.live import protocol as p
from emulator.live.nodes import NodeState, NodeTable
from emulator.live.tracker import MAX_ATTEMPTS, RequestState, Tracker
from emulator.telemetry.metrics import RequestCounters, SlidingWindow
from emulator.telemetry.schemas import RequestEvent
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

    def __init__(self, settings: GatewaySettings, router: Router, index: PrefixCacheIndex,
                 scheduler: DualTimescaleScheduler | None, nodes: NodeTable,
                 kv_target: Callable[[Cluster, int], tuple[str, int]], events: EventSink) -> None:
        self.settings, self.router, self.index, self.scheduler = settings, router, index, scheduler
        self.nodes, self.kv_target, self.events = nodes, kv_target, events
        self.tracker = Tracker()
        self.counters = RequestCounters()
        self.ttft = SlidingWindow(30.0)
        self.t0 = time.monotonic()
        self.is_stopping = False
        self.changed = asyncio.Event()  # set whenever a request ends or a node comes or goes

    def now(self) -> float:
        return time.monotonic() - self.t0

    def rel(self, t_monotonic: float) -> float:
        """A worker's monotonic stamp as seconds since the run started (CLOCK_MONOTONIC is shared)."""
        return t_monotonic - self.t0

    # ---- admission and dispatch ----

    async def admit(self, spec: RequestSpec) -> RequestState:
        now = self.now()
        state = self.tracker.arrive(spec, now)
        self.counters.on_arrived()
        if self.scheduler is not None:
            self.scheduler.observe_arrival(now, spec.input_len)
        await self._event(state, "arrived", detail={"input_len": spec.input_len})
        await self.dispatch(state)
        return state

    async def dispatch(self, state: RequestState) -> None:
        """Route and hand out one attempt; a request nothing can take ends failed with the reason."""
        rid = self.tracker.new_attempt(state)
        decision = self.router.decide(state.spec, self.nodes.prefill_loads(), self.now())
        if decision.route is None or decision.node is None:
            await self.fail(state, FailReason.NO_PREFILL_NODE, decision.reason)
            return
        prefill, decode = self.nodes.get(decision.node), self.nodes.pick_decode()
        if prefill is None:
            await self.fail(state, FailReason.NO_PREFILL_NODE, f"{decision.node} is unknown")
            return
        if decode is None or decode.kv_port is None:
            await self.fail(state, FailReason.NO_DECODE_NODE, "no decode node is up" if decode is None
                            else f"{decode.name} has no KV port")
            return
        state.decision, state.prefill_node, state.decode_node = decision, prefill.name, decode.name
        if state.attempts == 1:
            self.counters.on_routed(decision.route.value)
        try:
            command = self._prefill_command(state, rid, decode, prefill.cluster)
        except (ValueError, PrfaasError) as err:  # pydantic's ValidationError is a ValueError
            await self.fail(state, FailReason.REFUSED, f"prefill command: {err}".replace("\n", "; "))
            return
        prefill.prefill_rids.add(rid)
        prefill.prefill_tokens[rid] = decision.incremental_len
        decode.decode_rids.add(rid)
        await self._event(state, "routed", node=prefill.name, reason=decision.reason)
        if not await prefill.send(command):
            await self.node_lost(prefill, "its control connection is closed")

    def _prefill_command(self, state: RequestState, rid: int, decode: NodeState, cluster: Cluster) -> p.Prefill:
        spec, block = state.spec, self.settings.block_tokens
        tokens = synthesize_tokens(spec, block, self.settings.seed)
        cached = state.decision.cached_len if state.decision is not None else 0
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
        if isinstance(msg, p.TransferDone) and self.tracker.get(msg.rid) is None:
            # the DONE reply often returns after the decode side already finished the request
            self.tracker.late_transfer(msg.rid, self.rel(msg.t_start), self.rel(msg.t_end))
            return
        state = self.tracker.get(getattr(msg, "rid", -1))
        if state is None:
            return  # a stale attempt (retried or failed already): nothing to update
        handler = {p.PrefillStarted: self._on_prefill_started, p.PrefillDone: self._on_prefill_done,
                   p.TransferDone: self._on_transfer_done, p.FirstToken: self._on_first_token,
                   p.Completed: self._on_completed, p.Failed: self._on_failed}.get(type(msg))
        if handler is not None:
            await handler(node, state, msg)

    async def _on_prefill_started(self, node: NodeState, state: RequestState, msg: p.PrefillStarted) -> None:
        state.prefill_start_s = self.rel(msg.t)
        await self._event(state, "prefill_start", node=node.name)

    async def _on_prefill_done(self, node: NodeState, state: RequestState, msg: p.PrefillDone) -> None:
        state.prefill_end_s, state.cached_len = self.rel(msg.t_end), msg.cached_len
        state.kv_bytes, state.first_token = msg.kv_bytes, msg.first_token
        node.prefill_rids.discard(msg.rid)
        node.prefill_tokens.pop(msg.rid, None)
        spec, block = state.spec, self.settings.block_tokens
        full_blocks = min(spec.input_len // block, len(spec.block_hashes))
        if full_blocks:
            self.index.insert(node.node, spec.block_hashes[:full_blocks], self.now())
        if self.scheduler is not None:
            self.scheduler.observe_prefill(node.cluster, spec.input_len - msg.cached_len,
                                           msg.t_end - msg.t_start, self.now())
        await self._event(state, "prefill_end", node=node.name,
                          detail={"kv_bytes": msg.kv_bytes, "cached_len": msg.cached_len})
        decode = self.nodes.get(state.decode_node or "")
        command = p.Decode(rid=msg.rid, first_token=msg.first_token, output_len=spec.output_len,
                           prompt_len=spec.input_len)
        if decode is None or not await decode.send(command):
            await self.retry_or_fail(state, FailReason.WORKER_LOST, f"decode node {state.decode_node} is gone")

    async def _on_transfer_done(self, node: NodeState, state: RequestState, msg: p.TransferDone) -> None:
        state.transfer_start_s, state.transfer_end_s = self.rel(msg.t_start), self.rel(msg.t_end)
        if msg.status == "failed":
            await self.retry_or_fail(state, msg.reason or FailReason.TRANSFER_FAILED,
                                     f"transfer from {node.name}: {msg.detail}")
            return
        await self._event(state, "transfer_end", node=node.name)

    async def _on_first_token(self, node: NodeState, state: RequestState, msg: p.FirstToken) -> None:
        state.first_token_s = self.rel(msg.t)
        await self._event(state, "first_token", node=node.name,
                          detail={"ttft_s": state.first_token_s - state.arrival_s})

    async def _on_completed(self, node: NodeState, state: RequestState, msg: p.Completed) -> None:
        node.decode_rids.discard(msg.rid)
        state.tokens = list(msg.tokens)
        record = self.tracker.finish(state, self.rel(msg.t), tpot_s=msg.tpot_s)
        if record is not None:
            self.counters.on_completed()
            if record.ttft_s is not None:  # the gateway's clock: workers' stamps may arrive out of order
                self.ttft.add(self.now(), record.ttft_s)
            await self._event(state, "completed", node=node.name, detail={"ttft_s": record.ttft_s or 0.0})
        self.changed.set()

    async def _on_failed(self, node: NodeState, state: RequestState, msg: p.Failed) -> None:
        await self.retry_or_fail(state, msg.reason, f"{msg.stage} on {node.name}: {msg.detail}")

    def _on_role_set(self, node: NodeState, role: Role) -> None:
        if role is not node.role:
            self.index.drop_node(node.node)  # its prefix entries belonged to the old role
        node.role, node.is_draining = role, False
        log.info("%s now serves as %s", node.spawn_name, role.value)
        self.changed.set()

    # ---- failures ----

    async def retry_or_fail(self, state: RequestState, reason: FailReason, detail: str) -> None:
        """Give the request another attempt elsewhere, or end it failed with `reason` (and `detail`)."""
        if state.is_done:
            return
        await self._release(state)
        if state.attempts < MAX_ATTEMPTS and not self.is_stopping:
            log.info("request %s: %s; retrying (attempt %d)", state.spec.id, detail, state.attempts + 1)
            await self.dispatch(state)
        else:
            await self.fail(state, reason, detail)

    async def _release(self, state: RequestState) -> None:
        """Take the attempt off its nodes; the decode node drops whatever it holds for it."""
        rid = state.rid
        for name in (state.prefill_node, state.decode_node):
            node = self.nodes.get(name or "")
            if node is None or rid is None:
                continue
            node.prefill_rids.discard(rid)
            node.prefill_tokens.pop(rid, None)
            if rid in node.decode_rids:
                node.decode_rids.discard(rid)
                if node.is_up:
                    await node.send(p.Cancel(rid=rid))

    async def fail(self, state: RequestState, reason: FailReason, detail: str) -> None:
        await self._release(state)
        if self.tracker.finish(state, self.now(), fail_reason=reason, fail_detail=detail) is not None:
            self.counters.on_failed()
            await self._event(state, "failed", reason=f"{reason.value}: {detail}")
        self.changed.set()

    async def node_lost(self, node: NodeState, why: str) -> None:
        """A worker went away: everything it held is retried elsewhere or failed."""
        if not node.is_up:
            return
        (log.info if self.is_stopping else log.warning)("%s lost: %s", node.name, why)
        node.is_up, node.writer = False, None
        self.index.drop_node(node.node)
        held = [s for s in self.tracker.open if s.rid in node.prefill_rids | node.decode_rids]
        node.prefill_rids.clear()
        node.prefill_tokens.clear()
        node.decode_rids.clear()
        for state in held:
            await self.retry_or_fail(state, FailReason.WORKER_LOST, f"worker lost: {node.name} ({why})")
        self.changed.set()

    async def fail_open(self, reason: FailReason, detail: str) -> None:
        """End every request still open (the run is over or interrupted)."""
        self.is_stopping = True
        for state in self.tracker.open:
            await self.fail(state, reason, detail)

    async def _event(self, state: RequestState, event: str, node: str | None = None,
                     reason: str | None = None, detail: dict[str, float] | None = None) -> None:
        await self.events.publish_event(RequestEvent(
            run_id=self.settings.run_id, t_s=max(self.now(), 0.0), request_id=state.spec.id, event=event,
            route=state.route, node=node, reason=reason, detail=detail or {}))


def _key(block_hash: int) -> str:
    """The worker's prefix-store key for the state at the end of the block with this chained hash."""
    return f"{block_hash:016x}"
