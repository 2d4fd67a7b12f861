"""The Live page's sidebar of knobs: each widget's callback checks its control message with
`app.knobs_view` and publishes it through the server's MQTT feed; what was sent is kept in the
session for the page to pair with the run's answer.

Layout and callbacks only; the messages and their checks are `app.knobs_view`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import streamlit as st

from app.knob_acks import SentKnob, ack_of, is_replay
from app.knob_sync import WIDGET_PREFIX, Origin, origin, renewed, retire, sent_names, unapplied, widget_updates
from app.knobs_view import (
    AFFINITIES,
    BOUNDS,
    LINK_FIELDS,
    POLICIES,
    THRESHOLD_STEP,
    affinity_payload,
    arrival_rate_payload,
    check_knob,
    empty_payload,
    knob_values,
    link_base,
    link_payload,
    policy_payload,
    scheduler_payload,
    threshold_max,
    threshold_payload,
)
from app.live_view import KNOB_TITLES, RunView
from app.mqtt_feed import MqttFeed
from emulator.errors import TelemetryError
from emulator.scenario import Scenario
from emulator.telemetry.control_messages import Knob
from emulator.telemetry.labels import KNOB_LABELS, format_number

MAX_SENT_SHOWN = 5
KNOBS_FRAGMENT = "live_knobs"  # the sidebar's knobs: a widget or Apply reruns this fragment alone
SYNCED = "live_knobs_synced"  # (run id, {knob: the run's value its widget was last set to})
GENERATIONS = "live_knob_generations"  # {knob: times its widget was made anew}: its key's suffix
RETIRED = "live_knobs_retired"  # (run id, {widget key: (knob, value) when made anew under another key})
PENDING = "live_knobs_pending"  # {knob: the run's value} of the edits the sidebar names as not applied
TCP_NOTE = ("TCP connections per KV link are set when a run starts (Advanced start options, or "
            "transport.connections in the scenario): live workers open them at start and cannot change "
            "them while running.")
PHASE_NOTES = {
    "running": "Each knob shows the run's own value, whoever set it; a change is published on its "
               "control topic and the run's answer shows above the charts.",
    "waiting": "Knobs wait for the run's first metrics snapshot.",
    "virtual": "A virtual run takes no knobs: it is simulated and done in seconds.",
    "ended": "This run is over; its knobs are off.",
}
LINK_WORDS = {"bandwidth_mbit": "the rate the remote cluster's KV caches cross to the local one; "
                                "lower it to watch egress pin at the line and TTFT climb",
              "delay_ms": "one-way delay the link adds to every packet",
              "jitter_ms": "random variation of that delay",
              "loss_pct": "share of packets the link drops (TCP resends them; the KV arrives later)"}


def knob_key(name: str) -> str:
    """The widget key of knob `name` now: `live_k_<name>`, with a suffix once it was made anew."""
    generation = st.session_state.get(GENERATIONS, {}).get(name, 0)
    return f"{WIDGET_PREFIX}{name}" + (f"_{generation}" if generation else "")


def bounds_help(name: str) -> str:
    """The registry's range for a number input. The widget itself is not clamped: a value out of
    range is refused with the run's own one-line reason instead of silently moved."""
    low, high = BOUNDS[name]
    return f"from {low:g} to {high:g}"


# The rate knob's (label, help), by whether the run replays a trace: a generated workload draws
# arrivals at the rate in force; a trace keeps its own timestamps and the knob scales its time.
RATE_KNOB = {
    False: (KNOB_TITLES["rate"], f"{bounds_help('rate_per_s')}; arrivals are drawn at the rate in force "
                                    "until the run's duration ends"),
    True: ("Replay speed (x the trace's pace)", f"{bounds_help('rate_per_s')}; 2 plays the trace twice as "
           "fast, 0.5 half as fast; the trace's end (or the run's duration) ends arrivals"),
}


def sent_knobs(run_id: str) -> list[SentKnob]:
    """What this session sent to `run_id`, oldest first."""
    return [s for s in st.session_state.get("live_sent", []) if s.message.run_id == run_id]


def _send(feed: MqttFeed | None, why_no_feed: str, run_id: str, knob: Knob, payload: dict[str, Any]) -> None:
    """Check, then publish one knob; a refusal is kept for the sidebar to show. Only the knobs'
    fragment reruns (never the page with its charts); it waits on the feed for the run's answer
    and draws it the moment it is filed."""
    st.session_state["live_refusal"] = None
    try:
        view = feed.buffer.view(run_id) if feed is not None else RunView(run_id)
        message = check_knob(run_id, knob, payload, link_base(view))
        if is_replay(sent_knobs(run_id), message, time.monotonic()):
            return
        if feed is None:
            raise TelemetryError(f"mqtt: no broker ({why_no_feed}); knobs need one")
        sent_at_s = time.monotonic()  # before publishing: the run may answer before publish() returns
        feed.publish(message.topic, message.data)
    except TelemetryError as err:
        st.session_state["live_refusal"] = f"Not sent: {err}"
        return
    st.session_state["live_sent"] = [*sent_knobs(run_id), SentKnob(message, sent_at_s)][-MAX_SENT_SHOWN:]
    synced = _of_run(SYNCED, run_id)  # the session's own dict: dropped here, for good
    for name in sent_names(knob):  # once answered, the widget shows the run's value again
        synced.pop(name, None)


