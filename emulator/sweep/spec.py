"""A sweep file (`scenarios/sweeps/*.yaml`) as one frozen pydantic model, and its loading: a base
scenario, axes over `--set` paths, named configurations (override bundles), the sampling mode,
replicate seeds, engines, kept metrics and the optional capacity mode. Every problem is one
`path: problem; fix` line of a ScenarioError, as for scenarios. Expanding a sweep into points is
points.py's job; nothing here runs anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from emulator.errors import ScenarioError
from emulator.limits import (
    MAX_AXIS_VALUES,
    MAX_INTERVAL_S,
    MAX_REQUESTS,
    MAX_SCENARIO_BYTES,
    MAX_SEED,
    MAX_STEP_S,
    MAX_SWEEP_AXES,
    MAX_SWEEP_POINTS,
    MAX_SWEEP_SEEDS,
    MAX_SWEEP_SETS,
    MAX_TEXT_CHARS,
)
from emulator.scenario import Scenario, apply_overrides, load_scenario
from emulator.scenario.overrides import check_override_path, parse_override
from emulator.scenario.schema import read_scenario_text
from emulator.scenario.shared_data import may_read
from emulator.scenario.yaml_reader import LimitError, describe_yaml_error, load_yaml
from emulator.sweep.capacity import (
    DEFAULT_NUM_REQUESTS,
    MAX_PROBES,
    MIN_NUM_REQUESTS,
    CapacitySlo,
    check_searchable,
)
from emulator.sweep.levels import axis_levels, num_axis_levels
from emulator.telemetry.records import summarize
from emulator.validation import format_validation_error

# What an analytic point reports (point.py flattens optimize_scenario's JSON into these keys); the
# virtual engine's keys are the run summary's scalar figures (records.summarize).
ANALYTIC_METRICS = ("lambda_max", "t", "p", "n_prfaas", "n_p", "n_d", "egress_gbps", "ttft_noqueue_mean_s",
                    "ttft_noqueue_p90_s", "gain_vs_homogeneous", "gain_vs_naive", "homogeneous_lambda_max",
                    "naive_lambda_max", "configured_lambda_max", "configured_t", "configured_n_p",
                    "configured_egress_gbps", "configured_p", "configured_theta_prfaas", "configured_theta_pd_p",
                    "configured_theta_pd_d", "configured_lambda_max_mean_t")
# What a virtual point measures of the model's stage throughputs (point.measured_throughputs).
MEASURED_METRICS = ("measured_p", "measured_theta_prfaas", "measured_theta_pd_p", "measured_theta_pd_d",
                    "measured_lambda_max")
VIRTUAL_METRICS = tuple(k for k, v in summarize([], 0.0).items() if not isinstance(v, dict)) + MEASURED_METRICS
DEFAULT_METRICS = ("ttft_p50_s", "ttft_p90_s", "tpot_mean_s", "throughput_rps", "completed_fraction",
                   "prfaas_fraction", "egress_gbps_mean", "lambda_max", "t", "n_p", "egress_gbps")
# What a virtual point reports in capacity mode (point.py, from capacity.find_capacity):
# capacity_converged is 1.0 or 0.0 (metric columns are numbers).
CAPACITY_METRICS = ("capacity_rps", "lambda_max_model", "capacity_ratio", "capacity_probes", "capacity_converged")
CAPACITY_DEFAULT_METRICS = CAPACITY_METRICS + tuple(m for m in DEFAULT_METRICS if m in ANALYTIC_METRICS)
# set by `seeds:`, `engines:` and `configurations:`, not by an axis
RESERVED_PATHS = ("seed", "engine", "configuration")
PAPER = "paper"  # a configuration computed by virtual.baselines.configuration_overrides per point
Engine = Literal["virtual", "analytic"]
Level = int | float | str | bool
# A number as written: `1` stays an int (a range of ints gives ints), `1.0` a float.
Number = Annotated[Annotated[int, Field(strict=True)] | float, Field(union_mode="left_to_right")]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Range(Section):
    """Evenly spaced levels from start to stop, stop included when it falls on a step. `step` is
    needed for a grid; random and LHS sampling draw from the whole interval."""

    start: Number
    stop: Number
    step: Annotated[Number, Field(gt=0)] | None = None

    @model_validator(mode="after")
    def _ordered(self) -> Range:
        if self.stop < self.start:
            raise ValueError(f"stop {self.stop} is below start {self.start}; swap them")
        if self.step is not None and (self.stop - self.start) / self.step >= MAX_AXIS_VALUES:
            raise ValueError(f"more than {MAX_AXIS_VALUES:,} levels; use a larger step")
        return self


class LogRange(Section):
    """`num` levels spaced evenly in log from start to stop, both included (numpy's geomspace)."""

    start: Annotated[Number, Field(gt=0)]
    stop: Annotated[Number, Field(gt=0)]
    num: Annotated[int, Field(strict=True, ge=2, le=MAX_AXIS_VALUES)] | None = None

    @model_validator(mode="after")
    def _ordered(self) -> LogRange:
        if self.stop < self.start:
            raise ValueError(f"stop {self.stop} is below start {self.start}; swap them")
        return self


class Axis(Section):
    """One scenario path and its levels: exactly one of `values`, `range` or `log_range`; in mode
    `oat` also its `center`, the level it keeps while another axis moves."""

    values: Annotated[list[Annotated[Level, Field(union_mode="left_to_right")]],
                      Field(min_length=1, max_length=MAX_AXIS_VALUES)] | None = None
    range: Range | None = None
    log_range: LogRange | None = None
    center: Annotated[Level, Field(union_mode="left_to_right")] | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Axis:
        given = [k for k in ("values", "range", "log_range") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"gives {', '.join(given) or 'nothing'}; give exactly one of values, "
                             "range or log_range")
        if self.values is not None and any(isinstance(v, str) and len(v) > 200 for v in self.values):
            raise ValueError("a value of more than 200 characters; shorten it")
        return self


Path_ = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$")]
Name = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,63}$")]
SetItem = Annotated[str, Field(max_length=1_000)]
Bundle = Literal["paper"] | Annotated[list[SetItem], Field(max_length=MAX_SWEEP_SETS)]


