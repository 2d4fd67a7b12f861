"""Loss recovery behind a full drop-tail buffer (emulator/virtual/overflow.py), by hand: when the
senders' window overflows the buffer, which caches wait for the retransmissions and until when,
and how the window backs off and grows back; then on the fluid link."""

from __future__ import annotations

import math

import pytest

from emulator.virtual.core import Simulator
from emulator.virtual.link import FluidLink, LinkState
from emulator.virtual.overflow import WINDOW_BACKOFF, WINDOW_GROWTH, QueueOverflow

MB = 1e6


def test_an_overflow_holds_the_caches_finishing_in_the_next_queue_wait_and_backs_the_window_off() -> None:
    # 1 MB/s, BDP 0.02 MB, a 2 MB buffer (a 2 s wait). The window starts at the BDP and grows
    # WINDOW_GROWTH of the rate per second the link was full. A 10 MB backlog overflows the buffer
    # only once the window holds more than BDP + buffer; then the caches whose last bytes pass the
    # bottleneck 2-4 s later arrive at 4 s, the window drops to 0.7 of 2.02 MB and does not grow
    # for a wait (recovery).
    overflow = QueueOverflow()
    overflow.check(0.0, 0.0, 10 * MB, 0.02 * MB, 2 * MB, 1 * MB)
    assert overflow.window_bytes == 0.02 * MB and overflow.num_overflows == 0
    overflow.check(3.0, 3.0, 10 * MB, 0.02 * MB, 2 * MB, 1 * MB)  # in flight: the window, under 2.02 MB
    assert overflow.window_bytes == pytest.approx((0.02 + 3 * WINDOW_GROWTH) * MB) and overflow.num_overflows == 0
    overflow.check(10.0, 7.0, 1.9 * MB, 0.02 * MB, 2 * MB, 1 * MB)  # in flight: the backlog, under it
    assert overflow.num_overflows == 0 and overflow.arrival_s(13.0) == 13.0
    overflow.check(10.0, 0.0, 10 * MB, 0.02 * MB, 2 * MB, 1 * MB)
    assert overflow.num_overflows == 1 and overflow.holds_until_s == 14.0
    assert [overflow.arrival_s(t) for t in (11.9, 12.0, 13.5, 13.99, 14.0)] == [11.9, 14.0, 14.0, 14.0, 14.0]
    assert overflow.window_bytes == pytest.approx(WINDOW_BACKOFF * 2.02 * MB)
    overflow.check(11.5, 1.5, 10 * MB, 0.02 * MB, 2 * MB, 1 * MB)  # recovering until 12 s: no growth, no loss
    assert overflow.window_bytes == pytest.approx(WINDOW_BACKOFF * 2.02 * MB) and overflow.num_overflows == 1
    overflow.check(13.0, 1.5, 10 * MB, 0.02 * MB, 2 * MB, 1 * MB)  # full 1.5 s, 1 s of it after recovery
    assert overflow.window_bytes == pytest.approx((WINDOW_BACKOFF * 2.02 + WINDOW_GROWTH) * MB)
    overflow.window_bytes = 3 * MB
    overflow.check(13.0, 0.0, 10 * MB, 0.02 * MB, 2 * MB, 1 * MB)
    assert overflow.num_overflows == 2 and overflow.arrival_s(15.5) == 17.0
    assert overflow.arrival_s(13.5) == 14.0  # the first spell still holds its caches


def test_on_the_fluid_link_a_cache_finishing_after_an_overflow_waits_for_the_retransmission() -> None:
    # 1 MB/s, 10 ms each way, a 2 MB buffer. A (20 MB), B (4 MB) and C (0.5 MB) start together and
    # share the link: C is across at 1.5 s, before any overflow; the window, growing WINDOW_GROWTH MB
    # per second from the BDP (0.02 MB), overflows BDP + buffer (2.02 MB) at t1 (read on a 10 ms
    # sampler, as a run's is); B, alone with A from 1.5 s, passes the bottleneck at 8.5 s, within t1 + 2 .. t1 + 4 s, and
    # arrives at t1 + 4 s. A is cancelled at 9 s; the link carried its full rate throughout.
    sim = Simulator()
    link = FluidLink(sim, LinkState(1 * MB, delay_s=0.01, rtt_s=0.02, queue_bytes=2 * MB))
    arrived: dict[str, float] = {}
    a = link.start(20 * MB, lambda k: arrived.__setitem__(k, sim.now), "A")
    for name, size in (("B", 4 * MB), ("C", 0.5 * MB)):
        link.start(size, lambda k: arrived.__setitem__(k, sim.now), name)

    def sample(step: int) -> None:
        link.sync()
        if step < 900:
            sim.schedule((step + 1) / 100, sample, step + 1)

    sim.schedule(0.01, sample, 1)
    sim.schedule(9.0, lambda _: link.cancel(a))
    sim.run()
    t1 = math.ceil(2.0 / WINDOW_GROWTH * 100 - 1e-6) / 100
    assert 6.5 < t1 + 2 < 8.5 < t1 + 4
    assert arrived == {"C": pytest.approx(1.51), "B": pytest.approx(t1 + 4 + 0.01, abs=1e-6)}
    assert link.bytes_sent == pytest.approx(9 * MB)
