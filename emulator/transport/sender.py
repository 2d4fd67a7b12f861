"""KVSender: N persistent TCP connections striping a request's layer chunks, nothing lost silently.

Chunks wait in one shared queue; each connection takes the next one when its socket can write, so a
slow connection never holds the others back. A bounded window caps chunks in flight. A chunk stays
"unacked" until the receiver ACKs it; a NACK or a lost connection puts it back in the queue for any
live connection. `finish` resolves to delivered (DONE) or failed (FAIL, deadline, no connection).

Each connection first answers the receiver's CHALLENGE with a HELLO proving the run's secret
(issue 25); it takes chunks only after that. A receiver closes a proven connection that carries no
data for its stall time, so a connection lost while holding nothing is reopened when chunks come,
not at once; reconnects are limited in a row (an ACK resets the count), not per lifetime.

Writes go out through `socket_io.send_all` (header and payload gathered by sendmsg, never joined),
reads through its SocketReader: no stream transport copies chunk bytes (issue 28).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from emulator.transport.congestion import CongestionMonitor
from emulator.transport.frames import (
    CHUNK_BYTES,
    HEADER_BYTES,
    Chunk,
    FrameError,
    FrameType,
    HelloProof,
    check_payload,
    decode_header,
    encode_header,
    hello,
    split_layer,
)
from emulator.transport.socket_io import SocketReader, send_all

log = logging.getLogger(__name__)
CONGESTION_CONTROLS = ("cubic", "reno", "bbr")
SOCKET_BUFFER_BYTES = 8 << 20
# Unsent bytes a connection may hold in the kernel. Without a cap each connection queues megabytes,
# and at the end of a transfer the link idles while the slowest one drains its backlog (1 Gbit/s,
# 20 ms, 4 connections: 0.93 -> 0.96 of iperf3). Sent-but-unacked bytes do not count against it.
NOTSENT_LOWAT_BYTES = 256 << 10
TCP_NOTSENT_LOWAT = getattr(socket, "TCP_NOTSENT_LOWAT", 25)  # Linux >= 3.12
CHALLENGE_TIMEOUT_S = 10.0  # the receiver's CHALLENGE must come within this of connecting


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


@dataclass(slots=True, eq=False)
class _Link:
    """One connection's state: what it owes ACKs for, and whether it has proven and been acked."""

    sock: socket.socket
    owned: dict[tuple[int, int, int], Chunk] = field(default_factory=dict)
    proven: asyncio.Event = field(default_factory=asyncio.Event)  # its HELLO is sent: it may take chunks
    acked: bool = False


