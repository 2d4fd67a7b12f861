"""How the dashboard shows the paper beside the project: the case-study table and its notes.

One renderer for the Threshold explorer (the optimizer's figures) and for a recorded run of
paper-case-study (the Runs page), so both read alike; the numbers come from `app.paper_compare`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pandas as pd
import streamlit as st

from app.paper_compare import run_vs_paper_table

PAPER_SCENARIO = "paper-case-study"  # the scenario whose runs are shown beside the paper (its name)
PX_PER_CHAR, PX_PADDING = 8, 24  # the grid's 14 px sans font averages under 8 px a character
ROW_PX, BORDER_PX = 35, 3  # a grid row (the header too): a table shows every row, no scrolling
FIGURE = re.compile(r"[-+]?[\d,.:]+(x|%| points)?|-|same|differs")  # a cell of a column of figures
TTFT_NOTE = ("The paper's TTFT (Table 6) is a request's prefill service time, with no queueing in "
             "it; the project's comparable figures are its `ttft_noqueue` ones (the TTFT no queue "
             "rows). Table 6's TTFT values are not in the project's reference notes, so they are "
             "not shown.")
RUN_NOTE = ("Project: this run's starting threshold and split and its mean egress over the run. "
            "Throughput ratios need runs of the baselines on the same workload (`python -m emulator "
            "baselines`); without them they show -.")


def fitted_columns(table: pd.DataFrame) -> dict[str, Any]:
    """A column config that makes each text column as wide as its header or its longest cell,
    so neither is clipped; columns of figures are right-aligned, as numbers are."""
    config: dict[str, Any] = {}
    for name in table.columns:
        cells = [str(cell) for cell in table[name]]
        chars = max([len(str(name)), *map(len, cells)])
        is_figures = all(FIGURE.fullmatch(cell) for cell in cells)
        config[name] = st.column_config.TextColumn(name, width=PX_PADDING + PX_PER_CHAR * chars,
                                                   alignment="right" if is_figures else "left")
    return config


def show_text_table(table: pd.DataFrame) -> None:
    """A table of display strings (as `app.paper_compare` builds them), columns fitted."""
    st.dataframe(table, hide_index=True, column_config=fitted_columns(table),
                 height=ROW_PX * (len(table) + 1) + BORDER_PX)


def show_case_study_table(table: pd.DataFrame, note: str = "") -> None:
    """A `paper_compare.case_study_table` with the TTFT note."""
    show_text_table(table)
    st.caption(f"{note} {TTFT_NOTE}".strip())


def show_run_vs_paper(doc: Mapping[str, Any], homogeneous: Mapping[str, Any] | None = None,
                      naive: Mapping[str, Any] | None = None) -> None:
    """The case-study table for a recorded run of paper-case-study: `doc` is its summary.json
    document (`summary` and `meta`); `homogeneous` and `naive` are the baselines' documents."""
    show_case_study_table(run_vs_paper_table(doc, homogeneous, naive), RUN_NOTE)
