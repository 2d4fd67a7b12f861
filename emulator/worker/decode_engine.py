"""The decode role: a KVReceiver for shipped caches, pairing each with its `decode` command, and a
continuous batch that advances every admitted request by one greedy token per step.

Each step is a short list of phases: expire and report, admit, step on the torch thread, complete.
It does not decide where requests decode or how large the pool is; the gateway does.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import torch

from emulator.control.types import FailReason
from emulator.transport.frames import HelloProof
from emulator.transport.receiver import KVReceiver
from emulator.wire.protocol import Completed, Decode, Failed, FirstToken, Message
from emulator.worker.compute import ComputeThread
from emulator.worker.kv_decoder import ModelKVDecoder
from model_stub.cache import HybridCache
from model_stub.model import HybridModel

log = logging.getLogger(__name__)
Emit = Callable[[Message], None]
CANCELLED = "cancelled by the gateway"
WATCH_INTERVAL_S = 0.25


@dataclass(slots=True)
class Active:
    """A request in the batch: its cache advances in place and `tokens` grows by one per step."""

    rid: int
    cache: HybridCache
    tokens: list[int]
    output_len: int
    first_token_s: float


def decode_tokens(model: HybridModel, tokens: list[int], caches: list[HybridCache]) -> list[int]:
    """One greedy step of a batch (every cache advances in place): the step the decode role runs,
    and the one `calibrate --machine` times (emulator/worker/machine_probe.py)."""
    logits = model.decode_step(tokens, caches)  # (b, vocab)
    return torch.argmax(logits, dim=-1).tolist()


class DecodeEngine:
    def __init__(self, model: HybridModel, compute: ComputeThread, emit: Emit, proof: HelloProof,
                 max_batch: int = 8, orphan_timeout_s: float = 30.0) -> None:
        """`proof`: the run's secret, which every KV connection must prove (issue 25)."""
        if max_batch < 1:
            raise ValueError(f"max_batch: {max_batch} must be at least 1")
        self.model, self.compute, self.emit = model, compute, emit
        self.max_batch = max_batch
        self.orphan_timeout_s = orphan_timeout_s
        self.receiver = KVReceiver(ModelKVDecoder(model.config, device=model.device), self._on_cache, proof=proof)
        self._caches: dict[int, tuple[HybridCache, float]] = {}  # arrived, no command yet
        self._commands: dict[int, Decode] = {}  # arrived, no cache yet
        self._waiting: deque[tuple[Decode, HybridCache]] = deque()
        self._batch: list[Active] = []
        self._wakeup = asyncio.Event()

    async def start(self, listener: socket.socket) -> None:
        await self.receiver.start(listener)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def batch_size(self) -> int:
        return len(self._batch)

    @property
    def num_held(self) -> int:
        return len(self._caches) + len(self._commands) + len(self._waiting) + len(self._batch)

    def submit(self, cmd: Decode) -> None:
        entry = self._caches.pop(cmd.rid, None)
        if entry is None:
            self._commands[cmd.rid] = cmd
        else:
            self._pair(cmd, entry[0])

    def _on_cache(self, rid: int, cache: HybridCache) -> None:
        cmd = self._commands.pop(rid, None)
        if cmd is None:
            self._caches[rid] = cache, time.monotonic()
        else:
            self._pair(cmd, cache)

    def _pair(self, cmd: Decode, cache: HybridCache) -> None:
        if cache.num_tokens != cmd.prompt_len:
            self.emit(Failed(rid=cmd.rid, stage="decode", reason=FailReason.DECODE_FAILED, detail=(
                f"decode.prompt_len: {cmd.prompt_len} but the cache that arrived holds "
                f"{cache.num_tokens} tokens; send the prompt's length")))
            return
        self._waiting.append((cmd, cache))
        self._wakeup.set()

    def cancel(self, rid: int) -> bool:
        """Drop `rid` wherever it is held (reported failed); False when it is not held here."""
        found = self._commands.pop(rid, None) is not None or self._caches.pop(rid, None) is not None
        waiting = [w for w in self._waiting if w[0].rid == rid]
        for w in waiting:
            self._waiting.remove(w)
        active = [a for a in self._batch if a.rid == rid]
        self._batch = [a for a in self._batch if a.rid != rid]
        if found or waiting or active:
            self.emit(Failed(rid=rid, stage="decode", reason=FailReason.DECODE_FAILED, detail=CANCELLED))
            return True
        return False

    def fail_all(self, reason: FailReason, detail: str) -> None:
        rids = [*self._commands, *self._caches, *(c.rid for c, _ in self._waiting),
                *(a.rid for a in self._batch)]
        self._commands.clear()
        self._caches.clear()
        self._waiting.clear()
        self._batch = []
        for rid in rids:
            self.emit(Failed(rid=rid, stage="decode", reason=reason, detail=detail))

    async def drain(self) -> None:
        while self.num_held:
            await asyncio.sleep(0.01)

    async def watch(self) -> None:
        """Report receive failures and drop caches whose command never came."""
        while True:
            await asyncio.sleep(WATCH_INTERVAL_S)
            self._report_receive_failures()
            self._expire_orphans(time.monotonic())

    def _report_receive_failures(self) -> None:
        for failure in self.receiver.take_failures():
            self._commands.pop(failure.request_id, None)
            self.emit(Failed(rid=failure.request_id, stage="transfer", reason=FailReason.TRANSFER_FAILED,
                             detail=failure.reason))

    def _expire_orphans(self, now: float) -> None:
        for rid, (_, arrived_s) in list(self._caches.items()):
            if now - arrived_s > self.orphan_timeout_s:
                del self._caches[rid]
                self.emit(Failed(rid=rid, stage="decode", reason=FailReason.DECODE_FAILED, detail=(
                    f"decode: cache arrived but no decode command within "
                    f"{self.orphan_timeout_s:g} s; dropped")))

    async def run(self) -> None:
        while True:
            while not self._waiting and not self._batch:
                self._wakeup.clear()
                await self._wakeup.wait()
            await self._admit()
            if self._batch:
                await self._step()

    async def _admit(self) -> None:
        """Move waiting requests into the batch; the first token (from the prefill's logits) is
        delivered now, when the request joins."""
        while self._waiting and len(self._batch) < self.max_batch:
            cmd, cache = self._waiting.popleft()
            if cache.layers[0].tensors[0].device != self.model.device:
                cache = await self.compute.call(cache.to, self.model.device)
            active = Active(cmd.rid, cache, [cmd.first_token], cmd.output_len, time.monotonic())
            self.emit(FirstToken(rid=cmd.rid, t=active.first_token_s))
            if cmd.output_len == 1:
                self._complete(active)
            else:
                self._batch.append(active)

    async def _step(self) -> None:
        stepping = list(self._batch)
        try:
            next_tokens = await self.compute.call(self._decode_step, stepping)
        except Exception as err:  # a batch that cannot step fails its members, not the worker
            log.exception("decode step failed")
            for active in stepping:
                self.emit(Failed(rid=active.rid, stage="decode", reason=FailReason.DECODE_FAILED,
                                 detail=f"decode: {err}"))
            self._batch = [a for a in self._batch if a not in stepping]
            return
        for active, token in zip(stepping, next_tokens, strict=True):
            active.tokens.append(token)
        finished = [a for a in self._batch if len(a.tokens) >= a.output_len]
        self._batch = [a for a in self._batch if len(a.tokens) < a.output_len]
        for active in finished:
            self._complete(active)

    def _decode_step(self, stepping: list[Active]) -> list[int]:
        return decode_tokens(self.model, [a.tokens[-1] for a in stepping], [a.cache for a in stepping])

    def _complete(self, active: Active) -> None:
        now = time.monotonic()
        steps = active.output_len - 1
        tpot_s = (now - active.first_token_s) / steps if steps else 0.0
        self.emit(Completed(rid=active.rid, t=now, tokens=active.tokens, tpot_s=tpot_s))

    async def close(self) -> None:
        await self.receiver.close()
