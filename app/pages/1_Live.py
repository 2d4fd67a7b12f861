"""Live control room: start a scenario (live or virtual) through the run API, turn its knobs over
MQTT and watch it over the server's MQTT feed: the tiles and answers in a fragment redrawn every
tenth of a second, the charts in one redrawn every second.

Layout only; the buffer and tables come from `app.live_view`, the tiles from `app.live_tiles`, the
knobs from `app.live_knobs` (their messages from `app.knobs_view`, answers from `app.knob_acks`),
the charts from `app.live_charts`, runs from `app.run_registry`.
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from app import live_charts
from app.decisions_view import DETAILS_TITLE, TABLE_COLUMNS, TIME, WRAPPED, decision_details, decision_rows, note_rows
from app.knob_acks import AckState, ack_of, answer_wait_s
from app.live_knobs import KNOBS_FRAGMENT, knobs_behind, knobs_sidebar, sent_knobs
from app.live_results import show_results
from app.live_tiles import Tile, bus_tiles, count_tiles, knob_tiles, record_tiles
from app.live_view import TILES, RunView, metrics_frame, requests_table, roles_table, run_phase
from app.mqtt_feed import MqttFeed, choose_broker, get_feed
from app.recorded_meta import RecordedMeta
from app.run_registry import RunRefused, StartedRun, get_registry
from app.table_fit import tile_px, tile_rows
from app.tables import show_table
from emulator.api import SCENARIOS_DIR, ScenarioInfo, list_scenarios, live_capability
from emulator.errors import PrfaasError
from emulator.scenario import Scenario, apply_overrides, load_scenario
from emulator.scenario.parts import MAX_CONNECTIONS
from emulator.telemetry.reason_words import route_summary

INTRO = """
Start a scenario, then steer it while it runs: every knob is published on the run's MQTT control
topic (`prfaas/<run>/control/<knob>`), and the tiles, the knobs and the run's answer show what the
run itself reports, whoever turned it (its timeline, the scheduler, you). The charts redraw every
second from the server's MQTT subscriber; a virtual run is simulated in seconds and drawn from its
record when it ends.
"""
# How often each part of the page redraws while a run goes on. Every redraw costs the browser a
# redraw of the page around it (on two cores it shares them with the run's workers), so the tiles
# and charts redraw each second and the tables of decisions and requests every two; a knob's answer
# does not wait for either: the knobs' own fragment draws it the moment the run files it.
CHARTS_EVERY_S = 1.0
TABLES_EVERY_S = 2.0
KNOBS_SHOWN = "live_knobs_shown"  # what the knobs' fragment last drew: (run id, tile values, answers)
TILES_PER_ROW = 4
ROLES, LAST_REQUESTS, DECISIONS = live_charts.TABLE_TITLES
ACK_BOX = {AckState.APPLIED: st.success, AckState.REFUSED: st.error, AckState.SILENT: st.warning,
           AckState.WAITING: st.info}
REQUEST_COLUMNS = {
    "input_len": st.column_config.NumberColumn("input (tokens)"),
    "ttft_s": st.column_config.NumberColumn("TTFT (s)", format="%.3f"),
    "queue_s": st.column_config.NumberColumn("queue (s)", format="%.3f"),
    "prefill_s": st.column_config.NumberColumn("prefill (s)", format="%.3f"),
    "transfer_s": st.column_config.NumberColumn("exposed transfer (s)", format="%.3f",
                                                help="from the end of prefill to the KV's arrival"),
    "request": st.column_config.TextColumn("request", width="small"),
    "status": st.column_config.TextColumn("status", width="small"),
    "route": st.column_config.TextColumn("route", width="small"),
    "node": st.column_config.TextColumn("prefill node", width="medium"),
    "reason": st.column_config.TextColumn("router's reason", width="large"),
}
OVERRIDES_HELP = ("One `path=value` per line, as `python -m emulator run --set`; e.g. "
                  "`workload.arrival.rate_per_s=1` or a scheduler trigger such as "
                  "`scheduler.short_term.queue_depth_trigger=8`.")


@st.cache_resource(show_spinner=False, max_entries=4)
def _scenarios(stamp: tuple[float, ...]) -> list[ScenarioInfo]:
    del stamp  # part of the cache key only: an edited scenario directory is read again
    return list_scenarios()


@st.cache_resource(show_spinner=False, max_entries=32)
def _scenario(path: str, overrides: tuple[str, ...]) -> Scenario | None:
    try:
        return apply_overrides(load_scenario(path), overrides)
    except PrfaasError:
        return None


def _view(run_id: str) -> RunView:
    return FEED.buffer.view(run_id) if FEED is not None else RunView(run_id)


def _phase(run_id: str, view: RunView) -> str:
    started = REGISTRY.get(run_id)
    return run_phase(view, time.monotonic(), started.handle.engine if started else None,
                     started.handle.is_running if started else None)


# --- starting and choosing a run ---------------------------------------------------------------


def _on_scenario_change() -> None:
    st.session_state.pop("live_engine", None)  # the new scenario's own engine


def _start(path: Path) -> None:
    st.session_state["live_start_error"] = None
    overrides = []
    if connections := st.session_state.get("live_connections") or 0:
        overrides.append(f"transport.connections={int(connections)}")
    if (duration := st.session_state.get("live_duration") or 0) > 0:
        overrides.append(f"duration_s={duration:g}")
    for line in (st.session_state.get("live_overrides") or "").splitlines():
        if line.strip() and not line.strip().startswith("#"):
            overrides.append(line.strip())
    try:
        started = REGISTRY.start(path, st.session_state.get("live_engine"), BROKER.url, tuple(overrides))
    except (PrfaasError, RunRefused, OSError) as err:
        st.session_state["live_start_error"] = str(err)
        return
    st.session_state["live_focus"] = started.run_id


def _start_section() -> None:
    infos = _scenarios(tuple(p.stat().st_mtime for p in sorted(SCENARIOS_DIR.glob("*.yaml"))))
    by_file = {info.path.name: info for info in infos}
    if not by_file:
        st.error(f"No valid scenario files under {SCENARIOS_DIR}.")
        return
    names = list(by_file)
    st.session_state.setdefault("live_scenario", "live-quickstart.yaml" if "live-quickstart.yaml" in names
                                else names[0])
    left, mid, right = st.columns([3, 2, 1], vertical_alignment="bottom")
    chosen = by_file[left.selectbox("Scenario", names, key="live_scenario", on_change=_on_scenario_change)]
    st.session_state.setdefault("live_engine", chosen.engine)
    engine = mid.radio("Engine", ("live", "virtual"), key="live_engine", horizontal=True)
    right.button("Start", key="live_start", type="primary", on_click=_start, args=(chosen.path,),
                 width="stretch")
    reason = live_capability()[1]
    st.caption(f"{chosen.description} · " + (
        f"live: {reason}" if engine == "live" else
        "virtual: simulated time, done in seconds; it publishes nothing while it runs, so its "
        "results show when it ends"))
    with st.expander("Advanced start options"):
        st.number_input("Duration (s), 0 = the scenario's own", min_value=0.0, value=0.0, step=5.0,
                        key="live_duration", help="overrides duration_s: arrivals stop then, the run drains")
        st.number_input("TCP connections per KV link, 0 = the scenario's own", min_value=0,
                        max_value=MAX_CONNECTIONS, value=0, step=1, key="live_connections",
                        help="overrides transport.connections: live workers open this many when they "
                             "start; a virtual run caps each lossy transfer at as many Mathis flows")
        st.text_area("More overrides", key="live_overrides", height=80, help=OVERRIDES_HELP)
    if error := st.session_state.get("live_start_error"):
        st.error("\n".join(f"- {line}" for line in error.splitlines()))  # each problem on its own line


def _follow_watched() -> None:
    """The scenario selector follows the run being watched (when this server started it)."""
    started = REGISTRY.get(st.session_state.get("live_watch"))
    if started is not None and started.path.parent == SCENARIOS_DIR:
        st.session_state["live_scenario"] = started.path.name
        st.session_state["live_engine"] = started.handle.engine


def _take_focus() -> None:
    """A run to open (the page's ?run= link, once; a start here; the Classroom's or a Sweeps point's
    replay) becomes the watched run, and the selectors follow it. Called before any selector is
    drawn: a widget's value cannot change once it is on the page."""
    if not st.session_state.get("live_query_done"):
        st.session_state["live_query_done"] = True
        if wanted := st.query_params.get("run"):
            st.session_state["live_focus"] = wanted
    focus = st.session_state.pop("live_focus", None)
    if focus is not None:
        st.session_state["live_watch"] = st.session_state["live_pinned"] = focus
        _follow_watched()