class CapacitySection(Section):
    """Capacity mode: each virtual point is a capacity search (capacity.find_capacity: the highest
    arrival rate meeting this SLO, by bisection) instead of one run. The SLO is bounded as
    capacity.CapacitySlo is; the search knobs as find_capacity's arguments."""

    ttft_p90_s: Annotated[float, Field(gt=0, le=MAX_INTERVAL_S)]
    tpot_mean_s: Annotated[float, Field(gt=0, le=MAX_STEP_S)] | None = None
    rel_tolerance: Annotated[float, Field(gt=0, lt=1)] = 0.05
    max_probes: Annotated[int, Field(strict=True, ge=1, le=MAX_PROBES)] = 12
    num_requests: Annotated[int, Field(strict=True, ge=MIN_NUM_REQUESTS, le=MAX_REQUESTS)] = DEFAULT_NUM_REQUESTS

    def slo(self) -> CapacitySlo:
        return CapacitySlo(self.ttft_p90_s, self.tpot_mean_s)


class SweepSpec(Section):
    """A whole sweep file. Points = levels (grid product, or `samples` draws) x configurations x
    seeds x engines.

    `configurations` (optional) is an axis named `configuration` whose levels are named override
    bundles: a list of `--set` items, or `paper` for the paper's configuration of that name
    (prfaas, homogeneous, naive), which virtual.baselines.configuration_overrides computes for each
    point's scenario. A bundle applies after the axes (it wins) and may not set an axis's path;
    random and LHS draws are each crossed with every configuration.

    `capacity` (optional) turns each virtual point into a capacity search; analytic points are
    unchanged. Metrics then follow one rule: a virtual point has the CAPACITY_METRICS and no run
    summary, so `metrics` may name only capacity and analytic figures, and defaults to
    CAPACITY_METRICS (and CAPACITY_DEFAULT_METRICS' analytic figures when `engines` has analytic)."""

    name: Name
    description: Annotated[str, Field(max_length=MAX_TEXT_CHARS)] = ""
    base: Annotated[str, Field(min_length=1, max_length=1_000)]
    set: Annotated[list[SetItem], Field(max_length=MAX_SWEEP_SETS)] = []
    axes: Annotated[dict[Path_, Axis], Field(max_length=MAX_SWEEP_AXES)] = {}
    configurations: Annotated[dict[Name, Bundle], Field(min_length=1, max_length=MAX_AXIS_VALUES)] | None = None
    mode: Literal["grid", "oat", "random", "lhs"] = "grid"
    samples: Annotated[int, Field(strict=True, ge=1, le=MAX_SWEEP_POINTS)] | None = None
    seed: Annotated[int, Field(strict=True, ge=0, le=MAX_SEED)] = 0
    seeds: Annotated[list[Annotated[int, Field(strict=True, ge=0, le=MAX_SEED)]],
                     Field(min_length=1, max_length=MAX_SWEEP_SEEDS)] = [0]
    engines: Annotated[list[Engine], Field(min_length=1, max_length=2)] = ["virtual"]
    metrics: Annotated[list[str], Field(min_length=1, max_length=len(VIRTUAL_METRICS) + len(ANALYTIC_METRICS)
                                        + len(CAPACITY_METRICS))] = list(DEFAULT_METRICS)
    capacity: CapacitySection | None = None

    @model_validator(mode="before")
    @classmethod
    def _capacity_metrics(cls, data: Any) -> Any:
        """In capacity mode the default metrics are the capacity figures (see the class docstring)."""
        if isinstance(data, dict) and data.get("capacity") is not None and "metrics" not in data:
            engines = data.get("engines")
            has_analytic = isinstance(engines, list) and "analytic" in engines
            return {**data, "metrics": list(CAPACITY_DEFAULT_METRICS if has_analytic else CAPACITY_METRICS)}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> SweepSpec:
        for key, items in (("seeds", self.seeds), ("engines", self.engines), ("metrics", self.metrics)):
            if len(set(items)) != len(items):
                raise ValueError(f"{key} repeats an item; list each once")
        if not self.axes and not self.configurations:
            raise ValueError("axes: none given; add an axis (or configurations)")
        if reserved := [p for p in self.axes if p in RESERVED_PATHS]:
            raise ValueError(f"axes: {reserved[0]} is set by `{reserved[0]}s:`; remove the axis")
        self._check_metrics()
        self._check_configurations()
        if self.mode in ("grid", "oat"):
            self._check_grid()
        elif self.samples is None:
            raise ValueError(f"mode {self.mode} needs samples; add samples: N")
        elif not self.axes:
            raise ValueError(f"mode {self.mode} draws from the axes, and there are none; add one or use mode: grid")
        num = self.num_levels() * len(self.seeds) * len(self.engines)
        if num > MAX_SWEEP_POINTS:
            raise ValueError(f"{num:,} points (levels x seeds x engines) is more than {MAX_SWEEP_POINTS:,}; "
                             "use fewer levels, seeds or samples")
        return self

    def _check_metrics(self) -> None:
        known = (CAPACITY_METRICS if self.capacity else VIRTUAL_METRICS) + ANALYTIC_METRICS
        if unknown := [m for m in self.metrics if m not in known]:
            if self.capacity and unknown[0] in VIRTUAL_METRICS:
                raise ValueError(f"metrics: {unknown[0]!r} is a run summary's, and capacity mode runs searches; "
                                 f"use some of {', '.join(known)}")
            if unknown[0] in CAPACITY_METRICS:
                raise ValueError(f"metrics: {unknown[0]!r} is a capacity search's; add a capacity: section "
                                 "or drop it")
            raise ValueError(f"metrics: {unknown[0]!r} is no summary figure; use some of {', '.join(known)}")

    def _check_configurations(self) -> None:
        for name, bundle in (self.configurations or {}).items():
            if bundle == PAPER:
                continue
            for item in bundle:
                try:
                    path = parse_override(item)[0]
                except ScenarioError as err:
                    raise ValueError(f"configurations.{name}: {str(err).removeprefix('--set ')}") from None
                if path in self.axes or path in RESERVED_PATHS:
                    raise ValueError(f"configurations.{name}: sets {path}, which an axis or `seeds:` sets; "
                                     "set it in one place")

    def _check_grid(self) -> None:
        if self.samples is not None:
            raise ValueError("samples is for mode random or lhs; remove it, or set mode: lhs")
        for path, axis in self.axes.items():
            if self.mode == "oat" and axis.center is None:
                raise ValueError(f"axes.{path}: mode oat moves one axis at a time around each axis's center; "
                                 "add center: LEVEL")
            if self.mode != "oat" and axis.center is not None:
                raise ValueError(f"axes.{path}.center: only mode oat has centers; remove it, or set mode: oat")
            if axis.range is not None and axis.range.step is None:
                raise ValueError(f"axes.{path}.range: a grid needs a step; add step")
            if axis.log_range is not None and axis.log_range.num is None:
                raise ValueError(f"axes.{path}.log_range: a grid needs num; add num")

    def num_levels(self) -> int:
        """Points per seed and engine: the grid's product (or the samples drawn) x configurations."""
        if self.mode == "grid":
            per_configuration = math.prod(num_axis_levels(axis) for axis in self.axes.values())
        elif self.mode == "oat":  # the centre, then each axis's levels (its centre among them counted once)
            per_configuration = 1 + sum(num_axis_levels(axis) - (axis.center in axis_levels(axis))
                                        for axis in self.axes.values())
        else:
            per_configuration = self.samples or 0
        return per_configuration * len(self.configurations or [None])

    @property
    def axis_names(self) -> list[str]:
        """The columns a point's values fill: `configuration` (when given), then the axes' paths."""
        return (["configuration"] if self.configurations else []) + list(self.axes)


