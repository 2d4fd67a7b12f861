"""Sweeps: start a sweep file (`python -m emulator sweep` as a child, Ray underneath) or open a
sweep's directory; watch its points arrive; a heatmap over two axes, a metric along one axis with a
band over the seeds, and the Pareto front of throughput against TTFT P90 coloured by egress; any
point downloadable as a scenario that `python -m emulator run` replays, or replayed at once as a
virtual run the Live page follows.

Layout only; the figures come from `emulator.sweep.figures` and `.findings` (as report.html's), the
files from `emulator.sweep`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pandas as pd
import streamlit as st

from app import sweeps_view
from app.mqtt_feed import choose_broker, get_feed
from app.page_links import page_link
from app.run_registry import RunRefused, get_registry
from app.tables import show_table
from emulator.api import SweepHandle, list_sweep_files, start_sweep
from emulator.errors import PrfaasError
from emulator.paths import REPO_ROOT, runs_dir
from emulator.scenario.export import replay_yaml
from emulator.sweep import figures, findings
from emulator.sweep.points import point_scenario
from emulator.sweep.spec import Sweep, load_sweep
from emulator.sweep.store import read_results
from emulator.telemetry.labels import label, setting_label
from emulator.telemetry.run_files import RunFolder

REFRESH_S = 2.0
CASE_STUDY_FILE = "paper-case-study.yaml"  # a sweep over it is set beside the paper's figures
INTRO = """
A sweep runs one scenario over a grid (or a random or Latin-hypercube sample) of settings, each
point a Ray task, and keeps a row per point and seed in `sweep.parquet`. Start one of the shipped
sweeps here, or `python -m emulator sweep SWEEP.yaml --out DIR [--ray ADDRESS]` in a terminal (a
cluster joins with `--ray`), then open its directory below.
"""


@st.cache_resource(show_spinner=False)
def _started() -> dict[str, SweepHandle]:
    """The sweeps this server started, by directory (one registry per server)."""
    return {}


def _start_section() -> None:
    files = {path.name: path for path in list_sweep_files()}
    if not files:
        st.info("No sweep files under scenarios/sweeps.")
        return
    left, mid, right = st.columns([3, 1, 1], vertical_alignment="bottom")
    name = left.selectbox("Sweep file", list(files), key="sweeps_file")
    workers = mid.number_input("Workers", min_value=1, max_value=64, value=2, step=1, key="sweeps_workers",
                               help="Ray workers on this machine, one point each at a time")
    if right.button("Start sweep", key="sweeps_start", type="primary", width="stretch"):
        try:
            load_sweep(files[name])  # a bad file is refused here, in one line per problem
            handle = start_sweep(files[name], workers=int(workers))
        except (PrfaasError, OSError) as err:
            st.error("\n".join(f"- {line}" for line in str(err).splitlines()))
            return
        _started()[str(handle.out_dir)] = handle
        st.session_state["sweeps_dir"] = str(handle.out_dir)


def _results(folder: RunFolder) -> tuple[pd.DataFrame, dict] | None:
    try:
        return read_results(folder)  # through run_files: no link followed, sizes and depth capped
    except PrfaasError as err:
        handle = _started().get(str(folder.path))
        if handle is not None and handle.is_running:  # started here: its first points are coming
            _starting(handle)
        else:
            st.info(str(err))
        return None


def _starting(handle: SweepHandle) -> None:
    """A sweep started from this page before its first point is written: that it is starting, for
    how long, and the last line of its log (Ray and the first points take a while)."""
    waited = time.monotonic() - handle.started_at
    st.progress(0.0, text=f"Starting {handle.name}: {waited:.0f} s since Start · Ray starts its workers, "
                          "then the points arrive here as they finish")
    last = next((line for line in reversed(handle.log_tail(20).splitlines()) if line.strip()), "")
    if last:
        st.caption(f"Its log: `{last[:200]}`")
    if st.button("Stop", key="sweeps_stop"):
        handle.stop()


def _progress(out_dir: Path, rows: pd.DataFrame, doc: dict) -> None:
    handle = _started().get(str(out_dir))
    total = (doc.get("counts") or {}).get("points") or len(rows)
    failed = int((rows["status"] != figures.OK).sum()) if "status" in rows.columns else 0
    running = handle is not None and handle.is_running
    st.progress(min(len(rows) / total, 1.0) if total else 1.0,
                text=f"{len(rows):,} of {total:,} points, {failed} failed · "
                     f"{'running' if running else doc.get('status', 'stopped')}")
    if handle is not None and not running and handle.returncode not in (0, None):
        st.error(f"The sweep ended with exit code {handle.returncode}:\n\n```\n{handle.log_tail(6)}\n```")
    if running and st.button("Stop (keeps every finished point)", key="sweeps_stop"):
        handle.stop()


def _findings(rows: pd.DataFrame, sweep: Sweep) -> None:
    """The paper's Figure 5 and the bandwidth crossover, for the sweeps that hold them."""
    if (f5 := findings.sweep_figure5(rows, sweep)) is not None:
        st.markdown("**The paper's Figure 5**: the throughput model's curves (lines) and the simulation's "
                    "points (circles) through the optimum")
        show_table(sweeps_view.optimum_table(f5, sweep.base_path.name == CASE_STUDY_FILE), "sweeps_optimum")
        left, right = st.columns(2)
        split, curves = findings.figure5_figures(f5)
        left.plotly_chart(split, key="sweeps_figure5a")
        right.plotly_chart(curves, key="sweeps_figure5b")
    if (c := findings.crossover(rows)) is not None:
        st.markdown(f"**Bandwidth crossover**: {findings.crossover_sentence(c)}.")
        st.plotly_chart(findings.crossover_figure(c), key="sweeps_crossover")


