"""Which of the Live page's knob widgets follow the run now, without taking an edit out of the
user's hands. Pure: the run's values, the widgets' values and what was sent go in; the widget values
to set come out (`app.live_knobs` sets them through `st.session_state` before drawing the widgets).

The rule, per knob (`synced` holds the run value each widget was last set to):
- When the run's value moves (the timeline, the scheduler, another client, or this page's own
  message taking effect), the widget is set to it, even over an edit not yet applied: the run is the
  truth, and Apply must never send a value chosen against one the run has left.
- While the run's value stays put, the widget keeps what the user set: an edit in progress, or one
  made and not applied, is left alone (and named beside the knobs as not applied).
- A widget that must show another value is made anew under a new key (`renewed`), never set in
  place (see there why).
- A knob this page sent waits for the run's answer (`app.knob_acks`); once answered (applied,
  refused, or silent), its widget shows the run's value again, so a refused value never stays on
  screen as if the run had taken it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from app.knobs_view import LINK_FIELDS
from emulator.telemetry.control_messages import Knob

WIDGET_PREFIX = "live_k_"  # a knob's widget key: live_k_<name>
KNOB_WIDGETS: dict[Knob, tuple[str, ...]] = {
    Knob.THRESHOLD: ("threshold",), Knob.POLICY: ("policy",), Knob.AFFINITY: ("affinity",),
    Knob.SCHEDULER: ("short_term", "long_term"), Knob.LINK: LINK_FIELDS, Knob.ARRIVAL_RATE: ("rate_per_s",),
    Knob.PAUSE: (), Knob.RESUME: (),
}
_UNSET = object()


def widget_updates(run: Mapping[str, Any], synced: Mapping[str, Any], widgets: Mapping[str, Any],
                   waiting: Collection[str] = ()) -> dict[str, Any]:
    """The widget values to set now: every knob whose widget does not exist yet or whose run value
    differs from the one it was last set to, except those still waiting for the run's answer."""
    return {name: value for name, value in run.items()
            if name not in waiting and (name not in widgets or synced.get(name, _UNSET) != value)}


def renewed(updates: Mapping[str, Any], widgets: Mapping[str, Any]) -> set[str]:
    """The knobs whose widget is made anew, under a new key, to show the run's value: those that
    exist and show another value. A live widget's value is never set in place: a rerun already on its
    way from the browser (the page's fragments rerun every second) carries the old value back,
    which Streamlit reads as the user's change, firing its callback (a knob sent that nobody turned)."""
    return {name for name, value in updates.items() if name in widgets and widgets[name] != value}


def unapplied(run: Mapping[str, Any], widgets: Mapping[str, Any], waiting: Collection[str] = ()) -> dict[str, Any]:
    """Knobs whose widget holds a value the run is not at (an edit not applied yet): name -> the
    run's value. One sent and waiting for its answer is not listed."""
    return {name: value for name, value in run.items()
            if name in widgets and name not in waiting and widgets[name] != value}


def sent_names(knob: Knob) -> tuple[str, ...]:
    """The widgets a knob's message sets."""
    return KNOB_WIDGETS[knob]
