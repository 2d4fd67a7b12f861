"""Several recorded runs side by side for the Runs page's Compare tab: the headline numbers with each
run's difference to the first (A), absolute and relative, both TTFT CDFs and egress on one chart.
Runs are named by what tells them apart (scenario, engine, model, then their settings:
`emulator.telemetry.run_names`, as `compare` names them) and drawn in the run colours.

Pure functions over loaded runs (`app.runs_view.Run`); the figures are named and written as
`emulator.telemetry.labels` says, the differences are `emulator.telemetry.compare.MetricDiff`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from string import ascii_uppercase

import pandas as pd

from app.runs_view import Run, link_backend, timeseries_lines, ttft_cdf
from emulator.telemetry.compare import MetricDiff, reason_order, summary_failures
from emulator.telemetry.figures import HEADLINE, egress_bit_per_s, egress_label, number, rate_label
from emulator.telemetry.labels import format_number, label
from emulator.telemetry.palette import run_color
from emulator.telemetry.run_names import run_names

COMPARE_TAB = "Compare runs"  # the Runs page tab this module fills (the Classroom tour names it)

# Counts first, then the headline figures, then egress in the unit that suits the runs.
COUNT_KEYS = ("requests", "completed", "failed_count")


def run_letters(names: Sequence[str]) -> dict[str, str]:
    """{run name: A, B, ...}: the short names the difference columns use (A is the reference)."""
    return {name: ascii_uppercase[i % 26] * (1 + i // 26) for i, name in enumerate(names)}


def compare_names(runs: Mapping[str, Run]) -> dict[str, str]:
    """{run folder name: the run's name by what tells it apart from the others}."""
    return dict(zip(runs, run_names([run.meta.as_recorded for run in runs.values()], list(runs)), strict=True))


def compare_colors(runs: Mapping[str, Run]) -> dict[str, str]:
    """{the run's name (compare_names): its colour}, A's first: the charts' lines and the legend."""
    return {name: run_color(i) for i, name in enumerate(compare_names(runs).values())}


def format_difference(value: float | None) -> str:
    """`+0.8`, `-1,234`, `0`; `-` when either side has no number."""
    if value is None:
        return "-"
    return ("+" if value > 0 else "") + format_number(value)


def format_relative(value: float | None) -> str:
    """`+50%`, `-12.3%`; `-` when A is 0 or missing."""
    if value is None:
        return "-"
    return ("+" if value > 0 else "") + format_number(value * 100) + "%"


def compare_table(runs: Mapping[str, Run]) -> pd.DataFrame:
    """One row per figure, one column per run headed by its letter (A, B, ...: run names from the
    dashboard are long, and a table wider than the page hides its difference columns; the page's
    caption says which run is which), then for each run after the first its difference to A
    (`B - A`) and relative difference (`B - A (%)`); failures by reason last."""
    names = list(runs)
    letters = run_letters(names)
    metas = [run.meta for run in runs.values()]
    text_rows = {label("scenario"): [meta.scenario or "-" for meta in metas],
                 label("engine"): [meta.engine or "-" for meta in metas],
                 label("model"): [meta.model or "-" for meta in metas],
                 label("link_backend"): [link_backend(meta) for meta in metas]}
    figures: list[tuple[str, list[float | None], float]] = [
        (label(key), [number(run.summary, key) for run in runs.values()], 1.0)
        for key in (*COUNT_KEYS, *(key for key, _ in HEADLINE))]
    egress = [egress_bit_per_s(run.summary) for run in runs.values()]
    unit, per_unit = rate_label(egress)
    figures.append((egress_label(unit), egress, per_unit))
    counts = [summary_failures(run.doc) for run in runs.values()]
    for reason in reason_order(reason for count in counts for reason in count):
        figures.append((f"failed: {reason}", [float(count.get(reason, 0)) for count in counts], 1.0))

    diff_columns = [column for name in names[1:]
                    for column in (f"{letters[name]} - A", f"{letters[name]} - A (%)")]
    rows: dict[str, list[str]] = {}
    for row, texts in text_rows.items():
        rows[row] = texts + ["-"] * len(diff_columns)
    for row, values, scale in figures:
        shown = [None if v is None else v / scale for v in values]
        rows[row] = [format_number(v) for v in shown]
        for value in shown[1:]:
            diff = MetricDiff(row, row, shown[0], value)
            rows[row] += [format_difference(diff.difference), format_relative(diff.relative)]
    table = pd.DataFrame.from_dict(rows, orient="index", columns=[*(letters[n] for n in names), *diff_columns])
    table.index.name = "metric"
    return table


def compare_cdfs(runs: Mapping[str, Run]) -> pd.DataFrame:
    """Every run's TTFT CDF over all routes, labelled by the run's name (compare_names)."""
    names = compare_names(runs)
    parts = [ttft_cdf(run.requests, by=None).assign(group=names[key]) for key, run in runs.items()]
    if not parts:
        return pd.DataFrame(columns=["group", "ttft_s", "fraction"])
    return pd.concat(parts, ignore_index=True)


def compare_egress(runs: Mapping[str, Run]) -> tuple[pd.DataFrame, str]:
    """(t_s, run, value) of every run's egress over time, the run by its name (compare_names), in
    the Mbit/s or Gbit/s that suits the largest (figures.rate_label); returns (lines, unit label)."""
    parts = []
    for name, run in zip(compare_names(runs).values(), runs.values(), strict=True):
        lines = timeseries_lines(run.timeseries, {"egress_bit_per_s": name})
        parts.append(lines.rename(columns={"series": "run"}))
    lines = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["t_s", "run", "value"])
    lines["value"] = lines["value"].astype("float64")
    unit, per_unit = rate_label([float(lines["value"].max())] if not lines.empty else [])
    lines["value"] = lines["value"] / per_unit
    return lines, unit