def _figures(rows: pd.DataFrame, sweep: Sweep | None, axes: list[str], metrics: list[str]) -> str | None:
    """The heatmap, the lines along an axis and the Pareto front; returns the metric they show."""
    if not metrics or rows.empty:
        return None
    metric = st.selectbox("Metric", metrics, index=sweeps_view.default_metric(rows, metrics), key="sweeps_metric",
                          format_func=label)
    if len(axes) >= 2 and (sweep is None or sweep.spec.mode != "oat"):  # oat fills a cross, not a grid
        left, right = st.columns(2)
        x = left.selectbox("Heatmap x", axes, index=0, key="sweeps_x", format_func=setting_label)
        y = right.selectbox("Heatmap y", [a for a in axes if a != x], key="sweeps_y", format_func=setting_label)
        st.plotly_chart(figures.heatmap_figure(rows, x, y, metric), key="sweeps_heatmap")
    along = st.selectbox("Along the axis", axes, key="sweeps_along", format_func=setting_label)
    others = [a for a in axes if a != along]
    shown = figures.along_axis(rows, sweep.spec, along) if sweep is not None else rows
    if "configuration" in others:
        by = "configuration"
    elif sweep is not None and sweep.spec.mode == "oat":
        by = None  # the other axes sit at their centres
    else:
        by = others[0] if others else None
    st.plotly_chart(figures.lines_figure(shown, along, metric, by=by), key="sweeps_lines")
    if {figures.THROUGHPUT, figures.LATENCY} <= set(rows.columns):
        st.markdown("**Pareto front**: throughput against TTFT P90, coloured by egress")
        st.plotly_chart(figures.pareto_figure(rows, hover=axes), key="sweeps_pareto")
    return metric


def _sweep_of(doc: dict) -> Sweep | None:
    """The sweep file a directory was run from, as it reads now; None (and why) when it cannot be read.
    The folder names the file, so only a YAML file is read, and the loader's words (which may quote
    the file) are not shown: the command line says what is wrong with it."""
    path = sweeps_view.sweep_file_of(doc, REPO_ROOT)
    if path is None:
        st.caption("sweep.json names no sweep file (.yaml): no findings, and points cannot be saved as scenarios.")
        return None
    try:
        return load_sweep(path)
    except (PrfaasError, OSError):
        st.caption(f"The sweep file `{path.name[:80]}` cannot be read as a sweep (`python -m emulator sweep` "
                   "on it says why): no findings, and points cannot be saved as scenarios.")
        return None


