"""A finished run on the Live page: its figures beside the model's Λ_max, how it ended (a stopped
run says so, and that its `expect:` was not judged), the paper where the run is the paper's case
study, and the run as a scenario file that replays it.

Layout helpers the Live page calls once a run has written its record; the record is the source, as
it is for the tiles above (app.live_tiles.record_tiles).
"""

from __future__ import annotations

import streamlit as st

from app.live_view import TILES
from app.outcome_view import show_outcome
from app.page_links import page_link
from app.paper_view import PAPER_SCENARIO, show_run_vs_paper
from app.recorded_meta import RecordedMeta
from app.run_registry import StartedRun
from emulator.auto_rate import is_auto, with_rate
from emulator.errors import PrfaasError
from emulator.scenario import Scenario
from emulator.scenario.export import replay_yaml
from emulator.telemetry.labels import format_number

LAMBDA_NOTE = ("requests per second: the run's measured throughput / the throughput model's Λ_max for the "
               "scenario (Eq. 6); below saturation the measured figure is the offered load, not a capacity")
UNTIMED_KNOBS = ("arrivals paused", "arrivals resumed")  # control messages no timeline event replays


def show_results(started: StartedRun, scenario: Scenario | None) -> None:
    """The run's answer (tiles, how it ended and its expect verdict, the paper) and what to do with it next."""
    doc = started.summary()
    if doc is None:
        if not started.handle.is_running:
            st.error(f"Run {started.run_id} ended with exit code {started.handle.returncode} and no "
                     f"results:\n\n```\n{started.handle.log_tail(8)}\n```")
        return
    summary, meta = doc.get("summary", {}), RecordedMeta.from_doc(doc)
    if meta.problem is not None:
        st.warning(meta.problem)
    counts, rates = st.columns(4), st.columns(4)  # two rows: seven tiles in one clip their titles
    for col, key in zip(counts, ("completed", "failed_count", "ttft_p50_s", "ttft_p90_s"), strict=True):
        col.metric(TILES[key], format_number(summary.get(key)))
    share = summary.get("prfaas_fraction")
    rates[0].metric(TILES["prfaas_fraction"], f"{share:.1%}" if isinstance(share, int | float) else "-")
    rates[1].metric(TILES["throughput_rps"], format_number(summary.get("throughput_rps")), help=LAMBDA_NOTE)
    rates[2].metric(TILES["lambda_max_model"], format_number(meta.lambda_max_model), help=LAMBDA_NOTE)
    show_outcome(doc)
    if started.handle.engine == "virtual" and meta.workload_statement:
        st.caption(f"Workload: {meta.workload_statement}")  # a live run's status row says it already
    if meta.scenario == PAPER_SCENARIO:
        with st.expander("The paper beside this run", expanded=True):
            show_run_vs_paper(doc)
    st.markdown(f"Recorded in `{started.handle.out_dir}`.")
    if scenario is not None:
        _save_as_scenario(started, scenario, meta)
    page_link("Runs", "Open it on the Runs page")


def replay_file(scenario: Scenario, engine: str, meta: RecordedMeta, run_id: str) -> str:
    """The run as a scenario file: its scenario on the engine it ran on (at the arrival rate it ran
    at, where its rate was `auto`), its start options and the knobs sent during it; pauses and
    resumes, which no timeline event replays, are named in its header."""
    untimed = [f"at {entry.t_s:g} s: {entry.what}" for entry in meta.log
               if entry.what in UNTIMED_KNOBS and entry.t_s is not None]
    if is_auto(scenario) and meta.arrival_rate_per_s is not None:  # the rate `auto` became in this run
        scenario = with_rate(scenario, meta.arrival_rate_per_s)
    return replay_yaml(scenario.model_copy(update={"engine": engine}), meta.control_events,
                       source=f"dashboard run {run_id}", untimed=untimed)


def _save_as_scenario(started: StartedRun, scenario: Scenario, meta: RecordedMeta) -> None:
    try:
        text = replay_file(scenario, started.handle.engine, meta, started.run_id)
    except PrfaasError as err:
        st.caption(f"Cannot save this run as a scenario: {err}")
        return
    knobs = len(meta.control_events)
    st.download_button("Save as scenario (YAML)", text, file_name=f"{scenario.name}-{started.run_id}.yaml",
                       mime="application/x-yaml", key="live_save_scenario",
                       help=f"replays the run headlessly on the {started.handle.engine} engine with its "
                            f"{knobs} knob changes as timeline events: python -m emulator run FILE.yaml")
