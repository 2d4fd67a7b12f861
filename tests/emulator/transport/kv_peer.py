"""A KV peer for receiver tests: the run's proof, and raw connections that prove it (or do not)."""

from __future__ import annotations

import asyncio

from emulator.transport.frames import HEADER_BYTES, ChunkHeader, FrameType, decode_header, hello
from emulator.wire import auth

WAIT_S = 10.0  # a liveness bound (the answer must come at all), not a timing assertion
PROOF = auth.KvHelloProof(auth.new_secret())  # the run's secret, as the KV port uses it
SENDER = "remote-prefill-0"


async def read_frame(reader: asyncio.StreamReader) -> tuple[ChunkHeader, bytes]:
    header = decode_header(await asyncio.wait_for(reader.readexactly(HEADER_BYTES), WAIT_S))
    return header, await asyncio.wait_for(reader.readexactly(header.length), WAIT_S)


async def challenged(target: tuple[str, int], source: str = "127.0.0.1"
                     ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    """A raw connection and the nonce its CHALLENGE carried."""
    reader, writer = await asyncio.open_connection(*target, local_addr=(source, 0))
    header, nonce = await read_frame(reader)
    assert header.type is FrameType.CHALLENGE and len(nonce) == 32
    return reader, writer, nonce


async def proven(target: tuple[str, int], source: str = "127.0.0.1", sender: str = SENDER
                 ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A raw connection that has answered its CHALLENGE with the run's proof: it may send DATA."""
    reader, writer, nonce = await challenged(target, source)
    writer.write(hello(PROOF.prove(nonce, sender), sender))
    return reader, writer


async def closed_by_peer(reader: asyncio.StreamReader) -> bool:
    """True when the receiver closed the connection (EOF or reset) within the liveness bound; frames
    it sent before closing (its CHALLENGE) are skipped."""
    try:
        async with asyncio.timeout(WAIT_S):
            while await reader.read(4096):
                pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
