"""The Sweeps page's own helpers; the figures are emulator.sweep.figures', shared with report.html."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from emulator.sweep.figures import level_text


def point_label(rows: pd.DataFrame, point_id: str, axes: Sequence[str]) -> str:
    """`router.threshold_tokens=8000, seed=1 (virtual)`: a point by its values, for a picker."""
    row = rows[rows["point_id"] == point_id].iloc[0]
    values = [f"{axis}={level_text(row[axis])}" for axis in axes]
    return f"{', '.join(values)}, seed={row['seed']} ({row['engine']})"
