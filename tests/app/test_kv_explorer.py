"""The KV explorer headless (AppTest): the calculator's numbers, Eq. 2 from the sliders, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from model_stub.kv_calculator import REAL_MODELS

PAGE = Path(__file__).resolve().parents[2] / "app" / "pages" / "3_KV_explorer.py"


def _page() -> AppTest:
    app = AppTest.from_file(str(PAGE), default_timeout=30).run()
    assert not app.exception, [e.message for e in app.exception]
    return app


def _chart_keys(app: AppTest) -> set[str]:
    return {c.proto.id.split("-", 2)[2] for c in app.get("plotly_chart")}


def test_renders_tables_and_charts() -> None:
    app = _page()
    assert app.title[0].value == "KV explorer"
    assert _chart_keys(app) == {"skv_chart", "phi_chart", "egress_chart"}
    assert not app.error


def test_kv_table_shows_the_calculators_bytes_per_token() -> None:
    table = _page().dataframe[0].value.set_index("model")
    assert table.loc["Kimi-Linear-48B-A3B", "kv_bytes_per_token"] == 8_064
    assert table.loc["Llama-3-70B", "kv_bytes_per_token"] == 327_680
    for spec in REAL_MODELS.values():
        assert table.loc[spec.name, "kv_bytes_per_token"] == spec.kv_bytes_per_token()
        assert table.loc[spec.name, "cache_bytes"] == spec.cache_bytes(32_768)


def test_curves_follow_the_model_picker() -> None:
    app = _page()
    app.multiselect(key="kv_curve_models").set_value(["Llama-3-70B"]).run()
    spec = next(json.loads(c.proto.spec) for c in app.get("plotly_chart")
                if c.proto.id.endswith("-skv_chart"))
    assert [t["name"] for t in spec["data"]] == ["Llama-3-70B, dense"]


def test_egress_tables_follow_the_sliders() -> None:
    app = _page()
    app.slider(key="kv_num_gpus").set_value(64)
    app.slider(key="kv_gpus_per_instance").set_value(8)
    app.slider(key="kv_l_avg").set_value(20_480).run()
    assert not app.exception and not app.error
    hybrid, dense = (d.value for d in app.dataframe if "egress_gbps" in d.value.columns)
    assert hybrid.set_index("model").loc["Kimi Linear 48B", "egress_gbps"] == pytest.approx(24.64)
    assert set(dense["model"]) == {"MiniMax-M2.5 229B", "Qwen3-235B"}
    assert (dense["egress_gbps"].min() > hybrid["egress_gbps"].max())


@pytest.mark.parametrize(("key", "value", "message"), [
    ("kv_tokens", -1, "tokens: -1 is negative; use 0 or more"),
    ("kv_link_gbps", 0.0, "link: 0.0 Gbit/s; use a positive bandwidth"),
])
def test_invalid_inputs_show_an_error(key: str, value: float, message: str) -> None:
    app = _page()
    app.number_input(key=key).set_value(value).run()
    assert not app.exception
    assert [e.value for e in app.error] == [message]
