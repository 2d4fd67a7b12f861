"""The KV receiver's connections: accept, challenge, prove, limit and time out. Knows nothing of chunks.

Every connection is challenged with a fresh nonce and starts *pending*: it may send one HELLO, whose
proof (keyed by the run's secret, see frames.HelloProof) must hold within `handshake_timeout_s`.
Pending connections have their own pool of `max_pending`; when it is full the oldest is closed to
make room, so a newcomer always gets its challenge: idle or unproven sockets, however many, cannot
keep a sender out, and they never count against the limits proven connections live under (in total
and per peer host). A proven connection must send its first DATA within `stall_timeout_s` of its
HELLO; after that it may idle between frames (senders keep theirs open).

Issue 25: an unproven connection never reaches `on_chunk`, so it can never touch reassembly state.
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
from collections.abc import Iterator

from emulator.limits import MAX_KV_CONNECTIONS, MAX_KV_CONNECTIONS_PER_PEER, MAX_KV_PENDING_HANDSHAKES
from emulator.transport.buffer_pool import BufferPool
from emulator.transport.chunk_protocol import ChunkProtocol, OnChunk
from emulator.transport.frames import ChunkHeader, FrameError, HelloProof, check_payload, read_hello

log = logging.getLogger(__name__)

_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_ACCEPT_BACKOFF_S = (0.05, 1.0)  # first and longest wait after accept ran out of descriptors
_LOG_EVERY_S = 10.0  # refusals and closings are logged at most this often (a peer may retry in a loop)


def default_limits() -> tuple[int, int]:
    """(proven, pending) connection limits, kept under half and an eighth of the descriptor limit so
    that accept never meets EMFILE from KV connections alone."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_KV_CONNECTIONS, MAX_KV_PENDING_HANDSHAKES
    return max(1, min(MAX_KV_CONNECTIONS, soft // 2)), max(1, min(MAX_KV_PENDING_HANDSHAKES, soft // 8))


class KVConnections:
    def __init__(self, proof: HelloProof, on_chunk: OnChunk, max_connections: int | None = None,
                 max_connections_per_peer: int = MAX_KV_CONNECTIONS_PER_PEER, max_pending: int | None = None,
                 handshake_timeout_s: float = 10.0, stall_timeout_s: float = 30.0,
                 buffers: BufferPool | None = None) -> None:
        proven, pending = default_limits()
        self.proof, self.on_chunk, self.buffers = proof, on_chunk, buffers
        self.max_connections = proven if max_connections is None else max_connections
        self.max_pending = pending if max_pending is None else max_pending
        self.max_connections_per_peer = max_connections_per_peer
        self.handshake_timeout_s, self.stall_timeout_s = handshake_timeout_s, stall_timeout_s
        self.num_refused = 0  # connections closed before they were proven, or over a limit
        self._pending: dict[ChunkProtocol, None] = {}  # insertion order: oldest first
        self._proven: set[ChunkProtocol] = set()
        self._peer_proven: collections.Counter[str] = collections.Counter()
        self._adopting: set[asyncio.Task] = set()
        self._logged_s: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self._pending) + len(self._proven)

    def of_sender(self, sender: str) -> Iterator[ChunkProtocol]:
        """The open proven connections of `sender` (a node id its HELLO proved)."""
        return (p for p in self._proven if p.sender == sender and p.transport is not None
                and not p.transport.is_closing())

    async def accept_loop(self, listener: socket.socket) -> None:
        """Accept and admit. Out of descriptors, wait (backing off) while connections queue in the
        backlog, and say so once per episode."""
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
        """Every newcomer is challenged; when the pending pool is full its oldest member makes room."""
        if len(self._pending) >= self.max_pending:
            oldest = next(iter(self._pending))
            self._drop(oldest, f"the oldest of {len(self._pending)} unproven connections, closed to make room")
        conn.setblocking(False)
        protocol = ChunkProtocol(self.on_chunk, self._on_hello, self._on_close, self.proof.new_nonce(), self.buffers)
        protocol.peer = peer
        self._pending[protocol] = None
        task = asyncio.create_task(self._adopt(loop, conn, protocol))
        self._adopting.add(task)
        task.add_done_callback(self._adopting.discard)

    async def _adopt(self, loop: asyncio.AbstractEventLoop, conn: socket.socket, protocol: ChunkProtocol) -> None:
        try:
            await loop.connect_accepted_socket(lambda: protocol, sock=conn)
        except OSError as err:
            log.warning("KV connection from %s could not be set up: %s", protocol.peer, err)
            conn.close()
            self._on_close(protocol)

    def _on_hello(self, protocol: ChunkProtocol, header: ChunkHeader, payload: memoryview) -> None:
        """Judge a pending connection's HELLO: proven and within the limits, or closed."""
        self._pending.pop(protocol, None)
        try:
            check_payload(header, payload)
            proof, sender = read_hello(payload)
        except FrameError as err:
            self._drop(protocol, str(err))
            return
        if not self.proof.check(protocol.nonce, sender, proof):
            self._drop(protocol, f"wrong proof for this run (claims sender {sender[:64]!r})")
        elif len(self._proven) >= self.max_connections:
            self._drop(protocol, f"{self.max_connections} proven connections are open")
        elif self._peer_proven[protocol.peer] >= self.max_connections_per_peer:
            self._drop(protocol, f"{self.max_connections_per_peer} proven connections from {protocol.peer} are open")
        else:
            protocol.prove(sender, time.monotonic())
            self._proven.add(protocol)
            self._peer_proven[protocol.peer] += 1

    def _drop(self, protocol: ChunkProtocol, why: str) -> None:
        """Close a connection that did not prove itself or is over a limit (logged at most every 10 s)."""
        self._pending.pop(protocol, None)
        protocol.abort()
        self.num_refused += 1
        self._log("refused", "KV connection from %s refused: %s (%d refused so far)", protocol.peer, why,
                  self.num_refused)

    def _on_close(self, protocol: ChunkProtocol) -> None:
        if protocol.rejected:
            self.num_refused += 1
            self._log("rejected", "closed a KV connection from %s (%s): %s (%d refused so far)", protocol.peer,
                      protocol.sender or "unproven", protocol.rejected, self.num_refused)
        self._pending.pop(protocol, None)
        if protocol in self._proven:
            self._proven.discard(protocol)
            self._peer_proven[protocol.peer] -= 1
            if not self._peer_proven[protocol.peer]:
                del self._peer_proven[protocol.peer]

    def close_stale(self, now: float) -> None:
        """Close connections past a deadline: unproven, proven without data, or stalled mid-frame."""
        stale = [(p, why) for p in [*self._pending, *self._proven] if p.transport is not None
                 and (why := p.stale_reason(now, self.handshake_timeout_s, self.stall_timeout_s))]
        for protocol, _ in stale:
            protocol.transport.close()
        if stale:
            self._log("stale", "closed %d KV connection(s) past a deadline (e.g. from %s: %s)", len(stale),
                      stale[0][0].peer, stale[0][1])

    def _log(self, kind: str, message: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._logged_s.get(kind, -math.inf) > _LOG_EVERY_S:
            self._logged_s[kind] = now
            log.warning(message, *args)

    async def close(self) -> None:
        for task in self._adopting:
            task.cancel()
        await asyncio.gather(*self._adopting, return_exceptions=True)
        for protocol in [*self._pending, *self._proven]:
            if protocol.transport is not None:
                protocol.transport.close()
