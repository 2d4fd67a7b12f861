"""KVReceiver: accepts the sender's connections, reassembles caches, acknowledges every chunk.

Each connection carries chunks of any request and layer; a chunk is ACKed once placed, NACKed when
its payload is corrupt (the sender resends it), and a request gets DONE when its cache is rebuilt
or FAIL with a reason, also when a chunk of it arrives after it finished. A header that cannot be
trusted closes only that connection. Runs on one asyncio loop; the listening socket is made by the
caller (inside the decode side's namespace).

What the bytes mean is the user's: a KVDecoder it supplies decodes each whole layer frame (in a
worker thread, as it lands) and assembles the request's cache, which goes to `on_cache`.

Peers are not trusted (issue 13): memory follows received bytes (see reassembly.py) and a claim is
capped by the decoder's largest frame for that layer; connections are limited in total and per peer host;
one that sends no header within `handshake_timeout_s`, or stalls mid-payload for
`stall_timeout_s`, is closed; accept running out of descriptors backs off and logs once.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import logging
import math
import resource
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from emulator.limits import MAX_KV_CONNECTIONS, MAX_KV_CONNECTIONS_PER_PEER, MAX_KV_PARTIAL_BYTES
from emulator.transport.chunk_protocol import ChunkProtocol
from emulator.transport.frames import ChunkHeader, FrameError, FrameType, PayloadCorrupt, check_payload, reply
from emulator.transport.reassembly import Finished, LayerAssembly, Outcome, Reassembler, Refused, RequestAssembly

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT_S = 10.0  # a new connection must send a header (HELLO) within this
STALL_TIMEOUT_S = 30.0  # a payload may pause this long (a slow, lossy link) before the connection is closed
_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_ACCEPT_BACKOFF_S = (0.05, 1.0)  # first and longest wait after accept ran out of descriptors
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


def _default_max_connections() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return MAX_KV_CONNECTIONS if soft == resource.RLIM_INFINITY else max(1, min(MAX_KV_CONNECTIONS, soft // 2))


class KVReceiver(Generic[Cache]):
    def __init__(
        self,
        decoder: KVDecoder[Cache],
        on_cache: Callable[[int, Cache], None],
        max_partial_bytes: int = MAX_KV_PARTIAL_BYTES,
        abandon_after_s: float = 30.0,
        max_connections: int | None = None,
        max_connections_per_peer: int = MAX_KV_CONNECTIONS_PER_PEER,
        handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S,
        stall_timeout_s: float = STALL_TIMEOUT_S,
    ) -> None:
        self.decoder = decoder
        self.on_cache = on_cache
        self.reassembler = Reassembler(max_partial_bytes, abandon_after_s, layer_caps=tuple(decoder.layer_caps))
        self.max_connections = _default_max_connections() if max_connections is None else max_connections
        self.max_connections_per_peer = max_connections_per_peer
        self.handshake_timeout_s, self.stall_timeout_s = handshake_timeout_s, stall_timeout_s
        self.failures: collections.deque[ReceiveFailure] = collections.deque(maxlen=MAX_FAILURES_KEPT)
        self.bytes_received = 0
        self.corrupt_chunks = 0
        self.refused_connections = 0
        self.first_chunk_at: dict[int, float] = {}  # monotonic time of each request's first chunk (bounded)
        self._listener: socket.socket | None = None
        self._tasks: list[asyncio.Task] = []
        self._handlers: set[asyncio.Task] = set()  # pending request completions
        self._connections: set[ChunkProtocol] = set()
        self._peer_connections: collections.Counter[str] = collections.Counter()
        self._decoded: dict[int, dict[int, asyncio.Future]] = {}  # request -> layer -> its decode
        self._asked: dict[int, set[ChunkProtocol]] = {}  # rebuilding requests -> connections awaiting the answer
        self._refusal_logged_s = -math.inf

    @property
    def num_connections(self) -> int:
        return len(self._connections)

    async def start(self, listener: socket.socket) -> None:
        listener.setblocking(False)
        self._listener = listener
        self._tasks = [asyncio.create_task(self._accept_loop(listener)), asyncio.create_task(self._housekeeping())]

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
        for protocol in list(self._connections):
            if protocol.transport is not None:
                protocol.transport.close()
        for task in self._handlers:
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await asyncio.sleep(0)  # let the transports finish closing their sockets

    async def _accept_loop(self, listener: socket.socket) -> None:
        """Accept, admit within the limits, hand the socket to a ChunkProtocol. Out of descriptors,
        wait (backing off) while connections queue in the backlog, and say so once per episode."""
        loop = asyncio.get_running_loop()
        backoff_s, failed = _ACCEPT_BACKOFF_S[0], 0
        while True:
            try:
                conn, addr = await loop.sock_accept(listener)
            except OSError as err:
                if err.errno not in _OUT_OF_RESOURCES:
                    log.warning("KV accept failed (%s); still listening", err)
                    await asyncio.sleep(_ACCEPT_BACKOFF_S[0])
                    continue
                if not failed:
                    log.warning("KV accept: out of file descriptors (%s); new connections wait in the backlog "
                                "and accept retries every %g s at most", err.strerror, _ACCEPT_BACKOFF_S[1])
                failed += 1
                await asyncio.sleep(backoff_s)
                backoff_s = min(2 * backoff_s, _ACCEPT_BACKOFF_S[1])
                continue
            if failed:
                log.info("KV accept works again after %d failed attempts", failed)
                backoff_s, failed = _ACCEPT_BACKOFF_S[0], 0
            self._admit(loop, conn, str(addr[0]))

    def _admit(self, loop: asyncio.AbstractEventLoop, conn: socket.socket, peer: str) -> None:
        if len(self._connections) >= self.max_connections:
            self._refuse(conn, peer, f"{self.max_connections} connections are open")
            return
        if self._peer_connections[peer] >= self.max_connections_per_peer:
            self._refuse(conn, peer, f"{self.max_connections_per_peer} connections from {peer} are open")
            return
        conn.setblocking(False)
        protocol = ChunkProtocol(self._on_chunk, self._on_close)
        self._connections.add(protocol)
        self._peer_connections[peer] += 1
        protocol.peer = peer
        task = asyncio.create_task(self._adopt(loop, conn, protocol))
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)

    async def _adopt(self, loop: asyncio.AbstractEventLoop, conn: socket.socket, protocol: ChunkProtocol) -> None:
        try:
            await loop.connect_accepted_socket(lambda: protocol, sock=conn)
        except OSError as err:
            log.warning("KV connection from %s could not be set up: %s", protocol.peer, err)
            conn.close()
            self._on_close(protocol)

    def _refuse(self, conn: socket.socket, peer: str, why: str) -> None:
        """Close a connection over a limit; logged at most every 10 s (a peer may retry in a loop)."""
        conn.close()
        self.refused_connections += 1
        now = time.monotonic()
        if now - self._refusal_logged_s > 10.0:
            self._refusal_logged_s = now
            log.warning("KV connection from %s refused: %s (%d refused so far)", peer, why,
                        self.refused_connections)

    def _on_close(self, protocol: ChunkProtocol) -> None:
        if protocol in self._connections:
            self._connections.discard(protocol)
            self._peer_connections[protocol.peer] -= 1
            if not self._peer_connections[protocol.peer]:
                del self._peer_connections[protocol.peer]

    async def _housekeeping(self) -> None:
        """Expire abandoned requests and close connections that never greet or stall mid-frame."""
        period_s = min(0.5, self.handshake_timeout_s / 2, self.stall_timeout_s / 2)
        while True:
            await asyncio.sleep(period_s)
            now = time.monotonic()
            for rid in self.reassembler.expire(now):
                self._fail(rid, f"abandoned: no chunk for {self.reassembler.abandon_after_s:g} s")
            stale = [(p, why) for p in self._connections if p.transport is not None
                     and (why := p.stale_reason(now, self.handshake_timeout_s, self.stall_timeout_s))]
            for protocol, _ in stale:
                protocol.transport.close()
            if stale:
                log.warning("closed %d KV connection(s) that stalled (e.g. from %s: %s)", len(stale),
                            stale[0][0].peer, stale[0][1])

    def _fail(self, request_id: int, reason: str) -> None:
        log.warning("request %d failed on receive: %s", request_id, reason)
        self.reassembler.finish(request_id, Finished(Outcome.FAILED, reason))
        self._decoded.pop(request_id, None)
        self.failures.append(ReceiveFailure(request_id, reason))

    def _on_chunk(self, header: ChunkHeader, payload: memoryview, protocol: ChunkProtocol) -> None:
        """Check and place one chunk (its bytes are copied before returning), then ACK it; the chunk
        that completes a request schedules the rebuild and DONE."""
        transport = protocol.transport
        try:
            check_payload(header, payload)
        except PayloadCorrupt:
            self.corrupt_chunks += 1
            transport.write(reply(FrameType.NACK, header.key))
            return
        self.bytes_received += len(payload)
        finished = self.reassembler.finished(header.request_id)
        if finished is not None:
            self._answer_finished(header, finished, protocol)
            return
        try:
            done = self.reassembler.add(header, payload, time.monotonic(), protocol.peer)
        except Refused as err:
            self._fail(header.request_id, str(err))
            transport.write(reply(FrameType.FAIL, header.key, str(err)))
            return
        except FrameError as err:
            log.warning("closing a KV connection from %s: %s", protocol.peer, err)
            transport.close()
            return
        transport.write(reply(FrameType.ACK, header.key))
        self._note_first_chunk(header.request_id)
        self._start_decode(header, done)
        if done is not None:
            task = asyncio.create_task(self._complete(header, protocol))
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)

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
            self._fail(rid, f"cache rebuild: {err}")
            self._answer(rid, protocol, reply(FrameType.FAIL, header.key, str(err)))
            return
        self.reassembler.finish(rid, Finished(Outcome.DELIVERED))
        self.on_cache(rid, cache)
        self._answer(rid, protocol, reply(FrameType.DONE, header.key))

    def _answer(self, rid: int, protocol: ChunkProtocol, frame: bytes) -> None:
        """Send a request's DONE/FAIL on the connection that completed it (or, if that one closed,
        another from the same peer) and on every connection that asked meanwhile."""
        targets = self._asked.pop(rid, set())
        if protocol.transport.is_closing():
            protocol = next((p for p in self._connections if p.peer == protocol.peer
                             and p.transport is not None and not p.transport.is_closing()), protocol)
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
        return self.decoder.decode_layer(index, layer.frame())

    async def _gather_layers(self, rid: int) -> Cache:
        """Wait for every layer's decode and build the cache (each layer's decode is a future, so
        the chunk that completes the request waits for decodes that other chunks started)."""
        pending = self._decoded.pop(rid)
        decoded = dict(zip(pending, await asyncio.gather(*pending.values()), strict=False))
        return self.decoder.assemble(decoded)

