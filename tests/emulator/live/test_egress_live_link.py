"""The live loops on a real shaped link (the tun relay, real TCP, real byte counters): threshold and
link changes at every phase of the sampling interval, and a knob that holds the loop while a counter
read is in flight (the issue's 13 Gbit/s sample), never record egress above the link's capacity
(issue 26), and the meter never refuses a real sample.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Iterator

import pytest

from emulator.live.loops import METRICS_PERIOD_S, RunLoops
from emulator.net import probe
from emulator.net.spec import LinkSpec
from emulator.net.topology import LOCAL, REMOTE, Topology
from emulator.telemetry.control_messages import parse_control

from .model_link import RecordingBus, make_loops

PHASES = 8  # changes land at k/8 of the sampling interval, k = 0..7, in a shuffled order
SCHEDULE = [  # (interval, phase k, knob, payload): a link change or a threshold change each interval
    (1, 0, "link", {"bandwidth_mbit": 10}), (2, 5, "threshold", {"tokens": 2000}),
    (3, 2, "link", {"bandwidth_mbit": 200}), (4, 7, "threshold", {"tokens": 30000}),
    (5, 4, "link", {"bandwidth_mbit": 50}), (6, 1, "link", {"bandwidth_mbit": 20}),
    (7, 6, "threshold", {"tokens": "auto"}), (8, 3, "link", {"bandwidth_mbit": 100}),
]
HOLD_S = 0.3  # a threshold change that holds the loop this long as a periodic read is answered
RUN_S = (len(SCHEDULE) + 6) * METRICS_PERIOD_S


@pytest.fixture
def tun_link() -> Iterator[Topology]:
    if os.geteuid() != 0 or not os.path.exists("/dev/net/tun"):
        pytest.skip("needs root and /dev/net/tun for namespaces and the tun relay")
    with Topology(LinkSpec(bandwidth_mbit=50, delay_ms=5), backend="tun") as topology:
        yield topology


@pytest.mark.live
def test_a_relay_stamps_its_counters_on_the_shared_clock() -> None:
    """Both relays say when they read (CLOCK_MONOTONIC), within the request's own bracket."""
    with Topology(LinkSpec(bandwidth_mbit=50), backend="proxy") as topology:
        before = time.monotonic()
        at = topology.counters().read_at_monotonic
        assert at is not None and before <= at <= time.monotonic()


@pytest.mark.root
@pytest.mark.slow
def test_changes_at_every_phase_on_a_real_link_stay_within_capacity(tun_link: Topology) -> None:
    before = time.monotonic()
    at = tun_link.counters().read_at_monotonic
    assert at is not None and before <= at <= time.monotonic()
    loops, bus = make_loops(tun_link)
    stream = threading.Thread(target=probe.measure_throughput, daemon=True, args=(
        tun_link.netns(REMOTE), tun_link.netns(LOCAL), tun_link.address(LOCAL), RUN_S), kwargs={"warmup_s": 0.0})
    stream.start()  # one TCP stream keeps the link busy throughout
    sent = asyncio.run(_play(loops, bus, tun_link))
    stream.join(RUN_S + 10)
    capacities = {s.t_s: s.link["bandwidth_mbit"] * 1e6 for s in loops.snapshots}
    recorded = loops.snapshots
    for i, snapshot in enumerate(recorded[1:], start=1):  # against every capacity its interval may span
        since = recorded[max(i - 3, 0)].t_s
        spans = [c for t, c in capacities.items() if since <= t <= snapshot.t_s]
        spans += [c for t, c in sent if since - METRICS_PERIOD_S <= t <= snapshot.t_s]
        assert snapshot.egress_bit_per_s <= 1.1 * max(spans), (snapshot.t_s, snapshot.egress_bit_per_s, spans)
    busy = [s.egress_bit_per_s / s.link_capacity_bit_per_s for s in recorded[3:] if s.link_utilization]
    assert max(busy) > 0.5  # the stream did load the link: the check above was not vacuous


async def _play(loops: RunLoops, bus: RecordingBus, link: Topology) -> list[tuple[float, float]]:
    """The loops' metrics and commands for RUN_S, the schedule's changes at their phases; returns
    (run time sent, capacity) of each link change."""
    loops.gateway.t0 = time.monotonic()
    tasks = [asyncio.create_task(loops._metrics()), asyncio.create_task(loops._commands())]
    sent = []
    for interval, phase, knob, value in SCHEDULE:
        at_s = (interval + phase / PHASES) * METRICS_PERIOD_S
        await asyncio.sleep(max(0.0, at_s - loops.gateway.now()))
        bus.queue.put_nowait(parse_control(knob, json.dumps({"v": 1, **value}).encode(), link.spec))
        if knob == "link":
            sent.append((loops.gateway.now(), value["bandwidth_mbit"] * 1e6))
    for _ in range(2):
        await _hold_during_a_read(loops, bus, link)
    await asyncio.sleep(max(0.0, RUN_S - loops.gateway.now()))
    loops._ended.set()
    bus.queue.put_nowait(None)
    await asyncio.wait_for(asyncio.gather(*tasks), 10.0)
    assert loops.egress_refused == []  # a sample above the link's capacity: refused, kept out
    return sent


async def _hold_during_a_read(loops: RunLoops, bus: RecordingBus, link: Topology) -> None:
    """Queue a threshold change and hold the loop as the next periodic read begins (the metrics
    loop's timer, set first, fires first): the read is answered while the loop is held, and the
    change's own snapshot reads right after."""
    recorded = len(loops.snapshots)
    while len(loops.snapshots) == recorded:
        await asyncio.sleep(0.001)
    await asyncio.sleep(METRICS_PERIOD_S)  # the metrics loop sleeps this long, then reads
    bus.queue.put_nowait(parse_control("threshold", b'{"v": 1, "tokens": 5000}', link.spec))
    time.sleep(HOLD_S)
