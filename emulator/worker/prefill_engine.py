"""The prefill role: a FIFO of `prefill` commands, each resumed from the prefix store when it can,
computed layer by layer on the torch thread with every final layer shipped at once (layer-wise
pipelining: kv_shipping copies, encodes and sends layer i on its own thread while layer i+1
computes), then reported. It does not route or choose the decode node; the gateway does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from emulator.control.types import FailReason
from emulator.errors import WorkerError
from emulator.transport.sender import KVSender, TransferFailure, TransferResult
from emulator.wire.protocol import (
    Failed,
    Message,
    Prefill,
    PrefillDone,
    PrefillStarted,
    TransferDone,
)
from emulator.worker.compute import ComputeThread
from emulator.worker.kv_links import KvLinks
from emulator.worker.kv_shipping import LayerShipper, ShipReport, prefill_shipping
from emulator.worker.prefix_store import PrefixStore
from model_stub.cache import HybridCache
from model_stub.model import HybridModel

log = logging.getLogger(__name__)
Emit = Callable[[Message], None]
CANCELLED = "cancelled by the gateway"


def check_speed_factor(speed_factor: float) -> float:
    if not 0 < speed_factor <= 1:
        raise ValueError(f"speed_factor: {speed_factor} must be in (0, 1]; 1 is full speed")
    return speed_factor


class Pace:
    """Makes full-speed work look like it ran at `speed_factor` of this machine's speed.

    `hold()` (on the torch thread) sleeps until the compute done since `t0` would have finished on
    the slower machine: t0 + compute_s / speed_factor, where compute_s excludes earlier holds.
    Encoding and sending run on the ship thread, so they are not scaled (a faster or slower GPU
    does not change the host's share of the work).
    """

    def __init__(self, speed_factor: float) -> None:
        self.speed_factor = check_speed_factor(speed_factor)
        self.t0 = time.monotonic()
        self.held_s = 0.0

    def hold(self) -> None:
        if self.speed_factor == 1:
            return
        now = time.monotonic()
        compute_s = now - self.t0 - self.held_s
        wait_s = self.t0 + compute_s / self.speed_factor - now
        if wait_s > 0:
            time.sleep(wait_s)
            self.held_s += wait_s


@dataclass(frozen=True, slots=True)
class PrefillOutcome:
    t_start: float
    t_end: float
    t_first_send: float
    cached_len: int
    kv_bytes: int
    first_token: int
    held_s: float
    shipping: ShipReport  # `shipping.overlap`: the copy/compute overlap figure


class PrefillEngine:
    def __init__(self, model: HybridModel, compute: ComputeThread, links: KvLinks,
                 store: PrefixStore, emit: Emit, speed_factor: float = 1.0) -> None:
        self.model, self.compute, self.links, self.store = model, compute, links, store
        self.emit = emit
        self.speed_factor = check_speed_factor(speed_factor)
        self._queue: deque[Prefill] = deque()
        self._wakeup = asyncio.Event()
        self._running: Prefill | None = None
        self._cancelled: set[int] = set()
        self._transfers: dict[int, asyncio.Task] = {}  # rid -> its finish() waiter
        self._transfer_start: dict[int, float] = {}
        self.shipper = LayerShipper(model.device)

    @property
    def num_queued(self) -> int:
        return len(self._queue)

    @property
    def num_held(self) -> int:
        """Requests this engine still owes a report: queued, computing, or transferring."""
        return len(self._queue) + (self._running is not None) + len(self._transfers)

    def submit(self, cmd: Prefill) -> None:
        self._queue.append(cmd)
        self._wakeup.set()

    def cancel(self, rid: int) -> bool:
        """Drop `rid` (reported failed); a running prefill finishes but its result is dropped."""
        for cmd in self._queue:
            if cmd.rid == rid:
                self._queue.remove(cmd)
                self.emit(Failed(rid=rid, stage="prefill", reason=FailReason.PREFILL_FAILED, detail=CANCELLED))
                return True
        if self._running is not None and self._running.rid == rid:
            self._cancelled.add(rid)
            self.emit(Failed(rid=rid, stage="prefill", reason=FailReason.PREFILL_FAILED, detail=CANCELLED))
            return True
        return False

    async def drain(self) -> None:
        while self.num_held:
            await asyncio.sleep(0.01)

    def fail_all(self, reason: FailReason, detail: str) -> None:
        """Report every request still held as failed (the worker is going away)."""
        for cmd in self._queue:
            self.emit(Failed(rid=cmd.rid, stage="prefill", reason=reason, detail=detail))
        self._queue.clear()
        if self._running is not None and self._running.rid not in self._cancelled:
            self._cancelled.add(self._running.rid)
            self.emit(Failed(rid=self._running.rid, stage="prefill", reason=reason, detail=detail))
        for rid, task in list(self._transfers.items()):
            task.cancel()
            self.emit(TransferDone(rid=rid, t_start=self._transfer_start[rid],
                                   t_end=time.monotonic(), status="failed", reason=reason, detail=detail))
        self._transfers.clear()
        self._transfer_start.clear()

    def close(self) -> None:
        """Stop the ship thread (after fail_all: nothing it still holds is reported)."""
        self.shipper.close()

    async def run(self) -> None:
        while True:
            while not self._queue:
                self._wakeup.clear()
                await self._wakeup.wait()
            cmd = self._running = self._queue.popleft()
            try:
                await self._serve(cmd)
            finally:
                self._running = None
                self._cancelled.discard(cmd.rid)

    async def _serve(self, cmd: Prefill) -> None:
        self.emit(PrefillStarted(rid=cmd.rid, t=time.monotonic()))
        try:
            sender = await self.links.sender(tuple(cmd.kv_target))
        except WorkerError as err:
            self.emit(Failed(rid=cmd.rid, stage="transfer", reason=FailReason.TRANSFER_FAILED, detail=str(err)))
            return
        try:
            outcome = await self.compute.call(self._compute, cmd, sender)
        except Exception as err:  # one bad request must not take the worker down
            log.exception("prefill of request %d failed", cmd.rid)
            self.emit(Failed(rid=cmd.rid, stage="prefill", reason=FailReason.PREFILL_FAILED, detail=f"prefill: {err}"))
            return
        if cmd.rid in self._cancelled:
            return
        self.emit(PrefillDone(
            rid=cmd.rid, t_start=outcome.t_start, t_end=outcome.t_end,
            cached_len=outcome.cached_len, kv_bytes=outcome.kv_bytes,
            first_token=outcome.first_token, held_s=outcome.held_s))
        self._transfer_start[cmd.rid] = outcome.t_first_send
        self._transfers[cmd.rid] = asyncio.create_task(self._finish_transfer(cmd, sender))

    async def _finish_transfer(self, cmd: Prefill, sender: KVSender) -> None:
        result = await sender.finish(cmd.rid, cmd.deadline_s)
        self._transfers.pop(cmd.rid, None)
        t_start = self._transfer_start.pop(cmd.rid)
        self.emit(TransferDone(rid=cmd.rid, t_start=t_start, t_end=time.monotonic(), status=result.status,
                               reason=transfer_fail_reason(result), detail=result.reason))

    def _compute(self, cmd: Prefill, sender: KVSender) -> PrefillOutcome:
        """On the torch thread: resume, prefill with shipping, store snapshots, pace, report."""
        pace = Pace(self.speed_factor)
        tokens = cmd.prompt_tokens()
        base = self._resume_point(cmd)
        start = 0 if base is None else base.num_tokens
        num_layers = self.model.config.num_layers

        def send(index: int, frame: bytes) -> None:
            sender.send_layer(cmd.rid, index, num_layers, frame)

        logits, cache, shipping = prefill_shipping(
            self.model, tokens[start:], self.shipper, send, cache=base,
            checkpoint_at=[p for p, _ in cmd.store], before_ship=pace.hold)
        first_token = int(logits.argmax())
        self._store_snapshots(cmd, cache)
        pace.hold()
        log.info("request %d: %d layers, %d bytes shipped; copy/compute overlap %.2f", cmd.rid,
                 len(shipping.spans), shipping.kv_bytes, shipping.overlap)
        return PrefillOutcome(
            t_start=pace.t0, t_end=time.monotonic(), t_first_send=shipping.first_send_s, cached_len=start,
            kv_bytes=shipping.kv_bytes, first_token=first_token, held_s=pace.held_s, shipping=shipping)

    def _resume_point(self, cmd: Prefill) -> HybridCache | None:
        if not cmd.resume_tokens:
            return None
        entry = self.store.get(cmd.resume_key)
        if entry is None:
            log.info("request %d: prefix %r not in the store; prefilling in full", cmd.rid,
                     cmd.resume_key)
            return None
        if entry.num_tokens != cmd.resume_tokens:
            log.warning("request %d: prefix %r holds %d tokens, not %d; prefilling in full",
                        cmd.rid, cmd.resume_key, entry.num_tokens, cmd.resume_tokens)
            return None
        return entry

    def _store_snapshots(self, cmd: Prefill, cache: HybridCache) -> None:
        for position, key in cmd.store:
            try:
                self.store.put(key, cache.snapshot(position))
            except ValueError as err:  # e.g. a position before the resume point with no checkpoint
                log.warning("request %d: prefix %r at %d not stored: %s",
                            cmd.rid, key, position, err)


TRANSFER_FAIL_REASONS = {TransferFailure.DEADLINE: FailReason.DEADLINE, TransferFailure.LINK_DOWN: FailReason.LINK_DOWN,
                         TransferFailure.REFUSED: FailReason.TRANSFER_FAILED}


def transfer_fail_reason(result: TransferResult) -> FailReason | None:
    """The tag a transfer's end reports: none when delivered."""
    if result.status != "failed":
        return None
    return TRANSFER_FAIL_REASONS[result.failure] if result.failure else FailReason.TRANSFER_FAILED
