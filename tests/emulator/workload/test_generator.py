"""Synthetic request generation: ordering, ids, caps, bursts, prefix sharing and determinism."""

from __future__ import annotations

import math

import numpy as np
import pytest

from emulator.errors import ScenarioError
from emulator.workload.arrivals import Burst, PoissonArrivals, RateChange
from emulator.workload.generator import PrefixSharing, generate_requests
from emulator.workload.lengths import FixedLength, LogNormalLength, UniformLength
from emulator.workload.tokens import synthesize_tokens

PAPER_INPUT = LogNormalLength(9.90, 1.00, 128, 131072)


def generate(seed: int = 0, **overrides):
    settings = dict(
        arrival=PoissonArrivals(20.0),
        input_len=UniformLength(100, 5000),
        output_len=FixedLength(64),
        duration_s=100.0,
        seed=seed,
        max_requests=100_000,
        block_tokens=512,
    )
    return generate_requests(**{**settings, **overrides})


def test_requests_are_sorted_numbered_and_sized() -> None:
    requests = generate()
    assert abs(len(requests) - 2000) <= 5 * math.sqrt(2000)
    assert [r.id for r in requests[:3]] == ["rq-000001", "rq-000002", "rq-000003"]
    arrivals = [r.arrival_s for r in requests]
    assert arrivals == sorted(arrivals) and 0 <= arrivals[0] and arrivals[-1] < 100.0
    assert all(100 <= r.input_len <= 5000 and r.output_len == 64 for r in requests)
    assert all(len(r.block_hashes) == r.input_len // 512 for r in requests)


def test_same_seed_same_list_different_seed_different() -> None:
    assert generate(seed=3) == generate(seed=3)
    assert generate(seed=3) != generate(seed=4)


def test_cap_keeps_the_earliest_requests() -> None:
    capped = generate(seed=5, max_requests=50)
    assert capped == generate(seed=5)[:50]


def test_output_lengths_do_not_move_arrivals() -> None:
    """Each ingredient has its own stream: changing one leaves the others alone."""
    a = generate(seed=6)
    b = generate(seed=6, output_len=FixedLength(7))
    assert [r.arrival_s for r in a] == [r.arrival_s for r in b]
    assert [r.input_len for r in a] == [r.input_len for r in b]


def test_rate_changes_and_bursts_reach_the_arrivals() -> None:
    plain = generate(seed=7, rate_changes=[RateChange(50.0, 100.0)])
    late = sum(r.arrival_s >= 50.0 for r in plain)
    assert abs(late - 5000) <= 5 * math.sqrt(5000)
    with_burst = generate(seed=7, rate_changes=[RateChange(50.0, 100.0)],
                          bursts=[Burst(at_s=20.0, requests=40, over_s=4.0)])
    extra = sorted(set(r.arrival_s for r in with_burst) - set(r.arrival_s for r in plain))
    assert extra == pytest.approx([20.0 + 0.1 * i for i in range(40)])
    assert len(with_burst) == len(plain) + 40


def test_bursts_past_the_end_are_refused() -> None:
    with pytest.raises(ScenarioError, match="ends past duration_s"):
        generate(bursts=[Burst(at_s=99.0, requests=5, over_s=2.0)])


def test_prefix_sharing_gives_each_long_request_one_of_the_prefixes() -> None:
    sharing = PrefixSharing(num_prefixes=4, shared_blocks=8)
    requests = generate(seed=8, input_len=PAPER_INPUT, prefix_sharing=sharing)
    long = [r for r in requests if r.input_len // 512 >= 8]
    short = [r for r in requests if r.input_len // 512 < 8]
    assert len(long) > 1000 and short  # the paper distribution has both
    prefixes = {r.block_hashes[:8] for r in long}
    assert len(prefixes) == 4
    counts = [sum(r.block_hashes[:8] == p for r in long) for p in prefixes]
    assert min(counts) > len(long) / 4 * 0.8  # picked uniformly
    after = [r.block_hashes[8] for r in long if len(r.block_hashes) > 8]
    assert len(set(after)) == len(after)  # the rest is unique
    shared_first = {p[0] for p in prefixes}
    assert all(not r.block_hashes or r.block_hashes[0] not in shared_first for r in short)


def test_prefix_sharing_shares_real_tokens() -> None:
    sharing = PrefixSharing(num_prefixes=2, shared_blocks=3)
    requests = generate(seed=9, input_len=FixedLength(5 * 512 + 10), prefix_sharing=sharing,
                        max_requests=20)
    first = requests[0]
    twin = next(r for r in requests[1:] if r.block_hashes[:3] == first.block_hashes[:3])
    a, b = synthesize_tokens(first, 512, seed=0), synthesize_tokens(twin, 512, seed=0)
    np.testing.assert_array_equal(a[: 3 * 512], b[: 3 * 512])
    assert not np.array_equal(a[3 * 512 : 4 * 512], b[3 * 512 : 4 * 512])


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: PrefixSharing(0, 8), "prefix_sharing.num_prefixes"),
        (lambda: PrefixSharing(4, 0), "prefix_sharing.shared_blocks"),
        (lambda: generate(seed=-1), "seed"),
        (lambda: generate(max_requests=0), "max_requests"),
        (lambda: generate(block_tokens=0), "block_tokens"),
    ],
)
def test_bad_settings_name_the_field(make, field: str) -> None:
    with pytest.raises(ScenarioError, match=field.replace(".", r"\.")):
        make()
