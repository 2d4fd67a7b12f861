"""Expanding a sweep into points: a pure function, the same spec giving the same points and ids."""

from __future__ import annotations

from emulator.sweep.points import Point, expand, point_id
from emulator.sweep.spec import SweepSpec


def spec(**fields: object) -> SweepSpec:
    return SweepSpec.model_validate({"name": "t", "base": "x.yaml", **fields})


def axes_of(points: list[Point]) -> list[dict[str, object]]:
    return [dict(p.values) for p in points]


def test_grid_is_the_product_times_seeds_and_engines() -> None:
    s = spec(axes={"a": {"values": [1, 2, 3]}, "b": {"range": {"start": 0.1, "stop": 0.3, "step": 0.1}}},
             seeds=[0, 1], engines=["virtual", "analytic"])
    points = expand(s)
    assert len(points) == 3 * 3 * 2 * 2 == s.num_levels() * 4
    assert len({p.point_id for p in points}) == len(points)
    assert sorted({p.values[1][1] for p in points}) == [0.1, 0.2, 0.3]  # rounded, stop included


def test_integer_range_and_log_range_levels() -> None:
    points = expand(spec(axes={"n": {"range": {"start": 2, "stop": 8, "step": 3}},
                               "bw": {"log_range": {"start": 1, "stop": 1000, "num": 4}}}))
    assert sorted({p.values[0][1] for p in points}) == [2, 5, 8]
    assert sorted({p.values[1][1] for p in points}) == [1, 10, 100, 1000]


def test_random_and_lhs_are_reproducible_by_seed_and_bounded() -> None:
    axes = {"rate": {"range": {"start": 1.0, "stop": 3.5}}, "t": {"log_range": {"start": 1000, "stop": 64000}}}
    for mode in ("random", "lhs"):
        first = expand(spec(axes=axes, mode=mode, samples=20, seed=7))
        assert first == expand(spec(axes=axes, mode=mode, samples=20, seed=7))
        assert axes_of(first) != axes_of(expand(spec(axes=axes, mode=mode, samples=20, seed=8)))
        assert len(first) == 20
        assert all(1.0 <= v["rate"] <= 3.5 and 1000 <= v["t"] <= 64000 for v in axes_of(first))


def test_lhs_puts_one_sample_in_each_stratum() -> None:
    points = expand(spec(axes={"u": {"range": {"start": 0.0, "stop": 1.0}}}, mode="lhs", samples=10, seed=3))
    assert sorted(int(v["u"] * 10) for v in axes_of(points)) == list(range(10))


def test_random_draws_of_listed_values_are_deduplicated() -> None:
    points = expand(spec(axes={"a": {"values": [1, 2]}}, mode="random", samples=50, seed=0))
    assert sorted(v["a"] for v in axes_of(points)) == [1, 2]


def test_point_id_is_stable_and_overrides_set_the_values_and_seed() -> None:
    point = expand(spec(axes={"router.threshold_tokens": {"values": ["auto", 8000]}}, seeds=[3]))[0]
    assert point.point_id == point_id((("router.threshold_tokens", "auto"),), 3, "virtual") == "c4c735405b558a47"
    assert point.overrides() == ['router.threshold_tokens="auto"', "seed=3"]


def test_one_at_a_time_moves_each_axis_around_the_centre() -> None:
    s = spec(axes={"n": {"range": {"start": 1, "stop": 4, "step": 1}, "center": 3},
                   "t": {"values": [1000, 8000], "center": 19620}}, mode="oat", seeds=[0, 1])
    points = expand(s)
    combos = axes_of(points[::2])  # seeds alternate
    assert combos == [{"n": 3, "t": 19620},  # the centre once, then n at the centre t, t at the centre n
                      {"n": 1, "t": 19620}, {"n": 2, "t": 19620}, {"n": 4, "t": 19620},
                      {"n": 3, "t": 1000}, {"n": 3, "t": 8000}]
    assert len(points) == s.num_levels() * 2 == 12 and len({p.point_id for p in points}) == 12
