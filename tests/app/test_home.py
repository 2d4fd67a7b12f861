"""The Home page runs headless (AppTest) and shows the presets' real KV sizes."""

from __future__ import annotations

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

from app.table_fit import PAGE_PX, natural_px, number_text
from model_stub.config import PRESET_NAMES, get_preset

HOME = Path(__file__).resolve().parents[2] / "app" / "Home.py"


def _run_home() -> AppTest:
    app = AppTest.from_file(str(HOME), default_timeout=30).run()
    assert not app.exception, [e.message for e in app.exception]
    return app


def _kv_by_preset(app: AppTest) -> dict[str, int]:
    table = app.dataframe[0].value
    return dict(zip(table["preset"], table["kv_bytes_per_token"].astype(int), strict=True))


def test_home_renders_title_table_and_chart() -> None:
    app = _run_home()
    assert app.title[0].value == "PrfaaS Lab"
    assert len(app.dataframe) == 1
    assert app.get("plotly_chart"), "the cache-size chart is missing"


def test_table_lists_presets_with_kv_bytes_per_token() -> None:
    app = _run_home()
    assert app.radio(key="size").value == "small"
    expected = {name: get_preset(name, "small").kv_bytes_per_token() for name in PRESET_NAMES}
    assert _kv_by_preset(app) == expected


def test_size_selector_changes_the_numbers() -> None:
    app = _run_home()
    small = _kv_by_preset(app)
    app.radio(key="size").set_value("tiny").run()
    assert not app.exception
    tiny = _kv_by_preset(app)
    assert tiny == {name: get_preset(name, "tiny").kv_bytes_per_token() for name in PRESET_NAMES}
    assert tiny != small


def test_tokens_input_changes_cache_bytes() -> None:
    app = _run_home()
    app.number_input(key="tokens").set_value(1024).run()
    table = app.dataframe[0].value.set_index("preset")
    for name in PRESET_NAMES:
        assert table.loc[name, "cache_bytes"] == get_preset(name, "small").cache_bytes(1024)


def test_no_header_or_cell_is_clipped_in_the_presets_table() -> None:
    """Every column as wide as its header ("Cache at contex" was cut) and its cells as the grid
    writes them, and the table within a 1280 px window's page (it ran off the right edge)."""
    app = AppTest.from_file(str(HOME), default_timeout=30).run()
    table, columns = app.dataframe[0].value, json.loads(app.dataframe[0].proto.columns)
    assert columns["cache_bytes"]["label"] == "Cache at context"
    for key in table.columns:
        fmt = (columns[key].get("type_config") or {}).get("format")
        cells = [number_text(v.item() if hasattr(v, "item") else v, fmt) for v in table[key]]
        assert columns[key]["width"] >= natural_px(columns[key]["label"], cells), key
    assert sum(columns[key]["width"] for key in table.columns) <= PAGE_PX
    assert set(table["pattern"]) >= {"(3 kda, mla) × 2", "8 full"}  # layouts at a glance, not 12 names
