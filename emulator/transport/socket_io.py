"""The KV sender's socket I/O on the event loop without a stream transport: gathered writes, framed reads.

An asyncio stream joins what it is given and copies whatever the kernel did not take into its own
buffer; at 1 Gbit/s that is a megabyte copy per chunk on a core the link relay also needs (issue 28).
Here a chunk's header and payload (a view of the layer frame) go to `sendmsg` as they are, and the
loop is asked for writability only while the kernel refuses more (its TCP_NOTSENT_LOWAT decides).
Replies are small frames, read through the loop's `sock_recv` into one growing buffer.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Sequence

READ_BYTES = 64 << 10  # one recv's size for replies (ACKs are 64 bytes; many arrive together)


async def send_all(sock: socket.socket, buffers: Sequence[bytes | memoryview]) -> None:
    """Write every byte of `buffers`, in order, with as few system calls as the socket allows."""
    loop = asyncio.get_running_loop()
    views = [memoryview(b).cast("B") for b in buffers if len(b)]
    while views:
        try:
            sent = sock.sendmsg(views)
        except (BlockingIOError, InterruptedError):
            sent = 0
        views = _consume(views, sent)
        if views:
            await _writable(loop, sock)


def _consume(views: list[memoryview], sent: int) -> list[memoryview]:
    """What is left of `views` after `sent` bytes went out (views only; nothing is copied)."""
    while views and sent >= len(views[0]):
        sent -= len(views[0])
        views = views[1:]
    if views and sent:
        views[0] = views[0][sent:]
    return views


async def _writable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    ready = loop.create_future()
    fd = sock.fileno()
    loop.add_writer(fd, lambda: ready.done() or ready.set_result(None))
    try:
        await ready
    finally:
        loop.remove_writer(fd)


class SocketReader:
    """Exact-size reads off a non-blocking socket through the loop (its `sock_recv`)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = bytearray()

    async def read_exactly(self, num_bytes: int) -> bytes:
        """`num_bytes` bytes; asyncio.IncompleteReadError when the peer closes first."""
        loop = asyncio.get_running_loop()
        while len(self._buffer) < num_bytes:
            data = await loop.sock_recv(self._sock, max(READ_BYTES, num_bytes - len(self._buffer)))
            if not data:
                raise asyncio.IncompleteReadError(bytes(self._buffer), num_bytes)
            self._buffer += data
        out = bytes(self._buffer[:num_bytes])
        del self._buffer[:num_bytes]
        return out
