"""Tables behind the Runs page: recorded runs found under a directory, one run's headline numbers
and per-node figures, TTFT CDFs, Gantt segments, timeseries lines, and several runs side by side.

Pure functions over `emulator.telemetry.recorder.load_run`'s frames, so tests check them without
Streamlit. Nothing here writes a run or starts one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from emulator.compare import reason_order, summary_failures
from emulator.control.types import RequestStatus
from emulator.errors import TelemetryError
from emulator.paths import REPO_ROOT
from emulator.telemetry.figures import HEADLINE, egress_bit_per_s, node_figures, rate_label
from emulator.telemetry.recorder import load_run
from emulator.telemetry.timeseries import frame_rate_unit

DEFAULT_RUNS_DIR = "runs"  # `python -m emulator run`'s default --out is runs/<scenario>-<time>
MAX_GANTT_REQUESTS = 200

# (summary key, label) of the headline numbers, in the order the comparison shows them (then egress,
# in a unit that suits the runs: compare_table).
SUMMARY_METRICS: tuple[tuple[str, str], ...] = (
    ("requests", "requests"),
    ("completed", "completed"),
    ("failed_count", "failed"),
    *HEADLINE,
)
NODE_COLUMNS = ("node", "role", "requests", "busy", "mean queue")
LISTING_COLUMNS = ("run", "scenario", "engine", "link_backend", "requests", "completed", "failed",
                   "ttft_p50_s", "ttft_p90_s", "modified")
EGRESS_SERIES = {"egress_bit_per_s": "egress", "link_capacity_bit_per_s": "link capacity"}
# The Gantt's segments, in drawing order; gantt_segments says where each starts and ends.
SEGMENTS = ("queue", "prefill", "transfer", "decode")


@dataclass(frozen=True, slots=True)
class Run:
    """One loaded run directory: its frames and summary.json document."""

    name: str
    path: Path
    requests: pd.DataFrame
    timeseries: pd.DataFrame
    doc: dict[str, Any]

    @property
    def summary(self) -> dict[str, Any]:
        return self.doc.get("summary", {})

    @property
    def meta(self) -> dict[str, Any]:
        return self.doc.get("meta", {})


@dataclass(frozen=True, slots=True)
class RunListing:
    """The runs found under a directory, newest first, and the directories that are not runs."""

    runs: tuple[Run, ...]
    problems: tuple[tuple[str, str], ...] = field(default=())  # (dir name, load_run's one line)

    def by_name(self) -> dict[str, Run]:
        return {run.name: run for run in self.runs}


def resolve_runs_dir(text: str, root: Path = REPO_ROOT) -> Path:
    """The directory a user typed; a relative path starts at the repository root."""
    text = text.strip()
    if not text:
        raise TelemetryError("runs directory: empty; type a directory such as runs/")
    path = Path(text).expanduser()
    return path if path.is_absolute() else root / path


def find_run_dirs(runs_dir: Path) -> list[Path]:
    """`runs_dir` itself if it holds a summary.json, else its subdirectories that do, newest first.

    A directory without summary.json is not a run and is skipped silently; one with it is offered
    to `load_run`, which names what is wrong when it is foreign or incomplete.
    """
    if not runs_dir.is_dir():
        raise TelemetryError(f"runs directory {str(runs_dir)!r} does not exist; "
                             "type the directory holding your run folders (default runs/)")
    if (runs_dir / "summary.json").is_file():
        return [runs_dir]
    found = [p for p in runs_dir.iterdir() if p.is_dir() and (p / "summary.json").is_file()]
    return sorted(found, key=lambda p: ((p / "summary.json").stat().st_mtime, p.name), reverse=True)


Loader = Callable[[Path], tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]]


def list_runs(runs_dir: Path, loader: Loader = load_run) -> RunListing:
    """Load every run under `runs_dir`; `loader` lets the page put a cache in front of load_run."""
    runs, problems = [], []
    for path in find_run_dirs(runs_dir):
        try:
            requests, timeseries, doc = loader(path)
        except (TelemetryError, OSError) as err:  # OSError: removed or unreadable meanwhile
            problems.append((path.name, str(err)))
            continue
        runs.append(Run(path.name, path, requests, timeseries, doc))
    return RunListing(tuple(runs), tuple(problems))


def listing_table(listing: RunListing) -> pd.DataFrame:
    """One row per run: what ran and its headline TTFT."""
    rows = []
    for run in listing.runs:
        summary, meta = run.summary, run.meta
        rows.append({
            "run": run.name, "scenario": meta.get("scenario"), "engine": meta.get("engine"),
            "link_backend": link_backend(meta), "requests": summary.get("requests"),
            "completed": summary.get("completed"), "failed": summary.get("failed_count"),
            "ttft_p50_s": summary.get("ttft_p50_s"), "ttft_p90_s": summary.get("ttft_p90_s"),
            "modified": pd.Timestamp((run.path / "summary.json").stat().st_mtime, unit="s"),
        })
    return pd.DataFrame(rows, columns=list(LISTING_COLUMNS))


def link_backend(meta: Mapping[str, Any]) -> str:
    """The link backend a run used; the virtual engine models its link and names none."""
    backend = meta.get("link_backend")
    if backend:
        return str(backend)
    return "simulated" if meta.get("engine") == "virtual" else "unknown"


def format_number(value: Any, digits: int = 3) -> str:
    """A summary value for a metric tile: '-' when missing, integers with separators."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int) or abs(value) >= 10 ** (digits - 1):
        return f"{round(value):,}"
    return f"{value:.{digits}g}"