@dataclass(frozen=True, slots=True)
class Sweep:
    """A loaded sweep: the spec, the file it came from and its text, and the base scenario file."""

    spec: SweepSpec
    path: Path
    text: str
    base_path: Path
    base_text: str

    def base_scenario(self) -> Scenario:
        return apply_overrides(load_scenario(self.base_path), self.spec.set)


def is_sweep_document(data: Any) -> bool:
    """A sweep file has a top-level `axes:`, `configurations:` or `base:`; a scenario never does."""
    return isinstance(data, dict) and any(key in data for key in ("axes", "configurations", "base"))


def read_document(path: Path) -> tuple[str, Any]:
    """(text, YAML document) of a sweep or scenario file, bounded as scenarios are read."""
    text = read_scenario_text(path)
    try:
        return text, load_yaml(text)
    except yaml.YAMLError as err:
        line, problem = describe_yaml_error(err)
        where = f"{path}:{line}" if line else str(path)
        if isinstance(err, LimitError):
            raise ScenarioError(f"{where}: {problem}") from None
        raise ScenarioError(f"{where}: YAML syntax error ({problem}); fix the syntax on that line") from None


def load_sweep(path: str | Path) -> Sweep:
    """Read and check a sweep file: the schema, the base scenario (with `set:` applied) and that
    each axis names a scenario path. Axis values are checked per point, when the point runs."""
    path = Path(path)
    text, data = read_document(path)
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: the top level is {type(data).__name__}, not a mapping; "
                            "start the file with `name: ...`")
    spec = parse_sweep(data)
    base_path = (path.resolve().parent / spec.base).resolve()
    if not may_read(base_path, trusted_dir=path.resolve().parent):
        raise ScenarioError(f"base: {spec.base} lies outside the folders a sweep may read; "
                            "put the scenario beside the sweep file or in the repository")
    sweep = Sweep(spec, path, text, base_path, read_scenario_text(base_path)[:MAX_SCENARIO_BYTES])
    base = sweep.base_scenario()
    problems = []
    for axis_path in spec.axes:
        try:
            check_override_path(base, axis_path)
        except ScenarioError as err:
            problems.append(f"axes.{str(err).removeprefix('--set ')}")
    problems += _configuration_problems(spec, base)
    if spec.capacity is not None:
        problems += _capacity_problems(spec, base)
    if problems:
        raise ScenarioError("\n".join(problems))
    return sweep


