"""A sweep's points, as a pure function of its spec: the grid (every combination of the axes'
levels), one axis at a time around the axes' centres (`oat`), or `samples` draws (independent
uniform, or Latin-hypercube: each axis's range cut into `samples` strata, one draw per stratum,
strata shuffled per axis), each crossed with the named configurations, the replicate seeds and
the engines. The same spec always gives the same points, ids and order. A point's scenario
(`make_point_scenario`) is the base with the point's axis values, then its configuration's bundle,
applied.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from dataclasses import dataclass

from emulator.errors import ScenarioError
from emulator.scenario import Scenario, apply_overrides
from emulator.sweep.levels import Value, axis_levels, picker
from emulator.sweep.spec import PAPER, Sweep, SweepSpec


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
    combos = grid(spec) if spec.mode == "grid" else one_at_a_time(spec) if spec.mode == "oat" else sample(spec)
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


def one_at_a_time(spec: SweepSpec) -> list[tuple[tuple[str, Value], ...]]:
    """The centre (every axis at its `center`), then each axis's levels in turn with the others at
    theirs: a figure's curves through one operating point, at a sum, not a product, of levels."""
    center = {path: axis.center for path, axis in spec.axes.items()}
    combos = [tuple(center.items())]
    for path, axis in spec.axes.items():
        combos += [tuple((center | {path: level}).items()) for level in axis_levels(axis) if level != axis.center]
    return combos  # type: ignore[return-value]


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
        pick = picker(axis)
        columns.append([pick(u) for u in strata])
    paths = list(spec.axes)
    return [tuple(zip(paths, row, strict=True)) for row in zip(*columns, strict=True)]


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