def format_percent(value: Any) -> str:
    """A fraction for a tile, `42%`; `-` when missing (a run recorded before the figure existed)."""
    if value is None or isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return "-"
    return f"{value:.0%}"


def ttft_cdf(requests: pd.DataFrame, by: str | None = "route") -> pd.DataFrame:
    """Long-form (group, ttft_s, fraction) rows of completed requests' TTFT, sorted per group.

    `by="route"` gives one curve per route; `by=None` one curve ("all").
    """
    done = requests[(requests["status"] == RequestStatus.COMPLETED.value) & requests["ttft_s"].notna()]
    groups = {"all": done} if by is None else dict(tuple(done.groupby(done[by].fillna("none"))))
    parts = []
    for name, frame in groups.items():
        ttft = np.sort(frame["ttft_s"].to_numpy(dtype=float))
        if ttft.size:
            fraction = np.arange(1, ttft.size + 1) / ttft.size
            parts.append(pd.DataFrame({"group": str(name), "ttft_s": ttft, "fraction": fraction}))
    if not parts:
        return pd.DataFrame(columns=["group", "ttft_s", "fraction"])
    return pd.concat(parts, ignore_index=True)


def gantt_segments(requests: pd.DataFrame, limit: int = MAX_GANTT_REQUESTS) -> pd.DataFrame:
    """(id, segment, start_s, end_s) of the first `limit` requests by arrival.

    queue: arrival -> prefill start; prefill: its start -> end; transfer: KV transfer start -> end
    (it may overlap prefill when layers stream); decode: once the KV is in place (transfer end,
    else prefill end) -> finish. A missing field (a failed request) drops only that segment.
    """
    if limit < 1:
        raise ValueError(f"gantt limit: {limit}; show at least 1 request")
    first = requests.sort_values("arrival_s", kind="stable").head(limit)
    kv_ready = first["transfer_end_s"].where(first["transfer_end_s"].notna(), first["prefill_end_s"])
    bounds = {
        "queue": (first["arrival_s"], first["prefill_start_s"]),
        "prefill": (first["prefill_start_s"], first["prefill_end_s"]),
        "transfer": (first["transfer_start_s"], first["transfer_end_s"]),
        "decode": (kv_ready, first["finish_s"]),
    }
    parts = []
    for segment in SEGMENTS:
        start, end = bounds[segment]
        frame = pd.DataFrame({"id": first["id"], "route": first["route"], "segment": segment,
                              "start_s": start.astype(float), "end_s": end.astype(float)})
        parts.append(frame[frame["start_s"].notna() & frame["end_s"].notna()
                           & (frame["end_s"] >= frame["start_s"])])
    out = pd.concat(parts, ignore_index=True)
    out["duration_s"] = out["end_s"] - out["start_s"]
    return out


