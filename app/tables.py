"""A display-text table as the Runs and Sweeps pages show it: each column wide enough for its header
and its longest cell, `-` for a missing cell. The text itself comes from `runs_view.as_text` (or a
page's own builder on top of it); this module only lays it out.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app.runs_view import column_widths


def show_table(frame: pd.DataFrame, key: str, hide_index: bool = True) -> None:
    """`frame` (display text) as a Streamlit dataframe under `key`, no header clipped."""
    widths = column_widths(frame)
    config = {col: st.column_config.Column(width=px) for col, px in widths.items()
              if col != "_index" or not hide_index}
    st.dataframe(frame, hide_index=hide_index, key=key, column_config=config, placeholder="-")
