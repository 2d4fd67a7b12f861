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
from emulator.scenario import Scenario, apply_overrides, load_scenario
from emulator.sweep.capacity import find_capacity
from emulator.sweep.points import Point, make_point_scenario
from emulator.sweep.spec import CapacitySection, SweepSpec
from emulator.telemetry.records import summarize

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
        return summarize(records, run_duration_s(records))
    return flatten(optimize_scenario(scenario))


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
