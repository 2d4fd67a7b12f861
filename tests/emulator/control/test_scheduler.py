"""The dual-timescale scheduler driven by a fake clock (plain floats): congestion raises t, recovery
lowers it without oscillating, traffic shifts flip local nodes one at a time; and the estimators it
re-profiles with, against hand values."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from emulator.control.estimators import ArrivalWindow, Ewma, LinkEstimator, LinkObservation
from emulator.control.scheduler import (
    DualTimescaleScheduler,
    RoleChange,
    SchedulerConfig,
    ThresholdChange,
)
from emulator.control.throughput_model import ModelInputs, optimize
from emulator.control.types import Cluster, NodeId, Role
from tests.emulator.control.paper_case import K, paper_inputs

INTERVAL_S = 5.0


TEN_GBIT = paper_inputs(egress_bytes_per_s=1.25e9)  # a link thin enough that the egress term binds
SHORT_ONLY = SchedulerConfig(long_term_enabled=False)


class FakeLink:
    """A link of `capacity` bytes/s carrying `rate` requests/s of which those over t go remote.

    Offered KV bytes beyond the capacity mean a saturated sender, 2 % retransmits and a doubled
    RTT; below it, a clean link busy for demand / capacity of the time.
    """

    def __init__(self, inputs: ModelInputs, rate_per_s: float) -> None:
        self.inputs, self.rate_per_s = inputs, rate_per_s

    def observe(self, sched: DualTimescaleScheduler, now_s: float, capacity: float) -> None:
        lengths, t = self.inputs.lengths, sched.current_threshold
        demand = self.rate_per_s * float(lengths.tail_prob(t)) * float(
            self.inputs.kv_bytes(float(lengths.mean_above(t))))
        over = demand > capacity
        sched.observe_link(now_s, min(demand, capacity), min(1.0, demand / capacity),
                           0.02 if over else 0.001, 2.0 if over else 1.05)


def run(sched: DualTimescaleScheduler, ticks: int, start_s: float, feed) -> list:
    """Tick every INTERVAL_S after calling feed(now_s); returns (tick, decision) pairs."""
    log = []
    for i in range(ticks):
        now_s = start_s + (i + 1) * INTERVAL_S
        feed(now_s)
        log += [(i, d) for d in sched.tick(now_s)]
    return log


def test_congestion_raises_t_and_recovery_lowers_it():
    sched = DualTimescaleScheduler(TEN_GBIT, SHORT_ONLY)
    link = FakeLink(TEN_GBIT, rate_per_s=3.0)
    t_start = sched.current_threshold
    calm = run(sched, 20, 0.0, lambda now: link.observe(sched, now, 1.25e9))
    assert calm == []  # the planned t already fits the nominal link
    congested = run(sched, 40, 100.0, lambda now: link.observe(sched, now, 0.5e9))
    assert congested and all(d.new_t > d.old_t for _, d in congested)
    assert "retransmits" in congested[0][1].reason
    t_congested = sched.current_threshold
    recovered = run(sched, 40, 300.0, lambda now: link.observe(sched, now, 1.25e9))
    assert recovered and all(d.new_t < d.old_t for _, d in recovered)
    assert "held 2 intervals" in recovered[0][1].reason
    assert t_start <= sched.current_threshold <= t_start * (1 + SHORT_ONLY.hysteresis)
    assert sched.current_threshold < t_congested
    assert recovered[0][0] >= 1  # the first decrease waited for the dwell


@pytest.mark.parametrize("level", [1.25e9, 0.8e9, 0.5e9])
def test_noisy_but_stable_link_does_not_oscillate(level):
    sched = DualTimescaleScheduler(TEN_GBIT, SHORT_ONLY)
    rng = random.Random(7)

    def feed(now_s: float) -> None:
        sched.observe_link(now_s, level * 0.92 * (1 + rng.uniform(-0.05, 0.05)),
                           min(1.0, 0.92 + rng.uniform(-0.04, 0.04)),
                           0.004 + rng.uniform(-0.003, 0.003), 1.15 + rng.uniform(-0.1, 0.1))

    log = run(sched, 100, 0.0, feed)
    directions = {d.new_t > d.old_t for _, d in log}
    assert len(directions) <= 1  # it may settle toward a new level, never back and forth
    assert all(i < 30 for i, _ in log)  # and once the estimates settled, it holds still
    assert len(log) <= 5


def test_a_single_clean_interval_does_not_lower_t():
    sched = DualTimescaleScheduler(TEN_GBIT, SHORT_ONLY)
    link = FakeLink(TEN_GBIT, rate_per_s=3.0)
    run(sched, 40, 0.0, lambda now: link.observe(sched, now, 0.5e9))
    t_congested = sched.current_threshold
    blip = run(sched, 30, 200.0, lambda now: link.observe(
        sched, now, 1.25e9 if now == 205.0 else 0.5e9))
    assert all(d.new_t >= d.old_t for _, d in blip)
    assert sched.current_threshold >= t_congested


def test_slower_remote_prefill_raises_t():
    sched = DualTimescaleScheduler(paper_inputs(), dataclasses.replace(SHORT_ONLY, ewma_alpha=1.0))
    t_before = sched.current_threshold
    sched.observe_prefill(Cluster.REMOTE, 32 * K, 2 * 1.84, now_s=1.0)  # half the profiled speed
    [change] = sched.tick(INTERVAL_S)
    assert sched.estimates.speed_remote == pytest.approx(0.5)
    assert change.new_t > t_before and "remote prefill speed x1.00 -> x0.50" in change.reason


def test_disabled_scheduler_emits_nothing():
    config = SchedulerConfig(short_term_enabled=False, long_term_enabled=False)
    sched = DualTimescaleScheduler(TEN_GBIT, config)
    rng = random.Random(1)

    def feed(now_s: float) -> None:
        sched.observe_link(now_s, 1e8, 1.0, 0.05, 3.0)
        sched.observe_queues(now_s, 100, 100, 100)
        sched.observe_prefill(Cluster.REMOTE, 8 * K, 5.0, now_s)
        for k in range(10):
            sched.observe_arrival(now_s + k * 0.1, rng.uniform(60_000, 130_000))

    start = (sched.current_threshold, sched.current_n_p)
    assert run(sched, 100, 0.0, feed) == []
    assert (sched.current_threshold, sched.current_n_p) == start


def _traffic_shift(mu_after: float) -> tuple[DualTimescaleScheduler, list]:
    """2 requests/s at the paper's mu for 600 s, then at mu_after; both loops on."""
    sched = DualTimescaleScheduler(paper_inputs())
    rng = random.Random(3)

    def draw(mu: float) -> float:
        while not 128 <= (x := rng.lognormvariate(mu, 1.0)) <= 131072:
            pass
        return x

    def feed(now_s: float) -> None:
        for k in range(10):
            mu = 9.90 if now_s <= 600 else mu_after
            sched.observe_arrival(now_s - INTERVAL_S + k * 0.5, draw(mu))

    return sched, run(sched, 240, 0.0, feed)


