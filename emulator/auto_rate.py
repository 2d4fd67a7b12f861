"""`workload.arrival.rate_per_s: auto`: the arrival rate sized to what the run's workers sustain.

A demo must fit the machine it runs on: a class on a 2-core laptop should see queues only where a
step is about queues. `auto` resolves, once at the start of a run, to AUTO_LOAD of the workers'
capacity: Eq. 6 of the throughput model with each path's mean service time (mean_service_lambda),
over the prefill and decode workers only (the link is what a scenario studies, not the machine),
at the tightest threshold, split and policy the scenario's timeline sets. The live engine measures
its workers first (emulator/live/calibration.py); the virtual engine takes the profile's model.
Pure: the engines pass in what they measured.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from emulator.control.profiles import PiecewiseLinear
from emulator.control.throughput_model import ModelInputs, mean_service_lambda
from emulator.control.types import RoutePolicy
from emulator.errors import ScenarioError
from emulator.limits import MAX_RATE_PER_S, MIN_RATE_PER_S
from emulator.plane import ControlPlane
from emulator.scenario import Scenario
from emulator.scenario.workload import AUTO_RATE
from emulator.workload.coverage import WorkloadCoverage
from model_stub.config import get_preset
from model_stub.flops import prefill_flops

AUTO_LOAD = 0.6  # the share of capacity `auto` offers: queues stay short, as M/M/1 at rho 0.6 does
NO_LINK_BYTES_PER_S = sys.float_info.max  # the egress term never binds: the link is not the machine


class RateSource(StrEnum):
    MEASURED = "measured"  # the live engine timed its own workers at start
    MODELLED = "modelled"  # the scenario's profile (or a preset's estimate), as the virtual engine charges


@dataclass(frozen=True, slots=True)
class ResolvedRate:
    """What `auto` became in one run, and why: recorded in summary.json (meta.workload.arrival_rate)."""

    rate_per_s: float
    capacity_per_s: float
    target_load: float
    source: RateSource
    how: str  # one phrase: what was measured or modelled

    @property
    def statement(self) -> str:
        return (f"arrival rate auto = {self.rate_per_s:.3g}/s, {self.target_load:.0%} of the "
                f"{self.capacity_per_s:.3g}/s the workers sustain ({self.source.value}: {self.how})")

    def as_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "source": self.source.value, "statement": self.statement}


def is_auto(scenario: Scenario) -> bool:
    arrival = scenario.workload.arrival
    return arrival is not None and arrival.rate_per_s == AUTO_RATE


def _states(scenario: Scenario, plane: ControlPlane) -> list[tuple[float, int]]:
    """(threshold, local prefill instances) at the start and after each timeline `set`; a threshold
    of inf sends everything local (local-only), -1 everything remote (all-remote)."""
    threshold, n_p, policy = float(plane.threshold), plane.n_p, scenario.router.policy
    states = []
    for values in [{}, *(e.set for e in scenario.timeline if e.set is not None)]:
        if (t := values.get("router.threshold_tokens")) is not None:
            threshold = float(plane.state.auto_threshold if t == "auto" else t)
        n_p = values.get("clusters.local.prefill_instances", n_p)
        policy = RoutePolicy(values.get("router.policy", policy))
        routed = {RoutePolicy.LOCAL_ONLY: math.inf, RoutePolicy.ALL_REMOTE: -1.0}.get(policy, threshold)
        states.append((routed, int(n_p)))
    return states


def capacity_per_s(scenario: Scenario, plane: ControlPlane, inputs: ModelInputs | None = None) -> float:
    """Requests per second the workers sustain at the tightest state the timeline sets; `inputs`
    default to the plane's (the profile the virtual engine charges)."""
    unlinked = dataclasses.replace(inputs or plane.inputs, egress_bytes_per_s=NO_LINK_BYTES_PER_S)
    return min(mean_service_lambda(unlinked, t, n_p) for t, n_p in _states(scenario, plane))


