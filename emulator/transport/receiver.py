"""KVReceiver: accepts the sender's connections, reassembles caches, acknowledges every chunk.

Each connection carries chunks of any request and layer; a chunk is ACKed once placed, NACKed when
its payload is corrupt (the sender resends it), and a request gets DONE when its cache is rebuilt
or FAIL with a reason, also when a chunk of it arrives after it finished. A header that cannot be
trusted closes only that connection. Runs on one asyncio loop; the listening socket is made by the
caller (inside the decode side's namespace).

What the bytes mean is the user's: a KVDecoder it supplies decodes each whole layer frame (in a
worker thread, as it lands) and assembles the request's cache, which goes to `on_cache`.

Peers are not trusted (issues 13, 25): only a connection whose HELLO proves the run's secret sends
chunks (connections.py: challenge, proof, limits, deadlines); memory follows received bytes (see
reassembly.py) and a claim is capped by the decoder's largest frame for that layer. A request
belongs to the proven sender that started it: another sender's chunk for it is refused without
touching it, and a refusal is remembered for the refused sender only.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from emulator.limits import MAX_KV_CONNECTIONS_PER_PEER, MAX_KV_PARTIAL_BYTES
from emulator.transport.buffer_pool import BufferPool
from emulator.transport.chunk_protocol import ChunkProtocol
from emulator.transport.connections import KVConnections
from emulator.transport.frames import (
    ChunkHeader,
    FrameError,
    FrameType,
    HelloProof,
    PayloadCorrupt,
    check_payload,
    reply,
)
from emulator.transport.reassembly import Finished, LayerAssembly, Outcome, Reassembler, Refused, RequestAssembly

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT_S = 10.0  # the proof deadline: a new connection must prove its HELLO within this
# A payload may pause this long (a slow, lossy link) before the connection is closed; a proven
# connection must also send its first DATA within this of its HELLO.
STALL_TIMEOUT_S = 30.0
MAX_FAILURES_KEPT = 4096  # unread receive failures (the decode engine takes them every 0.25 s)


@dataclass(frozen=True, slots=True)
class ReceiveFailure:
    request_id: int
    reason: str


Cache = TypeVar("Cache")


class KVDecoder(Protocol[Cache]):
    """What a layer's bytes mean, supplied by the receiver's user (the decode worker's model).

    `decode_layer` runs in a worker thread; it and `assemble` raise ValueError for bytes that are
    not a valid layer or cache (the request then fails, the connection stays)."""

    @property
    def layer_caps(self) -> Sequence[int]:
        """The largest frame each layer may have, in bytes: a claim above it is refused unread."""
        ...

    def decode_layer(self, index: int, frame: bytes) -> Any: ...

    def assemble(self, layers: dict[int, Any]) -> Cache: ...


class KVReceiver(Generic[Cache]):
    def __init__(
        self,
        decoder: KVDecoder[Cache],
        on_cache: Callable[[int, Cache], None],
        *,
        proof: HelloProof,
        max_partial_bytes: int = MAX_KV_PARTIAL_BYTES,
        abandon_after_s: float = 30.0,
        max_connections: int | None = None,
        max_connections_per_peer: int = MAX_KV_CONNECTIONS_PER_PEER,
        max_pending: int | None = None,
        handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S,
        stall_timeout_s: float = STALL_TIMEOUT_S,
    ) -> None:
        """`proof` holds the run's secret: only connections that prove it send chunks."""
        self.decoder = decoder
        self.on_cache = on_cache
        self.reassembler = Reassembler(max_partial_bytes, abandon_after_s, layer_caps=tuple(decoder.layer_caps))
        self.buffers = BufferPool()  # payload buffers: connection -> reassembly -> back after the layer's join
        self.connections = KVConnections(proof, self._on_chunk, max_connections, max_connections_per_peer,
                                         max_pending, handshake_timeout_s, stall_timeout_s, self.buffers)
        self.failures: collections.deque[ReceiveFailure] = collections.deque(maxlen=MAX_FAILURES_KEPT)
        self.bytes_received = 0
        self.corrupt_chunks = 0
        self.first_chunk_at: dict[int, float] = {}  # monotonic time of each request's first chunk (bounded)
        self._listener: socket.socket | None = None
        self._tasks: list[asyncio.Task] = []
        self._handlers: set[asyncio.Task] = set()  # pending request completions
        self._decoded: dict[int, dict[int, asyncio.Future]] = {}  # request -> layer -> its decode
        self._asked: dict[int, set[ChunkProtocol]] = {}  # rebuilding requests -> connections awaiting the answer

    @property
    def num_connections(self) -> int:
        """Open connections, proven or still proving themselves."""
        return len(self.connections)

    @property
    def refused_connections(self) -> int:
        return self.connections.num_refused

    async def start(self, listener: socket.socket) -> None:
        listener.setblocking(False)
        self._listener = listener
        self._tasks = [asyncio.create_task(self.connections.accept_loop(listener)),
                       asyncio.create_task(self._housekeeping())]

    def take_failures(self) -> list[ReceiveFailure]:
        """Receive failures since the last call (the decode engine reports them)."""
        failures = list(self.failures)
        self.failures.clear()
        return failures

    async def close(self) -> None:
        """Stop listening, drop every connection and wait for pending completions."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._listener is not None:
            self._listener.close()
        await self.connections.close()
        for task in self._handlers:
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await asyncio.sleep(0)  # let the transports finish closing their sockets

    async def _housekeeping(self) -> None:
        """Expire abandoned requests and close connections past their deadlines."""
        c = self.connections
        period_s = min(0.5, c.handshake_timeout_s / 2, c.stall_timeout_s / 2)
        while True:
            await asyncio.sleep(period_s)
            now = time.monotonic()
            for request in self.reassembler.expire_requests(now):
                self._fail(request.request_id, f"abandoned: no chunk for {self.reassembler.abandon_after_s:g} s",
                           request.owner)
            c.close_stale(now)

    def _fail(self, request_id: int, reason: str, owner: str) -> None:
        """End a request that `owner` was sending: remembered (for its chunks) and reported."""
        log.warning("request %d failed on receive: %s", request_id, reason)
        self.reassembler.finish(request_id, Finished(Outcome.FAILED, reason, owner))
        self._decoded.pop(request_id, None)
        self.failures.append(ReceiveFailure(request_id, reason))

    def _on_chunk(self, header: ChunkHeader, payload: bytes | memoryview, protocol: ChunkProtocol) -> None:
        """Check and place one chunk of a proven connection (reassembly keeps its payload), then ACK it; the chunk that completes a request schedules the rebuild and DONE."""
        transport, rid, sender = protocol.transport, header.request_id, protocol.sender
        try:
            check_payload(header, payload)
        except PayloadCorrupt:
            self.corrupt_chunks += 1
            transport.write(reply(FrameType.NACK, header.key))
            return
        self.bytes_received += len(payload)
        if not self._may_send(header, protocol):
            return
        partial = self.reassembler.partial.get(rid)
        try:
            done = self.reassembler.add(header, payload, time.monotonic(), protocol.peer, sender)
        except Refused as err:
            if partial is not None:  # its own request (see _may_send): drop what it holds, report it
                self._fail(rid, str(err), sender)
            else:  # remembered for this sender only; it hears FAIL and reports it itself
                self.reassembler.finish(rid, Finished(Outcome.FAILED, str(err), sender))
            transport.write(reply(FrameType.FAIL, header.key, str(err)))
            return
        except FrameError as err:
            log.warning("closing a KV connection from %s (%s): %s", protocol.peer, sender, err)
            transport.close()
            return
        transport.write(reply(FrameType.ACK, header.key))
        self._note_first_chunk(rid)
        self._start_decode(header, done)
        if done is not None:
            task = asyncio.create_task(self._complete(header, protocol))
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)

    def _may_send(self, header: ChunkHeader, protocol: ChunkProtocol) -> bool:
        """Whether this sender may place a chunk of the request (else it has been answered). A
        finished request answers its outcome, except a failure remembered for another sender; a
        request in progress belongs to its sender while that one has a connection open, and passes
        to this one (a retry) once it has none."""
        rid, sender = header.request_id, protocol.sender
        finished = self.reassembler.finished(rid)
        if finished is not None and (finished.outcome is not Outcome.FAILED or finished.owner == sender):
            self._answer_finished(header, finished, protocol)
            return False
        partial = self.reassembler.partial.get(rid)
        if finished is None and (partial is None or partial.owner == sender):
            return True
        if partial is not None and any(self.connections.of_sender(partial.owner)):
            reason = f"request {rid} is being sent by {partial.owner}"
            protocol.transport.write(reply(FrameType.FAIL, header.key, reason))
            return False
        self.reassembler.forget(rid)
        self._decoded.pop(rid, None)
        return True

    def _answer_finished(self, header: ChunkHeader, finished: Finished, protocol: ChunkProtocol) -> None:
        """A chunk of a request that already finished (a resend, or a reused id): answer with its
        outcome so the sender does not wait out its deadline."""
        transport = protocol.transport
        if finished.outcome is Outcome.FAILED:
            reason = f"request {header.request_id} already failed here: {finished.reason}"
            transport.write(reply(FrameType.FAIL, header.key, reason))
            return
        transport.write(reply(FrameType.ACK, header.key))
        if finished.outcome is Outcome.DELIVERED:
            transport.write(reply(FrameType.DONE, header.key))
        else:
            self._asked.setdefault(header.request_id, set()).add(protocol)

    def _note_first_chunk(self, request_id: int) -> None:
        if request_id not in self.first_chunk_at:
            self.first_chunk_at[request_id] = time.monotonic()
            if len(self.first_chunk_at) > MAX_FAILURES_KEPT:
                del self.first_chunk_at[next(iter(self.first_chunk_at))]

    async def _complete(self, header: ChunkHeader, protocol: ChunkProtocol) -> None:
        rid = header.request_id
        try:
            cache = await self._gather_layers(rid)
        except ValueError as err:  # the decoder's refusal (a FrameError is one too)
            self._fail(rid, f"cache rebuild: {err}", protocol.sender)
            self._answer(rid, protocol, reply(FrameType.FAIL, header.key, str(err)))
            return
        self.reassembler.finish(rid, Finished(Outcome.DELIVERED))
        self.on_cache(rid, cache)
        self._answer(rid, protocol, reply(FrameType.DONE, header.key))

    def _answer(self, rid: int, protocol: ChunkProtocol, frame: bytes) -> None:
        """Send a request's DONE/FAIL on the connection that completed it (or, if that one closed,
        another of the same sender) and on every connection that asked meanwhile."""
        targets = self._asked.pop(rid, set())
        if protocol.transport.is_closing():
            protocol = next(self.connections.of_sender(protocol.sender), protocol)
        targets.add(protocol)
        for target in targets:
            if target.transport is not None and not target.transport.is_closing():
                target.transport.write(frame)

    def _start_decode(self, header: ChunkHeader, done: RequestAssembly | None) -> None:
        """Start decoding a layer the moment its last chunk lands, in a worker thread (it joins,
        copies and checksums megabytes), so only the final layer's decode is exposed after the
        transfer and the loop keeps reading every connection meanwhile."""
        rid, index = header.request_id, header.layer_index
        assembly = done if done is not None else self.reassembler.partial.get(rid)
        layer = assembly.layers.get(index) if assembly is not None else None
        pending = self._decoded.setdefault(rid, {})
        if layer is not None and layer.is_complete and index not in pending:
            pending[index] = asyncio.get_running_loop().run_in_executor(None, self._decode, index, layer)

    def _decode(self, index: int, layer: LayerAssembly) -> Any:
        return self.decoder.decode_layer(index, layer.frame(self.buffers))

    async def _gather_layers(self, rid: int) -> Cache:
        """Wait for every layer's decode and build the cache (each layer's decode is a future, so
        the chunk that completes the request waits for decodes that other chunks started)."""
        pending = self._decoded.pop(rid)
        decoded = dict(zip(pending, await asyncio.gather(*pending.values()), strict=False))
        return self.decoder.assemble(decoded)