def _configuration_problems(spec: SweepSpec, base: Scenario) -> list[str]:
    """A `paper` bundle names one of the paper's configurations; a listed bundle applies to the base."""
    from emulator.virtual.baselines import CONFIGS  # the engine: only when a sweep file is loaded

    problems = []
    for name, bundle in (spec.configurations or {}).items():
        if bundle == PAPER:
            if name not in CONFIGS:
                problems.append(f"configurations.{name}: `paper` names one of the paper's configurations; "
                                f"use {', '.join(CONFIGS)}, or list its --set items")
            continue
        try:
            apply_overrides(base, list(bundle))
        except ScenarioError as err:
            problems.append(f"configurations.{name}: {'; '.join(str(err).removeprefix('--set ').splitlines())}")
    return problems


def _capacity_problems(spec: SweepSpec, base: Scenario) -> list[str]:
    """Capacity mode sets the arrival rate itself: the base needs one, and no axis may set it."""
    problems = [f"axes.{path}: capacity mode searches the arrival rate; remove the axis"
                for path in spec.axes if path.startswith("workload.arrival")]
    try:
        check_searchable(base)
    except ScenarioError as err:
        problems.append(f"capacity: {err}")
    return problems


def parse_sweep(data: dict) -> SweepSpec:
    try:
        return SweepSpec.model_validate(data)
    except ValidationError as err:
        # a whole-file rule's message names its own field; drop the model name put before it
        lines = format_validation_error(err, "", model=SweepSpec).splitlines()
        raise ScenarioError("\n".join(line.removeprefix("SweepSpec: ") for line in lines)) from None
