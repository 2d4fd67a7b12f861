"""The Threshold explorer headless (AppTest): the case study's optimum, knobs that move it, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from emulator.control.throughput_model import optimize
from emulator.plane.inputs import model_inputs
from emulator.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "app" / "pages" / "4_Threshold_explorer.py"


def _page() -> AppTest:
    app = AppTest.from_file(str(PAGE), default_timeout=30).run()
    assert not app.exception, [e.message for e in app.exception]
    return app


def _metrics(app: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in app.metric}


def _charts(app: AppTest) -> dict[str, dict]:
    return {c.proto.id.split("-", 2)[2]: json.loads(c.proto.spec) for c in app.get("plotly_chart")}


def _set(app: AppTest, key: str, value: float) -> AppTest:
    app.slider(key=key).set_value(value).run()
    assert not app.exception, [e.message for e in app.exception]
    return app


def test_case_study_optimum_is_shown() -> None:
    app = _page()
    assert app.selectbox(key="te_scenario").value == "paper-case-study.yaml"
    metrics = _metrics(app)
    assert metrics["Threshold t (tokens)"] == "19,620"
    assert metrics["Split n_p:n_d"] == "3:5"
    assert metrics["Bottleneck"] == "PrfaaS compute"  # named (labels.py), not the code prfaas-compute
    assert metrics["PrfaaS path bound by"] == "compute"
    assert not app.error
    # nothing is shaded at the case study's link, so the chart's caption does not speak of shading
    caption = next(c.value for c in app.caption if c.value.startswith("Curves at the optimum"))
    assert "Shaded" not in caption and "No threshold on this chart is link-bound" in caption


def test_lambda_max_equals_the_optimizers() -> None:
    app = _page()
    plan = optimize(model_inputs(load_scenario(ROOT / "scenarios" / "paper-case-study.yaml"))[0])
    shown = json.loads(app.json[0].value)
    assert {k: shown[k] for k in plan.as_dict()} == plan.as_dict()
    assert _metrics(app)["Λ_max (req/s)"] == f"{plan.prfaas.lambda_max:.3f}"


def test_charts_mark_the_optimum_and_the_baselines() -> None:
    charts = _charts(_page())
    assert set(charts) == {"t_chart", "split_chart"}
    t_chart = charts["t_chart"]
    names = [trace["name"] for trace in t_chart["data"]]
    assert names == ["Θ_prfaas / p", "Θ_pd_p / (1 − p)", "Θ_pd_d", "Λ_max(t)"]
    lines = [s for s in t_chart["layout"]["shapes"] if s["type"] == "line"]
    assert any(s["x0"] == s["x1"] == 19_620 for s in lines)  # the vertical line at t*
    texts = " ".join(a["text"] for a in t_chart["layout"]["annotations"])
    assert "t* = 19,620" in texts and "homogeneous PD" in texts and "naive" in texts
    assert not [s for s in t_chart["layout"]["shapes"] if s["type"] == "rect"]  # link never binds
    assert charts["split_chart"]["data"][0]["x"] == ["1:7", "2:6", "3:5", "4:4", "5:3", "6:2", "7:1"]


def test_a_thin_link_makes_egress_the_bottleneck_and_moves_t() -> None:
    app = _set(_page(), "te_b_out_gbps", 5.0)
    metrics = _metrics(app)
    assert metrics["Bottleneck"] == "link egress" and metrics["PrfaaS path bound by"] == "link"
    assert metrics["Threshold t (tokens)"] != "19,620"
    assert int(metrics["Threshold t (tokens)"].replace(",", "")) > 19_620
    shaded = [s for s in _charts(app)["t_chart"]["layout"]["shapes"] if s["type"] == "rect"]
    assert len(shaded) == 1
    assert any(c.value.startswith("Curves at the optimum") and "Shaded: thresholds" in c.value for c in app.caption)
    app = _set(app, "te_b_out_gbps", 0.5)  # tiny: the PrfaaS path is still link-bound
    assert _metrics(app)["PrfaaS path bound by"] == "link"


def test_prfaas_instances_and_lengths_recompute() -> None:
    app = _page()
    before = float(_metrics(app)["Λ_max (req/s)"])
    app = _set(app, "te_n_prfaas", 8)
    assert float(_metrics(app)["Λ_max (req/s)"]) > before
    app = _set(app, "te_mu", 8.0)  # shorter prompts: fewer cross the link
    assert _metrics(app)["Threshold t (tokens)"] != "19,620"


@pytest.mark.parametrize(("key", "value", "message"), [
    ("te_sigma", 0.0, "sigma: 0 must be positive"),
    ("te_b_out_gbps", 0.0, "B_out: 0 Gbit/s; use a positive link bandwidth"),
])
def test_invalid_knobs_show_an_error(key: str, value: float, message: str) -> None:
    app = _set(_page(), key, value)
    assert len(app.error) == 1 and app.error[0].value.startswith(message)
    assert not app.metric  # nothing stale is shown


def test_another_scenario_starts_from_its_own_values() -> None:
    app = _set(_page(), "te_b_out_gbps", 5.0)
    app.selectbox(key="te_scenario").set_value("classroom-basic.yaml").run()
    assert not app.exception and not app.error
    assert app.slider(key="te_b_out_gbps").value == pytest.approx(0.2)  # its 200 Mbit/s link
    assert app.slider(key="te_n_prfaas").value == 1
    assert app.slider(key="te_sigma").disabled  # uniform lengths: the log-normal is opt-in
    before = _metrics(app)["Threshold t (tokens)"]
    app.toggle(key="te_use_lognormal").set_value(True).run()
    assert not app.exception and not app.slider(key="te_sigma").disabled
    assert _metrics(app)["Threshold t (tokens)"] != before
