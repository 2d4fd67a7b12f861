"""The paper's throughput model (Eq. 3-8): stage throughputs of a threshold-split PrfaaS deployment,
the exhaustive grid search for (t, N_p/N_d), and the two baselines it is compared with.

Numbers only: profiles and a length sample in, operating points out. No queueing (see the virtual
engine for that) and no scenario parsing (the schema builds ModelInputs).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from emulator.control.profiles import LengthSamples, PiecewiseLinear, weighted_quantile

TIE_RTOL = 1e-9  # two throughputs this close are a tie, broken toward fewer remote requests


class Bottleneck(StrEnum):
    """The term of Eq. 6 (with Eq. 3's two halves told apart) that sets Lambda_max."""

    PRFAAS_COMPUTE = "prfaas-compute"  # N_prfaas / T_remote(l_long), per unit of p
    EGRESS = "egress"  # B_out / S_kv(l_long), per unit of p
    PD_PREFILL = "pd-prefill"  # N_p / T_local(l_short), per unit of 1 - p
    PD_DECODE = "pd-decode"  # N_d * BS_max / (T_decode * L_out)


_BOTTLENECKS = tuple(Bottleneck)  # in the order of StageThroughputs.bottleneck's terms


@dataclass(frozen=True, slots=True)
class ModelInputs:
    """Hardware, profiles and workload of one deployment; times per instance, sizes in bytes."""

    kv_bytes: PiecewiseLinear  # S_kv(l)
    prefill_remote_s: PiecewiseLinear  # T_prefill(l) on one PrfaaS instance
    prefill_local_s: PiecewiseLinear  # T_prefill(l) on one local instance
    decode_step_s: float
    max_decode_batch: int
    output_len: float
    num_prfaas: int
    num_local: int
    num_baseline: int  # instances of the homogeneous-PD baseline
    egress_bytes_per_s: float  # B_out
    lengths: LengthSamples

    def __post_init__(self) -> None:
        checks = (
            ("decode_step_s", self.decode_step_s > 0, "a positive step time"),
            ("max_decode_batch", self.max_decode_batch >= 1, "at least 1"),
            ("output_len", self.output_len > 0, "a positive mean token count"),
            ("num_prfaas", self.num_prfaas >= 0, "0 or more instances"),
            ("num_local", self.num_local >= 2, "at least 2 (one prefill, one decode)"),
            ("num_baseline", self.num_baseline >= 2, "at least 2 (one prefill, one decode)"),
            ("egress_bytes_per_s", self.egress_bytes_per_s > 0, "a positive bandwidth"),
        )
        for name, ok, fix in checks:
            value = getattr(self, name)
            if not ok or not math.isfinite(value):
                raise ValueError(f"model inputs: {name}={value} is invalid; use {fix}")

    @property
    def decode_rate_per_instance(self) -> float:
        """Requests per second one decode instance finishes: BS_max / (T_decode * L_out)."""
        return self.max_decode_batch / (self.decode_step_s * self.output_len)


@dataclass(frozen=True, slots=True, eq=False)
class StageThroughputs:
    """Eq. 3-6 for a vector of thresholds at one N_p. Requests per second throughout.

    `prfaas_limit` and `pd_p_limit` are the first two terms of Eq. 6 (Theta / p, Theta / (1 - p));
    a path that receives no requests does not limit Lambda, so its term is inf.
    """

    t: np.ndarray
    p: np.ndarray
    l_long: np.ndarray
    l_short: np.ndarray
    prfaas_compute: np.ndarray
    prfaas_egress: np.ndarray
    theta_prfaas: np.ndarray
    theta_pd_p: np.ndarray
    theta_pd_d: float
    prfaas_limit: np.ndarray
    pd_p_limit: np.ndarray
    lambda_max: np.ndarray

    def bottleneck(self, i: int) -> Bottleneck:
        terms = (self.prfaas_compute[i] / self.p[i] if self.p[i] > 0 else math.inf,
                 self.prfaas_egress[i] / self.p[i] if self.p[i] > 0 else math.inf,
                 self.pd_p_limit[i], self.theta_pd_d)
        return _BOTTLENECKS[int(np.argmin(terms))]


@dataclass(frozen=True, slots=True, eq=False)
class _ThresholdSide:
    """The half of Eq. 3-6 that depends on t only (not on N_p), shared by every split searched."""

    t: np.ndarray
    p: np.ndarray
    head: np.ndarray
    l_long: np.ndarray
    l_short: np.ndarray
    has_short: np.ndarray
    compute: np.ndarray
    egress: np.ndarray
    theta_prfaas: np.ndarray
    prfaas_limit: np.ndarray
    local_s: np.ndarray  # T_local(l_short)


def _threshold_side(inputs: ModelInputs, t: float | np.ndarray) -> _ThresholdSide:
    t = np.atleast_1d(np.asarray(t, dtype=float))
    p, head, l_long, l_short = inputs.lengths.split_stats(t)
    has_long, has_short = p > 0, head > 0
    compute = np.where(has_long, inputs.num_prfaas / inputs.prefill_remote_s(l_long), 0.0)
    egress = np.where(has_long, inputs.egress_bytes_per_s / inputs.kv_bytes(l_long), 0.0)
    theta_prfaas = np.minimum(compute, egress)
    with np.errstate(divide="ignore", invalid="ignore"):
        prfaas_limit = np.where(has_long, theta_prfaas / np.where(has_long, p, 1.0), math.inf)
    return _ThresholdSide(t, p, head, l_long, l_short, has_short, compute, egress, theta_prfaas,
                          prfaas_limit, inputs.prefill_local_s(l_short))


def _split_side(inputs: ModelInputs, side: _ThresholdSide,
                n_p: int | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(Theta_pd_p, Theta_pd_d, Theta_pd_p / (1 - p), Lambda_max) at n_p local prefill instances: a
    number, or a column of them (one row per split, each row what the number would give)."""
    has_short = side.has_short
    theta_pd_p = np.where(has_short, n_p / side.local_s, 0.0)
    theta_pd_d = np.asarray((inputs.num_local - n_p) * inputs.decode_rate_per_instance)
    with np.errstate(divide="ignore", invalid="ignore"):
        pd_p_limit = np.where(has_short, theta_pd_p / np.where(has_short, side.head, 1.0), math.inf)
    lambda_max = np.minimum(np.minimum(side.prfaas_limit, pd_p_limit), theta_pd_d)
    return theta_pd_p, theta_pd_d, pd_p_limit, lambda_max


def _at_split(inputs: ModelInputs, side: _ThresholdSide, n_p: int) -> StageThroughputs:
    """Eq. 3-6 at n_p local prefill instances, from the t-only half."""
    theta_pd_p, theta_pd_d, pd_p_limit, lambda_max = _split_side(inputs, side, n_p)
    return StageThroughputs(side.t, side.p, side.l_long, side.l_short, side.compute, side.egress,
                            side.theta_prfaas, theta_pd_p, float(theta_pd_d), side.prfaas_limit,
                            pd_p_limit, lambda_max)


def stage_throughputs(inputs: ModelInputs, t: float | np.ndarray, n_p: int) -> StageThroughputs:
    """Eq. 3-6 at thresholds t (scalar or array) with n_p local prefill instances."""
    return _at_split(inputs, _threshold_side(inputs, t), n_p)


@dataclass(frozen=True, slots=True)
class OperatingPoint:
    """One deployment's threshold, split and throughputs, as the dashboard and CLI show them."""

    t: float  # inf: no threshold, everything local
    p: float
    l_long: float
    l_short: float
    n_prfaas: int
    n_p: int
    n_d: int
    theta_prfaas: float
    theta_pd_p: float
    theta_pd_d: float
    lambda_max: float  # requests per second
    egress_gbps: float  # cross-DC KV egress used at lambda_max
    ttft_noqueue_mean_s: float
    ttft_noqueue_p90_s: float
    bottleneck: Bottleneck

    def as_dict(self) -> dict[str, float | int | str | None]:
        return {
            "t": round(self.t) if math.isfinite(self.t) else None,
            "p": round(self.p, 4),
            "l_long": round(self.l_long, 1),
            "l_short": round(self.l_short, 1),
            "n_prfaas": self.n_prfaas,
            "n_p": self.n_p,
            "n_d": self.n_d,
            "theta_prfaas": round(self.theta_prfaas, 4),
            "theta_pd_p": round(self.theta_pd_p, 4),
            "theta_pd_d": round(self.theta_pd_d, 4),
            "lambda_max": round(self.lambda_max, 4),
            "egress_gbps": round(self.egress_gbps, 3),
            "ttft_noqueue_mean_s": round(self.ttft_noqueue_mean_s, 3),
            "ttft_noqueue_p90_s": round(self.ttft_noqueue_p90_s, 3),
            "bottleneck": self.bottleneck.value,
        }


def ttft_noqueue(inputs: ModelInputs, t: float) -> tuple[float, float]:
    """Mean and P90 of the prefill service time each request sees where it is prefilled."""
    values = inputs.lengths.values
    service_s = np.where(values > t, inputs.prefill_remote_s(values),
                         inputs.prefill_local_s(values))
    weights = inputs.lengths.weights
    return float(np.dot(weights, service_s)), weighted_quantile(service_s, weights, 0.9)


def operating_point(
    inputs: ModelInputs, stages: StageThroughputs, i: int, n_p: int
) -> OperatingPoint:
    """The operating point at grid index i of `stages` (computed with `inputs` and `n_p`)."""
    t, p, l_long = float(stages.t[i]), float(stages.p[i]), float(stages.l_long[i])
    lam = float(stages.lambda_max[i])
    egress_bytes = lam * p * inputs.kv_bytes(l_long) if p > 0 else 0.0
    mean_s, p90_s = ttft_noqueue(inputs, t)
    return OperatingPoint(
        t=t, p=p, l_long=l_long, l_short=float(stages.l_short[i]),
        n_prfaas=inputs.num_prfaas, n_p=n_p, n_d=inputs.num_local - n_p,
        theta_prfaas=float(stages.theta_prfaas[i]), theta_pd_p=float(stages.theta_pd_p[i]),
        theta_pd_d=stages.theta_pd_d, lambda_max=lam, egress_gbps=egress_bytes * 8 / 1e9,
        ttft_noqueue_mean_s=mean_s, ttft_noqueue_p90_s=p90_s, bottleneck=stages.bottleneck(i),
    )


def default_t_grid(lengths: LengthSamples) -> np.ndarray:
    """0 and every distinct sample rounded up to a whole token.

    p, l_long and l_short change only where t crosses a sample, so this grid reaches every split
    of the sample: the optimum it finds is the sample's exact optimum, and Eq. 7 holds there to
    within one sample's step.
    """
    # np.unique, without its sort: the samples are sorted and >= 0, so 0 then their ceilings ascend
    grid = np.concatenate(([0.0], np.ceil(lengths.values)))
    return grid[np.concatenate(([True], grid[1:] != grid[:-1]))]


def _best_index(lambda_max: np.ndarray) -> int:
    """Index of the largest Lambda; among ties the last one (grids ascend: the largest t)."""
    best = float(np.max(lambda_max))
    return int(np.flatnonzero(lambda_max >= best * (1 - TIE_RTOL))[-1])


def optimize_threshold(
    inputs: ModelInputs, n_p: int, t_grid: np.ndarray | None = None
) -> OperatingPoint:
    """The best threshold at a fixed split (the short-term scheduler's search)."""
    if not 0 <= n_p <= inputs.num_local:
        raise ValueError(f"n_p={n_p}: must lie in 0..num_local={inputs.num_local}")
    grid = default_t_grid(inputs.lengths) if t_grid is None else np.sort(np.asarray(t_grid, float))
    stages = stage_throughputs(inputs, grid, n_p)
    return operating_point(inputs, stages, _best_index(stages.lambda_max), n_p)


@dataclass(frozen=True, slots=True, eq=False)
class SplitSearch:
    """`optimize_threshold(inputs, n_p)` for several splits at once: the t-only half of the model
    is computed once and the splits are rows of one array (the long-term scheduler compares every
    split each interval, and the short-term loop then wants the best t at one of them)."""

    inputs: ModelInputs
    side: _ThresholdSide
    n_p_values: range
    lambda_max: np.ndarray  # (splits, t)
    best: list[int]  # _best_index of each row

    @classmethod
    def run(cls, inputs: ModelInputs, n_p_values: range) -> SplitSearch:
        for n_p in n_p_values:
            if not 0 <= n_p <= inputs.num_local:
                raise ValueError(f"n_p={n_p}: must lie in 0..num_local={inputs.num_local}")
        side = _threshold_side(inputs, default_t_grid(inputs.lengths))
        splits = np.array(n_p_values, dtype=float)[:, None]  # (splits, 1)
        lambda_max = _split_side(inputs, side, splits)[3]  # (splits, t)
        # _best_index per row: the last t whose Lambda is within TIE_RTOL of the row's best
        near = lambda_max >= (lambda_max.max(axis=1) * (1 - TIE_RTOL))[:, None]
        if near.any(axis=1).all():
            best = (near.shape[1] - 1 - np.argmax(near[:, ::-1], axis=1)).tolist()
        else:  # NaN somewhere: let _best_index fail as optimize_threshold does
            best = [_best_index(row) for row in lambda_max]
        return cls(inputs, side, n_p_values, lambda_max, best)

    def capacities(self) -> list[float]:
        """Lambda_max of each split, as optimize_threshold(inputs, n_p).lambda_max."""
        return [float(self.lambda_max[row, k]) for row, k in enumerate(self.best)]

    def best_t(self, n_p: int) -> float:
        """optimize_threshold(inputs, n_p).t, without building the operating point."""
        return float(self.side.t[self.best[self.n_p_values.index(n_p)]])

    def point(self, n_p: int) -> OperatingPoint:
        """optimize_threshold(inputs, n_p), the same floats, for one of the searched splits."""
        row = self.n_p_values.index(n_p)
        return operating_point(self.inputs, _at_split(self.inputs, self.side, n_p), self.best[row], n_p)


def mean_service_lambda(inputs: ModelInputs, t: float, n_p: int) -> float:
    """Eq. 6 with each path's mean over its requests, E[T(L)] and E[S_kv(L)], where Eq. 3-4 take
    T and S_kv at the path's mean length: what a simulation charging each request its own time
    finds. T_prefill is convex, so Eq. 3-4 read higher by Jensen's gap (up to ~6 % on the case study)."""
    values, weights = inputs.lengths.values, inputs.lengths.weights
    remote = values > t
    p = float(weights[remote].sum())
    limits = [(inputs.num_local - n_p) * inputs.decode_rate_per_instance]
    if p > 0:
        share = weights[remote] / p
        compute = inputs.num_prfaas / float(np.dot(share, inputs.prefill_remote_s(values[remote])))
        egress = inputs.egress_bytes_per_s / float(np.dot(share, inputs.kv_bytes(values[remote])))
        limits.append(min(compute, egress) / p)
    if p < 1:
        share = weights[~remote] / (1 - p)
        limits.append(n_p / float(np.dot(share, inputs.prefill_local_s(values[~remote]))) / (1 - p))
    return float(min(limits))


def split_capacities(inputs: ModelInputs, n_p_values: range) -> list[float]:
    """Lambda_max of `optimize_threshold(inputs, n_p)` for each n_p, the same floats."""
    return SplitSearch.run(inputs, n_p_values).capacities()


def egress_bound_threshold(inputs: ModelInputs, t_grid: np.ndarray | None = None) -> float:
    """The smallest grid threshold at which the PrfaaS cluster at full speed fits in B_out.

    Below it Eq. 3's bandwidth term binds: remote instances would idle waiting for the link.
    Returns inf when even the longest requests produce KV faster than the link carries it.
    """
    grid = default_t_grid(inputs.lengths) if t_grid is None else np.sort(np.asarray(t_grid, float))
    stages = stage_throughputs(inputs, grid, 1)
    fits = (stages.p > 0) & (stages.prfaas_compute <= stages.prfaas_egress)
    return float(grid[np.flatnonzero(fits)[0]]) if fits.any() else math.inf


@dataclass(frozen=True, slots=True)
class Plan:
    """The optimizer's answer: the PrfaaS operating point and the two baselines it is judged by."""

    prfaas: OperatingPoint
    homogeneous: OperatingPoint  # all num_baseline instances local, best split, nothing remote
    naive: OperatingPoint  # every prefill remote, every local instance decodes

    @property
    def gain_vs_homogeneous(self) -> float:
        """Relative throughput gain over homogeneous PD (inf when that baseline carries nothing)."""
        return _gain(self.prfaas.lambda_max, self.homogeneous.lambda_max)

    @property
    def gain_vs_naive(self) -> float:
        return _gain(self.prfaas.lambda_max, self.naive.lambda_max)

    def as_dict(self) -> dict[str, object]:
        """The `optimize` command's JSON: the PrfaaS point's keys, then each baseline's."""
        return {**self.prfaas.as_dict(), "homogeneous": self.homogeneous.as_dict(),
                "naive": self.naive.as_dict()}


def _gain(value: float, reference: float) -> float:
    return value / reference - 1 if reference > 0 else math.inf


def _best_split(inputs: ModelInputs, grid: np.ndarray, n_p_values: range) -> OperatingPoint:
    """Exhaustive search over (t in grid) x (n_p in n_p_values), vectorised over t.

    Ties go to the larger t (fewer requests cross the link), then to the smaller n_p.
    """
    best: tuple[float, float, int] | None = None
    best_point: OperatingPoint | None = None
    side = _threshold_side(inputs, grid)
    for n_p in n_p_values:
        stages = _at_split(inputs, side, n_p)
        i = _best_index(stages.lambda_max)
        lam, t = float(stages.lambda_max[i]), float(grid[i])
        if best is None or lam > best[0] * (1 + TIE_RTOL) or (
            lam >= best[0] * (1 - TIE_RTOL) and t > best[1]
        ):
            best = (lam, t, n_p)
            best_point = operating_point(inputs, stages, i, n_p)
    assert best_point is not None  # n_p_values is never empty: num_local >= 2
    return best_point


def homogeneous_baseline(inputs: ModelInputs) -> OperatingPoint:
    """Homogeneous PD: num_baseline local-kind instances, the best N_p/N_d, no remote cluster."""
    local = dataclasses.replace(inputs, num_prfaas=0, num_local=inputs.num_baseline)
    return _best_split(local, np.array([math.inf]), range(1, local.num_local))


def naive_baseline(inputs: ModelInputs) -> OperatingPoint:
    """Naive heterogeneous: t = 0 (every prefill remote, p = 1), all local instances decode."""
    return operating_point(inputs, stage_throughputs(inputs, 0.0, 0), 0, 0)


def optimize(inputs: ModelInputs, t_grid: np.ndarray | None = None) -> Plan:
    """The paper's 2-D grid search over t and N_p in 1..num_local-1, and both baselines."""
    grid = default_t_grid(inputs.lengths) if t_grid is None else np.sort(np.asarray(t_grid, float))
    prfaas = _best_split(inputs, grid, range(1, inputs.num_local))
    return Plan(prfaas, homogeneous_baseline(inputs), naive_baseline(inputs))
