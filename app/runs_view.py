"""Tables behind the Runs page: recorded runs found under a directory (and run folders left
incomplete, with why, and those that cannot be read, with why), one run's headline numbers and
per-node figures, TTFT CDFs, Gantt segments, timeseries lines, and tables as display text. Several
runs side by side: `app.runs_compare`.

Pure functions over `emulator.telemetry.recorder.load_run`'s frames, so tests check them without
Streamlit. Every file of a run folder is read through `emulator.telemetry.run_files.RunFolder` (no
link followed, sizes and depth capped). Nothing here writes a run or starts one.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from app.recorded_meta import RecordedMeta
from emulator.control.types import RequestStatus
from emulator.errors import RunFileError, TelemetryError
from emulator.paths import REPO_ROOT
from emulator.telemetry.figures import node_figures
from emulator.telemetry.labels import format_number, label
from emulator.telemetry.recorder import load_run
from emulator.telemetry.run_files import RunFolder, list_folders
from emulator.telemetry.timeseries import frame_rate_unit

DEFAULT_RUNS_DIR = "runs"  # `python -m emulator run`'s default --out is runs/<scenario>-<time>
MAX_GANTT_REQUESTS = 200

NODE_COLUMNS = ("node", "role", "requests", "busy", "mean queue")
# The listing's summary figures, named as everywhere else (labels.py)
LISTING_FIGURES = ("requests", "completed", "failed_count", "ttft_p50_s", "ttft_p90_s")
LISTING_COLUMNS = ("run", "status", "scenario", "engine", label("link_backend"),
                   *(label(key) for key in LISTING_FIGURES), "recorded at")
RUN_LOG = "run.log"  # what `emulator.api.start_run` writes beside the run's files
SUMMARY = "summary.json"
LOG_TAIL_LINES = 20
EGRESS_SERIES = {"egress_bit_per_s": "egress", "link_capacity_bit_per_s": "link capacity"}
# The Gantt's segments, in drawing order; gantt_segments says where each starts and ends.
SEGMENTS = ("queue", "prefill", "transfer", "decode")


@dataclass(frozen=True, slots=True)
class Run:
    """One loaded run directory: its frames and summary.json document."""

    name: str
    folder: RunFolder
    requests: pd.DataFrame
    timeseries: pd.DataFrame
    doc: dict[str, Any]
    meta: RecordedMeta  # the doc's `meta`, read once

    @property
    def path(self) -> Path:
        return self.folder.path

    @property
    def summary(self) -> dict[str, Any]:
        return self.doc.get("summary", {})


@dataclass(frozen=True, slots=True)
class IncompleteRun:
    """A run folder with a run.log but no summary.json: its run was stopped, failed before it
    recorded anything, or is still going. Listed, so a killed run does not silently vanish."""

    name: str
    folder: RunFolder
    why: str
    log_tail: str  # the last lines of run.log

    @property
    def path(self) -> Path:
        return self.folder.path


@dataclass(frozen=True, slots=True)
class RunListing:
    """The runs found under a directory, newest first, the directories that are not runs, and the
    run folders left incomplete."""

    runs: tuple[Run, ...]
    problems: tuple[tuple[str, str], ...] = field(default=())  # (dir name, why it cannot be read: one line)
    incomplete: tuple[IncompleteRun, ...] = field(default=())

    def by_name(self) -> dict[str, Run]:
        return {run.name: run for run in self.runs}


def resolve_runs_dir(text: str, root: Path = REPO_ROOT) -> Path:
    """The directory a user typed; a relative path starts at the repository root."""
    text = text.strip()
    if not text:
        raise TelemetryError("runs directory: empty; type a directory such as runs/")
    path = Path(text).expanduser()
    return path if path.is_absolute() else root / path


def find_run_dirs(runs_dir: Path, marker: str = SUMMARY) -> list[RunFolder]:
    """`runs_dir` itself if it holds `marker`, else its folders that do, newest first.

    A folder without summary.json is not a recorded run (`find_incomplete_dirs` finds the run
    folders among them); one with it is offered to `load_run`, which names what is wrong when it
    is foreign, incomplete or unsafe to read. Links are not entered (`linked_folders` names them).
    """
    if not runs_dir.is_dir():
        raise TelemetryError(f"runs directory {str(runs_dir)!r} does not exist; "
                             "type the directory holding your run folders (default runs/)")
    here = RunFolder(runs_dir)
    if _info(here, marker) is not None:
        return [here]
    found = []
    for name in list_folders(runs_dir)[0]:
        folder = RunFolder(runs_dir, name)
        if (info := _info(folder, marker)) is not None:
            found.append((info.st_mtime, name, folder))
    return [folder for _, _, folder in sorted(found, key=lambda item: item[:2], reverse=True)]


def find_incomplete_dirs(runs_dir: Path) -> list[RunFolder]:
    """Run folders (they hold run.log) without summary.json, newest log first."""
    return [f for f in find_run_dirs(runs_dir, RUN_LOG) if _info(f, SUMMARY) is None]


def linked_folders(runs_dir: Path) -> list[tuple[str, str]]:
    """(name, why) of each link to a folder in `runs_dir`: listed as unreadable, never entered."""
    if _info(RunFolder(runs_dir), SUMMARY) is not None:
        return []  # a run folder itself: its own files are all that is read
    return [(name, f"{runs_dir / name}: is a symbolic link, which the Runs page never follows; "
                   "move or copy the run folder itself here") for name in list_folders(runs_dir)[1]]


Loader = Callable[[RunFolder], tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]]


def list_runs(runs_dir: Path, loader: Loader = load_run) -> RunListing:
    """Load every run under `runs_dir`; `loader` lets the page put a cache in front of load_run. A
    folder that cannot be read (foreign, a link, a file over its cap, JSON nested too deep) is named
    in `problems` with its one line, as is one whose `meta` is not an object, and the others still list."""
    runs, problems, incomplete = [], [], []
    for folder in find_run_dirs(runs_dir):
        try:
            requests, timeseries, doc = loader(folder)
        except (TelemetryError, OSError) as err:  # OSError: removed or unreadable meanwhile
            problems.append((folder.name, str(err)))
            continue
        meta = RecordedMeta.from_doc(doc)
        if meta.problem is not None:
            problems.append((folder.name, f"run dir {str(folder.path)!r}: {meta.problem}"))
            continue
        runs.append(Run(folder.name, folder, requests, timeseries, doc, meta))
    for folder in find_incomplete_dirs(runs_dir):
        try:
            incomplete.append(incomplete_run(folder))
        except RunFileError as err:
            problems.append((folder.name, str(err)))
    problems += linked_folders(runs_dir)
    return RunListing(tuple(runs), tuple(problems), tuple(incomplete))


def incomplete_run(folder: RunFolder) -> IncompleteRun:
    """What a run folder without summary.json tells: the error its log ends with, else that the run
    stopped before it finished (killed) or still goes. RunFileError when its log cannot be read."""
    tail = log_tail(folder)
    lines = [line for line in tail.splitlines() if line.strip()]
    last = lines[-1].strip() if lines else ""
    if last.startswith("error:") or any(line.startswith("Traceback") for line in lines):
        why = f"no summary.json: the run ended with an error ({last[:200]})"
    else:
        why = ("no summary.json: the run was stopped before it finished (killed?), or is still going; "
               f"its log was last written {_mtime(folder, RUN_LOG)}")
    return IncompleteRun(folder.name, folder, why, tail)


def log_tail(folder: RunFolder, name: str = RUN_LOG, num_lines: int = LOG_TAIL_LINES) -> str:
    """The last `num_lines` lines of a folder's log, read from its tail only (MAX_LOG_TAIL_BYTES)."""
    text = folder.read_tail(name)
    return "\n".join(text.replace("\r", "\n").splitlines()[-num_lines:])