def _of_run(name: str, run_id: str) -> dict[str, Any]:
    """The session's (run id, dict) under `name`, when it is `run_id`'s; else an empty dict."""
    kept = st.session_state.get(name)
    return kept[1] if kept is not None and kept[0] == run_id else {}


def _from_widgets(feed: MqttFeed | None, why_no_feed: str, run_id: str, knob: Knob,
                  build: Callable[..., dict[str, Any]], *keys: str) -> None:
    """A widget's on_change or a form's Apply: its knob, from the widgets' values. A retired
    widget's echo sends nothing; an edit the run's move overtook is not sent, and says so."""
    values = {k: st.session_state[k] for k in keys}
    retired = _of_run(RETIRED, run_id)
    match origin(values, retired):
        case Origin.ECHO:
            return
        case Origin.LATE_EDIT:
            names = [retired[k][0] for k in keys if k in retired]
            now = "; ".join(f"{KNOB_LABELS[n]} is now {_shown(st.session_state.get(knob_key(n)))}" for n in names)
            st.session_state["live_refusal"] = (f"Not sent: the run moved this knob as you changed it ({now}); "
                                                "the sidebar shows the run's value: set it again to send yours.")
            return
    _send(feed, why_no_feed, run_id, knob, build(*values.values()))


def _sync(run_id: str, view: RunView, scenario: Scenario | None, start_threshold: int | None,
          now_s: float) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], set[str]]:
    """(the run's values, the synced ones, the widgets' values, the knobs waiting for an answer)."""
    run = knob_values(scenario, view.latest, start_threshold)
    synced = dict(_of_run(SYNCED, run_id))
    widgets = {name: st.session_state[knob_key(name)] for name in run if knob_key(name) in st.session_state}
    waiting = {name for sent in sent_knobs(run_id) if not ack_of(sent, view, now_s).is_settled
               for name in sent_names(sent.message.knob)}
    return run, synced, widgets, waiting


def follow_run(run_id: str, view: RunView, scenario: Scenario | None, start_threshold: int | None,
               now_s: float) -> dict[str, Any]:
    """Set each knob widget the run has moved (app.knob_sync's rule); call before drawing them.
    Returns the knobs whose widget holds an edit the run is not at: name -> the run's value."""
    run, synced, widgets, waiting = _sync(run_id, view, scenario, start_threshold, now_s)
    updates = widget_updates(run, synced, widgets, waiting)
    generations = st.session_state.setdefault(GENERATIONS, {})
    retired = _of_run(RETIRED, run_id)
    for name in renewed(updates, widgets):
        retired = retire(retired, knob_key(name), name, widgets[name])
        generations[name] = generations.get(name, 0) + 1
    st.session_state[RETIRED] = (run_id, retired)
    for name, value in updates.items():
        if knob_key(name) not in st.session_state:  # a new widget (or one made anew): its first value
            st.session_state[knob_key(name)] = value
    st.session_state[SYNCED] = (run_id, synced | updates)
    st.session_state[PENDING] = unapplied(run, widgets | updates, waiting)
    return st.session_state[PENDING]


def knobs_behind(run_id: str, view: RunView, scenario: Scenario | None, start_threshold: int | None,
                 now_s: float) -> bool:
    """Whether the run has moved a knob so that its widget must show another value, or the sidebar's
    "Not applied" line is out of date (the page then reruns whole, as only a whole run redraws the
    sidebar); a move the widget already shows is recorded here, without a rerun. While a sent knob
    waits for its answer, the line waits too: a rerun then would only delay the answer."""
    run, synced, widgets, waiting = _sync(run_id, view, scenario, start_threshold, now_s)
    updates = widget_updates(run, synced, widgets, waiting)
    if renewed(updates, widgets):
        return True
    if updates:
        st.session_state[SYNCED] = (run_id, synced | updates)
    return not waiting and unapplied(run, widgets | updates) != st.session_state.get(PENDING, {})


def _shown(value: Any) -> str:
    if value is None:
        return "unshaped"
    if isinstance(value, bool):
        return "on" if value else "off"
    return format_number(value) if isinstance(value, int | float) else str(value)