def _run_label(run_id: str) -> str:
    started = REGISTRY.get(run_id)
    return started.label if started is not None else f"{run_id} · seen on the bus"


def _watch_section() -> str | None:
    """The run the page follows (newest started first, then runs only seen on the bus)."""
    options = [r.run_id for r in REGISTRY.all()]
    options += [rid for rid in (FEED.buffer.run_ids() if FEED else []) if rid not in options]
    if (pinned := st.session_state.get("live_pinned")) is not None and pinned not in options:
        options.insert(0, pinned)  # opened by id before this server has heard of it
    if not options:
        st.info("No run yet: start one above, or start one in a terminal with "
                f"`python -m emulator run SCENARIO.yaml --broker {BROKER.shown}` to watch it here.")
        return None
    if st.session_state.get("live_watch") not in options:
        st.session_state["live_watch"] = options[0]
    left, mid, right = st.columns([4, 1, 1], vertical_alignment="bottom")
    run_id = left.selectbox("Watching", options, key="live_watch", format_func=_run_label,
                            on_change=_follow_watched)
    started = REGISTRY.get(run_id)
    if mid.button("Stop", key="live_stop", disabled=started is None or not started.handle.is_running,
                  width="stretch", help="Ctrl-C the run: open requests end failed, it records"):
        REGISTRY.stop(run_id)
        st.toast(f"Stopping {run_id}: it fails what is open and writes its results.")
    right.button("Refresh", key="live_refresh", width="stretch")
    return run_id


