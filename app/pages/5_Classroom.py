"""Classroom: a guided tour in six steps; each starts a scenario (same run API as the Live page),
says what to watch and what should happen, and points to the page to watch it on.

Layout only; the steps are data in `app.classroom_view`, runs start through `app.run_registry`.
"""

from __future__ import annotations

import streamlit as st

from app.classroom_times import load_measured
from app.classroom_view import ALSO_TRY, STEPS, Step, Variant, button_label, variant_scenario
from app.mqtt_feed import choose_broker, get_feed
from app.page_links import page_link
from app.run_registry import RunRefused, get_registry
from emulator.api import SCENARIOS_DIR, live_capability
from emulator.errors import PrfaasError

INTRO = """
Six steps. Each one starts a scenario and says what to watch; live steps run real processes and a
real shaped link, sized to this machine (their arrival rate is 60% of what the workers sustain,
measured at start), virtual ones simulate in seconds. Each button says how long its run takes, as
measured on a 2-core machine. Start a step, then open the Live page: it follows the run you started
last, and its sidebar holds the knobs.
"""

def _start(number: int, step: Step, variant: Variant) -> None:
    started_runs = st.session_state.setdefault("class_started", {})
    broker = choose_broker()
    if broker.url is not None:
        get_feed(broker.url)  # subscribed before the run says its first word
    try:
        run = get_registry().start(SCENARIOS_DIR / step.scenario, variant.engine, broker.url,
                                   variant.overrides)
    except (PrfaasError, RunRefused, OSError) as err:
        started_runs[number] = ("error", str(err))
        return
    started_runs[number] = ("ok", f"Started run **{run.run_id}** ({variant.label.lower()}).")
    st.session_state["live_focus"] = run.run_id  # the Live page opens on it


def _timing(step: Step) -> str:
    """Where a live variant's time goes, as measured: start-up, the scenario's arrivals, the drain."""
    for variant in step.variants:
        measured = MEASURED.get((step.title, variant.label))
        if variant.engine == "live" and measured is not None:
            arrivals = variant_scenario(step, variant).duration_s
            return (f"Live: {measured.startup_s:.0f} s to start the workers and time them, {arrivals:g} s of "
                    f"arrivals, {measured.drain_s:.0f} s to finish what is open (measured on a 2-core machine).")
    return ""


def _step(number: int, step: Step) -> None:
    with st.container(border=True):
        st.subheader(f"Step {number}. {step.title}")
        st.markdown(step.idea)
        st.markdown(f"**Watch:** {step.watch}")
        st.markdown(f"**What you should see:** {step.expect}")
        st.markdown(f"**Ask:** {step.question}")
        st.caption(f"Scenario: `scenarios/{step.scenario}`. {_timing(step)}")
        cols = st.columns(len(step.variants) + 1)
        for i, (col, variant) in enumerate(zip(cols, step.variants, strict=False)):
            col.button(button_label(step, variant, MEASURED), key=f"class_start_{number}_{i}", on_click=_start,
                       args=(number, step, variant), type="primary" if i == 0 else "secondary",
                       width="stretch")
        outcome = st.session_state.get("class_started", {}).get(number)
        if outcome is None:
            return
        state, text = outcome
        if state == "error":
            st.error(text)
            return
        st.success(text)
        page_link("Live", "Watch it on the Live page")
        if step.pointer != "Live":
            page_link(step.pointer, f"Then open the {step.pointer} page")


MEASURED = load_measured()
st.set_page_config(page_title="Classroom · PrfaaS Lab", layout="wide")
st.title("Classroom")
st.markdown(INTRO)
st.caption(live_capability()[1])
for index, tour_step in enumerate(STEPS, start=1):
    _step(index, tour_step)
st.markdown(f"**Also try:** {ALSO_TRY}")
