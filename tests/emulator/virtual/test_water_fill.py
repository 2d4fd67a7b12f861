"""Water-filling against hand-worked max-min allocations: capped flows keep their caps, the rest
split what is left (by weight where weighted), and nothing exceeds the capacity."""

from __future__ import annotations

import math

import pytest

from emulator.virtual.water_fill import max_min, weighted_max_min


@pytest.mark.parametrize(("caps", "left", "want"), [
    ([1.0, 5.0, 5.0], 9.0, [1.0, 4.0, 4.0]),  # the small cap met, the others halve the rest
    ([1.0, 2.0, 10.0], 9.0, [1.0, 2.0, 6.0]),  # two caps met, the last takes what is left
    ([4.0, 4.0], 10.0, [4.0, 4.0]),  # every cap fits: each at its cap
    ([math.inf, math.inf, math.inf], 9.0, [3.0, 3.0, 3.0]),  # no cap binds: an equal split
    ([0.0, math.inf], 9.0, [0.0, 9.0]),  # a waiting flow takes nothing
    ([2.0, 3.0], math.inf, [2.0, 3.0]),  # an unshaped link: every cap
])
def test_max_min_meets_small_caps_first_and_splits_the_rest(caps, left, want) -> None:
    assert max_min(caps, sum(caps), left) == pytest.approx(want)


def test_weighted_max_min_splits_by_weight_after_the_caps_it_meets() -> None:
    # a newcomer at weight 0.1 beside two incumbents: 10 split 1 : 1 : 0.1
    assert weighted_max_min([math.inf] * 3, [1.0, 1.0, 0.1], 10.0) == pytest.approx([10 / 2.1, 10 / 2.1, 1 / 2.1])
    # the first incumbent capped at 1: the other and the newcomer split 9 as 1 : 0.1
    assert weighted_max_min([1.0, math.inf, math.inf], [1.0, 1.0, 0.1], 10.0) == pytest.approx(
        [1.0, 9 / 1.1, 0.9 / 1.1])
    assert sum(weighted_max_min([2.0, 50.0, 50.0], [1.0, 0.5, 0.25], 12.0)) == pytest.approx(12.0)