def first_tokens(requests: pd.DataFrame, limit: int = MAX_GANTT_REQUESTS) -> pd.DataFrame:
    """(id, first_token_s) of the Gantt's requests that produced a first token."""
    first = requests.sort_values("arrival_s", kind="stable").head(limit)
    return first.loc[first["first_token_s"].notna(), ["id", "first_token_s"]].reset_index(drop=True)


def timeseries_lines(timeseries: pd.DataFrame, columns: Mapping[str, str]) -> pd.DataFrame:
    """Long-form (t_s, series, value) of the named columns, NaN samples dropped."""
    present = {c: label for c, label in columns.items() if c in timeseries.columns}
    if not present or timeseries.empty:
        return pd.DataFrame(columns=["t_s", "series", "value"])
    long = timeseries[["t_s", *present]].melt(id_vars="t_s", var_name="series", value_name="value")
    long = long[long["value"].notna()].copy()
    long["series"] = long["series"].map(present)
    return long.reset_index(drop=True)


def egress_lines(timeseries: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """Egress and link capacity as `timeseries_lines`, recorded in bit/s and shown in Mbit/s or
    Gbit/s (whichever suits the larger); returns (lines, unit label)."""
    unit, per_unit = frame_rate_unit(timeseries)
    lines = timeseries_lines(timeseries, EGRESS_SERIES)
    lines["value"] = lines["value"].astype("float64") / per_unit
    return lines, unit


def compare_table(runs: Mapping[str, Run]) -> pd.DataFrame:
    """Headline numbers side by side, as display text: one row per metric, one column per run, then
    one row per fail reason any of the runs met (`failed: worker_lost`)."""
    rows = {"scenario": [str(run.meta.get("scenario", "-")) for run in runs.values()],
            "engine": [str(run.meta.get("engine", "-")) for run in runs.values()],
            "link backend": [link_backend(run.meta) for run in runs.values()]}
    for key, label in SUMMARY_METRICS:
        rows[label] = [format_number(run.summary.get(key)) for run in runs.values()]
    egress = [egress_bit_per_s(run.summary) for run in runs.values()]
    unit, per_unit = rate_label(egress)
    rows[f"egress mean ({unit})"] = [format_number(None if v is None else v / per_unit) for v in egress]
    counts = [summary_failures(run.doc) for run in runs.values()]
    for reason in reason_order(reason for count in counts for reason in count):
        rows[f"failed: {reason}"] = [format_number(count.get(reason, 0)) for count in counts]
    table = pd.DataFrame.from_dict(rows, orient="index", columns=list(runs))
    table.index.name = "metric"
    return table


def node_table(summary: Mapping[str, Any]) -> pd.DataFrame:
    """One row per node (prefill nodes, then decode nodes): requests served, and a prefill node's
    busy fraction and mean queue (NaN for a decode node); empty for a run recorded before
    per-node figures."""
    rows = [(n.node, n.role, n.requests, n.busy_fraction, n.queue_mean) for n in node_figures(summary)]
    table = pd.DataFrame(rows, columns=list(NODE_COLUMNS))
    return table.astype({"requests": "Int64", "busy": "float64", "mean queue": "float64"})


def compare_cdfs(runs: Mapping[str, Run]) -> pd.DataFrame:
    """Every run's TTFT CDF over all routes, labelled by run name."""
    parts = []
    for name, run in runs.items():
        cdf = ttft_cdf(run.requests, by=None)
        parts.append(cdf.assign(group=name))
    if not parts:
        return pd.DataFrame(columns=["group", "ttft_s", "fraction"])
    return pd.concat(parts, ignore_index=True)


def csv_bytes(frame: pd.DataFrame) -> bytes:
    return frame.to_csv(index=False).encode("utf-8")


def file_bytes(path: Path) -> bytes | None:
    """A run file's bytes for a download button; None when it is missing."""
    try:
        return path.read_bytes()
    except OSError:
        return None
