"""Numbers behind the Threshold explorer: a scenario's throughput-model inputs with the page's
overrides (N_prfaas, B_out, a log-normal length law), the optimum and baselines, Eq. 6's curves
against t, Lambda_max against the local split, and the thresholds where the link binds.

Pure functions over `emulator.plane.inputs` and `emulator.control.throughput_model`; no Streamlit.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from app.paper_compare import ProjectFigures
from emulator.control.profiles import LengthSamples
from emulator.control.throughput_model import (
    ModelInputs,
    Plan,
    default_t_grid,
    optimize,
    optimize_threshold,
    stage_throughputs,
)
from emulator.paths import SCENARIOS_DIR
from emulator.plane.inputs import ProfileTables, model_inputs
from emulator.scenario import Scenario, load_scenario
from emulator.scenario.workload import LognormalLength
from emulator.telemetry.labels import BOTTLENECK_LABELS

CASE_STUDY = "paper-case-study.yaml"
CURVE_POINTS = 400
BITS_PER_BYTE = 8


@dataclass(frozen=True, slots=True)
class LengthLaw:
    """A log-normal input-length law truncated to [lo, hi] tokens (the workload's `lognormal`)."""

    mu: float
    sigma: float
    lo: float
    hi: float

    def samples(self) -> LengthSamples:
        """The same deterministic quantile sample the analytic engine draws; ValueError if bad."""
        if not (math.isfinite(self.sigma) and self.sigma > 0):
            raise ValueError(f"sigma: {self.sigma:g} must be positive; log-normal lengths need "
                             "some spread (try 1.0)")
        if not math.isfinite(self.mu):
            raise ValueError(f"mu: {self.mu} is not a number; try 9.9 (about 20K tokens)")
        return LengthSamples.truncated_lognormal(self.mu, self.sigma, self.lo, self.hi)


@dataclass(frozen=True, slots=True)
class Base:
    """A scenario's model inputs before the page's overrides."""

    scenario: Scenario
    inputs: ModelInputs
    tables: ProfileTables

    @property
    def egress_gbps(self) -> float:
        return self.inputs.egress_bytes_per_s * BITS_PER_BYTE / 1e9

    @property
    def length_law(self) -> LengthLaw | None:
        """The scenario's log-normal length law, or None when its workload uses another one."""
        workload = self.scenario.workload
        spec = workload.input_len
        if workload.trace is not None or not isinstance(spec, LognormalLength):
            return None
        return LengthLaw(spec.mu, spec.sigma, float(spec.min), float(spec.max))


def list_scenarios(scenarios_dir: Path = SCENARIOS_DIR) -> list[str]:
    """Scenario file names, the paper's case study first."""
    names = sorted(p.name for p in scenarios_dir.glob("*.yaml"))
    return sorted(names, key=lambda name: name != CASE_STUDY)


def load_base(path: Path) -> Base:
    """Load a scenario and build its inputs; ScenarioError (one line) when it cannot be used."""
    scenario = load_scenario(path)
    inputs, tables = model_inputs(scenario)
    return Base(scenario, inputs, tables)


def own_figures(base: Base) -> ProjectFigures:
    """The optimizer's figures for the scenario at its own values, to set beside the paper's."""
    return ProjectFigures.from_plan(optimize(base.inputs), base.egress_gbps)


def with_overrides(base: Base, num_prfaas: int, egress_gbps: float,
                   law: LengthLaw | None = None) -> ModelInputs:
    """The base inputs with the page's knobs; ValueError (one line) on an invalid value."""
    if not (math.isfinite(egress_gbps) and egress_gbps > 0):
        raise ValueError(f"B_out: {egress_gbps:g} Gbit/s; use a positive link bandwidth")
    if num_prfaas < 0:
        raise ValueError(f"N_prfaas: {num_prfaas}; use 0 or more PrfaaS instances")
    lengths = base.inputs.lengths if law is None else law.samples()
    return dataclasses.replace(base.inputs, num_prfaas=int(num_prfaas), lengths=lengths,
                               egress_bytes_per_s=egress_gbps * 1e9 / BITS_PER_BYTE)


def summary_numbers(plan: Plan) -> dict[str, str]:
    """The optimum's headline numbers as the page's metric tiles show them (label -> text)."""
    best = plan.prfaas
    return {
        "Threshold t (tokens)": f"{best.t:,.0f}" if math.isfinite(best.t) else "none",
        "Split n_p:n_d": f"{best.n_p}:{best.n_d}",
        "Λ_max (req/s)": f"{best.lambda_max:.3f}",
        "Gain vs homogeneous PD": _gain_text(plan.gain_vs_homogeneous),
        "Gain vs naive": _gain_text(plan.gain_vs_naive),
        "Egress used (Gbit/s)": _gbps_text(best.egress_gbps),
        "Share routed remote p": f"{best.p:.1%}",
        "Bottleneck": BOTTLENECK_LABELS[best.bottleneck.value],
    }


def _gbps_text(gbps: float) -> str:
    return f"{gbps:,.2f}" if gbps >= 1 else f"{gbps:.3g}"


def _gain_text(gain: float) -> str:
    return "inf" if math.isinf(gain) else f"{gain:+.1%}"


def prfaas_path_bound(inputs: ModelInputs, plan: Plan) -> str:
    """What limits the PrfaaS path at the optimum (Eq. 3): 'compute', 'link' or 'idle' (p = 0)."""
    best = plan.prfaas
    if best.p <= 0:
        return "idle"
    stages = stage_throughputs(inputs, best.t, best.n_p)
    return "link" if stages.prfaas_egress[0] < stages.prfaas_compute[0] else "compute"


def plan_json(plan: Plan, tables: ProfileTables) -> dict[str, object]:
    """The `optimize` command's JSON for these inputs (plan, gains, profile source)."""
    return {**plan.as_dict(), "gain_vs_homogeneous": round(plan.gain_vs_homogeneous, 4),
            "gain_vs_naive": round(plan.gain_vs_naive, 4), "profile": tables.source}


def curve_grid(inputs: ModelInputs, t_star: float, num: int = CURVE_POINTS) -> np.ndarray:
    """Thresholds for the chart: log-spaced over the sampled lengths, plus the optimum."""
    values = inputs.lengths.values
    lo, hi = max(float(values[0]), 1.0), max(float(values[-1]), 2.0)
    grid = np.geomspace(lo, hi, num)
    extra = [t_star] if math.isfinite(t_star) and t_star >= lo else []
    return np.unique(np.concatenate((grid, extra)))


def threshold_curves(inputs: ModelInputs, n_p: int, grid: np.ndarray) -> pd.DataFrame:
    """Eq. 6's terms against t at split n_p: Theta_prfaas/p, Theta_pd_p/(1-p), Theta_pd_d and
    Lambda_max (requests/s; NaN where a path carries nothing and so sets no limit)."""
    stages = stage_throughputs(inputs, grid, n_p)

    def finite(a: np.ndarray) -> np.ndarray:
        return np.where(np.isfinite(a), a, np.nan)

    return pd.DataFrame({
        "t": stages.t, "p": stages.p,
        "prfaas_limit": finite(stages.prfaas_limit), "pd_p_limit": finite(stages.pd_p_limit),
        "pd_d_limit": np.full(stages.t.shape, stages.theta_pd_d),
        "lambda_max": finite(stages.lambda_max),
    })


def split_curve(inputs: ModelInputs) -> pd.DataFrame:
    """Lambda_max at the best threshold for each local split n_p in 1..num_local-1."""
    rows = []
    for n_p in range(1, inputs.num_local):
        point = optimize_threshold(inputs, n_p)
        rows.append({"n_p": n_p, "n_d": point.n_d, "split": f"{n_p}:{point.n_d}",
                     "lambda_max": point.lambda_max, "t": point.t,
                     "bottleneck": BOTTLENECK_LABELS[point.bottleneck.value]})
    return pd.DataFrame(rows, columns=["n_p", "n_d", "split", "lambda_max", "t", "bottleneck"])


def bandwidth_bound_ranges(inputs: ModelInputs) -> list[tuple[float, float]]:
    """The t ranges where Eq. 3's egress term B_out/S_kv(l_long) is below the compute term
    N_prfaas/T_remote(l_long): the PrfaaS cluster would wait on the link there.

    p, l_long change only where t crosses a sample, so the ranges are exact on the sample grid:
    each is [first bound grid point, next grid point), the last one ends at the largest sample.
    """
    grid = default_t_grid(inputs.lengths)
    stages = stage_throughputs(inputs, grid, 1)  # Eq. 3 does not depend on n_p
    bound = (stages.p > 0) & (stages.prfaas_egress < stages.prfaas_compute)
    ranges = []
    i = 0
    while i < grid.size:
        if not bound[i]:
            i += 1
            continue
        j = i
        while j + 1 < grid.size and bound[j + 1]:
            j += 1
        end = grid[j + 1] if j + 1 < grid.size else grid[j]
        ranges.append((float(grid[i]), float(end)))
        i = j + 1
    return ranges


def shown_ranges(ranges: list[tuple[float, float]], x_lo: float, x_hi: float) -> list[tuple[float, float]]:
    """The link-bound ranges that fall on a chart spanning [x_lo, x_hi], clipped to it."""
    clipped = [(max(lo, x_lo), min(hi, x_hi)) for lo, hi in ranges]
    return [(lo, hi) for lo, hi in clipped if hi > lo]


def curves_caption(n_p: int, n_d: int, is_shaded: bool) -> str:
    """What the t chart shows; it speaks of shading only when something is shaded."""
    where = ("Shaded: thresholds where B_out/S_kv(l_long) is below N_prfaas/T_remote(l_long), so the "
             "link limits the PrfaaS path." if is_shaded else
             "No threshold on this chart is link-bound: B_out/S_kv(l_long) stays above "
             "N_prfaas/T_remote(l_long), so compute, not the link, limits the PrfaaS path.")
    return f"Curves at the optimum's split n_p:n_d = {n_p}:{n_d}. {where}"


@dataclass(frozen=True, slots=True)
class Exploration:
    """Everything the page draws for one setting of the knobs."""

    plan: Plan
    curves: pd.DataFrame
    split: pd.DataFrame
    bound_ranges: list[tuple[float, float]]
    prfaas_bound: str

    @property
    def shaded_ranges(self) -> list[tuple[float, float]]:
        """The link-bound ranges on the t chart, clipped to the thresholds it draws."""
        t = self.curves["t"]
        return shown_ranges(self.bound_ranges, float(t.min()), float(t.max()))


def explore(inputs: ModelInputs) -> Exploration:
    plan = optimize(inputs)
    curves = threshold_curves(inputs, plan.prfaas.n_p, curve_grid(inputs, plan.prfaas.t))
    return Exploration(plan, curves, split_curve(inputs), bandwidth_bound_ranges(inputs),
                       prfaas_path_bound(inputs, plan))


def fitted_law(lengths: LengthSamples) -> LengthLaw:
    """A log-normal with the sample's log-mean and log-spread, truncated to its range: the
    starting point for replacing a non-log-normal workload's lengths."""
    logs = np.log(np.maximum(lengths.values, 1.0))
    mu = float(np.dot(lengths.weights, logs))
    sigma = float(np.sqrt(np.dot(lengths.weights, (logs - mu) ** 2)))
    lo = max(float(lengths.values[0]), 1.0)
    hi = max(float(lengths.values[-1]), lo + 1.0)
    return LengthLaw(round(mu, 2), round(max(sigma, 0.05), 2), lo, hi)
