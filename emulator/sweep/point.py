"""Runs one sweep point in this process and returns its flat row: the virtual engine's run summary
(records.summarize over the simulated records, as `run` writes summary.json), in capacity mode its
capacity search (capacity.find_capacity), or the analytic engine's optimum (optimize_scenario),
cut to the kept metrics. A point that raises is a failed row with a one-line reason. Knows
nothing of Ray: the runner calls this inside a task.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from emulator.analytic import optimize_scenario
from emulator.control.types import Route
from emulator.scenario import Scenario, apply_overrides, load_scenario
from emulator.sweep.capacity import find_capacity
from emulator.sweep.points import Point, make_point_scenario
from emulator.sweep.spec import CapacitySection, SweepSpec
from emulator.telemetry.records import RequestRecord, summarize

MAX_REASON_CHARS = 500
OK, FAILED = "ok", "failed"


def run_point(base_path: str | Path, spec: SweepSpec, point: Point) -> dict[str, Any]:
    """The row of `point` of the sweep `spec` over the scenario at `base_path`: point_id, its axis
    values, seed, engine, each kept metric (None where the engine has no such figure), status,
    reason and wall_s. Never raises for a bad point."""
    started = time.perf_counter()
    metrics = spec.metrics
    row: dict[str, Any] = {"point_id": point.point_id, **dict(point.values), "seed": point.seed,
                           "engine": point.engine}
    try:
        base = apply_overrides(load_scenario(base_path), list(spec.set))
        scenario = make_point_scenario(base, spec, point)
        figures = engine_figures(scenario, point.engine, spec.capacity)
        row |= {m: _number(figures.get(m)) for m in metrics}
        row |= {"status": OK, "reason": None}
    except Exception as err:  # a point's failure is data: the sweep records it and goes on
        row |= {m: None for m in metrics}
        row |= {"status": FAILED, "reason": one_line(err)}
    row["wall_s"] = time.perf_counter() - started
    return row


def engine_figures(scenario: Scenario, engine: str, capacity: CapacitySection | None = None) -> dict[str, Any]:
    """Every figure one engine reports for `scenario`, flat; a virtual point under `capacity`
    reports its capacity search instead of one run."""
    if engine == "virtual" and capacity is not None:
        return capacity_figures(scenario, capacity)
    if engine == "virtual":
        from emulator.virtual.engine import run_duration_s, simulate  # the compiled build, when current

        records = simulate(scenario).records
        return summarize(records, run_duration_s(records)) | measured_throughputs(records, scenario)
    return flatten(optimize_scenario(scenario))


def measured_throughputs(records: list[RequestRecord], scenario: Scenario) -> dict[str, float | None]:
    """Eq. 3-6's stage throughputs as a run measured them, for the paper's figures: each path's
    instances over its requests' mean service time (Theta = N / E[T], where the model takes
    N / T(E[L]) and so reads a little high where T_prefill is convex), the decode pool's slots
    over the mean time a request holds one, and Lambda_max = min(Theta_prfaas / p,
    Theta_pd_p / (1 - p), Theta_pd_d) with p the routed share. Meaningful below saturation and with
    the split fixed (`clusters.local.prefill_instances`); None where a figure has no data, and
    Lambda_max None unless every path it needs has one. Service times do not see the link: where
    Eq. 3's bandwidth term binds, Theta_prfaas here is the compute half only."""
    local = scenario.clusters.local
    n_p = local.prefill_instances
    routed = [r for r in records if r.route is not None]
    remote = [r.prefill_end_s - r.prefill_start_s for r in routed
              if r.route == Route.PRFAAS and r.prefill_end_s is not None and r.prefill_start_s is not None]
    near = [r.prefill_end_s - r.prefill_start_s for r in routed
            if r.route == Route.LOCAL and r.prefill_end_s is not None and r.prefill_start_s is not None]
    held = [r.finish_s - r.first_token_s for r in records if r.finish_s is not None and r.first_token_s is not None]
    p = sum(r.route == Route.PRFAAS for r in routed) / len(routed) if routed else None
    theta_prfaas = scenario.clusters.remote.instances / _mean(remote) if _mean(remote) else None
    theta_pd_p = n_p / _mean(near) if n_p and _mean(near) else None
    theta_pd_d = (local.instances - n_p) * local.decode_max_batch / _mean(held) \
        if n_p is not None and _mean(held) else None
    limits = [theta_pd_d] + ([theta_prfaas / p if theta_prfaas else None] if p else []) \
        + ([theta_pd_p / (1 - p) if theta_pd_p else None] if p is not None and p < 1 else [])
    lambda_max = min(limits) if p is not None and None not in limits else None  # a missing term: no Lambda
    return {"measured_p": p, "measured_theta_prfaas": theta_prfaas, "measured_theta_pd_p": theta_pd_p,
            "measured_theta_pd_d": theta_pd_d, "measured_lambda_max": lambda_max}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def capacity_figures(scenario: Scenario, capacity: CapacitySection) -> dict[str, Any]:
    """The CAPACITY_METRICS of one capacity search on `scenario`."""
    result = find_capacity(scenario, capacity.slo(), rel_tolerance=capacity.rel_tolerance,
                           max_probes=capacity.max_probes, num_requests=capacity.num_requests)
    return {"capacity_rps": result.rate_per_s, "lambda_max_model": result.lambda_max_model,
            "capacity_ratio": result.ratio_to_model, "capacity_probes": len(result.probes),
            "capacity_converged": float(result.converged)}


def flatten(doc: dict[str, Any]) -> dict[str, Any]:
    """optimize_scenario's JSON as flat keys: `lambda_max`, `homogeneous_lambda_max`, `configured_t`."""
    flat: dict[str, Any] = {}
    for key, value in doc.items():
        if isinstance(value, dict):
            flat |= {f"{key}_{k}": v for k, v in value.items() if not isinstance(v, dict)}
        else:
            flat[key] = value
    return flat


def one_line(err: BaseException) -> str:
    """An error as one line: its lines joined by `; `, the type named when it is not ours."""
    text = "; ".join(line.strip() for line in str(err).splitlines() if line.strip()) or type(err).__name__
    if type(err).__module__ != "emulator.errors":
        text = f"{type(err).__name__}: {text}"
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 3] + "..."


def _number(value: Any) -> float | None:
    """A metric as a float column's value: None for no data, for text and for non-finite numbers."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None
