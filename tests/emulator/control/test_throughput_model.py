"""The throughput model (Eq. 3-8): stage throughputs on a hand-computed case, the structure of the
optimum (Eq. 7, monotone prefill-path terms, the bandwidth-bound regime), the baselines and the
paper's case study."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from emulator.control.profiles import LengthSamples, PiecewiseLinear
from emulator.control.throughput_model import (
    Bottleneck,
    ModelInputs,
    default_t_grid,
    egress_bound_threshold,
    homogeneous_baseline,
    mean_service_lambda,
    naive_baseline,
    optimize,
    optimize_threshold,
    stage_throughputs,
)
from tests.emulator.control.paper_case import paper_inputs

case_study = paper_inputs
CASE = case_study()


def hand_case(egress_bytes_per_s: float = 1.2e9) -> ModelInputs:
    """Two lengths, equal weights; linear profiles through 0 so every term is easy by hand."""
    return ModelInputs(
        kv_bytes=PiecewiseLinear((0, 10_000), (0, 1e9)),  # 1e5 bytes per token
        prefill_remote_s=PiecewiseLinear((0, 10_000), (0, 1.0)),  # 10K tokens/s
        prefill_local_s=PiecewiseLinear((0, 10_000), (0, 2.0)),  # 5K tokens/s
        decode_step_s=0.02, max_decode_batch=10, output_len=500,  # 1 request/s per instance
        num_prfaas=2, num_local=4, num_baseline=6, egress_bytes_per_s=egress_bytes_per_s,
        lengths=LengthSamples.from_samples([1000, 9000]),
    )


def test_stage_throughputs_hand_case():
    s = stage_throughputs(hand_case(), 5000.0, n_p=1)
    assert (s.p[0], s.l_long[0], s.l_short[0]) == (0.5, 9000.0, 1000.0)
    assert s.prfaas_compute[0] == pytest.approx(2 / 0.9)  # Eq. 3, compute half
    assert s.prfaas_egress[0] == pytest.approx(1.2e9 / 9e8)  # Eq. 3, bandwidth half
    assert s.theta_prfaas[0] == pytest.approx(4 / 3)
    assert s.theta_pd_p[0] == pytest.approx(1 / 0.2)  # Eq. 4
    assert s.theta_pd_d == pytest.approx(3.0)  # Eq. 5: 3 instances x 10 / (0.02 x 500)
    assert s.lambda_max[0] == pytest.approx(8 / 3)  # Eq. 6: min(4/3 / 0.5, 5 / 0.5, 3)
    assert s.bottleneck(0) is Bottleneck.EGRESS


def test_operating_point_hand_case():
    point = optimize_threshold(hand_case(), n_p=1, t_grid=np.array([5000.0]))
    assert point.egress_gbps == pytest.approx(9.6)  # the bandwidth term binds: the link is full
    assert point.ttft_noqueue_mean_s == pytest.approx((0.2 + 0.9) / 2)  # local 1K, remote 9K
    assert point.ttft_noqueue_p90_s == pytest.approx(0.9)
    assert (point.n_prfaas, point.n_p, point.n_d) == (2, 1, 3)


def test_empty_paths_do_not_limit_lambda():
    all_remote = stage_throughputs(hand_case(), 0.0, n_p=0)  # p = 1, no local prefill at all
    assert all_remote.p[0] == 1.0 and all_remote.pd_p_limit[0] == math.inf
    assert all_remote.lambda_max[0] == pytest.approx(min(1.2e9 / 5e8, 2 / 0.5, 4.0))
    all_local = stage_throughputs(hand_case(), 9000.0, n_p=2)  # p = 0
    assert all_local.p[0] == 0.0 and all_local.prfaas_limit[0] == math.inf
    assert all_local.lambda_max[0] == pytest.approx(min(2 / 1.0, 2.0))


def _neighbour_step(values: np.ndarray, i: int) -> float:
    """The largest relative change of `values` over one grid step either side of i."""
    return max(abs(values[j] - values[i]) / values[i] for j in (i - 1, i + 1))


def test_eq7_holds_at_the_optimum_within_one_grid_step():
    point = optimize(CASE).prfaas
    grid = default_t_grid(CASE.lengths)
    i = int(np.searchsorted(grid, point.t))
    s = stage_throughputs(CASE, grid, point.n_p)
    a, b = s.prfaas_limit, s.pd_p_limit
    gap = abs(a[i] - b[i]) / min(a[i], b[i])
    assert gap <= _neighbour_step(a, i) + _neighbour_step(b, i)
    assert point.lambda_max == pytest.approx(min(a[i], b[i]))  # decode does not bind here


@pytest.mark.parametrize("n_p", [1, 3, 5])
def test_prefill_path_terms_are_monotone_in_t(n_p):
    grid = default_t_grid(CASE.lengths)[1:-1]  # both paths non-empty
    s = stage_throughputs(CASE, grid, n_p)
    assert np.all(np.diff(s.prfaas_limit) >= 0)  # fewer, longer remote requests: more per unit p
    assert np.all(np.diff(s.pd_p_limit) <= 0)  # more, longer local requests: less per unit 1-p


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 200_000), min_size=3, max_size=40),
    st.floats(0.01, 2.0), st.floats(1e-6, 1e-4), st.floats(1e5, 1e9),
)
def test_monotonicity_holds_for_affine_profiles(samples, intercept_s, slope_s, egress):
    """With T(l) = a + b l (a > 0), p T(l_long) = a p + b E[L; L > t] falls as t grows."""
    lengths = LengthSamples.from_samples(samples)
    line = PiecewiseLinear((0, 1), (intercept_s, intercept_s + slope_s))
    inputs = dataclasses.replace(CASE, lengths=lengths, prefill_remote_s=line,
                                 prefill_local_s=line.scaled(2.0), egress_bytes_per_s=egress)
    s = stage_throughputs(inputs, default_t_grid(lengths)[1:-1], 3)
    assert np.all(np.diff(s.prfaas_limit) >= -1e-9 * s.prfaas_limit[1:])
    assert np.all(np.diff(s.pd_p_limit) <= 1e-9 * s.pd_p_limit[1:])


def test_tiny_egress_makes_the_bandwidth_term_bind():
    thin, thinner = case_study(egress_bytes_per_s=2e8), case_study(egress_bytes_per_s=1e8)
    at_t = [stage_throughputs(x, 19_620.0, n_p=3) for x in (thin, thinner)]
    assert [s.bottleneck(0) for s in at_t] == [Bottleneck.EGRESS, Bottleneck.EGRESS]
    assert at_t[0].lambda_max[0] == pytest.approx(2 * at_t[1].lambda_max[0])
    naive = [naive_baseline(x) for x in (thin, thinner)]
    assert [n.bottleneck for n in naive] == [Bottleneck.EGRESS, Bottleneck.EGRESS]
    assert naive[0].lambda_max == pytest.approx(2 * naive[1].lambda_max)


def test_when_the_link_binds_the_optimum_fills_it():
    point = optimize(case_study(egress_bytes_per_s=1.25e9)).prfaas  # 10 Gbit/s
    assert point.bottleneck is Bottleneck.EGRESS
    assert point.egress_gbps == pytest.approx(10.0, rel=1e-6)
    assert point.t > optimize(CASE).prfaas.t  # a thinner link keeps more requests local


def test_egress_bound_threshold():
    assert egress_bound_threshold(CASE) == 0.0  # 4 x 3.6 Gbit/s fits in 100 Gbit/s at any t
    # 4 x Phi_kv(128K) = 10.5 Gbit/s: at 8 Gbit/s no threshold lets the cluster run flat out.
    assert egress_bound_threshold(case_study(egress_bytes_per_s=1e9)) == math.inf
    inputs = case_study(egress_bytes_per_s=1.5e9)  # 12 Gbit/s: fits once l_long is long enough
    grid = default_t_grid(inputs.lengths)
    t = egress_bound_threshold(inputs)
    s = stage_throughputs(inputs, grid, 3)
    i = int(np.searchsorted(grid, t))
    assert 0 < t < math.inf and s.prfaas_compute[i] <= s.prfaas_egress[i]
    assert s.prfaas_compute[i - 1] > s.prfaas_egress[i - 1]


def test_baselines_shape():
    homogeneous, naive = homogeneous_baseline(CASE), naive_baseline(CASE)
    assert (homogeneous.p, homogeneous.n_prfaas, homogeneous.t) == (0.0, 0, math.inf)
    assert homogeneous.n_p + homogeneous.n_d == 12 and homogeneous.egress_gbps == 0.0
    assert (naive.p, naive.n_p, naive.n_d, naive.t) == (1.0, 0, 8, 0.0)
    # Homogeneous by hand: N_p / T_local(mean) against N_d decode; 9:3 is the best split.
    t_mean = float(CASE.prefill_local_s(CASE.lengths.mean))
    assert homogeneous.lambda_max == pytest.approx(min(9 / t_mean, 3 * 20 / (0.025 * 1024)))
    assert naive.lambda_max == pytest.approx(4 / float(CASE.prefill_remote_s(CASE.lengths.mean)))


def test_case_study_plan_beats_both_baselines():
    plan = optimize(CASE)
    point = plan.prfaas
    assert point.lambda_max > plan.homogeneous.lambda_max
    assert point.lambda_max > plan.naive.lambda_max
    assert 0 < point.p < 1 and point.n_p + point.n_d == 8
    # Eq. 8 is the target the integer split approaches: producers within one decode instance.
    producers = point.theta_prfaas + point.theta_pd_p
    assert abs(producers - point.theta_pd_d) <= CASE.decode_rate_per_instance


def test_ties_go_to_the_larger_threshold():
    point = optimize_threshold(CASE, n_p=5)  # decode binds: a range of t reaches the same Lambda
    grid = default_t_grid(CASE.lengths)
    s = stage_throughputs(CASE, grid, 5)
    i = int(np.searchsorted(grid, point.t))
    assert point.bottleneck is Bottleneck.PD_DECODE
    assert s.lambda_max[i + 1] < point.lambda_max  # one step further and local prefill binds


def test_plan_as_dict_is_json_with_the_contract_keys():
    data = optimize(CASE).as_dict()
    keys = ["t", "p", "l_long", "l_short", "n_prfaas", "n_p", "n_d", "theta_prfaas", "theta_pd_p",
            "theta_pd_d", "lambda_max", "egress_gbps", "ttft_noqueue_mean_s",
            "ttft_noqueue_p90_s", "bottleneck"]
    assert list(data) == [*keys, "homogeneous", "naive"]
    assert list(data["homogeneous"]) == keys and data["homogeneous"]["t"] is None
    json.loads(json.dumps(data, allow_nan=False))


def test_bad_inputs_are_rejected():
    with pytest.raises(ValueError, match="num_local=1"):
        case_study(num_local=1)
    with pytest.raises(ValueError, match="egress_bytes_per_s=0"):
        case_study(egress_bytes_per_s=0)
    with pytest.raises(ValueError, match="n_p=9"):
        optimize_threshold(CASE, n_p=9)


def _per_request_lambda(inputs: ModelInputs, t: float, n_p: int) -> float:
    """Eq. 6 from each path's mean service time, one length at a time: the brute-force reference."""
    remote = [(x, w) for x, w in zip(inputs.lengths.values, inputs.lengths.weights, strict=True) if x > t]
    local = [(x, w) for x, w in zip(inputs.lengths.values, inputs.lengths.weights, strict=True) if x <= t]
    p = sum(w for _, w in remote)
    mean_remote = sum(w * inputs.prefill_remote_s(float(x)) for x, w in remote) / p
    mean_kv = sum(w * inputs.kv_bytes(float(x)) for x, w in remote) / p
    mean_local = sum(w * inputs.prefill_local_s(float(x)) for x, w in local) / (1 - p)
    prfaas = min(inputs.num_prfaas / mean_remote, inputs.egress_bytes_per_s / mean_kv)
    return min(prfaas / p, n_p / mean_local / (1 - p), (inputs.num_local - n_p) * inputs.decode_rate_per_instance)


@pytest.mark.parametrize(("t", "n_p"), [(4000.0, 3), (19_620.0, 3), (19_620.0, 5), (50_000.0, 2)])
def test_mean_service_lambda_is_eq6_over_each_requests_own_time_and_never_above_eq3(t, n_p):
    exact = mean_service_lambda(CASE, t, n_p)
    assert exact == pytest.approx(_per_request_lambda(CASE, t, n_p), rel=1e-9)
    eq3 = float(stage_throughputs(CASE, t, n_p).lambda_max[0])
    assert exact <= eq3 * (1 + 1e-12)  # T_prefill is convex: its value at the mean length is lower
    hand = hand_case()  # linear profiles: the two forms agree
    linear = float(stage_throughputs(hand, 5000.0, 1).lambda_max[0])
    assert mean_service_lambda(hand, 5000.0, 1) == pytest.approx(linear)
