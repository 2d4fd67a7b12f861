"""Runs: recorded runs under a directory (and run folders left incomplete, with their log), one run
opened (summary, per-node table, TTFT CDF, Gantt, egress, threshold, decision timeline), several
compared, and each run's files to download.

Layout only; the tables come from `app.runs_view`, `app.runs_compare` and `app.decisions_view`, the
figures from `app.figures`, each run's `meta` from `app.recorded_meta` (read once, in `list_runs`),
the files from `emulator.telemetry.recorder` and `.run_files` (no link followed, every file capped).
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from app import figures
from app.decisions_view import DETAILS_TITLE, TABLE_COLUMNS, WRAPPED, decision_details, decision_rows
from app.outcome_view import show_outcome
from app.paper_view import PAPER_SCENARIO, show_run_vs_paper
from app.recorded_meta import RecordedMeta
from app.runs_compare import (
    COMPARE_TAB,
    compare_cdfs,
    compare_colors,
    compare_egress,
    compare_names,
    compare_table,
    run_letters,
)
from app.runs_view import (
    DEFAULT_RUNS_DIR,
    MAX_GANTT_REQUESTS,
    Run,
    RunListing,
    as_text,
    csv_bytes,
    egress_lines,
    file_bytes,
    first_tokens,
    format_percent,
    gantt_segments,
    link_backend,
    list_runs,
    listing_table,
    node_table,
    resolve_runs_dir,
    timeseries_lines,
    ttft_cdf,
)
from app.table_fit import tile_px, tile_rows
from app.tables import show_table
from emulator.errors import TelemetryError
from emulator.telemetry.figures import NODE_NOTE, NOQUEUE_NOTE, egress_bit_per_s, format_rate
from emulator.telemetry.labels import format_number, label
from emulator.telemetry.recorder import load_run
from emulator.telemetry.run_files import RunFolder


@st.cache_data(show_spinner=False, max_entries=64)
def _load_cached(root: str, sub: str, stamp_ns: int) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    del stamp_ns  # part of the cache key only: a re-recorded run is read again
    return load_run(RunFolder(Path(root), sub))


def _load(folder: RunFolder) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    info = folder.info("summary.json")  # the file's own status: a link is refused by load_run
    return _load_cached(str(folder.root), folder.sub, 0 if info is None else info.st_mtime_ns)


def _listing(text: str) -> RunListing | None:
    """The runs under the typed directory, or None after saying why there are none."""
    try:
        listing = list_runs(resolve_runs_dir(text), loader=_load)
    except (TelemetryError, OSError) as err:
        missing_default = text.strip() == DEFAULT_RUNS_DIR and not resolve_runs_dir(text).exists()
        if missing_default:
            st.info("No runs yet: `python -m emulator run SCENARIO.yaml` records one under runs/.")
        else:
            st.error(str(err))
        return None
    if listing.problems:
        st.warning("Skipped, not readable as runs (each with why):\n" + "\n".join(
            f"- `{name}`: {reason}" for name, reason in listing.problems))
    if not listing.runs and not listing.incomplete:
        st.info(f"No recorded runs under {text.strip()!r}: a run directory holds summary.json, "
                "requests.parquet and timeseries.parquet.")
        return None
    return listing


# The listing's longer headers, shortened so every column fits a 1280 px window; each says its
# full name (labels.py) on hover.
LISTING_HEADERS = {"link backend": "link", "requests": "req.", "completed": "done", "TTFT P50 (s)": "P50 (s)",
                   "TTFT P90 (s)": "P90 (s)", "recorded at": "recorded"}
LISTING_HELP = {"link backend": label("link_backend"), "requests": "requests that arrived",
                "completed": label("completed"), "TTFT P50 (s)": label("ttft_p50_s"),
                "TTFT P90 (s)": label("ttft_p90_s"), "recorded at": "when summary.json was written"}


def _listing_table(listing: RunListing) -> None:
    """The runs, one a row: long names wrap; the scenario column is left out where every run's
    name already starts with its scenario (as `run` and the dashboard name them)."""
    table = listing_table(listing)
    config = {col: st.column_config.TextColumn(short, help=LISTING_HELP[col]) for col, short in LISTING_HEADERS.items()}
    redundant = all(scenario == "-" or str(run).startswith(str(scenario))
                    for run, scenario in zip(table["run"], table["scenario"], strict=True))
    show_table(table, "runs_listing", config=config, wrap=("run", "scenario", "recorded at"), min_wrap_px=70,
               hidden=("scenario",) if redundant else ())


def _incomplete(listing: RunListing) -> None:
    """Each run folder without summary.json: why, and the end of its log."""
    for folder in listing.incomplete:
        with st.expander(f"`{folder.name}` is incomplete: {folder.why}"):
            st.code(folder.log_tail or "(run.log is empty)", language=None)


def _tile(key: str) -> str:
    """A figure's name (labels.py) as a tile's title: `Throughput (req/s)`."""
    text = label(key)
    return text[:1].upper() + text[1:]


TILES_PER_ROW = 4  # at most; a tile whose value needs more room gets it (app.table_fit.tile_rows)


def _tile_rows(tiles: list[tuple[str, str, str | None]]) -> None:
    """(label, value, help) tiles in rows, each wide enough for its value and label."""
    needs = [tile_px(title, value, why is not None) for title, value, why in tiles]
    for indices, spec in tile_rows(needs, TILES_PER_ROW):
        for col, index in zip(st.columns(spec), indices, strict=False):
            title, value, why = tiles[index]
            col.metric(title, value, help=why)


def _summary_tiles(run: Run) -> None:
    summary, meta = run.summary, run.meta
    _tile_rows([(_tile("scenario"), meta.scenario or "-", None), (_tile("engine"), meta.engine or "-", None),
                (_tile("link_backend"), link_backend(meta), None),
                (_tile("outcome"), meta.outcome.value, "finished, stopped by its user, or failed")])
    figures = [(_tile(key), format_number(summary.get(key)), None)
               for key in ("completed", "failed_count", "throughput_rps")]
    figures.append((_tile("egress_bit_per_s_mean"), format_rate(egress_bit_per_s(summary)), None))
    figures += [(_tile(key), format_number(summary.get(key)), None)
                for key in ("ttft_mean_s", "ttft_p50_s", "ttft_p90_s")]
    figures += [(_tile(key), format_number(summary.get(key)), NOQUEUE_NOTE)
                for key in ("ttft_noqueue_mean_s", "ttft_noqueue_p90_s")]
    figures += [("Offloaded (requests / tokens)", f"{format_percent(summary.get('prfaas_fraction'))} / "
                 f"{format_percent(summary.get('prfaas_input_token_fraction'))}", None),
                ("Prefix hit", format_percent(summary.get("prefix_hit_fraction")), "cached / input tokens"),
                ("Prefix hit (remote / local)", f"{format_percent(summary.get('prefix_hit_fraction_remote'))} / "
                 f"{format_percent(summary.get('prefix_hit_fraction_local'))}", None)]
    _tile_rows(figures)
    if meta.link_note:
        st.caption(meta.link_note)
    _workload_note(meta)
    show_outcome(run.doc)


def _workload_note(meta: RecordedMeta) -> None:
    """What of its workload the run played: a cap, a time window or skipped rows stand out."""
    if meta.workload_statement is None:
        st.caption("Workload: not recorded (this run was recorded before runs said what they replayed).")
    elif meta.is_workload_cut:
        st.warning(f"Workload: {meta.workload_statement}")
    else:
        st.caption(f"Workload: {meta.workload_statement}")


def _node_table(run: Run) -> None:
    nodes = node_table(run.summary)
    if nodes.empty:
        st.caption("No per-node figures: this run was recorded before they existed.")
        return
    show_table(as_text(nodes, percent=("busy",)), "runs_nodes")
    st.caption(NODE_NOTE)


def _cdf_chart(cdf: pd.DataFrame, key: str, color_title: str, colors: dict[str, str] | None = None) -> None:
    """TTFT CDFs, one per group: by route in the routes' colours, or by run in `colors`."""
    if cdf.empty:
        st.info("No completed request has a TTFT.")
        return
    st.plotly_chart(figures.ttft_cdf_figure(cdf, color_title, colors), key=key)