def knobs_sidebar(run_id: str, view: RunView, phase: str, feed: MqttFeed | None, why_no_feed: str,
                  scenario: Scenario | None, start_threshold: int | None = None) -> None:
    """The knobs of `run_id`, live only while it runs. Call it inside `with st.sidebar:`.
    `start_threshold` is the t the run started at when its scenario says `auto`."""
    pending = follow_run(run_id, view, scenario, start_threshold, time.monotonic())
    keys = {name: knob_key(name) for name in KNOB_LABELS}
    link_keys = tuple(keys[name] for name in LINK_FIELDS)
    scheduler_keys = (keys["short_term"], keys["long_term"])
    off = phase != "running"
    on = {"disabled": off}

    def wire(knob: Knob, build: Callable[..., dict[str, Any]], *keys: str) -> dict[str, Any]:
        return {"on_change": _from_widgets, "args": (feed, why_no_feed, run_id, knob, build, *keys), **on}

    st.header("Knobs")
    st.caption(f"Run {run_id}. {PHASE_NOTES[phase]}")
    with st.form("live_threshold_form", border=False):  # one message on Apply, not one per key press
        st.slider(KNOB_LABELS["threshold"], 0, threshold_max(scenario, start_threshold), step=THRESHOLD_STEP,
                  key=keys["threshold"], disabled=off,
                  help="prompts whose uncached part is longer go to the remote PrfaaS cluster; the range "
                       "ends at the longest prompt the scenario can draw")
        st.form_submit_button("Apply threshold", key="live_apply_threshold", width="stretch", disabled=off,
                              on_click=_from_widgets,
                              args=(feed, why_no_feed, run_id, Knob.THRESHOLD, threshold_payload, keys["threshold"]))
    st.selectbox(KNOB_LABELS["policy"], POLICIES, key=keys["policy"],
                 help="prfaas: by threshold; local-only: homogeneous PD; all-remote: naive heterogeneous",
                 **wire(Knob.POLICY, policy_payload, keys["policy"]))
    is_trace = scenario is not None and scenario.workload.is_trace
    label, help_text = RATE_KNOB[is_trace]
    st.number_input(label, help=help_text, step=0.1, format="%.2f", key=keys["rate_per_s"],
                    **wire(Knob.ARRIVAL_RATE, arrival_rate_payload, keys["rate_per_s"]))
    pause, resume = st.columns(2)
    for col, label, key, knob in ((pause, KNOB_TITLES["pause"], "live_pause", Knob.PAUSE),
                                  (resume, "Resume", "live_resume", Knob.RESUME)):
        col.button(label, key=key, width="stretch", on_click=_send,
                   args=(feed, why_no_feed, run_id, knob, empty_payload()), **on)
    st.toggle(KNOB_LABELS["short_term"], key=scheduler_keys[0],
              help="its triggers are start-time settings: Advanced start options, e.g. "
                   "scheduler.short_term.queue_depth_trigger=8",
              **wire(Knob.SCHEDULER, scheduler_payload, *scheduler_keys))
    st.toggle(KNOB_LABELS["long_term"], key=scheduler_keys[1],
              help="every few minutes, re-plans how many local instances prefill and how many decode "
                   "(a node drains before it changes role)",
              **wire(Knob.SCHEDULER, scheduler_payload, *scheduler_keys))
    st.selectbox(KNOB_LABELS["affinity"], AFFINITIES, key=keys["affinity"],
                 help="which prefill node takes a request: cost (least estimated time to first token), "
                      "longest-prefix (the longest cached prefix, whatever its queue) or off (least loaded)",
                 **wire(Knob.AFFINITY, affinity_payload, keys["affinity"]))
    st.markdown("**Cross-datacenter link**")
    with st.form("live_link_form", border=False):  # the four fields in one message, on Apply
        st.number_input(KNOB_LABELS["bandwidth_mbit"], key=link_keys[0], step=10.0, format="%.1f",
                        help=f"{LINK_WORDS['bandwidth_mbit']}; {bounds_help('bandwidth_mbit')}", **on)
        for col, name in zip(st.columns(3), LINK_FIELDS[1:], strict=True):
            col.number_input(KNOB_LABELS[name], key=keys[name], step=1.0, format="%.1f",
                             help=f"{LINK_WORDS[name]}; {bounds_help(name)}", **on)
        st.form_submit_button("Apply link", key="live_apply_link", width="stretch", on_click=_from_widgets,
                              args=(feed, why_no_feed, run_id, Knob.LINK, link_payload, *link_keys), **on)
    st.caption(TCP_NOTE)
    if pending and not off:
        st.warning("Not applied: " + "; ".join(f"{KNOB_LABELS[name]} (the run is at {_shown(value)})"
                                                for name, value in pending.items()))
    if refusal := st.session_state.get("live_refusal"):
        st.error(refusal)
