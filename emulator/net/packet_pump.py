"""One direction of the TUN relay: read packets from one fd, shape them, write them to another.

A reader thread reads each packet (or unsegmented TCP burst, see vnet_header.py) and asks the
`DirectionShaper` when it is due; a writer thread sleeps until then and writes it out. Both block in
system calls with the GIL released. Shaping decisions are exact (the shaper's arithmetic); the
writer aims its sleeps early by its learned wake-up latency (`WakeEstimator`) and spins the rest, so
a packet leaves within tens of microseconds of its time; when it falls behind it catches up in a
burst, so rates stay exact on average. A TCP burst moves in one read and one write, which is what
takes a lossless link past 2 Gbit/s (issue 28): the relay pays per read, not per segment.
"""

from __future__ import annotations

import logging
import os
import random
import select
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from emulator.net.shaper import DirectionShaper
from emulator.net.spec import LinkShape
from emulator.net.tun_device import set_segmentation
from emulator.net.vnet_header import READ_BYTES, carries_bursts, wire_size
from emulator.net.wake_timer import WakeEstimator

log = logging.getLogger(__name__)

EARLY_S = 20e-6  # write a packet this much early rather than pay another wake-up for it
IDLE_POLL_MS = 200  # how often idle threads look at the stop flag
MAX_SLEEP_S = 0.5
MAX_QUEUED_BYTES = 256 * 1024 * 1024  # the relay's memory bound, whatever queue_packets says


@dataclass(frozen=True, slots=True)
class PumpCounters:
    """Written = delivered to the far device; drops split by cause."""

    packets: int
    bytes: int
    loss_drops: int
    queue_drops: int
    write_errors: int
    late_s_mean: float  # how long after its delivery time a packet was written, on average
    late_s_max: float

    @property
    def drops(self) -> int:
        return self.loss_drops + self.queue_drops + self.write_errors


class PacketPump:
    """Moves packets `src_fd` -> `dst_fd` through a shaper; `reshape` swaps the shape live.

    Invariant: `_queue` holds [delivery_time, packet] in admission order, and since the shaper
    never reorders, delivery times are non-decreasing along it. The shaper's pending packets are
    the queue's tail, which is what lets `reshape` re-time them in place.
    """

    def __init__(self, name: str, src_fd: int, dst_fd: int, shape: LinkShape,
                 rng: random.Random, frame: Callable[[bytes], bytes] | None = None) -> None:
        """`frame`: what each read becomes on `dst_fd` (the host relay adds a link header); default as read."""
        self.name = name
        self._src, self._dst, self._frame = src_fd, dst_fd, frame
        self._read_size = READ_BYTES  # a burst, even just after segmentation was turned off
        self._shaper = DirectionShaper(shape, rng)
        self._bursts = carries_bursts(shape)
        set_segmentation(src_fd, self._bursts)
        self._lock = threading.Lock()  # guards the shaper and the queue's entries
        self._queue: deque[list] = deque()
        self._wake = threading.Event()
        self._writer_idle = False
        self._stop = threading.Event()
        self._packets = self._bytes = self._write_errors = 0
        self._queued_bytes = self._overflow_drops = 0  # both guarded by `_lock`
        self._late_s_sum = self._late_s_max = 0.0
        self._threads = [
            threading.Thread(target=self._read_loop, name=f"{name}-read", daemon=True),
            threading.Thread(target=self._write_loop, name=f"{name}-write", daemon=True),
        ]

    @property
    def shape(self) -> LinkShape:
        return self._shaper.shape

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self, timeout_s: float = 1.0) -> None:
        self._stop.set()
        self._wake.set()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout_s)

    def reshape(self, shape: LinkShape) -> None:
        """Atomic: packets read after this see `shape`; the queued backlog is re-timed to it."""
        with self._lock:
            retimed = self._shaper.reshape(shape, time.monotonic())
            for entry, delivery in zip(reversed(self._queue), reversed(retimed), strict=False):
                entry[0] = delivery
        if carries_bursts(shape) != self._bursts:
            self._bursts = not self._bursts
            set_segmentation(self._src, self._bursts)
        self._wake.set()

    def counters(self) -> PumpCounters:
        with self._lock:
            stats = self._shaper.stats
        written = max(self._packets, 1)
        return PumpCounters(self._packets, self._bytes, stats.loss_drops,
                            stats.queue_drops + self._overflow_drops, self._write_errors,
                            self._late_s_sum / written, self._late_s_max)

    def _read_loop(self) -> None:
        poller = select.poll()
        poller.register(self._src, select.POLLIN)
        read, admit, queue, lock = os.read, self._shaper.admit, self._queue, self._lock
        while not self._stop.is_set():
            try:
                packet = read(self._src, self._read_size)
            except BlockingIOError:
                poller.poll(IDLE_POLL_MS)
                continue
            except OSError as err:
                if not self._stop.is_set():
                    log.error("%s: read failed (%s); direction stopped", self.name, err)
                return
            size, packets = wire_size(packet)
            with lock:
                if self._queued_bytes + len(packet) > MAX_QUEUED_BYTES:
                    self._overflow_drops += packets
                    continue
                delivery = admit(size, time.monotonic(), packets)
                if delivery is not None:
                    queue.append([delivery, packet, size, packets])
                    self._queued_bytes += len(packet)
            if delivery is not None and self._writer_idle:
                self._wake.set()

    def _write_loop(self) -> None:
        queue, lock, wake, write = self._queue, self._lock, self._wake, os.write
        monotonic, timer, spin = time.monotonic, WakeEstimator(), False
        while not self._stop.is_set():
            if not queue:
                # Idle first, then look again: a reader appending in between sees the flag.
                self._writer_idle = True
                if not queue:
                    wake.wait(MAX_SLEEP_S)
                self._writer_idle = False
                wake.clear()
                continue
            wait_s = queue[0][0] - monotonic()
            if wait_s > EARLY_S:
                sleep_s = min(timer.aim(wait_s), MAX_SLEEP_S)
                if sleep_s <= 0 and spin:
                    time.sleep(0)  # spin out what an early wake-up left, yielding the GIL
                    continue
                started = monotonic()
                # A reshape may move the head earlier; it sets `wake` so this wait ends. Short
                # waits (packets back to back) just sleep: spinning there would burn a core.
                woken = wake.wait(sleep_s if sleep_s > 0 else wait_s)
                if sleep_s > 0 and not woken:
                    timer.observe(sleep_s, monotonic() - started)
                spin = sleep_s > 0
                wake.clear()
                continue
            spin = False
            with lock:
                _, packet, size, packets = queue.popleft()
                self._queued_bytes -= len(packet)
            try:
                if self._frame is not None:
                    packet = self._frame(packet)
                write(self._dst, packet)  # its header too: the far stack takes a burst whole
                self._packets += packets
                self._bytes += size
                self._late_s_sum -= wait_s
                self._late_s_max = max(self._late_s_max, -wait_s)
            except OSError as err:  # e.g. the far device went down: count it, keep the link
                self._write_errors += 1
                log.debug("%s: write failed (%s)", self.name, err)