# --- the run now: tiles and answers (a fragment redrawn at once when the run says something) ----


def _acks(run_id: str, view: RunView) -> None:
    now = time.monotonic()
    for i, item in enumerate(reversed(sent_knobs(run_id))):
        ack = ack_of(item, view, now)
        text = f"**{item.message.what}**: {ack.state}: {ack.text}"
        if i == 0:
            ACK_BOX[ack.state](text)
        else:
            st.caption(text)


def _tiles(tiles: list[Tile]) -> None:
    # rows of TILES_PER_ROW (eight in one clip their titles), a tile whose value needs more room
    # (the link's `120 Mbit/s · 10 ms`) given it (app.table_fit.tile_rows)
    needs = [tile_px(tile.title, tile.value, tile.help is not None) for tile in tiles]
    for indices, spec in tile_rows(needs, TILES_PER_ROW):
        for col, index in zip(st.columns(spec), indices, strict=False):
            col.metric(tiles[index].title, tiles[index].value, help=tiles[index].help)


def _status_row(view: RunView, phase: str, started: StartedRun | None) -> None:
    latest, status = view.latest, view.status
    scenario = _scenario_of(started)
    # the scenario of a run started here, else what the run's status says (a run started in a terminal)
    duration_s = scenario.duration_s if scenario is not None else status.duration_s if status is not None else None
    if started is not None and started.handle.engine == "virtual":
        _virtual_status(started, phase, f" / {duration_s:g}" if duration_s is not None else "")
        return  # a virtual run says nothing on the bus: its log and record are all there is
    doc = started.summary() if started is not None and phase == "ended" else None
    _tiles(record_tiles(doc) if doc is not None else bus_tiles(view, phase, duration_s))
    if duration_s is not None and latest is not None and phase == "running":
        st.progress(min(latest.t_s / duration_s, 1.0), text=f"{latest.t_s:.0f} of {duration_s:g} s")
    if status is not None and (why := status.link_backend_reason or status.note):
        st.caption(f"Why this backend: {why}")
        if status.link_backend_reason and status.note and status.note != status.link_backend_reason:
            st.caption(f"Latest from the run: {status.note}")
    elif started is not None and started.handle.engine == "live":
        st.caption(live_capability()[1])
    if status is not None and status.workload:
        st.caption(f"Workload: {status.workload}")


def _now(run_id: str, view: RunView, phase: str, started: StartedRun | None) -> None:
    """The run's status tiles. The page reruns whole when the run changes phase, moves a knob its
    widget does not show yet, or has said something the knobs' fragment has not drawn (an answer
    later than it waits for, a timeline's change)."""
    if st.session_state.get("live_shown") != (run_id, phase, view.latest is not None):
        st.rerun()  # the run changed phase: redraw the whole page (knobs on/off, fragment timers)
    _status_row(view, phase, started)
    now_s = time.monotonic()
    if phase == "running" and not answer_wait_s(sent_knobs(run_id), view, now_s) and (
            st.session_state.get(KNOBS_SHOWN) != _knobs_shown(run_id, view, now_s)
            or knobs_behind(run_id, view, _scenario_of(started), _start_threshold(started, view), now_s)):
        st.rerun()  # after drawing: the knobs and their tiles follow the run


def _knobs_shown(run_id: str, view: RunView, now_s: float) -> tuple:
    """What the knobs' fragment draws of the run: its values for the knobs and its answers."""
    return (run_id, tuple(tile.value for tile in knob_tiles(view)),
            tuple(ack_of(item, view, now_s).state for item in sent_knobs(run_id)))


