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

from emulator.transport.frames import (
    HEADER_BYTES, FrameError, FrameType, PayloadCorrupt, check_payload, decode_header, reply,
)
from emulator.transport.reassembly import BudgetExceeded, Reassembler, RequestAssembly
from model_stub.cache import HybridCache
from model_stub.config import ModelConfig
from model_stub.serialize import FrameError as CacheFrameError
from model_stub.serialize import assemble_cache, decode_layer

log = logging.getLogger(__name__)
# asyncio pauses a socket once twice this much is buffered; the 64 KiB default pauses several times
# per 256 KiB chunk at 1 Gbit/s
STREAM_LIMIT_BYTES = 4 << 20


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
        self._handlers: set[asyncio.Task] = set()
        self._decoded: dict[int, dict[int, asyncio.Future]] = {}  # request -> layer -> its decode

    async def start(self, listener: socket.socket) -> None:
        listener.setblocking(False)
        self._server = await asyncio.start_server(self._serve, sock=listener, limit=STREAM_LIMIT_BYTES)
        self._expiry = asyncio.create_task(self._expire_loop())

    async def close(self) -> None:
        """Stop listening and end every connection's handler before returning."""
        if self._expiry is not None:
            self._expiry.cancel()
        if self._server is not None:
            self._server.close()
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

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._handlers.add(task)
        try:
            while True:
                header = decode_header(await reader.readexactly(HEADER_BYTES))
                payload = await reader.readexactly(header.length)  # bounded by decode_header's caps
                if header.type is not FrameType.DATA:
                    raise FrameError(f"chunk.type: a receiver accepts DATA only, got {header.type.name}")
                writer.write(await self._handle(header, payload))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the sender closed or lost this connection; it resends what was not ACKed
        except FrameError as err:
            log.warning("closing a KV connection: %s", err)
        except asyncio.CancelledError:
            pass  # close(): the receiver is shutting down
        finally:
            writer.close()
            self._handlers.discard(task)

    async def _handle(self, header, payload: bytes) -> bytes:
        try:
            check_payload(header, payload)
        except PayloadCorrupt:
            self.corrupt_chunks += 1
            return reply(FrameType.NACK, header.key)
        self.bytes_received += len(payload)
        self.first_chunk_at.setdefault(header.request_id, time.monotonic())
        try:
            done = self.reassembler.add(header, payload, time.monotonic())
        except BudgetExceeded as err:
            self._fail(header.request_id, str(err))
            return reply(FrameType.FAIL, header.key, str(err))
        ack = reply(FrameType.ACK, header.key)
        try:
            cache = await self._decode_progress(header, done)
        except CacheFrameError as err:
            self._fail(header.request_id, f"cache rebuild: {err}")
            self._decoded.pop(header.request_id, None)
            return ack + reply(FrameType.FAIL, header.key, str(err))
        if cache is None:
            return ack
        self.on_cache(header.request_id, cache)
        return ack + reply(FrameType.DONE, header.key)

    async def _decode_progress(self, header, done: RequestAssembly | None) -> HybridCache | None:
        """Start decoding a layer the moment its last chunk lands (so only the final layer's
        decode is exposed after the transfer); return the whole cache once every layer is in.

        Decoding copies and checksums megabytes, so it runs in a worker thread: the loop keeps
        reading every connection meanwhile instead of letting their windows fill. Each layer's
        decode is a future, so the handler that completes the request waits for all of them.
        """
        rid, index = header.request_id, header.layer_index
        assembly = done if done is not None else self.reassembler.partial.get(rid)
        layer = assembly.layers.get(index) if assembly is not None else None
        pending = self._decoded.setdefault(rid, {})
        if layer is not None and layer.is_complete and index not in pending:
            decode = functools.partial(decode_layer, layer.buffer, self.config)
            pending[index] = asyncio.get_running_loop().run_in_executor(None, decode)
        if done is None:
            return None
        decoded = dict(zip(pending, await asyncio.gather(*pending.values())))
        del self._decoded[rid]
        for index, (got_index, _, _) in decoded.items():
            if got_index != index:
                raise CacheFrameError(f"frame.layer_index: {got_index} arrived as layer {index}")
        return assemble_cache({i: (layer, tokens) for i, (_, layer, tokens) in decoded.items()}, self.config)