def resolve(scenario: Scenario, capacity: float, source: RateSource, how: str) -> tuple[Scenario, ResolvedRate]:
    """`scenario` with `auto` replaced by AUTO_LOAD x `capacity`, within the rate bounds."""
    if not math.isfinite(capacity) or capacity <= 0:
        raise ScenarioError(f"workload.arrival.rate_per_s: auto found no capacity ({capacity}/s from {how}); "
                            "give a number of requests per second")
    rate = min(max(AUTO_LOAD * capacity, MIN_RATE_PER_S), MAX_RATE_PER_S)
    return with_rate(scenario, rate), ResolvedRate(rate, capacity, AUTO_LOAD, source, how)


def with_rate(scenario: Scenario, rate_per_s: float) -> Scenario:
    """The same scenario at a fixed arrival rate, which the caller has bounded (not revalidated: the
    files the scenario names were checked when it was loaded, against its own folder)."""
    workload = scenario.workload
    arrival = workload.arrival.model_copy(update={"rate_per_s": float(rate_per_s)})
    return scenario.model_copy(update={"workload": workload.model_copy(update={"arrival": arrival})})


def modelled_rate(scenario: Scenario, plane: ControlPlane) -> tuple[Scenario, ResolvedRate]:
    """The virtual engine's meaning of `auto`: AUTO_LOAD of the capacity its own cost model gives."""
    return resolve(scenario, capacity_per_s(scenario, plane), RateSource.MODELLED, plane.profile_source)


def fitted_curve(lengths: tuple[int, ...], seconds: tuple[float, ...], flops: Mapping[int, float],
                 grid: tuple[int, ...]) -> PiecewiseLinear:
    """T_prefill over `grid` from prefills timed at `lengths`: a + b x FLOPs(l), fitted through the
    shortest and longest timed points (the fixed cost of a request plus the model's own shape), or
    proportional to FLOPs when the points disagree (b <= 0: noise on a busy machine)."""
    (l1, t1), (l2, t2) = (lengths[0], seconds[0]), (lengths[-1], seconds[-1])
    slope = (t2 - t1) / (flops[l2] - flops[l1]) if flops[l2] > flops[l1] else 0.0
    if slope <= 0:
        slope, fixed = max(seconds) / flops[l2], 0.0
    else:
        fixed = max(t1 - slope * flops[l1], 0.0)
    xs = np.array(sorted(set(grid)), dtype=float)
    return PiecewiseLinear(tuple(xs), tuple(fixed + slope * flops[int(x)] for x in xs))


def with_arrival_rate(coverage: WorkloadCoverage, rate: ResolvedRate) -> WorkloadCoverage:
    """The workload's record, stating what `auto` became (CLI, summary.json, the Live and Runs pages)."""
    return dataclasses.replace(coverage, arrival_rate=rate.as_json())


def measured_inputs(scenario: Scenario, plane: ControlPlane, lengths: tuple[int, ...],
                    local_s: tuple[float, ...], remote_s: tuple[float, ...], decode_step_s: float) -> ModelInputs:
    """The plane's inputs with each cluster's T_prefill fitted to prefills timed at `lengths` and the
    timed decode step; a cluster's speed factor below 1 holds its results back, so it divides."""
    config = get_preset(scenario.model.preset, scenario.model.preset_size)
    inputs = plane.inputs
    grid = tuple(sorted({1, *lengths, *(round(x) for x in inputs.prefill_local_s.xs),
                         round(float(inputs.lengths.values[-1]))}))
    flops = {n: float(prefill_flops(config, n)) for n in {*grid, *lengths}}
    local, remote = scenario.clusters.local, scenario.clusters.remote

    def curve(seconds: tuple[float, ...], speed_factor: float) -> PiecewiseLinear:
        return fitted_curve(lengths, tuple(s / min(speed_factor, 1.0) for s in seconds), flops, grid)

    return dataclasses.replace(inputs, prefill_local_s=curve(local_s, local.speed_factor),
                               prefill_remote_s=curve(remote_s, remote.speed_factor),
                               decode_step_s=decode_step_s / min(local.speed_factor, 1.0))


def recorded_rate(meta: Mapping[str, Any]) -> float | None:
    """The rate `auto` resolved to in a recorded run (summary.json's meta), or None."""
    workload = meta.get("workload")
    rate = workload.get("arrival_rate") if isinstance(workload, Mapping) else None
    value = rate.get("rate_per_s") if isinstance(rate, Mapping) else None
    return float(value) if isinstance(value, int | float) and MIN_RATE_PER_S <= value <= MAX_RATE_PER_S else None
