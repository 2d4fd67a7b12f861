"""The sender's socket I/O: gathered writes arrive byte for byte through a full socket, exact reads."""

from __future__ import annotations

import asyncio
import random
import socket
import threading

import pytest

from emulator.transport.socket_io import SocketReader, send_all


def _drain(sock: socket.socket, num_bytes: int, out: bytearray) -> None:
    """Read `num_bytes` slowly (small reads), so the writer meets a full socket many times."""
    while len(out) < num_bytes:
        data = sock.recv(4096)
        if not data:
            return
        out += data


def test_send_all_gathers_views_and_delivers_every_byte_in_order_through_a_full_socket() -> None:
    rng = random.Random(7)
    parts = [rng.randbytes(n) for n in (64, 1 << 20, 0, 3, 700_001)]
    views = [parts[0], memoryview(parts[1])[5:], parts[2], parts[3], memoryview(parts[4])]
    expected = b"".join(bytes(v) for v in views)
    writer, reader = socket.socketpair()
    writer.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    writer.setblocking(False)
    received = bytearray()
    drainer = threading.Thread(target=_drain, args=(reader, len(expected), received))
    drainer.start()
    try:
        asyncio.run(asyncio.wait_for(send_all(writer, views), 30))
        drainer.join(30)
    finally:
        writer.close()
        reader.close()
    assert bytes(received) == expected


def test_socket_reader_returns_exact_frames_across_split_writes_and_fails_on_early_close() -> None:
    async def scenario() -> tuple[list[bytes], asyncio.IncompleteReadError]:
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        reader = SocketReader(ours)
        theirs.sendall(b"abc")
        theirs.sendall(b"defgh" + b"i" * 100_000)
        frames = [await reader.read_exactly(2), await reader.read_exactly(6), await reader.read_exactly(100_000)]
        theirs.sendall(b"xy")
        theirs.close()
        with pytest.raises(asyncio.IncompleteReadError) as err:
            await reader.read_exactly(5)
        ours.close()
        return frames, err.value

    frames, err = asyncio.run(scenario())
    assert frames == [b"ab", b"cdefgh", b"i" * 100_000]
    assert (err.partial, err.expected) == (b"xy", 5)