def _point_download(rows: pd.DataFrame, sweep: Sweep, axes: list[str]) -> None:
    """Any point as a scenario file: the sweep's base with its `set:` and the point's values."""
    ids = rows["point_id"].tolist()
    if not ids:
        return
    chosen = st.selectbox("Point", ids, key="sweeps_point",
                          format_func=lambda pid: sweeps_view.point_label(rows, pid, axes))
    try:
        text = replay_yaml(point_scenario(sweep, chosen), source=f"sweep {sweep.spec.name}, point {chosen}")
    except PrfaasError as err:
        st.caption(f"This point cannot be saved as a scenario: {err}")
        return
    left, right = st.columns(2)
    left.download_button("Download the point as a scenario (YAML)", text, file_name=f"{chosen}.yaml",
                         mime="application/x-yaml", key="sweeps_point_yaml",
                         help="python -m emulator run FILE.yaml replays it")
    if right.button("Replay the point on the Live page (virtual engine)", key="sweeps_point_replay"):
        _replay(sweep.spec.name, chosen, text)
    if (message := st.session_state.get("sweeps_replayed")) is not None:
        (st.success if message[0] == "ok" else st.error)(message[1])
        if message[0] == "ok":
            page_link("Live", "Watch it on the Live page")


def _replay(sweep_name: str, point_id: str, text: str) -> None:
    """Run the point's scenario as a recorded virtual run, published for the Live page to follow."""
    path = runs_dir() / "sweep-points" / f"{sweep_name}-{point_id}.yaml"
    broker = choose_broker()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if broker.url is not None:
            get_feed(broker.url)  # subscribed before the run says its first word
        run = get_registry().start(path, "virtual", broker.url)
    except (PrfaasError, RunRefused, OSError) as err:
        st.session_state["sweeps_replayed"] = ("error", f"The point did not start: {err}")
        return
    st.session_state["live_focus"] = run.run_id  # the Live page opens on it
    st.session_state["sweeps_replayed"] = ("ok", f"Started run **{run.run_id}** from point {point_id}.")


def _panel(folder: RunFolder) -> None:
    out_dir = folder.path
    found = _results(folder)
    if found is None:
        return
    rows, doc = found
    _progress(out_dir, rows, doc)
    columns = doc.get("columns") or {}
    axes, metrics = list(columns.get("axes", [])), list(columns.get("metrics", []))
    failed = rows[rows["status"] != figures.OK] if "status" in rows.columns else rows.iloc[0:0]
    if not failed.empty:
        with st.expander(f"{len(failed)} failed points"):
            show_table(sweeps_view.points_table(failed[["point_id", *axes, "seed", "reason"]], axes),
                       "sweeps_failed")
    sweep = _sweep_of(doc)
    if sweep is not None:
        _findings(rows, sweep)
    metric = _figures(rows, sweep, axes, metrics)
    st.markdown("**Points**")
    every = st.toggle("Every kept metric", key="sweeps_every_metric",
                      help="All of sweep.parquet's columns, wider than the page; off: the metric charted above")
    columns = sweeps_view.point_columns(rows, axes, metrics, None if every else metric)
    show_table(sweeps_view.points_table(rows[columns], axes), "sweeps_rows")
    if sweep is not None:
        _point_download(rows, sweep, axes)


st.set_page_config(page_title="Sweeps · PrfaaS Lab", layout="wide")
st.title("Sweeps")
st.markdown(INTRO)
_start_section()
st.session_state.setdefault("sweeps_dir", str(runs_dir() / "sweeps"))
text = st.text_input("Sweep directory", key="sweeps_dir",
                     help="the --out directory of a sweep (it holds sweep.parquet and sweep.json), or a "
                          "folder of them")
directory = Path(text).expanduser()
chosen = RunFolder(directory)
if directory.is_dir() and not os.path.lexists(directory / "sweep.json"):  # a folder of sweeps
    found_dirs = {folder.name: folder for folder in sweeps_view.find_sweep_dirs(directory)}
    if found_dirs:
        chosen = found_dirs[st.selectbox("Sweep", list(found_dirs), key="sweeps_pick")]
handle = _started().get(str(chosen.path))
every = REFRESH_S if handle is not None and handle.is_running else None
st.fragment(run_every=every, key="sweeps_panel")(_panel)(chosen)
