"""The Sweeps page's own helpers: a point's label and Figure 5's optimum beside the paper's. The
figures are emulator.sweep.figures' and .findings', shared with report.html."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from app.paper_figures import CASE_STUDY
from emulator.sweep.figures import level_text
from emulator.sweep.findings import Figure5


def point_label(rows: pd.DataFrame, point_id: str, axes: Sequence[str]) -> str:
    """`router.threshold_tokens=8000, seed=1 (virtual)`: a point by its values, for a picker."""
    row = rows[rows["point_id"] == point_id].iloc[0]
    values = [f"{axis}={level_text(row[axis])}" for axis in axes]
    return f"{', '.join(values)}, seed={row['seed']} ({row['engine']})"


def optimum_table(f: Figure5, base_is_case_study: bool) -> pd.DataFrame:
    """Figure 5's optimum three ways and the split, beside the paper's (for its case study)."""
    rows = [("t* by the optimizer", f.optimizer_t, CASE_STUDY.threshold_tokens),
            ("t* as the grid's best Λ_max", f.best_t_on_grid, CASE_STUDY.threshold_tokens),
            ("t* where the prefill limits cross (Eq. 7)", f.crossing_t, CASE_STUDY.threshold_tokens)]
    table = [{"Figure": name, "Sweep": "none" if value is None else f"{value:,.0f}",
              "Paper": f"{paper:,.0f}" if base_is_case_study else "",
              "Difference": f"{value / paper - 1:+.1%}" if base_is_case_study and value is not None else ""}
             for name, value, paper in rows]
    split, paper_split = f"{f.optimizer_split}:{f.optimizer_n_d}", f"{CASE_STUDY.num_prefill}:{CASE_STUDY.num_decode}"
    table.append({"Figure": "split N_p:N_d by the optimizer", "Sweep": split,
                  "Paper": paper_split if base_is_case_study else "",
                  "Difference": ("same" if split == paper_split else "differs") if base_is_case_study else ""})
    return pd.DataFrame(table)
