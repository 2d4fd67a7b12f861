"""Chunk payload buffers that go from a connection to reassembly and back, so a steady stream of
chunks is received without allocating or copying a buffer per chunk (issue 28).

A connection receives a payload straight into a buffer and hands that buffer to reassembly, which
keeps it as the chunk; once the layer's frame is joined the buffer comes back here for the next chunk
of the same size. Only exact sizes are reused (a chunk never sits in a larger buffer than its
length, so the receiver's budget still counts real memory), and at most `max_bytes` wait idle.
"""

from __future__ import annotations

import threading

POOL_BYTES = 64 << 20  # idle buffers kept: a few layers' chunks at the default 1 MiB chunk


class BufferPool:
    """Idle payload buffers by size; `give` may be called from a decode thread, `take` from the loop."""

    def __init__(self, max_bytes: int = POOL_BYTES) -> None:
        self.max_bytes = max_bytes
        self._size_to_buffers: dict[int, list[bytearray]] = {}
        self._idle_bytes = 0
        self._lock = threading.Lock()

    @property
    def idle_bytes(self) -> int:
        return self._idle_bytes

    def take(self, num_bytes: int) -> bytearray | None:
        """An idle buffer of exactly `num_bytes`, or None (the caller grows its own as bytes arrive)."""
        with self._lock:
            buffers = self._size_to_buffers.get(num_bytes)
            if not buffers:
                return None
            self._idle_bytes -= num_bytes
            return buffers.pop()

    def give(self, buffer: bytearray) -> None:
        """Keep `buffer` for reuse (its giver must hold no view it still reads), unless the pool is full."""
        with self._lock:
            if self._idle_bytes + len(buffer) > self.max_bytes:
                return
            self._size_to_buffers.setdefault(len(buffer), []).append(buffer)
            self._idle_bytes += len(buffer)
