"""The standing queue the fluid link keeps for the senders' RTT: produced bytes not yet delivered
beyond the path's BDP, its peak per sampler interval, and the smoothed RTT the scheduler reads
from it (held while the senders are idle), against hand arithmetic and a virtual run whose link
drops from 100 to 10 Mbit/s (the live run of that scenario read RTT x112 and answered at 78 s)."""

from __future__ import annotations

from pathlib import Path

import pytest

from emulator.scenario import parse_scenario
from emulator.virtual.core import Simulator
from emulator.virtual.engine import simulate
from emulator.virtual.link import FluidLink, LinkState
from emulator.virtual.tcp import SRTT_QUEUE_SHARE, STANDING_QUEUE_CAP_BYTES, smoothed_rtt_s

MB = 1e6
RATE = 1.25 * MB  # 10 Mbit/s
RTT = 0.02
BDP = RATE * RTT


def _peaks(state: LinkState, size: float, at: list[float], layers: list[tuple[float, float, float]] | None = None,
           end_s: float = 0.0) -> list[tuple[float, bool]]:
    """Start one transfer of `size` at 0 (handed over in `layers`, the rest at `end_s`, when given)
    and take the queue's peak at each of `at`."""
    sim = Simulator()
    link = FluidLink(sim, state)
    taken: list[tuple[float, bool]] = []
    transfer = link.start(size, lambda _: None, None, layers)
    if layers is not None:
        sim.schedule(end_s, lambda _: link.end_production(transfer))
    for t in at:
        sim.schedule(t, lambda _: taken.append(link.take_queue_peak()))
    sim.run()
    return taken


def test_a_whole_cache_waits_beyond_the_bdp_and_drains_at_the_link_rate() -> None:
    # 3 MB at once on 10 Mbit/s, 20 ms: all of it in flight at 0 (the first window already covers
    # the BDP), then 1.25 MB delivered per second; the cache ends at 2.4 s.
    taken = _peaks(LinkState(RATE, delay_s=0.01, rtt_s=RTT), 3 * MB, [1.0, 2.0, 3.0, 4.0])
    assert taken[0] == (pytest.approx(3 * MB - BDP), True)  # the peak: as it started
    assert taken[1] == (pytest.approx(3 * MB - RATE - BDP), True)  # the interval's start
    assert taken[2] == (pytest.approx(3 * MB - 2 * RATE - BDP), True)  # sent until 2.4 s
    assert taken[3] == (0.0, False)  # nothing sent in (3, 4]


def test_a_pipelined_cache_queues_each_layer_as_it_is_handed_over() -> None:
    # 100 MB in ten 10 MB layers, nine at 0.4, 0.8, ... 3.6 s and the last when the prefill ends
    # at 4 s, on a 100 MB/s link, 20 ms: each layer is in flight at once and across in 0.1 s, so
    # the queue beyond the 2 MB BDP peaks at 8 MB per layer, once the window has opened (the
    # first layer's first round trips carry only the window: 4 x 10 segments, doubling).
    state = LinkState(100 * MB, delay_s=0.01, rtt_s=RTT)
    layers = [(0.4 * (i + 1), 10 * MB, 0.0) for i in range(9)]
    taken = _peaks(state, 100 * MB, [0.45, 1.0, 3.9, 4.5], layers, end_s=4.0)
    assert taken[0][0] < 8 * MB - 1  # the first layer: the window, not the layer, was in flight
    assert taken[1] == (pytest.approx(8 * MB), True)
    assert taken[2] == (pytest.approx(8 * MB), True)
    assert taken[3] == (pytest.approx(8 * MB), True)  # the last layer, after the prefill


def test_the_smoothed_rtt_keeps_a_share_of_the_wait_up_to_the_deepest_measured() -> None:
    assert smoothed_rtt_s(RTT, 1 * MB, RATE) == pytest.approx(RTT + SRTT_QUEUE_SHARE * 0.8)
    assert smoothed_rtt_s(RTT, 1e12, RATE) == pytest.approx(RTT + SRTT_QUEUE_SHARE * STANDING_QUEUE_CAP_BYTES / RATE)
    assert smoothed_rtt_s(RTT, -5.0, RATE) == RTT
    assert smoothed_rtt_s(RTT, 1 * MB, float("inf")) == RTT  # unshaped: no bottleneck to queue at


DROP = {
    "name": "drop", "engine": "virtual", "seed": 29, "duration_s": 150,
    "model": {"profile": {"name": "hand", "lengths_tokens": [128, 2048], "kv_mib": [0.5, 3.0],
                          "prefill_s": {"cpu": [0.05, 0.75]}, "decode_step_ms": {"cpu": 30.0}}},
    "clusters": {"remote": {"instances": 1, "device": "cpu"},
                 "local": {"instances": 2, "device": "cpu", "prefill_instances": 1, "decode_max_batch": 8}},
    "link": {"bandwidth_mbit": 100, "delay_ms": 10},
    "router": {"policy": "prfaas", "threshold_tokens": "auto"},
    "scheduler": {"short_term": {"enabled": True, "interval_s": 3}, "long_term": {"enabled": False}},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 0.8},
                 "input_len": {"kind": "uniform", "min": 128, "max": 2048},
                 "output_len": {"kind": "fixed", "tokens": 16}},
    "timeline": [{"at_s": 50, "link": {"bandwidth_mbit": 10}}],
}


def test_after_a_drop_to_10_mbit_the_scheduler_reads_the_queue_in_the_rtt() -> None:
    result = simulate(parse_scenario(DROP, Path('.')))
    decisions = [d for d in result.loops.decisions if "RTT x" in d]
    assert decisions, result.loops.decisions
    inflation = float(decisions[0].split("RTT x")[1].split(",")[0])
    assert inflation > 10 and 50 <= float(decisions[0][2:].split("s")[0]) <= 70  # answered within 20 s
    rows = result.loops.samples
    assert max(r["rtt_ms"] for r in rows if r["t_s"] < 50) < 100  # 100 Mbit/s: a last layer's burst
    idle_after_busy = [(a["rtt_ms"], b["rtt_ms"]) for a, b in zip(rows, rows[1:])
                       if b["t_s"] > 50 and a["egress_bit_per_s"] > 0 and b["egress_bit_per_s"] == 0]
    assert idle_after_busy and all(after == before for before, after in idle_after_busy)  # held while idle
