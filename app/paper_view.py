"""How the dashboard shows the paper beside the project: the case-study table and its notes.

One renderer for the Threshold explorer (the optimizer's figures) and for a recorded run of
paper-case-study (the Runs page), so both read alike; the numbers come from `app.paper_compare`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd
import streamlit as st

from app.paper_compare import run_vs_paper_table
from app.tables import show_table

PAPER_SCENARIO = "paper-case-study"  # the scenario whose runs are shown beside the paper (its name)
TTFT_NOTE = ("The paper's TTFT (Table 6) is a request's prefill service time, with no queueing in "
             "it; the project's comparable figures are its `ttft_noqueue` ones (the TTFT no queue "
             "rows). Table 6's TTFT values are not in the project's reference notes, so they are "
             "not shown.")
RUN_NOTE = ("Project: this run's starting threshold and split and its mean egress over the run. "
            "Throughput ratios need runs of the baselines on the same workload (`python -m emulator "
            "baselines`); without them they show -.")


def show_text_table(table: pd.DataFrame, wrap: tuple[str, ...] = ("Paper source",)) -> None:
    """A table of display strings (as `app.paper_compare` builds them): columns fitted to their
    text and the page, figures right-aligned, every row shown; a long source wraps."""
    show_table(table, wrap=wrap)


def show_case_study_table(table: pd.DataFrame, note: str = "") -> None:
    """A `paper_compare.case_study_table` with the TTFT note."""
    show_text_table(table)
    st.caption(f"{note} {TTFT_NOTE}".strip())


def show_run_vs_paper(doc: Mapping[str, Any], homogeneous: Mapping[str, Any] | None = None,
                      naive: Mapping[str, Any] | None = None) -> None:
    """The case-study table for a recorded run of paper-case-study: `doc` is its summary.json
    document (`summary` and `meta`); `homogeneous` and `naive` are the baselines' documents."""
    show_case_study_table(run_vs_paper_table(doc, homogeneous, naive), RUN_NOTE)
