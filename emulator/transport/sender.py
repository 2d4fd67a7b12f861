"""KVSender: N persistent TCP connections striping a request's layer chunks, nothing lost silently.

Chunks wait in one shared queue; each connection takes the next one when its socket can write, so a
slow connection never holds the others back. A bounded window caps chunks in flight. A chunk stays
"unacked" until the receiver ACKs it; a NACK or a lost connection puts it back in the queue for any
live connection. `finish` resolves to delivered (DONE) or failed (FAIL, deadline, no connection).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from emulator.transport.congestion import CongestionMonitor
from emulator.transport.frames import (
    CHUNK_BYTES,
    HEADER_BYTES,
    Chunk,
    FrameError,
    FrameType,
    check_payload,
    decode_header,
    hello,
    split_layer,
)

log = logging.getLogger(__name__)
CONGESTION_CONTROLS = ("cubic", "reno", "bbr")
SOCKET_BUFFER_BYTES = 8 << 20
# Unsent bytes a connection may hold in the kernel. Without a cap each connection queues megabytes,
# and at the end of a transfer the link idles while the slowest one drains its backlog (1 Gbit/s,
# 20 ms, 4 connections: 0.93 -> 0.96 of iperf3). Sent-but-unacked bytes do not count against it.
NOTSENT_LOWAT_BYTES = 256 << 10
TCP_NOTSENT_LOWAT = getattr(socket, "TCP_NOTSENT_LOWAT", 25)  # Linux >= 3.12


class TransferFailure(StrEnum):
    """Why a transfer failed, for its user to file without reading the words."""

    DEADLINE = "deadline"  # not delivered within the deadline
    LINK_DOWN = "link_down"  # every connection lost and reconnects exhausted
    REFUSED = "refused"  # the receiver answered FAIL


@dataclass(frozen=True, slots=True)
class TransferResult:
    request_id: int
    status: str  # "delivered" | "failed"
    reason: str = ""
    seconds: float = 0.0
    failure: TransferFailure | None = None  # set when failed


class KVSender:
    def __init__(
        self,
        make_socket: Callable[[], socket.socket],
        target: tuple[str, int],
        num_connections: int = 4,
        congestion: str = "cubic",
        window_chunks: int = 64,
        chunk_bytes: int = CHUNK_BYTES,
        max_reconnects: int = 5,
        monitor: CongestionMonitor | None = None,
    ) -> None:
        if congestion not in CONGESTION_CONTROLS:
            raise ValueError(f"congestion: {congestion!r} is not one of {', '.join(CONGESTION_CONTROLS)}")
        if num_connections < 1 or window_chunks < 1:
            raise ValueError("num_connections and window_chunks must be >= 1")
        self.make_socket, self.target = make_socket, target
        self.num_connections, self.congestion = num_connections, congestion
        self.chunk_bytes, self.max_reconnects = chunk_bytes, max_reconnects
        self.monitor = monitor  # sees every connection (TCP_INFO) and counts egress per destination
        self.destination = f"{target[0]}:{target[1]}"
        self.sockets: list[socket.socket] = []  # live connections (tests may close one)
        self.bytes_sent = 0
        self.resent_chunks = 0
        self._window_chunks = window_chunks
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[Chunk] | None = None
        self._window: asyncio.Semaphore | None = None
        self._unacked: dict[tuple[int, int, int], Chunk] = {}
        self._results: dict[int, asyncio.Future[TransferResult]] = {}
        self._started_at: dict[int, float] = {}
        self._tasks: list[asyncio.Task] = []
        self._writers: list[asyncio.StreamWriter] = []
        self._reconnects = 0
        self._closing = False

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue, self._window = asyncio.Queue(), asyncio.Semaphore(self._window_chunks)
        for _ in range(self.num_connections):
            await self._connect()

    async def _connect(self) -> None:
        sock = self.make_socket()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, self.congestion.encode())
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER_BYTES)
        sock.setsockopt(socket.IPPROTO_TCP, TCP_NOTSENT_LOWAT, NOTSENT_LOWAT_BYTES)
        sock.setblocking(False)
        await asyncio.wait_for(self._loop.sock_connect(sock, self.target), timeout=10)
        reader, writer = await asyncio.open_connection(sock=sock)
        writer.write(hello())  # the receiver closes connections that say nothing; this one may idle
        self._writers.append(writer)
        self.sockets.append(sock)
        if self.monitor is not None:
            self.monitor.add(sock)
        owned: dict[tuple[int, int, int], Chunk] = {}
        tasks = [asyncio.create_task(self._write_loop(writer, owned)), asyncio.create_task(self._read_loop(reader))]
        self._tasks += [*tasks, asyncio.create_task(self._watch(sock, writer, owned, tasks))]

    def send_layer(self, request_id: int, layer_index: int, num_layers: int, layer_frame: bytes) -> None:
        """Queue one layer's frame; returns at once and may be called from any thread."""
        chunks = split_layer(request_id, layer_index, num_layers, layer_frame, self.chunk_bytes)
        self._loop.call_soon_threadsafe(self._enqueue, request_id, chunks)

    def _enqueue(self, request_id: int, chunks: list[Chunk]) -> None:
        self._result_future(request_id)
        self._started_at.setdefault(request_id, time.monotonic())
        for chunk in chunks:
            self._queue.put_nowait(chunk)

    def _result_future(self, request_id: int) -> asyncio.Future[TransferResult]:
        if request_id not in self._results:
            self._results[request_id] = self._loop.create_future()
        return self._results[request_id]

    async def finish(self, request_id: int, deadline_s: float) -> TransferResult:
        """Wait until the receiver rebuilt the request's cache, or fail it with the reason."""
        await asyncio.sleep(0)  # let send_layer calls from this thread land first
        future = self._result_future(request_id)
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout=deadline_s)
        except TimeoutError:
            self._fail(request_id, TransferFailure.DEADLINE, f"deadline: not delivered within {deadline_s:g} s")
            return future.result()

    def _fail(self, request_id: int, failure: TransferFailure, reason: str) -> None:
        self._resolve(request_id, "failed", reason, failure)

    def _resolve(self, request_id: int, status: str, reason: str = "",
                 failure: TransferFailure | None = None) -> None:
        future = self._result_future(request_id)
        if not future.done():
            seconds = time.monotonic() - self._started_at.get(request_id, time.monotonic())
            future.set_result(TransferResult(request_id, status, reason, seconds, failure))
        for key in [k for k in self._unacked if k[0] == request_id]:
            del self._unacked[key]
            self._window.release()

    async def _write_loop(self, writer: asyncio.StreamWriter, owned: dict) -> None:
        while True:
            chunk = await self._queue.get()
            try:  # a permit is taken only with a chunk in hand, so a cancelled loop leaks none
                await self._window.acquire()
            except asyncio.CancelledError:
                self._queue.put_nowait(chunk)
                raise
            key = chunk.header.key
            if self._results.get(key[0]) is not None and self._results[key[0]].done():
                self._window.release()  # its request already ended (failed): drop the leftovers
                continue
            self._unacked[key] = owned[key] = chunk
            writer.write(chunk.encode())  # one write: with TCP_NODELAY a lone header would go as its own packet
            self.bytes_sent += HEADER_BYTES + chunk.header.length
            if self.monitor is not None:
                self.monitor.record_sent(self.destination, HEADER_BYTES + chunk.header.length)
            await writer.drain()

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        while True:
            header = decode_header(await reader.readexactly(HEADER_BYTES))
            payload = await reader.readexactly(header.length)
            check_payload(header, payload)
            chunk = self._unacked.pop(header.key, None)
            if header.type is FrameType.ACK and chunk is not None:
                self._window.release()
            elif header.type is FrameType.NACK and chunk is not None:
                self._window.release()
                self.resent_chunks += 1
                self._queue.put_nowait(chunk)
            elif header.request_id not in self._results:
                continue  # DONE/FAIL for a request this sender never sent
            elif header.type is FrameType.DONE:
                self._resolve(header.request_id, "delivered")
            elif header.type is FrameType.FAIL:
                self._fail(header.request_id, TransferFailure.REFUSED,
                           f"receiver: {payload.decode(errors='replace')}")

    async def _watch(self, sock: socket.socket, writer: asyncio.StreamWriter, owned: dict, tasks: list) -> None:
        """When a connection dies, put its unacked chunks back and open a replacement."""
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()
        error = next((t.exception() for t in done if not t.cancelled() and t.exception()), None)
        if isinstance(error, (FrameError, asyncio.IncompleteReadError, ConnectionError, OSError)):
            log.warning("KV connection lost (%s); resending its unacked chunks", error)
        with contextlib.suppress(OSError):
            writer.close()
        self._writers = [w for w in self._writers if w is not writer]
        self.sockets = [s for s in self.sockets if s is not sock]
        if self.monitor is not None:
            self.monitor.remove(sock)
        for key, chunk in list(owned.items()):
            if self._unacked.pop(key, None) is not None:
                self._window.release()
                self.resent_chunks += 1
                self._queue.put_nowait(chunk)
        owned.clear()
        if not self._closing:
            await self._replace_connection()

    async def _replace_connection(self) -> None:
        while self._reconnects < self.max_reconnects:
            self._reconnects += 1
            try:
                await self._connect()
                return
            except (OSError, TimeoutError) as err:
                log.warning("KV reconnect %d failed: %s", self._reconnects, err)
                await asyncio.sleep(0.1 * self._reconnects)
        if not self.sockets:
            for request_id in list(self._results):
                self._fail(request_id, TransferFailure.LINK_DOWN,
                           "link: every connection lost and reconnects exhausted")

    async def close(self) -> None:
        """Stop every connection through its transport (closing a socket under a live transport
        would let the loop confuse a reused descriptor with it)."""
        self._closing = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for writer in self._writers:
            with contextlib.suppress(OSError):
                writer.close()
        await asyncio.sleep(0)
        self._writers.clear()
        self.sockets.clear()