def _gantt_chart(run: Run) -> None:
    shown = st.slider("Requests shown (first by arrival)", 10, MAX_GANTT_REQUESTS, 50, step=10,
                      key="runs_gantt_n")
    segments = gantt_segments(run.requests, limit=shown)
    if segments.empty:
        st.info("No request reached a timed stage.")
        return
    st.plotly_chart(figures.gantt_figure(segments, first_tokens(run.requests, limit=shown)), key="gantt")
    st.caption(f"The first {min(shown, len(run.requests)):,} of {len(run.requests):,} requests by "
               "arrival; the thin orange bar is the KV transfer, which may overlap the prefill.")


def _line_chart(lines: pd.DataFrame, key: str, y_title: str, shape: str, decisions: pd.DataFrame | None = None,
                color: str = "series", colors: dict[str, str] | None = None) -> None:
    """`lines` as timeseries_lines gives them (figures.lines_figure), or why there are none."""
    if lines.empty:
        st.info(f"No {y_title} samples recorded.")
        return
    st.plotly_chart(figures.lines_figure(lines, y_title, shape, decisions, color, colors), key=key)


def _decisions(rows: pd.DataFrame) -> None:
    if rows.empty:
        st.caption("No scheduler decisions or knob changes recorded in this run.")
        return
    show_table(as_text(rows[list(TABLE_COLUMNS)]), "runs_decisions", wrap=WRAPPED)
    with st.expander(DETAILS_TITLE):
        st.markdown("\n".join(decision_details(rows)))
    st.caption("Dotted lines on the egress and threshold charts mark these times: purple the scheduler, "
               "grey the scenario's timeline, pink a control message.")


