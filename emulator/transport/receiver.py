"""KVReceiver: accepts the sender's connections, reassembles caches, acknowledges every chunk.

Each connection carries chunks of any request and layer; a chunk is ACKed once placed, NACKed when
its payload is corrupt (the sender resends it), and a request gets DONE when its cache is rebuilt
or FAIL with a reason. A header that cannot be trusted closes only that connection. Runs on one
asyncio loop; the listening socket is made by the caller (inside the decode side's namespace).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from emulator.transport.chunk_protocol import ChunkProtocol
from emulator.transport.frames import ChunkHeader, FrameError, FrameType, PayloadCorrupt, check_payload, reply
from emulator.transport.reassembly import BudgetExceeded, Reassembler, RequestAssembly
from model_stub.cache import HybridCache
from model_stub.config import ModelConfig
from model_stub.serialize import FrameError as CacheFrameError, assemble_cache, decode_layer

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReceiveFailure:
    request_id: int
    reason: str


class KVReceiver:
    def __init__(
        self,
        config: ModelConfig,
        on_cache: Callable[[int, HybridCache], None],
        max_partial_bytes: int = 1 << 30,
        abandon_after_s: float = 30.0,
    ) -> None:
        self.config = config
        self.on_cache = on_cache
        self.reassembler = Reassembler(max_partial_bytes, abandon_after_s)
        self.failures: list[ReceiveFailure] = []
        self.bytes_received = 0
        self.corrupt_chunks = 0
        self.first_chunk_at: dict[int, float] = {}  # monotonic time of each request's first chunk
        self._server: asyncio.Server | None = None
        self._expiry: asyncio.Task | None = None
        self._handlers: set[asyncio.Task] = set()  # pending request completions
        self._connections: set[ChunkProtocol] = set()
        self._decoded: dict[int, dict[int, asyncio.Future]] = {}  # request -> layer -> its decode

    async def start(self, listener: socket.socket) -> None:
        listener.setblocking(False)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._make_protocol, sock=listener)
        self._expiry = asyncio.create_task(self._expire_loop())

    def _make_protocol(self) -> ChunkProtocol:
        protocol = ChunkProtocol(self._on_chunk, self._connections.discard)
        self._connections.add(protocol)
        return protocol

    async def close(self) -> None:
        """Stop listening, drop every connection and wait for pending completions."""
        if self._expiry is not None:
            self._expiry.cancel()
        if self._server is not None:
            self._server.close()
        for protocol in list(self._connections):
            if protocol.transport is not None:
                protocol.transport.close()
        for task in self._handlers:
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            for rid in self.reassembler.expire(time.monotonic()):
                self._fail(rid, f"abandoned: no chunk for {self.reassembler.abandon_after_s:g} s")

    def _fail(self, request_id: int, reason: str) -> None:
        log.warning("request %d failed on receive: %s", request_id, reason)
        self.reassembler.finish(request_id)
        self._decoded.pop(request_id, None)
        self.failures.append(ReceiveFailure(request_id, reason))

    def _on_chunk(self, header: ChunkHeader, payload: memoryview, transport: asyncio.Transport) -> None:
        """Check and place one chunk (its bytes are copied into the layer buffer before returning),
        then ACK it; the chunk that completes a request schedules the rebuild and DONE."""
        try:
            check_payload(header, payload)
        except PayloadCorrupt:
            self.corrupt_chunks += 1
            transport.write(reply(FrameType.NACK, header.key))
            return
        self.bytes_received += len(payload)
        self.first_chunk_at.setdefault(header.request_id, time.monotonic())
        try:
            done = self.reassembler.add(header, payload, time.monotonic())
        except BudgetExceeded as err:
            self._fail(header.request_id, str(err))
            transport.write(reply(FrameType.FAIL, header.key, str(err)))
            return
        except FrameError as err:
            log.warning("closing a KV connection: %s", err)
            transport.close()
            return
        transport.write(reply(FrameType.ACK, header.key))
        self._start_decode(header, done)
        if done is not None:
            task = asyncio.create_task(self._complete(header, transport))
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)

    async def _complete(self, header: ChunkHeader, transport: asyncio.Transport) -> None:
        try:
            cache = await self._gather_layers(header.request_id)
        except CacheFrameError as err:
            self._fail(header.request_id, f"cache rebuild: {err}")
            transport.write(reply(FrameType.FAIL, header.key, str(err)))
            return
        self.on_cache(header.request_id, cache)
        if not transport.is_closing():
            transport.write(reply(FrameType.DONE, header.key))

    def _start_decode(self, header: ChunkHeader, done: RequestAssembly | None) -> None:
        """Start decoding a layer the moment its last chunk lands, in a worker thread (it copies
        and checksums megabytes), so only the final layer's decode is exposed after the transfer
        and the loop keeps reading every connection meanwhile."""
        rid, index = header.request_id, header.layer_index
        assembly = done if done is not None else self.reassembler.partial.get(rid)
        layer = assembly.layers.get(index) if assembly is not None else None
        pending = self._decoded.setdefault(rid, {})
        if layer is not None and layer.is_complete and index not in pending:
            decode = functools.partial(decode_layer, layer.buffer, self.config)
            pending[index] = asyncio.get_running_loop().run_in_executor(None, decode)

    async def _gather_layers(self, rid: int) -> HybridCache:
        """Wait for every layer's decode and build the cache (each layer's decode is a future, so
        the chunk that completes the request waits for decodes that other chunks started)."""
        pending = self._decoded.pop(rid)
        decoded = dict(zip(pending, await asyncio.gather(*pending.values()), strict=False))
        for index, (got_index, _, _) in decoded.items():
            if got_index != index:
                raise CacheFrameError(f"frame.layer_index: {got_index} arrived as layer {index}")
        return assemble_cache({i: (layer, tokens) for i, (_, layer, tokens) in decoded.items()}, self.config)
