"""A sweep's points, as a pure function of its spec: the grid (every combination of the axes'
levels), or `samples` draws (independent uniform, or Latin-hypercube: each axis's range cut into
`samples` strata, one draw per stratum, strata shuffled per axis), each crossed with the named
configurations, the replicate seeds and the engines. The same spec always gives the same points,
ids and order. A point's scenario (`make_point_scenario`) is the base with the point's axis
values, then its configuration's bundle, applied.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from emulator.errors import ScenarioError
from emulator.scenario import Scenario, apply_overrides
from emulator.sweep.spec import PAPER, Axis, Sweep, SweepSpec, num_axis_levels

Value = int | float | str | bool


@dataclass(frozen=True, slots=True)
class Point:
    """One run of a sweep: the axis values (`configuration` first when the sweep names some, then
    the file's axis order), the scenario seed, the engine."""

    point_id: str
    values: tuple[tuple[str, Value], ...]
    seed: int
    engine: str

    @property
    def configuration(self) -> str | None:
        return next((str(v) for path, v in self.values if path == "configuration"), None)

    def overrides(self) -> list[str]:
        """The `--set` items of the axis values and the seed (a configuration's bundle is
        make_point_scenario's to add)."""
        return [f"{path}={json.dumps(value)}" for path, value in self.values if path != "configuration"] \
            + [f"seed={self.seed}"]


def point_id(values: tuple[tuple[str, Value], ...], seed: int, engine: str) -> str:
    """A stable 16-hex-digit id of the axis values, seed and engine (what resuming matches on)."""
    doc = json.dumps({"axes": [[p, v] for p, v in values], "seed": seed, "engine": engine},
                     sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(doc.encode()).hexdigest()[:16]


def expand(spec: SweepSpec) -> list[Point]:
    """Every point of the sweep, without duplicates (random draws of listed values may repeat)."""
    combos = grid(spec) if spec.mode == "grid" else sample(spec)
    if spec.configurations:
        combos = [(("configuration", name), *combo) for name in spec.configurations for combo in combos]
    points, seen = [], set()
    for combo in combos:
        for seed in spec.seeds:
            for engine in spec.engines:
                pid = point_id(combo, seed, engine)
                if pid not in seen:
                    seen.add(pid)
                    points.append(Point(pid, combo, seed, engine))
    return points


def grid(spec: SweepSpec) -> list[tuple[tuple[str, Value], ...]]:
    paths = list(spec.axes)
    levels = [axis_levels(axis) for axis in spec.axes.values()]
    return [tuple(zip(paths, combo, strict=True)) for combo in itertools.product(*levels)]


def axis_levels(axis: Axis) -> list[Value]:
    """An axis's grid levels; a range written in integers gives integers, floats are rounded to 12
    significant digits so 0.1 + 0.2 reads 0.3."""
    if axis.values is not None:
        return list(axis.values)
    num = num_axis_levels(axis)
    pick = _picker(axis)
    return [pick(i / (num - 1) if num > 1 else 0.0) for i in range(num)] if axis.log_range else \
        [_number(axis.range.start + i * (axis.range.step or 0.0), _is_int_range(axis)) for i in range(num)]


def sample(spec: SweepSpec) -> list[tuple[tuple[str, Value], ...]]:
    """`samples` draws, seeded by the spec's `seed`: uniform per axis, or one per stratum (LHS)."""
    rng = random.Random(spec.seed)
    num = spec.samples or 0
    columns = []
    for axis in spec.axes.values():
        if spec.mode == "lhs":
            strata = [(i + rng.random()) / num for i in range(num)]
            rng.shuffle(strata)
        else:
            strata = [rng.random() for _ in range(num)]
        pick = _picker(axis)
        columns.append([pick(u) for u in strata])
    paths = list(spec.axes)
    return [tuple(zip(paths, row, strict=True)) for row in zip(*columns, strict=True)]


def _picker(axis: Axis) -> Callable[[float], Value]:
    """u in [0, 1] -> a level: a listed value (by stratum), a point of the range, or of the log range."""
    if axis.values is not None:
        values = axis.values
        return lambda u: values[min(int(u * len(values)), len(values) - 1)]
    if axis.range is not None:
        r, is_int = axis.range, _is_int_range(axis)
        return lambda u: _number(r.start + u * (r.stop - r.start), is_int)
    lr = axis.log_range
    assert lr is not None
    is_int = isinstance(lr.start, int) and isinstance(lr.stop, int)
    low, high = math.log(lr.start), math.log(lr.stop)
    return lambda u: _number(math.exp(low + u * (high - low)), is_int)


def _is_int_range(axis: Axis) -> bool:
    r = axis.range
    assert r is not None
    return all(isinstance(x, int) for x in (r.start, r.stop, r.step or 1))


def _number(x: float, is_int: bool) -> Any:
    return int(round(x)) if is_int else float(f"{x:.12g}")


def make_point_scenario(base: Scenario, spec: SweepSpec, point: Point) -> Scenario:
    """`base` (the sweep's base after `set:`) with the point's axis values and seed, then its
    configuration's bundle: the listed `--set` items, or for `paper` the paper's configuration
    of that name computed on the scenario so far (so it follows the axes, e.g. the optimizer's
    homogeneous split for the point's profile)."""
    scenario = apply_overrides(base, point.overrides())
    name = point.configuration
    if name is None or spec.configurations is None:
        return scenario
    bundle = spec.configurations[name]
    if bundle == PAPER:
        from emulator.virtual.baselines import configuration_overrides  # the engine: only when a point runs

        return apply_overrides(scenario, configuration_overrides(scenario, name))
    return apply_overrides(scenario, list(bundle))


def point_scenario(sweep: Sweep, point_id: str) -> Scenario:
    """The scenario one point of `sweep` ran (its base, `set:`, the point's values, seed and
    configuration), for saving it as a file that `python -m emulator run` replays; ScenarioError
    for an unknown id."""
    point = next((p for p in expand(sweep.spec) if p.point_id == point_id), None)
    if point is None:
        raise ScenarioError(f"point {point_id!r}: not a point of sweep {sweep.spec.name}; pick one of its rows")
    return make_point_scenario(sweep.base_scenario(), sweep.spec, point)
