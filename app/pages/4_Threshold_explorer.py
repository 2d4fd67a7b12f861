"""Threshold explorer: the paper's throughput model (Eq. 3-8) on a scenario, with knobs for the
PrfaaS cluster, the link and the length law; the optimum, both baselines, and where the link binds.

Layout only; the numbers come from `app.threshold_view`, the figures from `app.figures`.
"""

from __future__ import annotations

import dataclasses
import math

import pandas as pd
import streamlit as st

from app import figures
from app.paper_compare import case_study_table
from app.paper_view import show_case_study_table
from app.threshold_view import (
    CASE_STUDY,
    SCENARIOS_DIR,
    Base,
    Exploration,
    LengthLaw,
    curves_caption,
    explore,
    fitted_law,
    list_scenarios,
    load_base,
    own_figures,
    plan_json,
    summary_numbers,
    with_overrides,
)
from emulator.errors import PrfaasError

INTRO = """
The optimizer (Eq. 3-8 of the paper) sends prompts longer than a threshold **t** to the PrfaaS
cluster and splits the local instances into **n_p** prefill and **n_d** decode. The throughput
**Λ_max** is the smallest of the PrfaaS path's limit Θ_prfaas/p, the local prefill's
Θ_pd_p/(1−p) and the decoders' Θ_pd_d; the best t balances the first two.
"""
KNOB_KEYS = ("te_n_prfaas", "te_b_out_gbps", "te_use_lognormal", "te_mu", "te_sigma")
METRIC_HELP = {
    "Bottleneck": "the term of Eq. 6 that sets Λ_max at the optimum",
    "PrfaaS path bound by": "Eq. 3 at the optimum: compute (N_prfaas / T_remote) or link (B_out / S_kv)",
}


@st.cache_resource(show_spinner=False, max_entries=16)
def _load_base(path: str, stamp_ns: int) -> Base:
    del stamp_ns  # part of the cache key only: an edited scenario is read again
    return load_base(SCENARIOS_DIR / path)


@st.cache_data(show_spinner=False, max_entries=4)
def _paper_table(path: str, stamp_ns: int) -> pd.DataFrame:
    """Paper vs project at the scenario's own values (the knobs do not move it)."""
    return case_study_table(own_figures(_load_base(path, stamp_ns)))


def _reset_knobs() -> None:
    """A new scenario starts from its own values."""
    for key in KNOB_KEYS:
        st.session_state.pop(key, None)


def _knobs(base: Base) -> tuple[int, float, LengthLaw | None]:
    own_law = base.length_law
    start = own_law or fitted_law(base.inputs.lengths)
    b_out_gbps = round(base.egress_gbps, 3)
    defaults = {"te_n_prfaas": base.inputs.num_prfaas, "te_b_out_gbps": b_out_gbps,
                "te_use_lognormal": own_law is not None, "te_mu": start.mu, "te_sigma": start.sigma}
    for key, value in defaults.items():
        st.session_state.setdefault(key, value)
    cols = st.columns(4)
    n_prfaas = cols[0].slider("N_prfaas (PrfaaS instances)", 0, max(64, 4 * base.inputs.num_prfaas),
                              key="te_n_prfaas")
    b_out = cols[1].slider("B_out (Gbit/s)", 0.0, max(400.0, 4 * b_out_gbps), step=0.001,
                           format="%.3f", key="te_b_out_gbps", help="the cross-datacenter link's bandwidth")
    if own_law is None:
        st.toggle("Replace the workload's lengths with a log-normal", key="te_use_lognormal",
                  help="this scenario's input lengths are not log-normal; the sliders start from "
                       "a log-normal fitted to them")
    use_law = bool(st.session_state["te_use_lognormal"])
    # The ranges always hold the scenario's own values (a slider refuses a value outside them).
    mu = cols[2].slider("Length log-mean μ", min(4.0, math.floor(start.mu)),
                        max(13.0, math.ceil(start.mu)), step=0.05, key="te_mu", disabled=not use_law,
                        help="exp(μ) is the median prompt length in tokens")
    sigma = cols[3].slider("Length log-spread σ", 0.0, max(3.0, math.ceil(start.sigma)), step=0.05,
                           key="te_sigma", disabled=not use_law)
    law = dataclasses.replace(start, mu=float(mu), sigma=float(sigma)) if use_law else None
    return int(n_prfaas), float(b_out), law


def _metrics(found: Exploration) -> None:
    numbers = summary_numbers(found.plan)
    numbers["PrfaaS path bound by"] = found.prfaas_bound
    labels = list(numbers)
    for row, widths in ((labels[:5], [1] * 5), (labels[5:], [1, 1, 2, 1])):
        for col, label in zip(st.columns(widths), row, strict=True):
            col.metric(label, numbers[label], help=METRIC_HELP.get(label))


def _t_chart(found: Exploration) -> None:
    st.plotly_chart(figures.threshold_figure(found), key="t_chart")
    best = found.plan.prfaas
    st.caption(curves_caption(best.n_p, best.n_d, is_shaded=bool(found.shaded_ranges)))


def _split_chart(found: Exploration) -> None:
    st.plotly_chart(figures.split_figure(found), key="split_chart")


st.set_page_config(page_title="Threshold explorer · PrfaaS Lab", layout="wide")
st.title("Threshold explorer")
st.markdown(INTRO)
scenario_name = st.selectbox("Scenario", list_scenarios(), key="te_scenario", on_change=_reset_knobs)
try:
    if scenario_name is None:
        raise PrfaasError(f"no scenario files under {SCENARIOS_DIR}; add a .yaml scenario there")
    base = _load_base(scenario_name, (SCENARIOS_DIR / scenario_name).stat().st_mtime_ns)
except (PrfaasError, ValueError, OSError) as err:
    st.error(str(err))
    st.stop()
st.caption(f"{base.scenario.description or base.scenario.name} · profile: {base.tables.source}")
knobs = _knobs(base)
try:
    exploration = explore(with_overrides(base, *knobs))
except ValueError as err:
    st.error(str(err))
    st.stop()
_metrics(exploration)
left, right = st.columns([3, 2])
with left:
    st.markdown("**Eq. 6 against the threshold t**")
    _t_chart(exploration)
with right:
    st.markdown("**Λ_max against the local split**")
    _split_chart(exploration)
if scenario_name == CASE_STUDY:
    st.subheader("The paper beside the project")
    show_case_study_table(
        _paper_table(scenario_name, (SCENARIOS_DIR / scenario_name).stat().st_mtime_ns),
        "Project: `python -m emulator optimize` on this scenario at its own values (the knobs "
        "above do not move this table): throughput ratios are PrfaaS's Λ_max over each baseline's, "
        "egress is at Λ_max.")
with st.expander("The optimizer's answer (as `python -m emulator optimize` prints it)"):
    st.json(plan_json(exploration.plan, base.tables))
