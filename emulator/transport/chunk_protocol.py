"""Reading chunk frames off a socket with few copies: header, then payload, straight into two
reusable per-connection buffers (asyncio.BufferedProtocol).

A stream reader copies every byte twice before the receiver sees it; at 1 Gbit/s on two cores
those copies cost goodput. The payload buffer is handed to `on_chunk` and reused for the next
chunk, so `on_chunk` must finish with it before returning.

The payload buffer grows (doubling, from INITIAL_PAYLOAD_BYTES) as payload bytes arrive, never to
what a header claims, so a header alone costs nothing; once grown it is reused, so steady state
copies nothing extra. The protocol also keeps the times its owner needs to close connections that
never say HELLO or stall halfway through a frame (`stale_reason`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from emulator.transport.frames import HEADER_BYTES, ChunkHeader, FrameError, FrameType, decode_header

log = logging.getLogger(__name__)

INITIAL_PAYLOAD_BYTES = 64 << 10

OnChunk = Callable[[ChunkHeader, memoryview, "ChunkProtocol"], None]


class ChunkProtocol(asyncio.BufferedProtocol):
    def __init__(self, on_chunk: OnChunk, on_close: Callable[[ChunkProtocol], None]) -> None:
        self.on_chunk, self.on_close = on_chunk, on_close
        self.transport: asyncio.Transport | None = None
        self.peer = ""  # the remote host: limits and budget shares are per peer
        self.greeted = False  # a valid header (HELLO or DATA) has arrived
        self.connected_s = self.progress_s = time.monotonic()
        self._header_buf = bytearray(HEADER_BYTES)
        self._payload_buf = bytearray()
        self._header: ChunkHeader | None = None
        self._view = memoryview(self._header_buf)
        self._filled = 0
        self._frame_started_s = 0.0  # when the current, incomplete header began to arrive

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peername = transport.get_extra_info("peername")
        self.peer = str(peername[0]) if peername else ""

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
            self.on_chunk(header, payload, self)

    def _start_payload(self) -> None:
        try:
            header = decode_header(bytes(self._header_buf))  # sizes are checked before any allocation
            if header.type not in (FrameType.DATA, FrameType.HELLO):
                raise FrameError(f"chunk.type: a receiver accepts HELLO and DATA only, got {header.type.name}")
        except FrameError as err:
            log.warning("closing a KV connection from %s: %s", self.peer, err)
            self._view, self._filled = memoryview(self._header_buf), 0
            self.transport.close()
            return
        self.greeted = True
        self._filled = 0
        if header.type is FrameType.HELLO:
            return
        if not self._payload_buf:
            self._payload_buf = bytearray(INITIAL_PAYLOAD_BYTES)
        self._header = header
        self._view = memoryview(self._payload_buf)[: header.length]

    def _grow_payload(self) -> None:
        """Double the payload buffer (up to the frame's length): it has filled with received bytes."""
        grown = bytearray(min(self._header.length, 2 * len(self._payload_buf)))
        grown[: self._filled] = self._view
        self._view.release()
        self._payload_buf = grown
        self._view = memoryview(grown)[: self._header.length]

    def stale_reason(self, now: float, handshake_timeout_s: float, stall_timeout_s: float) -> str | None:
        """Why this connection should be closed now, or None: no header within the handshake time
        of connecting, half a header for that long, or a payload with no byte for the stall time.
        A greeted connection between frames may stay idle (senders keep theirs open)."""
        if not self.greeted and now - self.connected_s > handshake_timeout_s:
            return f"sent no frame header within {handshake_timeout_s:g} s"
        if self._header is None and self._filled and now - self._frame_started_s > handshake_timeout_s:
            return f"sent half a frame header for {handshake_timeout_s:g} s"
        if self._header is not None and now - self.progress_s > stall_timeout_s:
            return f"sent no payload byte for {stall_timeout_s:g} s"
        return None

    def eof_received(self) -> bool:
        return False  # close: the sender resends whatever was not ACKed

    def connection_lost(self, exc: Exception | None) -> None:
        self.on_close(self)