def _info(folder: RunFolder, name: str) -> os.stat_result | None:
    """The file's own status, None when absent or its folder cannot be opened (a link, gone)."""
    try:
        return folder.info(name)
    except RunFileError:
        return None


def _mtime(folder: RunFolder, name: str) -> str:
    info = _info(folder, name)
    return "-" if info is None else pd.Timestamp(info.st_mtime, unit="s").strftime("%Y-%m-%d %H:%M:%S")


def listing_table(listing: RunListing) -> pd.DataFrame:
    """One row per run folder, as display text: how it ended (finished, stopped, failed: the
    record's outcome, read from its end reason for older runs), what ran and its headline TTFT; an
    incomplete folder says so and shows `-` for what it never recorded."""
    rows = []
    for run in listing.runs:
        summary, meta = run.summary, run.meta
        rows.append([run.name, meta.outcome.value, meta.scenario or "-", meta.engine or "-",
                     link_backend(meta), *(format_number(summary.get(key)) for key in LISTING_FIGURES),
                     _mtime(run.folder, SUMMARY)])
    for folder in listing.incomplete:
        rows.append([folder.name, "incomplete", *["-"] * (len(LISTING_COLUMNS) - 3), _mtime(folder.folder, RUN_LOG)])
    table = pd.DataFrame(rows, columns=list(LISTING_COLUMNS))
    return table.sort_values("recorded at", ascending=False, kind="stable").reset_index(drop=True)


def link_backend(meta: RecordedMeta) -> str:
    """The link backend a run used; the virtual engine models its link and names none."""
    if meta.link_backend:
        return meta.link_backend
    return "simulated" if meta.engine == "virtual" else "unknown"


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


def node_table(summary: Mapping[str, Any]) -> pd.DataFrame:
    """One row per node (prefill nodes, then decode nodes): requests served, and a prefill node's
    busy fraction and mean queue (NaN for a decode node); empty for a run recorded before
    per-node figures."""
    rows = [(n.node, n.role, n.requests, n.busy_fraction, n.queue_mean) for n in node_figures(summary)]
    table = pd.DataFrame(rows, columns=list(NODE_COLUMNS))
    return table.astype({"requests": "Int64", "busy": "float64", "mean queue": "float64"})


def as_text(frame: pd.DataFrame, percent: tuple[str, ...] = ()) -> pd.DataFrame:
    """`frame` for display: numbers to three significant digits (the `percent` columns as `42%`),
    `-` for every missing value, never `None` or `nan`."""
    def shown(column: str) -> Callable[[Any], str]:
        return format_percent if column in percent else format_number
    out = frame.astype(object).where(frame.notna(), None)
    return out.apply(lambda col: col.map(shown(str(col.name))))


def csv_bytes(frame: pd.DataFrame) -> bytes:
    return frame.to_csv(index=False).encode("utf-8")


def file_bytes(folder: RunFolder, name: str) -> tuple[bytes | None, str]:
    """(a run file's bytes, "") for a download button, or (None, why it is not offered): missing, a
    link, not a regular file or over its cap."""
    try:
        return folder.read_bytes(name), ""
    except RunFileError as err:
        return None, str(err)
