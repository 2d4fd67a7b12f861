"""One palette: each model has one colour on every Home and KV explorer chart, the two presets
whose cache curves nearly coincide stay visible apart, and each route has one colour on the Runs
page, in report.html and on the Live charts."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from app.live_charts import queues_spec, share_spec, ttft_spec
from app.live_view import recorded_frame
from app.palette import MODEL_COLORS, POOL_COLORS, ROUTE_COLORS, canonical_model, model_color
from app.paper_figures import PHI_KV_TABLE
from emulator.control.types import Route
from emulator.telemetry.recorder import load_run
from emulator.telemetry.report import TITLES
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


def _report_traces(report: str, title: str) -> dict[str, dict]:
    """{trace name: trace} of report.html's chart under the heading `title`."""
    section = report.split(f"<h2>{title}</h2>", 1)[1].split("</section>", 1)[0]
    start = re.search(r'Plotly\.newPlot\(\s*"[^"]+",\s*', section).end()
    data, _ = json.JSONDecoder().raw_decode(section, start)
    return {trace["name"]: trace for trace in data}


def _series_colors(spec: dict) -> dict[str, str]:
    """{series: colour} of a Live chart, from the colour scale its line layers share."""
    scale = spec["layer"][0]["layer"][0]["encoding"]["color"]["scale"]
    return dict(zip(scale["domain"], scale["range"], strict=True))


@pytest.mark.slow
def test_a_route_has_one_colour_on_the_runs_page_report_html_and_the_live_charts(runs_dir: Path) -> None:
    run_dir = runs_dir / "fast-live"
    runs = _run(str(PAGES / "2_Runs.py"))
    runs.text_input(key="runs_dir").set_value(str(runs_dir)).run()
    runs.selectbox(key="runs_open").set_value("fast-live").run()
    assert not runs.exception
    page_cdf = {t["name"]: t["line"]["color"] for t in _charts(runs)["ttft_cdf"]["data"]}
    report = (run_dir / "report.html").read_text()
    report_cdf = {name: t["line"]["color"] for name, t in _report_traces(report, TITLES["ttft_cdf"]).items()}
    report_ttft = {name: t["marker"]["color"] for name, t in _report_traces(report, TITLES["ttft_time"]).items()}
    requests, timeseries, _ = load_run(run_dir)
    frame = recorded_frame(requests, timeseries)
    queues, share = _series_colors(queues_spec(frame)), _series_colors(share_spec(frame))

    routes = {route.value: ROUTE_COLORS[route.value] for route in Route}
    assert page_cdf == report_cdf == report_ttft == routes
    assert len(set(routes.values())) == len(routes)
    # Live: each prefill pool in its route's colour, the share routed remote in the PrfaaS route's.
    assert queues == {"remote prefill": routes["prfaas"], "local prefill": routes["local"],
                      "decode": POOL_COLORS["pd_d"]}
    assert share["since the start"] == routes["prfaas"]
    # No other series on these pages wears a route's colour.
    others = set(_series_colors(ttft_spec(frame)).values())
    assert not others & set(routes.values())
    assert POOL_COLORS == {"prfaas": routes["prfaas"], "pd_p": routes["local"], "pd_d": POOL_COLORS["pd_d"]}
