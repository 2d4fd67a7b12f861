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
- A widget made anew retires the old one, whose callback can still fire: a rerun the browser sent
  before it drew the new widget carries the old one's value, which Streamlit reads as changed once it
  has dropped the retired widget's state (`origin`). Such an echo sends nothing.
- A knob this page sent waits for the run's answer (`app.knob_acks`); once answered (applied,
  refused, or silent), its widget shows the run's value again, so a refused value never stays on
  screen as if the run had taken it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from enum import Enum
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
MAX_RETIRED = 64  # retired widgets remembered per session: enough for every knob to move many times a second


class Origin(Enum):
    """Where a knob widget's change comes from."""
    ON_SCREEN = "on screen"  # a widget the page shows now: the user's change, sent
    ECHO = "echo"  # retired widgets at the values they held when retired: a late rerun, nothing sent
    LATE_EDIT = "late edit"  # a retired widget at another value: an edit the run's move overtook


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


def retire(retired: Mapping[str, tuple[str, Any]], key: str, name: str, value: Any) -> dict[str, tuple[str, Any]]:
    """`retired` with widget `key` (knob `name`, showing `value`) added: the newest MAX_RETIRED."""
    kept = {k: v for k, v in retired.items() if k != key} | {key: (name, value)}
    return dict(list(kept.items())[-MAX_RETIRED:])


def origin(values: Mapping[str, Any], retired: Mapping[str, tuple[str, Any]]) -> Origin:
    """Where a change of the widgets `values` (key -> value) comes from, given the retired widgets
    (key -> (knob, value when retired))."""
    if not any(key in retired for key in values):
        return Origin.ON_SCREEN
    if all(key not in retired or retired[key][1] == value for key, value in values.items()):
        return Origin.ECHO
    return Origin.LATE_EDIT
