"""bench/link_overload.py's pieces that need no link: the offers, the window's growth read from
the sampled connections, and the fluid's prediction for a lone cache."""

from __future__ import annotations

import pytest

from tests.bench.scripts import load_bench


def test_offers_are_seeded_poisson_times_within_the_span() -> None:
    bench = load_bench("link_overload")
    offers = bench.offer_times(2.0, 500.0)
    assert offers == bench.offer_times(2.0, 500.0) and offers == sorted(offers) and offers[-1] <= 500.0
    assert len(offers) == pytest.approx(1000, rel=0.1)


def test_the_windows_growth_is_read_until_they_first_back_off() -> None:
    # 100 -> 400 segments of 9,000 bytes in 3 s on a 1 MB/s link: 0.9 of the rate per second; the
    # samples from the first fall on (a loss) are left out; two samples are too few.
    growth = load_bench("link_overload").window_growth
    samples = [{"t_s": t, "cwnd": 100 + 100 * t} for t in range(4)] + [{"t_s": 4, "cwnd": 300}, {"t_s": 5, "cwnd": 900}]
    assert growth(samples, 1e6, 9000) == pytest.approx(0.9)
    assert growth(samples[:2], 1e6, 9000) is None


def test_a_lone_cache_under_the_rate_takes_its_bytes_over_the_rate_and_the_delay() -> None:
    bench = load_bench("link_overload")
    state = bench.state_of(bench.POINT)
    (seconds,) = bench.fluid_seconds(state, [1.0], 3_000_000)
    wire = 3_000_000 * state.wire_per_byte
    assert seconds == pytest.approx(wire / state.rate_bytes_per_s + state.delay_s, rel=0.02)  # + slow start's rounds
