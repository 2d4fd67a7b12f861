"""Reading chunk frames off a socket with few copies: header, then payload, straight into two
reusable per-connection buffers (asyncio.BufferedProtocol), after the handshake that proves the peer.

A stream reader copies every byte twice before the receiver sees it; at 1 Gbit/s on two cores
those copies cost goodput. A DATA payload is `on_chunk`'s to keep: a buffer exactly its size is
handed over (the connection takes another, from the BufferPool reassembly refills, issue 28), and a
small payload that sits in a larger buffer is copied out.

The payload buffer grows (doubling, from INITIAL_PAYLOAD_BYTES) as payload bytes arrive, never to
what a header claims, so a header alone costs nothing; a pooled buffer is already allocated, so
steady state allocates and copies nothing extra. The protocol also keeps the times its owner needs to close connections that
never prove a HELLO, send no data after it, or stall halfway through a frame (`stale_reason`).

The handshake (issue 25): the protocol writes its CHALLENGE (a nonce) on connect; the first frame it
accepts is a HELLO, which goes to `on_hello` (the owner checks the proof and calls `prove`, or
closes); only a proven connection's frames, DATA only, reach `on_chunk`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from emulator.transport.buffer_pool import BufferPool
from emulator.transport.frames import HEADER_BYTES, ChunkHeader, FrameError, FrameType, challenge, decode_header

INITIAL_PAYLOAD_BYTES = 64 << 10

OnChunk = Callable[[ChunkHeader, bytes | memoryview, "ChunkProtocol"], None]  # the payload is its to keep
OnHello = Callable[["ChunkProtocol", ChunkHeader, memoryview], None]


class ChunkProtocol(asyncio.BufferedProtocol):
    def __init__(self, on_chunk: OnChunk, on_hello: OnHello, on_close: Callable[[ChunkProtocol], None],
                 nonce: bytes, buffers: BufferPool | None = None) -> None:
        self.buffers = buffers  # where a payload buffer comes from when one of its size is idle
        self.on_chunk, self.on_hello, self.on_close = on_chunk, on_hello, on_close
        self.nonce = nonce  # this connection's challenge: its HELLO must prove it
        self.transport: asyncio.Transport | None = None
        self.peer = ""  # the remote host: connection limits and budget shares are per peer
        self.sender = ""  # the node id its HELLO proved ('' until then)
        self.has_data = False  # a DATA frame has arrived
        self.connected_s = self.progress_s = time.monotonic()
        self.proven_s = 0.0
        self.rejected = ""  # why it was closed for a frame that cannot be trusted ('' if it was not)
        self._aborted = False  # closed by its owner before the transport existed
        self._header_buf = bytearray(HEADER_BYTES)
        self._payload_buf = bytearray()
        self._header: ChunkHeader | None = None
        self._view = memoryview(self._header_buf)
        self._filled = 0
        self._frame_started_s = 0.0  # when the current, incomplete header began to arrive

    @property
    def is_proven(self) -> bool:
        return bool(self.sender)

    def prove(self, sender: str, now: float) -> None:
        """The owner found this connection's HELLO proven for `sender`: DATA may follow."""
        self.sender, self.proven_s = sender, now

    def abort(self) -> None:
        """Close now, or as soon as the transport exists."""
        if self.transport is not None:
            self.transport.close()
        self._aborted = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if self._aborted:
            transport.close()
            return
        peername = transport.get_extra_info("peername")
        self.peer = str(peername[0]) if peername else ""
        transport.write(challenge(self.nonce))  # type: ignore[attr-defined]

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._view[self._filled :]

    def buffer_updated(self, nbytes: int) -> None:
        now = time.monotonic()
        if self._header is None and self._filled == 0:
            self._frame_started_s = now
        self.progress_s = now
        self._filled += nbytes
        if self._filled < len(self._view):
            return
        if self._header is None:
            self._start_payload()
        elif self._filled < self._header.length:
            self._grow_payload()
        else:
            header, self._header = self._header, None
            payload = self._view
            self._view, self._filled = memoryview(self._header_buf), 0
            if header.type is FrameType.HELLO:
                self.on_hello(self, header, payload)
            else:
                self.has_data = True
                self.on_chunk(header, self._hand_over(payload), self)

    def _start_payload(self) -> None:
        """The header is whole: check it (sizes before any allocation) and aim at its payload."""
        expected = FrameType.DATA if self.is_proven else FrameType.HELLO
        try:
            header = decode_header(bytes(self._header_buf))
            if header.type is not expected:
                rule = ("a proven connection sends DATA only" if self.is_proven
                        else "the first frame must be a HELLO answering the CHALLENGE")
                raise FrameError(f"chunk.type: {rule}, got {header.type.name}")
        except FrameError as err:
            self.rejected = str(err)  # the owner logs it (rate-limited: a peer may send garbage in a loop)
            self._view, self._filled = memoryview(self._header_buf), 0
            self.transport.close()
            return
        self._filled = 0
        self._header = header
        if header.type is FrameType.HELLO:  # under 100 bytes: never the shared payload buffer
            self._view = memoryview(bytearray(header.length))
            return
        pooled = self.buffers.take(header.length) if self.buffers is not None else None
        if pooled is not None:
            self._payload_buf = pooled
        elif not self._payload_buf:
            self._payload_buf = bytearray(INITIAL_PAYLOAD_BYTES)
        self._view = memoryview(self._payload_buf)[: header.length]

    def _hand_over(self, payload: memoryview) -> bytes | memoryview:
        """The payload for `on_chunk` to keep: its buffer when that is exactly its size (this
        connection takes another next time), else a copy (its buffer stays here for reuse)."""
        if len(self._payload_buf) == len(payload):
            self._payload_buf = bytearray()
            return payload
        return bytes(payload)

    def _grow_payload(self) -> None:
        """Double the payload buffer (up to the frame's length): it has filled with received bytes."""
        grown = bytearray(min(self._header.length, 2 * len(self._payload_buf)))
        grown[: self._filled] = self._view
        self._view.release()
        self._payload_buf = grown
        self._view = memoryview(grown)[: self._header.length]

    def stale_reason(self, now: float, handshake_timeout_s: float, stall_timeout_s: float) -> str | None:
        """Why this connection should be closed now, or None: no proven HELLO within the handshake
        time of connecting (the proof deadline), no DATA within the stall time of its HELLO, half a
        header for the handshake time, or a payload with no byte for the stall time. A connection
        that has carried data may stay idle between frames (senders keep theirs open)."""
        if not self.is_proven and now - self.connected_s > handshake_timeout_s:
            return f"sent no proven HELLO within {handshake_timeout_s:g} s"
        if (self.is_proven and not self.has_data and self._header is None and not self._filled
                and now - self.proven_s > stall_timeout_s):
            return f"sent no data within {stall_timeout_s:g} s of its HELLO"
        if self._header is None and self._filled and now - self._frame_started_s > handshake_timeout_s:
            return f"sent half a frame header for {handshake_timeout_s:g} s"
        if self._header is not None and now - self.progress_s > stall_timeout_s:
            return f"sent no payload byte for {stall_timeout_s:g} s"
        return None

    def eof_received(self) -> bool:
        return False  # close: the sender resends whatever was not ACKed

    def connection_lost(self, exc: Exception | None) -> None:
        self.on_close(self)
