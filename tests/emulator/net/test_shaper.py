"""DirectionShaper against hand-computed timelines: rate, delay/jitter, loss, queue, reshape.

Pure and fast: time is an argument (a fake clock), randomness a seeded `random.Random`.
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings, strategies as st

from emulator.net.shaper import CorrelatedLoss, DirectionShaper
from emulator.net.spec import LinkShape

MBIT_8 = 8.0  # 8 Mbit/s = 1e6 bytes/s: a 1000-byte packet takes exactly 1 ms


def shaper(seed: int = 1, **shape: float) -> DirectionShaper:
    return DirectionShaper(LinkShape(**shape), random.Random(seed))


def loss_runs(lost: list[bool]) -> list[int]:
    runs, current = [], 0
    for is_lost in lost:
        if is_lost:
            current += 1
        elif current:
            runs.append(current)
            current = 0
    return runs + ([current] if current else [])


def test_burst_is_delivered_at_the_configured_rate() -> None:
    s = shaper(bandwidth_mbit=MBIT_8)
    times = [s.admit(1000, now=0.0) for _ in range(50)]
    assert times == pytest.approx([0.001 * (k + 1) for k in range(50)], abs=1e-12)
    assert s.stats.packets == 50 and s.stats.bytes == 50_000 and s.stats.drops == 0


def test_rate_then_delay_and_an_idle_link_starts_fresh() -> None:
    s = shaper(bandwidth_mbit=MBIT_8, delay_ms=10)
    assert s.admit(1000, now=0.0) == pytest.approx(0.011)
    assert s.admit(500, now=0.0) == pytest.approx(0.0115)
    # Long after the backlog drained, a packet waits only for its own serialisation.
    assert s.admit(1000, now=5.0) == pytest.approx(5.011)
    assert s.backlog_s(5.0) == pytest.approx(0.001)


def test_unshaped_adds_only_delay() -> None:
    s = shaper(delay_ms=40)
    assert [s.admit(9000, now=t) for t in (0.0, 0.0, 0.5)] == pytest.approx([0.04, 0.04, 0.54])
    assert s.num_pending == 0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_jitter_stays_in_bounds_and_never_reorders(seed: int) -> None:
    s = shaper(seed, delay_ms=10, jitter_ms=3)
    sent = [k * 0.0005 for k in range(4000)]
    delivered = [s.admit(100, now=t) for t in sent]
    assert all(b >= a for a, b in zip(delivered, delivered[1:], strict=False))
    previous = -math.inf
    for t, d in zip(sent, delivered, strict=True):
        assert d - t >= 0.007 - 1e-12
        assert d <= max(t + 0.013, previous) + 1e-12
        previous = d
    # Jitter really varies the delay: the spread covers most of +-3 ms.
    delays = [d - t for t, d in zip(sent, delivered, strict=True)]
    assert max(delays) - min(delays) > 0.005


def test_jitter_larger_than_delay_is_clipped_at_zero() -> None:
    s = shaper(delay_ms=1, jitter_ms=5)
    sent = [k * 0.01 for k in range(500)]
    assert all(s.admit(100, now=t) >= t for t in sent)


@pytest.mark.parametrize(("loss_pct", "seed"), [(1.0, 11), (5.0, 12), (30.0, 13)])
def test_bernoulli_loss_rate_within_binomial_tolerance(loss_pct: float, seed: int) -> None:
    n = 40_000
    s = shaper(seed, loss_pct=loss_pct)
    lost = sum(s.admit(100, now=k * 1e-4) is None for k in range(n))
    p = loss_pct / 100
    assert abs(lost - n * p) <= 4.5 * math.sqrt(n * p * (1 - p))
    assert s.stats.loss_drops == lost and s.stats.queue_drops == 0


@settings(max_examples=25, deadline=None, derandomize=True)
@given(p=st.floats(0.01, 0.5), rho=st.floats(0.0, 0.9), seed=st.integers(0, 2**32 - 1))
def test_correlated_loss_keeps_the_mean(p: float, rho: float, seed: int) -> None:
    n = 30_000
    rng = random.Random(seed)
    model = CorrelatedLoss(p * 100, rho * 100, rng)
    lost = sum(model.lose(rng) for _ in range(n))
    # Lag-1 correlation rho inflates the variance of the count by (1 + rho) / (1 - rho).
    sigma = math.sqrt(n * p * (1 - p) * (1 + rho) / (1 - rho))
    assert abs(lost - n * p) <= 5 * sigma


def test_correlated_loss_gives_longer_runs_at_the_same_mean() -> None:
    n, p = 100_000, 0.05
    plain, bursty = random.Random(5), random.Random(6)
    plain_model, bursty_model = CorrelatedLoss(5, 0, plain), CorrelatedLoss(5, 60, bursty)
    plain_lost = [plain_model.lose(plain) for _ in range(n)]
    bursty_lost = [bursty_model.lose(bursty) for _ in range(n)]
    assert sum(bursty_lost) / n == pytest.approx(p, rel=0.15)
    plain_runs, bursty_runs = loss_runs(plain_lost), loss_runs(bursty_lost)
    mean_plain = sum(plain_runs) / len(plain_runs)
    mean_bursty = sum(bursty_runs) / len(bursty_runs)
    assert mean_plain == pytest.approx(1 / (1 - p), rel=0.05)
    assert mean_bursty == pytest.approx(1 / ((1 - p) * (1 - 0.6)), rel=0.1)
    assert mean_bursty > 2 * mean_plain


def test_full_loss_drops_everything() -> None:
    s = shaper(loss_pct=100, loss_correlation_pct=50)
    assert all(s.admit(100, now=k * 0.001) is None for k in range(100))
    assert s.stats.loss_drops == 100 and s.stats.packets == 0


def test_queue_overflow_drops_tail_until_serialisation_frees_room() -> None:
    s = shaper(bandwidth_mbit=MBIT_8, queue_packets=10)
    results = [s.admit(1000, now=0.0) for _ in range(15)]
    assert results[:10] == pytest.approx([0.001 * (k + 1) for k in range(10)])
    assert results[10:] == [None] * 5
    assert s.stats.queue_drops == 5 and s.stats.loss_drops == 0
    # By t = 3.5 ms three packets have left the queue: exactly three more fit.
    later = [s.admit(1000, now=0.0035) for _ in range(4)]
    assert later[:3] == pytest.approx([0.011, 0.012, 0.013]) and later[3] is None


def test_packets_in_propagation_do_not_count_against_the_queue() -> None:
    s = shaper(bandwidth_mbit=MBIT_8, delay_ms=1000, queue_packets=2)
    assert all(s.admit(1000, now=k * 0.002) is not None for k in range(100))


def test_reshape_changes_spacing_at_once_for_the_queued_backlog() -> None:
    s = shaper(bandwidth_mbit=MBIT_8, delay_ms=5)
    before = [s.admit(1000, now=0.0) for _ in range(100)]
    assert before[-1] == pytest.approx(0.105)
    # At t = 20.5 ms, packet 21 is half on the wire; 80 wait. Double the rate.
    retimed = s.reshape(LinkShape(bandwidth_mbit=2 * MBIT_8, delay_ms=5), now=0.0205)
    assert len(retimed) == 80
    assert retimed[0] == pytest.approx(0.0205 + 0.00025 + 0.005)
    spacing = [b - a for a, b in zip(retimed, retimed[1:], strict=False)]
    assert spacing == pytest.approx([0.0005] * 79)
    assert s.admit(1000, now=0.0205) == pytest.approx(retimed[-1] + 0.0005)


def test_reshape_to_a_lower_rate_slows_the_backlog_and_keeps_order() -> None:
    s = shaper(bandwidth_mbit=4 * MBIT_8, delay_ms=10)
    sent = [s.admit(1000, now=0.0) for _ in range(40)]
    retimed = s.reshape(LinkShape(bandwidth_mbit=MBIT_8, delay_ms=2), now=0.0051)
    in_flight = sent[: len(sent) - len(retimed)]
    timeline = in_flight + retimed
    assert all(b >= a for a, b in zip(timeline, timeline[1:], strict=False))
    # The first eight re-timed packets wait behind the last one already in flight (0.015 s):
    # a shorter delay never lets them overtake it. From there on they leave at the new rate.
    assert retimed[:8] == pytest.approx([0.015] * 8)
    assert [b - a for a, b in zip(retimed[8:], retimed[9:], strict=False)] == pytest.approx(
        [0.001] * (len(retimed) - 9)
    )


def test_reshape_to_unshaped_flushes_the_queue() -> None:
    s = shaper(bandwidth_mbit=MBIT_8)
    for _ in range(10):
        s.admit(1000, now=0.0)
    retimed = s.reshape(LinkShape(), now=0.002)
    assert retimed == pytest.approx([0.002] * 8)
    assert s.num_pending == 0 and s.admit(1000, now=0.002) == pytest.approx(0.002)


def test_reshape_applies_new_loss_and_keeps_counters() -> None:
    s = shaper(seed=3)
    assert all(s.admit(100, now=0.0) is not None for _ in range(100))
    s.reshape(LinkShape(loss_pct=100), now=0.0)
    assert all(s.admit(100, now=0.0) is None for _ in range(100))
    assert s.stats.packets == 100 and s.stats.loss_drops == 100
    assert s.shape.loss_pct == 100


def test_a_burst_is_served_as_its_bytes_and_counted_by_its_segments() -> None:
    s = shaper(bandwidth_mbit=MBIT_8, queue_packets=10)
    # a 6-segment burst of 6000 bytes takes as long as six 1000-byte packets: 6 ms
    assert s.admit(6000, now=0.0, packets=6) == pytest.approx(0.006, abs=1e-12)
    assert s.admit(1000, now=0.0, packets=1) == pytest.approx(0.007, abs=1e-12)
    assert s.admit(3000, now=0.0, packets=3) == pytest.approx(0.010, abs=1e-12)
    assert s.admit(1000, now=0.0) is None  # 10 segments wait: the queue is full
    assert s.stats.packets == 10 and s.stats.bytes == 10_000 and s.stats.queue_drops == 1
    # the first burst's 6 ms pass: its six segments leave the queue together
    assert s.admit(1000, now=0.006) == pytest.approx(0.011, abs=1e-12)
    assert s.num_pending == 3


def test_a_reshape_keeps_a_bursts_segments_in_the_queue_count() -> None:
    s = shaper(bandwidth_mbit=MBIT_8, queue_packets=8)
    s.admit(4000, now=0.0, packets=4)
    s.admit(4000, now=0.0, packets=4)
    assert s.reshape(LinkShape(bandwidth_mbit=2 * MBIT_8, queue_packets=8), now=0.0) == pytest.approx(
        [0.002, 0.004], abs=1e-12)
    assert s.admit(1000, now=0.0) is None
    assert s.admit(1000, now=0.002) == pytest.approx(0.0045, abs=1e-12)