def _knobs(run_id: str, knob_box: DeltaGenerator) -> None:
    """The sidebar's knobs and, in `knob_box` above the charts, the run's own values for them and its
    answers: one fragment, so a widget or Apply redraws these alone, never the page with its charts.
    While a knob sent waits for the run's answer, it waits on the feed and draws the answer the
    moment it is filed (push: no redraw of the page's to wait for)."""
    view = _view(run_id)
    if FEED is not None:
        while (wait_s := answer_wait_s(sent_knobs(run_id), view, time.monotonic())) > 0:
            FEED.buffer.wait_for_news(run_id, view.version, wait_s)
            view = _view(run_id)
    started = REGISTRY.get(run_id)
    if started is None or started.handle.engine != "virtual":  # a virtual run takes no knobs
        with knob_box.container():
            _tiles(knob_tiles(view))
            _acks(run_id, view)
    st.session_state[KNOBS_SHOWN] = _knobs_shown(run_id, view, time.monotonic())
    knobs_sidebar(run_id, view, _phase(run_id, view), FEED, BROKER.how, _scenario_of(started),
                  _start_threshold(started, view))


def _virtual_status(started: StartedRun, phase: str, duration: str) -> None:
    """A virtual run's progress, from the progress lines its CLI writes to its log; once it has
    ended, its record, as the results below (a stopped one says `stopped`)."""
    if phase == "ended" and (doc := started.summary()) is not None:
        _tiles(count_tiles(doc, TILES["simulated_time"]))
        return
    progress = started.progress()
    tiles = st.columns(3)
    tiles[0].metric(TILES["state"], "simulating" if phase == "virtual" else "ended")
    tiles[1].metric(TILES["simulated_time"], f"{progress.run_s:.1f}{duration}" if progress else "-")
    tiles[2].metric(TILES["ended"], f"{progress.done:,} / {progress.total:,}" if progress else "-")
    if phase == "virtual" and progress is not None and progress.total:
        st.progress(min(progress.done / progress.total, 1.0), text=f"{progress.done:,} of {progress.total:,} requests")


def _scenario_of(started: StartedRun | None) -> Scenario | None:
    return _scenario(str(started.path), started.overrides) if started is not None else None


def _start_threshold(started: StartedRun | None, view: RunView) -> int | None:
    """The t the run started at, for the threshold knob before any snapshot: the run's status, its
    record's threshold_start, or (a fixed threshold) the scenario's own."""
    if view.status is not None and view.status.threshold_tokens is not None:
        return view.status.threshold_tokens
    doc = started.summary() if started is not None else None
    if doc is not None and (start := RecordedMeta.from_doc(doc).threshold_start) is not None:
        return start
    scenario = _scenario_of(started)
    tokens = scenario.router.threshold_tokens if scenario is not None else None
    return tokens if isinstance(tokens, int) else None


def _decisions(started: StartedRun | None, view: RunView) -> pd.DataFrame:
    """The run's decisions and knob changes: from its record once written (complete), else as
    they arrived on the bus."""
    doc = started.summary() if started is not None and not started.handle.is_running else None
    return decision_rows(RecordedMeta.from_doc(doc)) if doc is not None else note_rows(view.notes)


def _charts(frame: pd.DataFrame, caption: str, decisions: pd.DataFrame, view: RunView | None = None) -> None:
    """The run's charts from `frame` (metrics_frame's columns: the bus's snapshots, or a record),
    the scheduler's decisions and the knob changes marked on the threshold and egress charts; with
    the bus `view`, also the node roles."""
    st.caption(caption)
    grid = [st.columns(2), st.columns(2), st.columns(2)]
    for col, key, spec in (
        (grid[0][0], "live_ttft", live_charts.ttft_spec(frame, decisions)),
        (grid[0][1], "live_egress", live_charts.egress_spec(frame, decisions)),
        (grid[1][0], "live_queues", live_charts.queues_spec(frame)),
        (grid[1][1], "live_share", live_charts.share_spec(frame)),
        (grid[2][0], "live_link", live_charts.link_health_spec(frame)),
    ):
        col.markdown(f"**{live_charts.CHART_TITLES[key]}**")
        # the same spec every second (its data travel beside it): the browser keeps the chart and swaps its data
        col.vega_lite_chart(spec | {"description": live_charts.CHART_TITLES[key]}, width="stretch")
    if view is not None:
        grid[2][1].markdown(f"**{ROLES}**")
        grid[2][1].dataframe(roles_table(view.latest), hide_index=True, placeholder="-")