def test_longer_traffic_moves_decode_nodes_to_prefill_one_at_a_time():
    sched, log = _traffic_shift(10.9)
    flips = [(i, d) for i, d in log if isinstance(d, RoleChange)]
    assert [d.node for _, d in flips] == [NodeId(Cluster.LOCAL, Role.DECODE, 3),
                                          NodeId(Cluster.LOCAL, Role.DECODE, 4)]
    assert all(d.to_role is Role.PREFILL and "drain, then flip" in d.reason for _, d in flips)
    assert flips[0][1].at_s > 600 and len({i for i, _ in flips}) == len(flips)  # one per tick
    assert sched.current_n_p == 5
    assert [n.role for n in sched.local_nodes] == [Role.PREFILL] * 5 + [Role.DECODE] * 3


def test_shorter_traffic_moves_prefill_nodes_to_decode():
    sched, log = _traffic_shift(8.9)
    flips = [d for _, d in log if isinstance(d, RoleChange)]
    assert flips and flips[0].node == NodeId(Cluster.LOCAL, Role.PREFILL, 2)
    assert all(d.to_role is Role.DECODE for d in flips) and flips[0].at_s > 600
    assert sched.current_n_p == 3 - len(flips) >= 1
    lowered = [d for _, d in log if isinstance(d, ThresholdChange) and d.at_s > flips[0].at_s]
    assert lowered and lowered[-1].new_t < optimize(paper_inputs()).prfaas.t


def test_stable_traffic_keeps_the_split():
    sched, log = _traffic_shift(9.90)
    assert not [d for _, d in log if isinstance(d, RoleChange)]


def test_start_and_config_validation():
    with pytest.raises(ValueError, match="n_p=8"):
        DualTimescaleScheduler(TEN_GBIT, n_p=8, threshold=1000)
    with pytest.raises(ValueError, match="scheduler.hysteresis"):
        SchedulerConfig(hysteresis=1.5)
    with pytest.raises(ValueError, match="scheduler.short_interval_s"):
        SchedulerConfig(short_interval_s=0)


# ---- estimators ----

def test_ewma_seeds_then_smooths():
    avg = Ewma(0.25)
    assert avg.update(8.0) == 8.0
    assert avg.update(4.0) == 7.0


def test_link_estimator_capacity_and_congestion_derate():
    est = LinkEstimator(1e9, alpha=1.0, retrans_trigger=0.01, rtt_trigger=1.5)
    est.observe(LinkObservation(1.0, 4e8, 0.5, 0.0, 1.0))  # busy half the time at 400 MB/s
    assert est.usable_bytes_per_s == pytest.approx(8e8) and not est.is_congested
    est.observe(LinkObservation(2.0, 5e8, 1.0, 0.02, 1.6))  # 1 - 10 x 0.02 - 0.25 x 0.4 = 0.7
    assert est.usable_bytes_per_s == pytest.approx(5e8 * 0.7) and est.is_congested
    est.observe(LinkObservation(3.0, 1e5, 0.001, 0.0, 1.0))  # idle: capacity unknown, kept
    assert est.usable_bytes_per_s == pytest.approx(5e8)
    with pytest.raises(ValueError, match="finite and >= 0"):
        est.observe(LinkObservation(4.0, float("nan"), 0.5, 0.0, 1.0))


def test_arrival_window_rate_and_pruning():
    window = ArrivalWindow(window_s=10.0, max_samples=100)
    for i in range(20):
        window.observe(float(i), 1000.0 + i)
    assert window.rate_per_s(19.0) == pytest.approx(11 / 10)  # arrivals at 9..19 s
    assert window.lengths(19.0).tolist() == list(np.arange(1009.0, 1020.0))
    assert window.rate_per_s(100.0) == 0.0


def test_operator_knobs_override_the_scheduler() -> None:
    sched = DualTimescaleScheduler(TEN_GBIT, SHORT_ONLY)
    sched.state.set_threshold(4096)
    assert sched.current_threshold == 4096
    sched.state.set_loops(short_term=False)
    assert not sched.config.short_term_enabled and not sched.config.long_term_enabled
    for i in range(1, 20):  # a congested link would raise t, but the loop is off
        sched.observe_link(i * INTERVAL_S, 0.5e9, 1.0, 0.05, 3.0)
        assert sched.tick(i * INTERVAL_S) == []
    assert sched.current_threshold == 4096
    with pytest.raises(ValueError, match="threshold"):
        sched.state.set_threshold(-1)
