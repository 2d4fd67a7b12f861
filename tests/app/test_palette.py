"""One palette: each model has one colour on every Home and KV explorer chart, and the two presets
whose cache curves nearly coincide stay visible apart."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
from streamlit.testing.v1 import AppTest

from app.palette import MODEL_COLORS, canonical_model, model_color
from app.paper_figures import PHI_KV_TABLE
from model_stub.config import PRESET_NAMES, get_preset
from model_stub.kv_calculator import REAL_MODELS

APP = Path(__file__).resolve().parents[2] / "app"
PAGES = APP / "pages"
KINDS = (", hybrid", ", dense")


def _run(path: str) -> AppTest:
    app = AppTest.from_file(path, default_timeout=30).run()
    assert not app.exception, [e.message for e in app.exception]
    return app


def _charts(app: AppTest) -> dict[str, dict]:
    """Plotly figures by their Streamlit key (the element id ends with `-<key>`)."""
    return {c.proto.id.split("-", 2)[2]: json.loads(c.proto.spec) for c in app.get("plotly_chart")}


def _values(data: list | dict) -> list:
    """A trace's x or y: plotly writes numeric arrays as base64 (`bdata`, `dtype`)."""
    if isinstance(data, dict):
        return np.frombuffer(base64.b64decode(data["bdata"]), dtype=data["dtype"]).tolist()
    return data


def _trace_colors(figure: dict) -> list[tuple[str, str]]:
    """(model, colour) per trace: a line's colour, or a bar's; the `, kind` suffix dropped."""
    pairs = []
    for trace in figure["data"]:
        name = trace["name"]
        for suffix in KINDS:
            name = name.removesuffix(suffix)
        color = trace.get("line", {}).get("color") or trace.get("marker", {}).get("color")
        pairs.append((name, color))
    return pairs


def test_every_model_shown_has_its_own_entry_and_colours_are_distinct() -> None:
    shown = [*PRESET_NAMES, *(s.name for s in REAL_MODELS.values()), *(r.model for r in PHI_KV_TABLE)]
    assert {canonical_model(name) for name in shown} <= set(MODEL_COLORS)
    assert len(set(MODEL_COLORS.values())) == len(MODEL_COLORS)
    assert model_color("Kimi Linear 48B") == model_color("Kimi-Linear-48B-A3B")
    assert model_color("kimi-linear-mini (tiny)") == model_color("kimi-linear-mini")


def test_a_model_has_one_colour_across_home_and_the_kv_explorer() -> None:
    home = _run(str(APP / "Home.py"))
    kv = _run(str(PAGES / "3_KV_explorer.py"))
    presets = [f"{name} (small)" for name in PRESET_NAMES]
    reals = [spec.name for spec in REAL_MODELS.values()]
    kv.multiselect(key="kv_curve_models").set_value(reals + presets).run()
    assert not kv.exception
    figures = {"home": _charts(home)["cache_chart"], **_charts(kv)}
    assert set(figures) == {"home", "skv_chart", "phi_chart", "egress_chart"}
    colors: dict[str, set[str]] = {}
    for figure in figures.values():
        for name, color in _trace_colors(figure):
            colors.setdefault(canonical_model(name), set()).add(color)
    assert set(colors) == set(MODEL_COLORS)  # every model appears on some chart
    assert colors == {model: {color} for model, color in MODEL_COLORS.items()}
    # the paper's Kimi Linear (Table 3 chart) and the calculator's (S_kv chart) are one model
    phi = dict(_trace_colors(figures["phi_chart"]))
    skv = dict(_trace_colors(figures["skv_chart"]))
    assert phi["Kimi Linear 48B"] == skv["Kimi-Linear-48B-A3B"] == MODEL_COLORS["Kimi-Linear-48B-A3B"]


def test_the_coinciding_preset_lines_are_told_apart() -> None:
    home = _run(str(APP / "Home.py"))
    traces = {t["name"]: t for t in _charts(home)["cache_chart"]["data"]}
    qwen, mimo = traces["qwen3-next-mini"], traces["mimo-v2-flash-mini"]
    # They do nearly coincide: the same KV bytes per token, within 2 % from 32K tokens up.
    assert get_preset("qwen3-next-mini").kv_bytes_per_token() == get_preset(
        "mimo-v2-flash-mini").kv_bytes_per_token()
    x, qwen_y, mimo_y = _values(qwen["x"]), _values(qwen["y"]), _values(mimo["y"])
    assert x == _values(mimo["x"])
    far = [i for i, tokens in enumerate(x) if tokens >= 32_768]
    assert far and all(abs(qwen_y[i] / mimo_y[i] - 1) < 0.02 for i in far)
    # Both are drawn, and differ by colour, dash style and marker.
    for trace in (qwen, mimo):
        assert trace.get("visible", True) is True and "markers" in trace["mode"]
    assert qwen["line"]["color"] != mimo["line"]["color"]
    assert qwen["line"]["dash"] != mimo["line"]["dash"]
    assert qwen["marker"]["symbol"] != mimo["marker"]["symbol"]
    styles = {(t["line"]["dash"], t["marker"]["symbol"]) for t in traces.values()}
    assert len(styles) == len(PRESET_NAMES)
    note = [c.value for c in home.caption if "nearly coincide" in c.value]
    assert note and "qwen3-next-mini" in note[0] and "mimo-v2-flash-mini" in note[0]
