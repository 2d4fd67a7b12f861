"""The paper's three configurations of one scenario (PrfaaS, homogeneous PD, naive heterogeneous)
as `--set` overrides, so each is revalidated like any scenario; run side by side, or driven into
saturation to check the throughput model's Lambda_max. No engine of its own: it calls engine.py.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emulator.control.throughput_model import OperatingPoint, Plan, optimize
from emulator.errors import ScenarioError
from emulator.plane.inputs import model_inputs
from emulator.scenario import Scenario, apply_overrides
from emulator.telemetry.records import RequestRecord, summarize
from emulator.virtual.engine import record_run, run_duration_s, simulate

CONFIGS = ("prfaas", "homogeneous", "naive")
SUMMARY_KEYS = ("throughput_rps", "ttft_mean_s", "ttft_p50_s", "ttft_p90_s", "egress_gbps_mean",
                "completed_fraction")
SATURATION_LOAD = 1.5  # arrivals at this multiple of Lambda_max keep every path's queue growing


def configuration_overrides(scenario: Scenario, config: str, plan: Plan | None = None) -> list[str]:
    """`--set` items that turn `scenario` into one of CONFIGS (the paper's Section 4 baselines):
    homogeneous = all baseline_instances local, the best split, nothing remote; naive = every
    prefill remote and every local instance decoding."""
    if config == "prfaas":
        return ["router.policy=prfaas"]
    plan = plan or optimize(model_inputs(scenario)[0])
    if config == "homogeneous":
        return ["router.policy=local-only", "clusters.remote.instances=0",
                f"clusters.local.instances={scenario.clusters.baseline_num_instances}",
                f"clusters.local.prefill_instances={plan.homogeneous.n_p}"]
    if config == "naive":
        return ["router.policy=all-remote", "clusters.local.prefill_instances=0"]
    raise ScenarioError(f"configuration {config!r}: unknown; use one of {', '.join(CONFIGS)}")


def model_point(plan: Plan, config: str) -> OperatingPoint:
    return {"prfaas": plan.prfaas, "homogeneous": plan.homogeneous, "naive": plan.naive}[config]


def compare_configurations(scenario: Scenario, out_dir: str | Path | None = None,
                           configs: tuple[str, ...] = CONFIGS) -> dict[str, dict[str, Any]]:
    """Run the scenario once per configuration (same seed, same arrivals) and tabulate throughput,
    TTFT with and without queueing, and egress, beside the model's Lambda_max. With `out_dir`,
    each run is recorded in out_dir/<config> like `run` does."""
    plan = optimize(model_inputs(scenario)[0])
    rows: dict[str, dict[str, Any]] = {}
    for config in configs:
        variant = apply_overrides(scenario, configuration_overrides(scenario, config, plan))
        result = simulate(variant)
        if out_dir is not None:
            summary = record_run(variant, result, Path(out_dir) / config)["summary"]
        else:
            summary = summarize(result.records, run_duration_s(result.records))
        point = model_point(plan, config)
        rows[config] = {
            "lambda_max_model": point.lambda_max, "ttft_noqueue_model_s": point.ttft_noqueue_mean_s,
            **{k: summary[k] for k in SUMMARY_KEYS}, "ttft_noqueue_mean_s": _noqueue_mean(result.records),
        }
    return rows


@dataclass(frozen=True, slots=True)
class Saturation:
    """A saturated run's completion rate against the model's Lambda_max for the configuration."""

    config: str
    lambda_max_model: float
    throughput_rps: float
    completed_in_window: int
    window_s: tuple[float, float]
    arrival_rate_per_s: float

    @property
    def relative_error(self) -> float:
        return self.throughput_rps / self.lambda_max_model - 1


def saturation_throughput(scenario: Scenario, config: str = "prfaas", *,
                          target_completions: int = 10_000, load: float = SATURATION_LOAD,
                          warmup_fraction: float = 0.2) -> Saturation:
    """Drive `config` with Poisson arrivals at `load` x its Lambda_max (threshold and split fixed
    at the optimizer's, scheduler off) and measure completions per second after a warm-up.

    Over capacity, every path the configuration uses runs at its own capacity, so the completion
    rate is the configuration's capacity; the run stops at its end without draining."""
    if scenario.workload.input_len is None:
        raise ScenarioError("workload: saturation needs a generated workload (input_len, output_len), "
                            "not a trace; use a scenario with arrival + input_len + output_len")
    plan = optimize(model_inputs(scenario)[0])
    point = model_point(plan, config)
    rate = load * point.lambda_max
    duration_s = target_completions / ((1 - warmup_fraction) * point.lambda_max)
    fixed = [f"router.threshold_tokens={int(plan.prfaas.t)}",
             f"clusters.local.prefill_instances={plan.prfaas.n_p}"] if config == "prfaas" else []
    variant = apply_overrides(scenario, [
        *configuration_overrides(scenario, config, plan), *fixed,
        "scheduler.short_term.enabled=false", "scheduler.long_term.enabled=false",
        f"workload.arrival={{kind: poisson, rate_per_s: {rate!r}}}", "workload.rate_changes=[]",
        f"duration_s={duration_s!r}", f"workload.max_requests={int(rate * duration_s * 1.2) + 100}",
        "timeline=[]", "expect={}",
    ])
    result = simulate(variant, until=duration_s)
    start_s = warmup_fraction * duration_s
    done = sum(1 for r in result.records
               if r.status == "completed" and r.finish_s is not None and r.finish_s >= start_s)
    return Saturation(config, point.lambda_max, done / (duration_s - start_s), done,
                      (start_s, duration_s), rate)


def _noqueue_mean(records: list[RequestRecord]) -> float | None:
    """The paper's TTFT without queueing: the prefill service time where each request ran."""
    times = [r.prefill_end_s - r.prefill_start_s for r in records
             if r.status == "completed" and r.prefill_end_s is not None and r.prefill_start_s is not None]
    return statistics.fmean(times) if times else None
