"""The instances on their own: a FIFO prefill instance against the M/M/1 formula, and a decode
instance's continuous batching against its BS_max."""

from __future__ import annotations

import numpy as np
import pytest

from emulator.control.profiles import PiecewiseLinear
from emulator.control.types import Cluster, NodeId, RequestSpec, Role
from emulator.run.journey import Journey
from emulator.virtual.core import Simulator
from emulator.virtual.costs import Curve
from emulator.virtual.nodes import DecodeNode, PrefillNode

US_PER_TOKEN = Curve.from_table(PiecewiseLinear((0.0, 1e6), (0.0, 1.0)))  # 1 token = 1 us


def test_one_fifo_prefill_instance_with_exponential_service_matches_mm1_mean_wait() -> None:
    """lambda = 0.5, mu = 1: mean wait in queue rho / (mu - lambda) = 1 s, within 5 % over 50k
    requests (the sample mean's standard error at rho = 0.5 is about 2.4 %)."""
    lam, mu, n = 0.5, 1.0, 50_000
    rng = np.random.default_rng(0)
    arrivals = np.cumsum(rng.exponential(1 / lam, n))
    services_us = np.maximum(np.round(rng.exponential(1e6 / mu, n)), 1).astype(int)
    sim = Simulator()
    waits: list[float] = []
    node = PrefillNode(sim, NodeId(Cluster.LOCAL, Role.PREFILL, 0), US_PER_TOKEN,
                       on_start=lambda _n, j, _s: waits.append(sim.now - j.spec.arrival_s),
                       on_end=lambda *_: None)
    for i in range(n):
        journey = Journey(RequestSpec(f"r{i}", float(arrivals[i]), int(services_us[i]), 1), float(arrivals[i]))
        sim.schedule(arrivals[i], node.enqueue, journey)
    sim.run()
    assert len(waits) == n
    rho = lam / mu
    assert np.mean(waits) == pytest.approx(rho / (mu - lam), rel=0.05)


def test_prefill_serves_in_arrival_order_one_at_a_time() -> None:
    sim, log = Simulator(), []
    node = PrefillNode(sim, NodeId(Cluster.REMOTE, Role.PREFILL, 0), US_PER_TOKEN,
                       on_start=lambda _n, j, s: log.append(("start", j.spec.id, sim.now, s)),
                       on_end=lambda _n, j, _s: log.append(("end", j.spec.id, sim.now, None)))
    for name, tokens in (("a", 2_000_000), ("b", 1_000_000)):
        node.enqueue(Journey(RequestSpec(name, 0.0, tokens, 1), 0.0))
    assert node.busy is not None and len(node.queue) == 1
    sim.run()
    assert log == [("start", "a", 0.0, 2.0), ("end", "a", 2.0, None),
                   ("start", "b", 2.0, 1.0), ("end", "b", 3.0, None)]
    assert node.is_idle


def test_decode_batch_never_exceeds_bs_max_and_waiting_requests_join_in_order() -> None:
    sim, finished = Simulator(), []
    node = DecodeNode(sim, NodeId(Cluster.LOCAL, Role.DECODE, 3), max_batch=3,
                      decode_s=lambda out: (out - 1) * 0.1, step_s=0.1,
                      on_first_token=lambda _n, j: setattr(j, "first_token_s", sim.now),
                      on_finish=lambda _n, j, tpot: finished.append((j.spec.id, j.first_token_s, sim.now, tpot)))
    journeys = [Journey(RequestSpec(f"r{i}", 0.0, 100, 11 if i % 2 else 21), 0.0) for i in range(8)]
    for journey in journeys:
        sim.schedule(0.0, node.admit, journey)
    sim.run()
    assert node.peak_active == 3
    intervals = [(first, end) for _, first, end, _ in finished]
    for t in sorted({first for first, _ in intervals}):
        assert sum(first <= t < end for first, end in intervals) <= 3
    joined = sorted(journeys, key=lambda j: (j.first_token_s, int(j.spec.id[1:])))
    assert [j.spec.id for j in joined] == [f"r{i}" for i in range(8)]  # FIFO admission
    assert all(tpot == pytest.approx(0.1) for *_, tpot in finished)
    assert node.is_idle
