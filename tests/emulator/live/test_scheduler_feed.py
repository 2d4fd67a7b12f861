"""What the live scheduler reads of the link each period: goodput and utilization over one window.

Was: the scheduler's capacity sample (goodput / utilization, emulator.control.estimators) divided the
remote senders' last 0.25 s of acknowledged bytes by the link counter's utilization over the last
0.5 s snapshot. On a bursty link the two windows disagree: a bandwidth-drop run fed it 9.4 Mbit/s
over a utilization of 0.057 (a 165 Mbit/s sample on a 10 Mbit/s link) and 48.5 Mbit/s over 0.036
before the drop, so its usable egress read 12.5 Mbit/s where the virtual engine's read 6.8, and the
two engines routed different shares remote.
"""

from __future__ import annotations

import asyncio

import pytest

from emulator.net.spec import LinkSpec
from emulator.wire import protocol as p

from .model_link import ModelLink, make_loops

MBIT = 10
CAPACITY_BYTES = MBIT * 1e6 / 8


def sender_stats() -> p.Stats:
    """A remote prefill worker's stats: its connections' TCP view (a queue on the link)."""
    link = p.LinkStats(retrans_rate=0.0, rtt_ms=60.0, rtt_inflation=3.0, bytes_sent=10_000_000)
    return p.Stats(t=1.0, queue_depth=0, batch_size=0, role="prefill", link=link)


def test_the_capacity_sample_is_the_links_over_each_period() -> None:
    link = ModelLink(LinkSpec(bandwidth_mbit=MBIT))
    link.stamps = True
    loops, _ = make_loops(link)
    loops.gateway.nodes.at(0).stats = sender_stats()  # slot 0: the remote prefill worker

    async def scene() -> list:
        intervals = []
        for _ in range(3):  # a scheduler period of two snapshots, three times
            for _ in range(2):
                await loops._snapshot(record=True)
                await asyncio.sleep(0.25)
            intervals.append(loops._interval())
        return intervals

    intervals = asyncio.run(scene())
    for interval in intervals[1:]:  # the first has no window behind it yet
        assert interval is not None and interval.utilization > 0.5
        assert interval.goodput_bytes_per_s / interval.utilization == pytest.approx(CAPACITY_BYTES, rel=0.02)
        assert interval.rtt_inflation == 3.0  # loss and RTT stay the senders' TCP view


def test_the_window_is_the_schedulers_period_not_the_last_snapshot() -> None:
    """A link change between two snapshots of one period: the period's goodput counts both halves."""
    link = ModelLink(LinkSpec(bandwidth_mbit=100))
    link.stamps = True
    loops, _ = make_loops(link)

    async def scene():
        await loops._snapshot(record=True)
        loops._interval()  # the period starts here
        await asyncio.sleep(0.5)
        await loops._snapshot(record=True)
        await loops._update_link(LinkSpec(bandwidth_mbit=MBIT))
        await asyncio.sleep(0.5)
        await loops._snapshot(record=True)
        return loops._interval(), loops.latest

    interval, latest = asyncio.run(scene())
    # the last snapshot alone saw ~10 Mbit/s; the period carried ~100 Mbit/s for half of it
    assert latest.egress_bit_per_s < 20e6
    assert interval.goodput_bytes_per_s * 8 > 40e6
