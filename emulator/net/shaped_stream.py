"""Shaping a TCP byte stream on asyncio: chunks as packets, one shared shaper per direction.

`ShapedDirection` holds a direction's `DirectionShaper` (loss off, queue unbounded: a stream cannot
drop bytes) and re-times queued chunks on reshape; `pump_connection` moves one proxied
connection's bytes both ways through two of them. Backpressure keeps memory bounded: a flow stops
reading while the shared bottleneck holds QUEUE_TARGET_S of data or the flow holds MAX_FLOW_BYTES.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import deque
from dataclasses import dataclass

from emulator.net.shaper import DirectionShaper
from emulator.net.spec import MAX_QUEUE_PACKETS, LinkShape
from emulator.net.wake_timer import WakeEstimator

log = logging.getLogger(__name__)

MIN_CHUNK_BYTES = 4 * 1024
MAX_CHUNK_BYTES = 64 * 1024
CHUNK_SERIALISATION_S = 0.002  # a chunk is at most ~2 ms on the wire, so pacing stays smooth
QUEUE_TARGET_S = 0.005
MAX_FLOW_BYTES = 16 * 1024 * 1024
MAX_DIRECTION_BYTES = 256 * 1024 * 1024  # the relay's memory bound per direction
RECHECK_S = 0.02  # a writer waiting for a chunk looks again this often, in case it was re-timed
EARLY_S = 20e-6


@dataclass(slots=True)
class Chunk:
    data: bytes
    deliver_at: float = 0.0


def stream_shape(shape: LinkShape) -> LinkShape:
    """`shape` as a byte stream can follow it: no loss, and the queue bounded by backpressure."""
    return shape.model_copy(update={"loss_pct": 0.0, "loss_correlation_pct": 0.0,
                                    "queue_packets": MAX_QUEUE_PACKETS})


class ShapedDirection:
    """One direction shared by every connection. Invariant: `_pending` is the tail of admitted
    chunks that the shaper still counts as queued, oldest first, so reshape can re-time them."""

    def __init__(self, shape: LinkShape, rng: random.Random) -> None:
        self._shaper = DirectionShaper(stream_shape(shape), rng)
        self._pending: deque[Chunk] = deque()
        self._chunks = self._bytes = 0
        self.queued_bytes = 0  # read but not yet written, over all flows
        self._late_s_sum = self._late_s_max = 0.0
        self.timer = WakeEstimator()  # shared by the direction's writers: one loop, one latency

    def chunk_bytes(self) -> int:
        rate = self._shaper.shape.rate_bytes_per_s
        wanted = rate * CHUNK_SERIALISATION_S
        return MAX_CHUNK_BYTES if wanted >= MAX_CHUNK_BYTES else max(MIN_CHUNK_BYTES, int(wanted))

    def wait_for_room_s(self, now: float) -> float:
        """How long a reader should wait before the bottleneck takes another chunk (<= 0: now)."""
        if self.queued_bytes >= MAX_DIRECTION_BYTES:
            return RECHECK_S
        return self._shaper.backlog_s(now) - QUEUE_TARGET_S

    def admit(self, chunk: Chunk, now: float) -> None:
        delivery = self._shaper.admit(len(chunk.data), now)
        chunk.deliver_at = now if delivery is None else delivery  # None cannot happen: no loss
        self.queued_bytes += len(chunk.data)
        self._pending.append(chunk)
        while len(self._pending) > self._shaper.num_pending:
            self._pending.popleft()

    def reshape(self, shape: LinkShape) -> None:
        retimed = self._shaper.reshape(stream_shape(shape), asyncio.get_running_loop().time())
        for chunk, delivery in zip(reversed(self._pending), reversed(retimed), strict=False):
            chunk.deliver_at = delivery
        while len(self._pending) > self._shaper.num_pending:
            self._pending.popleft()

    def forget(self, size: int) -> None:
        """Bytes that will never be written (their connection ended)."""
        self.queued_bytes -= size

    def delivered(self, size: int, late_s: float) -> None:
        self.queued_bytes -= size
        self._chunks += 1
        self._bytes += size
        self._late_s_sum += late_s
        self._late_s_max = max(self._late_s_max, late_s)

    def counters(self) -> dict[str, float]:
        mean_us = self._late_s_sum / max(self._chunks, 1) * 1e6
        return {"bytes": self._bytes, "packets": self._chunks, "drops": 0,
                "late_us_mean": round(mean_us, 1), "late_us_max": round(self._late_s_max * 1e6, 1)}


class _Flow:
    """One connection's bytes in one direction: read, admitted, held until due, written."""

    def __init__(self, direction: ShapedDirection, src: asyncio.StreamReader,
                 dst: asyncio.StreamWriter) -> None:
        self._direction = direction
        self._src, self._dst = src, dst
        self._queue: deque[Chunk] = deque()
        self._queued_bytes = 0
        self._has_data = asyncio.Event()
        self._has_room = asyncio.Event()
        self._eof = False

    def abandon(self) -> None:
        """Drop what is still queued, e.g. after a reset; the direction forgets those bytes."""
        self._direction.forget(self._queued_bytes)
        self._queue.clear()
        self._queued_bytes = 0

    async def read_side(self) -> None:
        loop = asyncio.get_running_loop()
        direction = self._direction
        while True:
            if self._queued_bytes >= MAX_FLOW_BYTES:
                self._has_room.clear()
                await self._has_room.wait()
                continue
            wait_s = direction.wait_for_room_s(loop.time())
            if wait_s > 0:
                await asyncio.sleep(wait_s)
                continue
            data = await self._src.read(direction.chunk_bytes())
            if not data:
                break
            chunk = Chunk(data)
            direction.admit(chunk, loop.time())
            self._queue.append(chunk)
            self._queued_bytes += len(data)
            self._has_data.set()
        self._eof = True
        self._has_data.set()

    async def write_side(self) -> None:
        loop = asyncio.get_running_loop()
        queue, timer, spin = self._queue, self._direction.timer, False
        while True:
            if not queue:
                if self._eof:
                    if self._dst.can_write_eof():
                        self._dst.write_eof()
                    return
                self._has_data.clear()
                await self._has_data.wait()
                continue
            wait_s = queue[0].deliver_at - loop.time()
            if wait_s > EARLY_S:
                sleep_s = min(timer.aim(wait_s), RECHECK_S)
                if sleep_s <= 0 and spin:
                    await asyncio.sleep(0)  # spin out what an early wake-up left
                    continue
                started = loop.time()
                await asyncio.sleep(sleep_s if sleep_s > 0 else wait_s)
                if sleep_s > 0:
                    timer.observe(sleep_s, loop.time() - started)
                spin = sleep_s > 0
                continue
            spin = False
            chunk = queue.popleft()
            self._queued_bytes -= len(chunk.data)
            self._has_room.set()
            self._dst.write(chunk.data)
            self._direction.delivered(len(chunk.data), -wait_s)
            await self._dst.drain()


async def pump_connection(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter,
                          server_r: asyncio.StreamReader, server_w: asyncio.StreamWriter,
                          to_server: ShapedDirection, to_client: ShapedDirection) -> None:
    """Both directions of one proxied connection until both ends finish; a reset on either side
    (or cancellation) tears the whole connection down."""
    up, down = _Flow(to_server, client_r, server_w), _Flow(to_client, server_r, client_w)
    tasks = [asyncio.create_task(coro) for coro in
             (up.read_side(), up.write_side(), down.read_side(), down.write_side())]
    try:
        await asyncio.gather(*tasks)
    except (OSError, asyncio.IncompleteReadError) as err:
        log.debug("proxied connection ended: %s", err)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        up.abandon()
        down.abandon()
        for writer in (client_w, server_w):
            writer.close()
