"""The live loops' snapshots never report more egress than the link carried (issue 26).

Was: a classroom-basic run recorded 13.0 Gbit/s on a 50 Mbit/s link 0.3 s after a threshold change.
The snapshot read the link's byte counter in a thread and took its time stamp after the await, and
a snapshot published for a control message shared the counter baseline with the periodic ones: a
counter read that answered late (or a loop that resumed it late) met the next snapshot's read a few
milliseconds later, and 0.3 s of bytes were divided by those milliseconds.
"""

from __future__ import annotations

import asyncio

import pytest

from emulator.net.spec import LinkSpec
from emulator.telemetry.control_messages import parse_control
from emulator.telemetry.schemas import MetricsSnapshot

from .model_link import ModelLink, make_loops

MBIT = 50
CAPACITY = MBIT * 1e6


def over_capacity(snapshots: list[MetricsSnapshot]) -> list[tuple[float, float]]:
    """(t, egress / capacity) of every snapshot above its link's constant capacity."""
    return [(s.t_s, s.egress_bit_per_s / CAPACITY) for s in snapshots
            if s.egress_bit_per_s > CAPACITY * (1 + 1e-9)]


def test_a_late_counter_answer_is_not_divided_by_the_next_snapshots_milliseconds() -> None:
    """A control snapshot whose counter read answers 0.3 s late, then the periodic one at once."""
    link = ModelLink(LinkSpec(bandwidth_mbit=MBIT))
    loops, bus = make_loops(link)

    async def scene() -> None:
        loops.gateway.t0 -= 1.0  # the run is 1 s old
        await loops._snapshot(record=True)
        await asyncio.sleep(0.1)
        link.read_delays_s.append(0.3)
        await loops._snapshot(record=False)  # a threshold change's snapshot, published at once
        await loops._snapshot(record=True)
        await asyncio.sleep(0.4)
        await loops._snapshot(record=True)

    asyncio.run(scene())
    assert over_capacity(bus.metrics) == []
    assert len(loops.snapshots) == 3
    assert loops.snapshots[-1].egress_bit_per_s == pytest.approx(CAPACITY, rel=0.05)  # it does measure


def test_a_control_snapshot_overtaking_a_periodic_one_moves_no_baseline() -> None:
    """A periodic read in flight (slow), a control message's snapshot started and answered meanwhile."""
    link = ModelLink(LinkSpec(bandwidth_mbit=MBIT))
    loops, bus = make_loops(link)

    async def scene() -> None:
        loops.gateway.t0 -= 1.0
        await loops._snapshot(record=True)
        await asyncio.sleep(0.1)
        link.read_delays_s.extend([0.3, 0.002])
        periodic = asyncio.create_task(loops._snapshot(record=True))
        await asyncio.sleep(0.1)
        await loops.knobs.apply_command(parse_control("threshold", b'{"v": 1, "tokens": 8000}'))
        await loops._snapshot(record=False)
        await periodic
        for _ in range(3):
            await asyncio.sleep(0.2)
            await loops._snapshot(record=True)

    asyncio.run(scene())
    assert over_capacity(bus.metrics) == []
    assert over_capacity(loops.snapshots) == []
    assert loops.snapshots[-1].egress_bit_per_s == pytest.approx(CAPACITY, rel=0.05)