def _tables(run_id: str) -> None:
    """The decisions and knob changes, and with the bus's view the last requests (redrawn every
    TABLES_EVERY_S), under the charts of a live run or of a record."""
    view = _view(run_id)
    phase = _phase(run_id, view)
    started = REGISTRY.get(run_id)
    if phase == "virtual" or not (view.metrics or (phase == "ended" and started is not None
                                                   and started.recorded_frame() is not None)):
        return
    decisions = _decisions(started, view)
    st.markdown(f"**{DECISIONS}** (the scheduler's, and every knob the timeline or a control message turned)")
    if decisions.empty:
        st.caption("None yet: no knob has been turned and the scheduler has not moved anything.")
    else:
        # reasons wrap in the table and read whole in the detail view (app.tables, app.decisions_view)
        show_table(decisions[list(TABLE_COLUMNS)], "live_decisions", wrap=WRAPPED,
                   config={TIME: st.column_config.NumberColumn(TIME, format="%.1f")})
        with st.expander(DETAILS_TITLE):
            st.markdown("\n".join(decision_details(decisions)))
    if view.metrics:
        st.markdown(f"**{LAST_REQUESTS}** (queue, prefill and exposed transfer make up the TTFT)")
        _last_requests(requests_table(view.events))


def _last_requests(table: pd.DataFrame) -> None:
    """The last requests, the router's reason summed up in its column (`30,000 new tokens > t 19,400
    -> remote`) and whole in the detail view below."""
    shown = table.assign(reason=table["reason"].map(route_summary))
    show_table(shown, "live_requests", config=REQUEST_COLUMNS, wrap=("reason", "node"), min_wrap_px=120)
    with st.expander("Each request's routing reason in full"):
        st.markdown("\n".join(f"- `{rid}`: {reason}" for rid, reason in zip(table["request"], table["reason"],
                                                                            strict=True)))


def _panel(run_id: str) -> None:
    """The run's tiles and charts (redrawn every CHARTS_EVERY_S), and the results once it has ended."""
    view = _view(run_id)
    phase = _phase(run_id, view)
    started = REGISTRY.get(run_id)
    _now(run_id, view, phase, started)
    if phase in ("ended", "virtual") and started is not None:
        show_results(started, _scenario_of(started))
    if phase == "virtual":
        st.info("Simulating: a virtual run publishes nothing while it runs; its charts show here when it ends.")
    elif view.metrics:
        frame = metrics_frame(view.metrics)
        _charts(frame, f"Last snapshot: t = {view.latest.t_s:.2f} s · {len(frame)} snapshots",
                _decisions(started, view), view)
    elif phase == "ended" and started is not None and (recorded := started.recorded_frame()) is not None:
        _charts(recorded, f"From the run's record: {len(recorded)} samples, one per second of run time",
                _decisions(started, view))
    elif phase == "waiting":
        st.info("Waiting for the run's first metrics snapshot (a live run takes a few seconds to start).")
        if started is not None:
            st.code(started.handle.log_tail(6) or "(no output yet)", language=None)


st.set_page_config(page_title="Live · PrfaaS Lab", layout="wide")
st.title("Live control room")
st.markdown(INTRO)
BROKER = choose_broker()
FEED: MqttFeed | None = get_feed(BROKER.url) if BROKER.url else None
REGISTRY = get_registry()
feed_state = ("connected" if FEED and FEED.connected else f"not connected ({FEED.reason})" if FEED
              else "no broker")
st.caption(f"MQTT broker: {BROKER.shown} ({BROKER.how}) · subscriber {feed_state}")
if BROKER.url is None:
    st.warning(f"No MQTT broker: {BROKER.how}. Runs still start and record, but nothing shows live.")
_take_focus()
_start_section()
watched = _watch_section()
if watched is not None:
    watched_view = _view(watched)
    watched_phase = _phase(watched, watched_view)
    st.session_state["live_shown"] = (watched, watched_phase, watched_view.latest is not None)
    knob_box = st.empty()  # the run's values for the knobs and its answers: drawn by the knobs' fragment
    with st.sidebar:
        st.fragment(key=KNOBS_FRAGMENT)(_knobs)(watched, knob_box)
    going = watched_phase in ("waiting", "running", "virtual")
    st.fragment(run_every=CHARTS_EVERY_S if going else None, key="live_panel")(_panel)(watched)
    st.fragment(run_every=TABLES_EVERY_S if going else None, key="live_tables")(_tables)(watched)
