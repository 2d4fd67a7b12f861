"""A table as every page shows it: each column wide enough for its header and its longest cell
(`app.table_fit`), the whole within the page's width, long free text wrapped, every row shown up to
`max_rows` (no scrolling inside a short table), `-` for a missing cell.

The text comes from `runs_view.as_text` (or a page's own builder); this module only lays it out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd
import streamlit as st

from app.table_fit import MIN_WRAP_PX, PAGE_PX, Fit, fit_columns, is_figure_column, number_text

INDEX = "_index"  # Streamlit's name for the index column in a column config
MAX_ROWS = 30


def table_fit(shown: pd.DataFrame, hide_index: bool = True, headers: Mapping[str, str] | None = None,
              budget_px: int = PAGE_PX, wrap: Iterable[str] = (), min_wrap_px: int = MIN_WRAP_PX) -> Fit:
    """The widths of `shown` (display text) under `headers` (a column's label, else its name)."""
    headers = headers or {}
    columns = {str(col): (headers.get(str(col), str(col)), shown[col].tolist()) for col in shown.columns}
    if not hide_index:
        columns = {INDEX: (str(shown.index.name or ""), [str(i) for i in shown.index]), **columns}
    return fit_columns(columns, budget_px, wrap, min_wrap_px)


def show_table(frame: pd.DataFrame, key: str | None = None, hide_index: bool = True, *,
               config: Mapping[str, Any] | None = None, shown: pd.DataFrame | None = None,
               budget_px: int = PAGE_PX, wrap: Iterable[str] = (), min_wrap_px: int = MIN_WRAP_PX,
               max_rows: int = MAX_ROWS, hidden: Iterable[str] = ()) -> Fit:
    """`frame` as a Streamlit dataframe, no header or cell clipped and no column past the page.

    `config` gives labels and formats, to which the widths are added; `shown` is the text the grid
    draws (default: `frame`'s cells, numbers as their `config` format writes them). Text columns
    of figures are right-aligned; `hidden` columns stay in the data but are not drawn. Returns the
    fit, for tests."""
    config = dict(config or {})
    hidden = set(hidden)
    shown = drawn_text(frame, config) if shown is None else shown
    shown = shown[[col for col in shown.columns if col not in hidden]]
    headers = {col: str(cfg.get("label") or col) for col, cfg in config.items() if isinstance(cfg, Mapping)}
    fit = table_fit(shown, hide_index, headers, budget_px, wrap, min_wrap_px)
    columns: dict[str, Any] = {}
    for col, px in fit.widths.items():
        if col in config:
            text_of_figures = config[col].get("alignment") is None and is_figure_column(shown[col].tolist())
            columns[col] = {**config[col], "width": px, **({"alignment": "right"} if text_of_figures else {})}
        elif col != INDEX:
            right = is_figure_column(shown[col].tolist())
            columns[col] = st.column_config.TextColumn(col, width=px, alignment="right" if right else "left")
        else:
            columns[col] = st.column_config.Column(width=px)
    order = [col for col in frame.columns if col not in hidden] if hidden else None
    st.dataframe(frame, hide_index=hide_index, key=key, column_config=columns, placeholder="-",
                 row_height=fit.row_px, height=fit.height_px(len(frame), max_rows), column_order=order)
    return fit


def drawn_text(frame: pd.DataFrame, config: Mapping[str, Any]) -> pd.DataFrame:
    """`frame`'s cells as the grid draws them: a number column under its config's format."""
    shown = frame.copy()
    for col, cfg in config.items():
        type_config = cfg.get("type_config") if isinstance(cfg, Mapping) else None
        if col in shown.columns and isinstance(type_config, Mapping) and type_config.get("type") == "number":
            fmt = type_config.get("format")
            shown[col] = [number_text(v.item() if hasattr(v, "item") else v, fmt) for v in frame[col]]
    return shown