class KVSender:
    def __init__(
        self,
        make_socket: Callable[[], socket.socket],
        target: tuple[str, int],
        *,
        proof: HelloProof,
        sender_id: str,
        num_connections: int = 4,
        congestion: str = "cubic",
        window_chunks: int = 64,
        chunk_bytes: int = CHUNK_BYTES,
        max_reconnects: int = 5,
        monitor: CongestionMonitor | None = None,
    ) -> None:
        """`proof` holds the run's secret and `sender_id` is this worker's node id: each connection
        proves both to the receiver before it sends a chunk."""
        if congestion not in CONGESTION_CONTROLS:
            raise ValueError(f"congestion: {congestion!r} is not one of {', '.join(CONGESTION_CONTROLS)}")
        if num_connections < 1 or window_chunks < 1:
            raise ValueError("num_connections and window_chunks must be >= 1")
        self.make_socket, self.target = make_socket, target
        self.proof, self.sender_id = proof, sender_id
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
        self._reconnects = 0  # failed connects and connections lost before any ACK, in a row
        self._topping_up: asyncio.Task | None = None
        self._closing = False
        self.is_broken = False  # reconnects exhausted: its user should make a new sender

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
        try:
            await asyncio.wait_for(self._loop.sock_connect(sock, self.target), timeout=10)
        except BaseException:
            sock.close()
            raise
        self.sockets.append(sock)
        if self.monitor is not None:
            self.monitor.add(sock)
        link = _Link(sock)
        tasks = [asyncio.create_task(self._write_loop(link)), asyncio.create_task(self._read_loop(link))]
        self._tasks += [*tasks, asyncio.create_task(self._watch(link, tasks))]

    async def _answer_challenge(self, reader: SocketReader, sock: socket.socket) -> None:
        """Read the receiver's CHALLENGE and send the HELLO that proves it (FrameError if it is not one)."""
        header = decode_header(await asyncio.wait_for(reader.read_exactly(HEADER_BYTES), CHALLENGE_TIMEOUT_S))
        if header.type is not FrameType.CHALLENGE:
            raise FrameError(f"chunk.type: the receiver sent {header.type.name} before its CHALLENGE")
        nonce = await asyncio.wait_for(reader.read_exactly(header.length), CHALLENGE_TIMEOUT_S)
        check_payload(header, nonce)
        await send_all(sock, [hello(self.proof.prove(nonce, self.sender_id), self.sender_id)])

    def send_layer(self, request_id: int, layer_index: int, num_layers: int, layer_frame: bytes) -> None:
        """Queue one layer's frame; returns at once and may be called from any thread."""
        chunks = split_layer(request_id, layer_index, num_layers, layer_frame, self.chunk_bytes)
        self._loop.call_soon_threadsafe(self._enqueue, request_id, chunks)

    def _enqueue(self, request_id: int, chunks: list[Chunk]) -> None:
        self._result_future(request_id)
        self._started_at.setdefault(request_id, time.monotonic())
        for chunk in chunks:
            self._queue.put_nowait(chunk)
        if len(self.sockets) < self.num_connections and not self._closing and (
                self._topping_up is None or self._topping_up.done()):
            self._topping_up = asyncio.create_task(self._replace_connection(self.num_connections))

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

    async def _write_loop(self, link: _Link) -> None:
        await link.proven.wait()  # no chunk waits on a connection that has not said its HELLO
        sock, owned = link.sock, link.owned
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
            # one sendmsg gathers header and payload: with TCP_NODELAY a lone header would be its own packet
            await send_all(sock, (encode_header(chunk.header), chunk.payload))
            self.bytes_sent += HEADER_BYTES + chunk.header.length
            if self.monitor is not None:
                self.monitor.record_sent(self.destination, HEADER_BYTES + chunk.header.length)

    async def _read_loop(self, link: _Link) -> None:
        reader = SocketReader(link.sock)
        await self._answer_challenge(reader, link.sock)
        link.proven.set()
        while True:
            header = decode_header(await reader.read_exactly(HEADER_BYTES))
            payload = await reader.read_exactly(header.length)
            check_payload(header, payload)
            chunk = self._unacked.pop(header.key, None)
            if header.type is FrameType.ACK and chunk is not None:
                self._reconnects, link.acked = 0, True  # it works: the next loss starts a new count
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

    async def _watch(self, link: _Link, tasks: list) -> None:
        """When a connection dies, put its unacked chunks back and, if there is work, open a
        replacement (a connection the receiver closed while idle is reopened by `_enqueue`)."""
        sock, owned = link.sock, link.owned
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)  # their loop registrations go before the socket closes
        error = next((t.exception() for t in done if not t.cancelled() and t.exception()), None)
        if owned and isinstance(error, (FrameError, asyncio.IncompleteReadError, TimeoutError, OSError)):
            log.warning("KV connection lost (%s); resending its unacked chunks", error)
        sock.close()
        self.sockets = [s for s in self.sockets if s is not sock]
        if self.monitor is not None:
            self.monitor.remove(sock)
        for key, chunk in list(owned.items()):
            if self._unacked.pop(key, None) is not None:
                self._window.release()
                self.resent_chunks += 1
                self._queue.put_nowait(chunk)
        had_work = bool(owned) or not self._queue.empty()
        owned.clear()
        if had_work and not link.acked:  # it was given work and never got an ACK: a failure
            self._reconnects += 1
        if not self._closing and had_work:
            await self._replace_connection(len(self.sockets) + 1)

    async def _replace_connection(self, until: int) -> None:
        """Connect until `until` connections are open; give up after `max_reconnects` failures in a
        row (failed connects, connections lost before an ACK), and then fail every open transfer if
        no connection is left."""
        while len(self.sockets) < until and not self._closing:
            if self._reconnects >= self.max_reconnects:
                self.is_broken = True
                break
            try:
                await self._connect()
            except (OSError, TimeoutError) as err:
                self._reconnects += 1
                log.warning("KV reconnect failed (%d in a row): %s", self._reconnects, err)
                await asyncio.sleep(0.1 * self._reconnects)
        if self.is_broken and not self.sockets:
            for request_id in list(self._results):
                self._fail(request_id, TransferFailure.LINK_DOWN,
                           "link: every connection lost and reconnects exhausted")

    async def close(self) -> None:
        """Stop every connection's tasks first, then close its socket (closing a socket the loop
        still watches would let it confuse a reused descriptor with it)."""
        self._closing = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for sock in self.sockets:
            sock.close()
        self.sockets.clear()