def _downloads(run: Run) -> None:
    """The run's own files and its tables as CSV; a file that cannot be read safely (missing, a link,
    over its cap) is not offered, and the caption says why."""
    cols = st.columns(4)
    parquet, parquet_why = file_bytes(run.folder, "requests.parquet")
    if parquet is not None:
        cols[0].download_button("requests.parquet", parquet, f"{run.name}-requests.parquet",
                                "application/octet-stream", key="runs_dl_parquet", on_click="ignore")
    cols[1].download_button("requests CSV", csv_bytes(run.requests), f"{run.name}-requests.csv",
                            "text/csv", key="runs_dl_requests_csv", on_click="ignore")
    cols[2].download_button("timeseries CSV", csv_bytes(run.timeseries),
                            f"{run.name}-timeseries.csv", "text/csv", key="runs_dl_timeseries_csv",
                            on_click="ignore")
    report, report_why = file_bytes(run.folder, "report.html")
    if report is not None:
        cols[3].download_button("report.html", report, f"{run.name}-report.html", "text/html",
                                key="runs_dl_report", on_click="ignore")
    for why in (w for w in (parquet_why, report_why) if w):
        st.caption(f"Not offered for download: {why}")


def _open_run(listing: RunListing) -> None:
    runs = listing.by_name()
    name = st.selectbox("Run", list(runs), key="runs_open")
    run = runs[name]
    decisions = decision_rows(run.meta)
    _summary_tiles(run)
    st.markdown("**Per node**")
    _node_table(run)
    left, right = st.columns(2)
    with left:
        st.markdown("**TTFT CDF by route**")
        _cdf_chart(ttft_cdf(run.requests), "ttft_cdf", "route")
    with right:
        st.markdown("**Egress vs link capacity**")
        lines, unit = egress_lines(run.timeseries)
        _line_chart(lines, "egress", unit, "linear", decisions)
    st.markdown("**Per-request timeline**: queue, prefill, KV transfer, decode")
    _gantt_chart(run)
    st.markdown("**Routing threshold over time**")
    _line_chart(timeseries_lines(run.timeseries, {"threshold_tokens": "threshold"}), "threshold", "tokens", "hv",
                decisions)
    st.markdown("**Decisions and knob changes**")
    _decisions(decisions)
    if run.meta.scenario == PAPER_SCENARIO:
        st.markdown("**The paper beside this run**")
        show_run_vs_paper(run.doc)
    _downloads(run)


def _compare(listing: RunListing) -> None:
    runs = listing.by_name()
    chosen = st.multiselect("Runs to compare", list(runs), default=list(runs)[:2], key="runs_compare")
    if len(chosen) < 2:
        st.info("Pick two or more runs to compare.")
        return
    picked = {name: runs[name] for name in chosen}
    colors, letters = compare_colors(picked), run_letters(chosen)
    st.markdown("Differences are to A. " + " ".join(
        f"<span style='color:{color}'>■</span> **{letters[folder]}** {html.escape(name)}"
        + (f" (`{folder}`)" if name != folder else "")
        for (folder, name), color in zip(compare_names(picked).items(), colors.values(), strict=True)),
        unsafe_allow_html=True)
    show_table(compare_table(picked), "runs_compare_table", hide_index=False, max_rows=100)
    left, right = st.columns(2)
    with left:
        st.markdown("**TTFT CDF**")
        _cdf_chart(compare_cdfs(picked), "compare_cdf", "run", colors)
    with right:
        st.markdown("**Egress over time**")
        lines, unit = compare_egress(picked)
        _line_chart(lines, "compare_egress", unit, "linear", color="run", colors=colors)


st.set_page_config(page_title="Runs · PrfaaS Lab", layout="wide")
st.title("Runs")
st.markdown("Recorded runs (live and virtual): open one, or overlay several. "
            "`python -m emulator run SCENARIO.yaml --out DIR` records a run.")
runs_text = st.text_input("Runs directory", value=DEFAULT_RUNS_DIR, key="runs_dir",
                          help="A folder of run folders, or one run folder; relative to the repository root")
found = _listing(runs_text)
if found is not None:
    _listing_table(found)
    _incomplete(found)
if found is not None and found.runs:
    open_tab, compare_tab = st.tabs(["Open a run", COMPARE_TAB])
    with open_tab:
        _open_run(found)
    with compare_tab:
        _compare(found)
