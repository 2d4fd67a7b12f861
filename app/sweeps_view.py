"""The Sweeps page's own helpers: the sweep folders under a directory, a point's label, the points as
display text, and Figure 5's optimum beside the paper's. The figures are emulator.sweep.figures' and
.findings', shared with report.html."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from app.paper_figures import CASE_STUDY
from app.runs_view import as_text
from emulator.errors import RunFileError
from emulator.sweep.figures import OK, level_text, succeeded
from emulator.sweep.findings import Figure5
from emulator.sweep.store import DOC
from emulator.telemetry.labels import label, setting_label
from emulator.telemetry.run_files import RunFolder, list_folders

HIDDEN_COLUMNS = ("node_id",)  # which Ray node ran a point: the sweep's log, not its results
SWEEP_FILE_SUFFIXES = (".yaml", ".yml")
# The metric a sweep's charts open on, the first of these it kept that varies over its points:
# latency first (what a user of PrfaaS feels), then throughput. A constant metric draws a flat line.
PREFERRED_METRICS = ("ttft_p90_s", "ttft_p50_s", "measured_lambda_max", "lambda_max", "capacity_rps",
                     "throughput_rps", "egress_gbps")


def find_sweep_dirs(directory: Path) -> list[RunFolder]:
    """The folders directly in `directory` that hold sweep.json, newest first; a link to a folder is
    never entered (the sweep is read through run_files, so nothing elsewhere is reached)."""
    try:
        names = list_folders(directory)[0]
    except RunFileError:
        return []
    found = []
    for name in names:
        folder = RunFolder(directory, name)
        try:
            info = folder.info(DOC)
        except RunFileError:
            continue
        if info is not None:
            found.append((info.st_mtime, name, folder))
    return [folder for _, _, folder in sorted(found, key=lambda item: item[:2], reverse=True)]


def sweep_file_of(doc: dict, root: Path) -> Path | None:
    """The sweep file a sweep.json names (relative to `root`), or None unless it is a YAML file: the
    page reads no other kind of file a folder names."""
    name = doc.get("sweep_file")
    if not isinstance(name, str) or "\0" in name:
        return None
    path = root / name
    return path if path.suffix in SWEEP_FILE_SUFFIXES else None


def point_label(rows: pd.DataFrame, point_id: str, axes: Sequence[str]) -> str:
    """`threshold t (tokens) = 8000, seed 1 (virtual)`: a point by its values, for a picker."""
    row = rows[rows["point_id"] == point_id].iloc[0]
    values = [f"{setting_label(axis)} = {level_text(row[axis])}" for axis in axes]
    return f"{', '.join(values)}, seed {row['seed']} ({row['engine']})"


def points_table(rows: pd.DataFrame, axes: Sequence[str]) -> pd.DataFrame:
    """`rows` (sweep.parquet's, any subset of its columns) as the Runs page's tables read: every
    column under its human name (labels.py: `threshold t (tokens)`, not `router.threshold_tokens`),
    the axes' levels as the sweep file wrote them (`8000`, not `8000.0`), the seed as it is, the
    figures to three significant digits, and `-` for every missing cell."""
    shown = rows.drop(columns=list(HIDDEN_COLUMNS), errors="ignore").copy()
    for axis in (a for a in axes if a in shown.columns):
        shown[axis] = shown[axis].map(lambda v: None if pd.isna(v) else level_text(v)).astype(object)
    if "seed" in shown.columns:
        shown["seed"] = shown["seed"].map(lambda v: None if pd.isna(v) else str(int(v))).astype(object)
    return as_text(shown).rename(columns={c: setting_label(c) if c in axes else label(c) for c in shown.columns})


def point_columns(rows: pd.DataFrame, axes: Sequence[str], metrics: Sequence[str], metric: str | None) -> list[str]:
    """The columns of the points table: every one, or (a metric chosen) the point, its axes, seed
    and engine, that metric, its status, and the reason where a point failed; so it fits the page."""
    if metric is None:
        return list(rows.columns)
    failed = "status" in rows.columns and bool((rows["status"] != OK).any())
    keep = {"point_id", *axes, "seed", "engine", metric, "status", *(["reason"] if failed else [])}
    return [c for c in rows.columns if c in keep]


def default_metric(rows: pd.DataFrame, metrics: Sequence[str]) -> int:
    """The index in `metrics` the charts open on: the first PREFERRED_METRICS one that varies over
    the sweep's successful points, else the first that varies, else the first."""
    done = succeeded(rows)
    varying = [m for m in metrics if m in done.columns and done[m].dropna().nunique() > 1]
    for metric in (*(m for m in PREFERRED_METRICS if m in varying), *varying):
        return list(metrics).index(metric)
    return 0


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
