"""The fluid link's TCP behaviour against closed forms: slow start on new connections (and a window
that survives idle), newcomers locked out behind a deep buffer, the lossless long-transfer limit
equal to the plain fluid (bytes / rate + delay), and the spread of loss-limited caches."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from emulator.virtual.core import Simulator
from emulator.virtual.link import FluidLink, LinkState
from emulator.virtual.link_replay import arrival_times
from emulator.virtual.tcp import (
    LOSS_SPREAD,
    MSS_BYTES,
    PACKET_BYTES,
    initial_window_bytes,
    is_lockout,
    loss_time_cv,
    loss_time_factor,
    slow_start_s,
)

MB = 1e6
W0 = 4 * 10 * MSS_BYTES  # 4 new connections, 10 segments of 8,948 bytes each: 357,920 in the first round trip


def test_slow_start_closed_form_by_hand() -> None:
    # 25 MB/s, 40 ms: windows of 357,920 * 2^k per round trip until 2^k * 357,920 / 0.04 >= 25e6
    # (k = 2: 1.43 MB per round trip = 35.8 MB/s). 1 MB: round 0 carries W0 in 0.04 s; the last
    # 642,080 bytes go at 2 * W0 / 0.04 = 17.9 MB/s (still below the rate).
    assert initial_window_bytes(4) == W0
    expected = 0.04 + (1e6 - W0) / (2 * W0 / 0.04)
    assert slow_start_s(1e6, 25e6, 0.04, W0) == pytest.approx(expected)
    # 16 MB: rounds 0-1 (3 * W0) in 0.08 s, the rest at the rate
    assert slow_start_s(16e6, 25e6, 0.04, W0) == pytest.approx(0.08 + (16e6 - 3 * W0) / 25e6)


@pytest.mark.parametrize("size", [0.5 * MB, 1 * MB, 4 * MB, 16 * MB])
def test_a_first_transfer_ramps_in_slow_start(size: float) -> None:
    state = LinkState(25e6, delay_s=0.02, rtt_s=0.04)
    (arrived,) = arrival_times(state, [(0.0, size)])
    assert arrived == pytest.approx(slow_start_s(size, 25e6, 0.04, W0) + 0.02)


def test_an_open_window_survives_idle_and_the_next_transfer_goes_at_the_rate() -> None:
    # tcp_slow_start_after_idle=0 on the live network: the second 4 MB, 5 s later, does not ramp.
    state = LinkState(25e6, delay_s=0.02, rtt_s=0.04)
    first, second = arrival_times(state, [(0.0, 4 * MB), (5.0, 4 * MB)])
    assert first - 0.0 == pytest.approx(slow_start_s(4 * MB, 25e6, 0.04, W0) + 0.02)
    assert second - 5.0 == pytest.approx(4 * MB / 25e6 + 0.02)


def test_lossless_long_transfers_tend_to_the_plain_fluid() -> None:
    # The ramp costs less than its rounds (2 round trips, 0.08 s, here) over bytes / rate: 0.037 s,
    # under 1 % of 400 MB at 25 MB/s, and a fixed cost, so the limit is the plain fluid.
    state = LinkState(25e6, delay_s=0.02, rtt_s=0.04)
    (arrived,) = arrival_times(state, [(0.0, 400 * MB)])
    fluid = 400 * MB / 25e6 + 0.02
    assert arrived - fluid == pytest.approx(2 * 0.04 - 3 * W0 / 25e6)
    assert arrived == pytest.approx(fluid, rel=1e-2)
    unshaped = LinkState(math.inf, delay_s=0.005, rtt_s=0.01)  # no rate: nothing to ramp to
    assert arrival_times(unshaped, [(1.0, 400 * MB)]) == [pytest.approx(1.005)]


def test_a_newcomer_behind_a_deep_buffer_gets_bdp_over_buffer_of_an_incumbents_share() -> None:
    # 6.25 MB/s (50 Mbit/s), 20 ms RTT: BDP 125 kB, buffer 1,000 x 9,000 B: weight 0.0139.
    state = LinkState(6.25e6, delay_s=0.01, rtt_s=0.02)
    assert is_lockout(6.25e6, 0.02, 9e6) and state.newcomer_weight == pytest.approx(0.125e6 / 9e6)
    big, small = 16 * MB, 1 * MB
    big_alone = slow_start_s(big, 6.25e6, 0.02, W0)  # ramps first, then holds the link
    big_done, small_done = arrival_times(state, [(0.0, big), (1.0, small)])
    w = 0.125 / 9
    small_rate, big_rate = 6.25e6 * w / (1 + w), 6.25e6 / (1 + w)
    big_left = big - 6.25e6 * (1.0 - (slow_start_s(0, 6.25e6, 0.02, W0) + big_alone - big / 6.25e6))
    # from 1 s the big one runs at big_rate; the small one at small_rate, then alone at the rate
    t_big = 1.0 + big_left / big_rate
    sent_small = small_rate * (t_big - 1.0)
    assert big_done == pytest.approx(t_big + 0.01)
    assert small_done == pytest.approx(t_big + (small - sent_small) / 6.25e6 + 0.01)


def test_a_shallow_buffer_shares_fairly_and_peers_started_together_are_not_newcomers() -> None:
    shallow = LinkState(6.25e6, delay_s=0.0, rtt_s=0.0, queue_bytes=0.0)
    assert not is_lockout(6.25e6, 0.02, 0.1e6) and shallow.newcomer_weight == 1.0
    assert arrival_times(shallow, [(0.0, 2 * MB), (0.16, 1 * MB)]) == [pytest.approx(0.48), pytest.approx(0.48)]
    deep = LinkState(6.25e6, delay_s=0.0, rtt_s=0.0)
    assert arrival_times(deep, [(0.0, 1 * MB), (0.0, 1 * MB)]) == [pytest.approx(0.32), pytest.approx(0.32)]


def _behind_a_big_one(queue_bytes: float, size: float) -> tuple[float, float, float, float, float]:
    """A 16 MB transfer at 0 s, then two newcomers of `size` at 1 and 1.5 s, on 50 Mbit/s, 20 ms:
    the arrivals, and what each newcomer had sent when the big one ended (both at w of its share)."""
    rate, w = 6.25e6, 0.125e6 / queue_bytes
    state = LinkState(rate, delay_s=0.0, rtt_s=0.02, queue_bytes=queue_bytes)
    big_done, first_done, second_done = arrival_times(state, [(0.0, 16 * MB), (1.0, size), (1.5, size)])
    sent_first = rate * w / (1 + w) * 0.5 + rate * w / (1 + 2 * w) * (big_done - 1.5)
    sent_second = rate * w / (1 + 2 * w) * (big_done - 1.5)
    return big_done, first_done, second_done, sent_first, sent_second


def test_a_backlog_deeper_than_the_buffer_drains_in_the_order_it_started() -> None:
    # tcp.py, lockout: newcomers wait behind the incumbent (w of its share each). When it ends, the
    # oldest newcomer takes its place; the next one's bytes would not fit in the buffer (2 + 2 MB
    # > 2.5 MB), so it stays locked out behind it, rather than sharing the link as its equal. Their
    # 3+ MB left overflow the buffer when the big one ends (overflow.py: the window is long past
    # it): the second's last bytes pass the bottleneck within the next two 0.4 s queue waits, so it
    # arrives with the retransmissions, at the end of the second.
    queue, size = 2.5 * MB, 2 * MB
    big_done, first_done, second_done, sent_first, sent_second = _behind_a_big_one(queue, size)
    rate, w = 6.25e6, 0.125e6 / queue
    t_first = big_done + (size - sent_first) / (rate / (1 + w))
    assert big_done < first_done < second_done
    assert first_done == pytest.approx(t_first, rel=1e-9) and t_first < big_done + queue / rate
    sent_second += rate * w / (1 + w) * (t_first - big_done)
    t_second = t_first + (size - sent_second) / rate
    assert big_done + queue / rate < t_second < big_done + 2 * queue / rate
    assert second_done == pytest.approx(big_done + 2 * queue / rate, rel=1e-9)


def test_newcomers_whose_bytes_fit_in_the_buffer_take_the_incumbents_place_together() -> None:
    # The same two, 1 MB each, behind the default 9 MB buffer: both fit, so both take full weight
    # when the big one ends and split the link; the first, ahead by what it sent alone at w, ends
    # first and the second has the link to itself after.
    queue, size = 9 * MB, 1 * MB
    big_done, first_done, second_done, sent_first, sent_second = _behind_a_big_one(queue, size)
    t_first = big_done + (size - sent_first) / (6.25e6 / 2)
    assert first_done == pytest.approx(t_first, rel=1e-9)
    sent_second += 6.25e6 / 2 * (t_first - big_done)
    assert second_done == pytest.approx(t_first + (size - sent_second) / 6.25e6, rel=1e-9)


def test_a_caches_loss_limited_time_spreads_the_less_the_more_loss_events_it_expects() -> None:
    assert loss_time_cv(3e6, 0.0) == 0.0 and loss_time_cv(3e6, 1.0) == 0.0  # lossless; cut: nothing moves
    assert loss_time_cv(36 * PACKET_BYTES, 0.01) == LOSS_SPREAD  # 0.36 events expected: counted as one
    assert loss_time_cv(400 * PACKET_BYTES, 0.01) == pytest.approx(LOSS_SPREAD / 2)  # 4 events
    assert loss_time_cv(1e10, 0.01) < 0.01  # paper scale: ~11,000 events, the mean
    draws = [loss_time_factor(random.Random(1), 0.0)] + [loss_time_factor(rng, 0.4) for rng in [random.Random(2)]
                                                          for _ in range(200_000)]
    assert draws[0] == 1.0
    times = draws[1:]
    assert statistics.fmean(times) == pytest.approx(1.0, abs=0.005)
    assert statistics.stdev(times) == pytest.approx(0.4, rel=0.03)


def test_with_draws_lossy_caches_keep_the_mean_time_and_spread_as_their_loss_events_say() -> None:
    # 300 whole 3.6 MB caches one after another on a 20 ms, 1 % loss link (4 connections at 5.8 MB/s
    # each; the window opens within the first): each takes 3.6 MB / 23.3 MB/s + the delay at the
    # mean, and with the engine's draws spreads loss_time_cv of that (4 expected events: 0.3).
    state = LinkState(1e9, delay_s=0.01, loss=0.01, rtt_s=0.02, connections=4)
    size = 400 * PACKET_BYTES
    taken: dict[str, list[float]] = {}
    for name, rng in (("mean", None), ("drawn", random.Random(5))):
        sim = Simulator()
        link = FluidLink(sim, state, rng)
        times: list[float] = []

        def send(_: object, times: list[float] = times, link: FluidLink = link, sim: Simulator = sim) -> None:
            start = sim.now
            link.start(size, lambda __: (times.append(sim.now - start - 0.01), sim.schedule(sim.now, send)
                                         if len(times) < 300 else None), None)

        sim.schedule(0.0, send)
        sim.run()
        taken[name] = times[1:]  # the first ramps in slow start
    steady = size / state.per_transfer_cap
    assert taken["mean"] == pytest.approx([steady] * 299)
    assert statistics.fmean(taken["drawn"]) == pytest.approx(steady, rel=0.06)
    cv = statistics.stdev(taken["drawn"]) / statistics.fmean(taken["drawn"])
    assert cv == pytest.approx(loss_time_cv(size, 0.01), rel=0.15) and loss_time_cv(size, 0.01) == pytest.approx(0.3)
