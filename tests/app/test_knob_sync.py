"""The rule that keeps the Live page's knob widgets on the run's values (app/knob_sync.py), case by
case: the run moves a knob, the user edits one, a sent knob is answered or refused."""

from __future__ import annotations

from app.knob_sync import KNOB_WIDGETS, MAX_RETIRED, Origin, origin, renewed, retire, unapplied, widget_updates
from app.knobs_view import LINK_FIELDS
from emulator.telemetry.control_messages import Knob

RUN = {"threshold": 2048, "bandwidth_mbit": 200.0, "policy": "prfaas", "short_term": False}


def test_new_widgets_take_the_runs_values() -> None:
    updates = widget_updates(RUN, synced={}, widgets={})
    assert updates == RUN and not renewed(updates, {})


def test_widgets_follow_whatever_moved_the_run() -> None:
    """Issue 26: the timeline raised t to 4,096 and cut the link to 50 Mbit/s; the knobs must show it."""
    moved = RUN | {"threshold": 4096, "bandwidth_mbit": 50.0}
    updates = widget_updates(moved, synced=RUN, widgets=RUN)
    assert updates == {"threshold": 4096, "bandwidth_mbit": 50.0}
    assert renewed(updates, RUN) == {"threshold", "bandwidth_mbit"}  # made anew, never set in place


def test_an_unapplied_edit_stays_while_the_run_stays_put() -> None:
    edited = RUN | {"bandwidth_mbit": 120.0}
    assert widget_updates(RUN, synced=RUN, widgets=edited) == {}
    assert unapplied(RUN, edited) == {"bandwidth_mbit": 200.0}  # named beside the knobs, with the run's value


def test_the_run_moving_replaces_an_unapplied_edit_so_apply_never_sends_a_stale_choice() -> None:
    edited = RUN | {"threshold": 3072}
    moved = RUN | {"threshold": 4096}
    assert widget_updates(moved, synced=RUN, widgets=edited) == {"threshold": 4096}


def test_a_sent_knob_waits_for_the_answer_then_shows_the_runs_value() -> None:
    """Sending drops the knob from `synced`: while waiting nothing moves it; once answered it is set to
    the run's value (no redraw when applied, as the widget already shows it; a redraw when refused)."""
    synced = {name: value for name, value in RUN.items() if name not in KNOB_WIDGETS[Knob.SCHEDULER]}
    toggled = RUN | {"short_term": True}
    assert widget_updates(RUN, synced, toggled, waiting={"short_term", "long_term"}) == {}
    assert unapplied(RUN, toggled, waiting={"short_term"}) == {}
    refused = widget_updates(RUN, synced, toggled)
    assert refused == {"short_term": False} and renewed(refused, toggled) == {"short_term"}
    applied = widget_updates(toggled, synced, toggled)
    assert applied == {"short_term": True} and not renewed(applied, toggled)


def test_each_knob_names_the_widgets_its_message_sets() -> None:
    assert KNOB_WIDGETS[Knob.LINK] == LINK_FIELDS
    assert set(KNOB_WIDGETS) == set(Knob)


def test_a_retired_widget_at_its_last_value_is_an_echo_and_at_another_a_late_edit() -> None:
    retired = retire({}, "live_k_rate_per_s_4", "rate_per_s", 1.7)
    assert origin({"live_k_rate_per_s_5": 0.9}, retired) is Origin.ON_SCREEN
    assert origin({"live_k_rate_per_s_4": 1.7}, retired) is Origin.ECHO
    assert origin({"live_k_rate_per_s_4": 3.0}, retired) is Origin.LATE_EDIT
    both = retire(retired, "live_k_short_term_1", "short_term", False)  # the scheduler's two toggles
    assert origin({"live_k_short_term_1": False, "live_k_long_term": True}, both) is Origin.ECHO
    assert origin({"live_k_short_term_1": True, "live_k_long_term": True}, both) is Origin.LATE_EDIT


def test_the_retired_widgets_kept_are_the_newest_and_bounded() -> None:
    retired: dict = {}
    for generation in range(3 * MAX_RETIRED):
        retired = retire(retired, f"live_k_threshold_{generation}", "threshold", generation)
    assert len(retired) == MAX_RETIRED and f"live_k_threshold_{3 * MAX_RETIRED - 1}" in retired
    assert "live_k_threshold_0" not in retired
