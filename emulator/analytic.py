"""The analytic engine's entry: the `optimize` command on a scenario, the paper's throughput model
(Eq. 3-8) and its grid search over the scenario's model inputs (emulator.plane.inputs), with both
baselines and the scenario's own setting when it fixes the threshold or the split.
"""

from __future__ import annotations

import numpy as np

from emulator.control.throughput_model import (
    Plan,
    mean_service_lambda,
    operating_point,
    optimize,
    stage_throughputs,
)
from emulator.plane.inputs import model_inputs
from emulator.scenario import Scenario


def optimize_scenario(scenario: Scenario) -> dict[str, object]:
    """The `optimize` command's JSON: the optimum, both baselines, and the scenario's own setting
    when it fixes the threshold or the split."""
    inputs, tables = model_inputs(scenario)
    plan: Plan = optimize(inputs)
    result: dict[str, object] = {**plan.as_dict(), "gain_vs_homogeneous": round(plan.gain_vs_homogeneous, 4),
                                 "gain_vs_naive": round(plan.gain_vs_naive, 4), "profile": tables.source}
    t, n_p = scenario.router.threshold_tokens, scenario.clusters.local.prefill_instances
    if t != "auto" or n_p is not None:
        t_fixed = float(plan.prfaas.t if t == "auto" else t)
        n_p_fixed = plan.prfaas.n_p if n_p is None else n_p
        stages = stage_throughputs(inputs, np.array([t_fixed]), n_p_fixed)
        result["configured"] = {**operating_point(inputs, stages, 0, n_p_fixed).as_dict(),
                                "lambda_max_mean_t": round(mean_service_lambda(inputs, t_fixed, n_p_fixed), 4)}
    return result
