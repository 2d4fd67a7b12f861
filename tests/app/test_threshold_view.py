"""The Threshold explorer's numbers against the optimizer and the paper's equations (Eq. 3-7)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.threshold_view import (
    CASE_STUDY,
    SCENARIOS_DIR,
    LengthLaw,
    bandwidth_bound_ranges,
    explore,
    fitted_law,
    list_scenarios,
    load_base,
    plan_json,
    summary_numbers,
    threshold_curves,
    with_overrides,
)
from emulator.analytic import optimize_scenario
from emulator.control.profiles import LengthSamples
from emulator.control.throughput_model import optimize, stage_throughputs
from emulator.errors import ScenarioError


@pytest.fixture(scope="module")
def base():
    return load_base(SCENARIOS_DIR / CASE_STUDY)


def test_case_study_is_listed_first() -> None:
    names = list_scenarios()
    assert names[0] == CASE_STUDY and "classroom-basic.yaml" in names


def test_untouched_knobs_reproduce_the_optimize_command(base) -> None:
    law = base.length_law
    assert law == LengthLaw(9.9, 1.0, 128.0, 131072.0)
    inputs = with_overrides(base, base.inputs.num_prfaas, base.egress_gbps, law)
    found = explore(inputs)
    assert plan_json(found.plan, base.tables) == optimize_scenario(base.scenario)
    numbers = summary_numbers(found.plan)
    assert numbers["Threshold t (tokens)"] == "19,620"
    assert numbers["Split n_p:n_d"] == "3:5"
    assert numbers["Λ_max (req/s)"] == f"{optimize(base.inputs).prfaas.lambda_max:.3f}"
    assert numbers["Gain vs homogeneous PD"].startswith("+") and found.prfaas_bound == "compute"
    assert found.bound_ranges == []  # at 100 Gbit/s the link never binds


def test_curves_cross_at_the_optimum(base) -> None:
    found = explore(base.inputs)
    best = found.plan.prfaas
    at = found.curves.set_index("t").loc[best.t]
    assert at["lambda_max"] == pytest.approx(best.lambda_max)
    # Eq. 7 within one sample's step: the two prefill limits nearly meet at t*.
    assert at["prfaas_limit"] == pytest.approx(at["pd_p_limit"], rel=0.05)
    assert (found.curves["lambda_max"] <= best.lambda_max * (1 + 1e-9)).all()
    assert found.split["lambda_max"].max() == pytest.approx(best.lambda_max)
    assert found.split.loc[found.split["lambda_max"].idxmax(), "split"] == "3:5"


def test_curves_leave_empty_paths_blank(base) -> None:
    curves = threshold_curves(base.inputs, 3, np.array([1.0, 200_000.0]))
    assert math.isnan(curves["pd_p_limit"][0])  # nothing is short: no local prefill limit
    assert math.isnan(curves["prfaas_limit"][1])  # nothing is long: no PrfaaS limit


def test_a_thin_link_binds_and_moves_the_threshold(base) -> None:
    thin = with_overrides(base, 4, 5.0)
    found = explore(thin)
    assert found.plan.prfaas.bottleneck.value == "egress" and found.prfaas_bound == "link"
    assert found.plan.prfaas.t > 19_620
    (lo, hi), = found.bound_ranges
    assert lo == 0.0 and hi > found.plan.prfaas.t
    # Inside the range the egress term is below the compute term, just past it not.
    stages = stage_throughputs(thin, np.array([hi - 1, hi]), 1)
    assert stages.prfaas_egress[0] < stages.prfaas_compute[0]
    assert stages.prfaas_egress[1] >= stages.prfaas_compute[1]
    assert bandwidth_bound_ranges(with_overrides(base, 4, 1.0))[0][0] == 0.0


def test_more_prfaas_instances_raise_lambda(base) -> None:
    more = explore(with_overrides(base, 8, base.egress_gbps)).plan.prfaas.lambda_max
    assert more > explore(base.inputs).plan.prfaas.lambda_max


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"num_prfaas": 4, "egress_gbps": 0.0}, "B_out: 0 Gbit/s"),
    ({"num_prfaas": -1, "egress_gbps": 100.0}, "N_prfaas: -1"),
    ({"num_prfaas": 4, "egress_gbps": 100.0, "law": LengthLaw(9.9, 0.0, 128, 131072)},
     "sigma: 0 must be positive"),
    ({"num_prfaas": 4, "egress_gbps": float("nan")}, "B_out: nan"),
])
def test_bad_knobs_are_refused(base, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        with_overrides(base, **kwargs)


def test_non_lognormal_scenarios_get_a_fitted_law() -> None:
    classroom = load_base(SCENARIOS_DIR / "classroom-basic.yaml")
    assert classroom.length_law is None  # uniform 256..8192
    law = fitted_law(classroom.inputs.lengths)
    assert (law.lo, law.hi) == (256.0, 8192.0) and law.sigma > 0
    assert 256 < math.exp(law.mu) < 8192
    sample = LengthSamples.from_samples([1000.0, 1000.0])
    assert fitted_law(sample).sigma == 0.05  # a point mass still gets a usable spread


def test_a_broken_scenario_is_a_scenario_error(tmp_path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nengine: warp\n")
    with pytest.raises(ScenarioError):
        load_base(path)
