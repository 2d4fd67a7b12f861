"""The Live page shows what the run is doing (issue 26), headless (AppTest) against a real broker
with a probe playing the run: the knobs follow the run's own values whoever moved them, a knob the
run refuses shows refused with its reason, and the tiles carry the run's threshold, link and arrivals.
A late rerun from the browser (`app._run` with the widget states it held) replays the race in which
the page once sent a rate back that the run had left."""

from __future__ import annotations

import time

from streamlit.proto.WidgetStates_pb2 import WidgetStates
from streamlit.testing.v1 import AppTest

from emulator.telemetry.schemas import KnobState
from tests.app.test_live_page import _knob, _metrics, _ok, _texts, _until, _watching

LINK = {"bandwidth_mbit": 200.0, "delay_ms": 10.0, "jitter_ms": 0.0, "loss_pct": 0.0}
KNOBS = KnobState(policy="prfaas", affinity="cost", has_scheduler=False, rate_per_s=0.5)


def test_the_knobs_follow_what_the_timeline_did_to_the_run(fake_run) -> None:
    """The scenario's timeline raised t to 4,096 and cut the link to 50 Mbit/s: the sidebar, the
    tiles and a later Apply all start from those values, never from what the page last sent."""
    app = _watching(fake_run)
    assert _knob(app, "slider", "threshold").value == 2048
    fake_run.snapshot(2.0, threshold=4096, link=LINK | {"bandwidth_mbit": 50.0},
                      knobs=KNOBS.model_copy(update={"policy": "local-only", "rate_per_s": 1.5}))
    _until(app, lambda a: _knob(a, "slider", "threshold").value == 4096)
    assert _knob(app, "number_input", "bandwidth_mbit").value == 50.0
    assert _knob(app, "selectbox", "policy").value == "local-only"
    assert _knob(app, "number_input", "rate_per_s").value == 1.5
    metrics = _metrics(app)
    assert (metrics["Threshold (tokens)"], metrics["Link"], metrics["Arrivals"]) == ("4,096", "50 Mbit/s · 10 ms",
                                                                                     "1.5/s")
    _ok(app.button(key="live_apply_link").click().run())  # Apply sends the run's link, not 200 again
    assert fake_run.control("link")["bandwidth_mbit"] == 50.0


def test_an_edit_not_applied_is_kept_and_named_until_the_run_moves(fake_run) -> None:
    """A value the page refused to send stays in its widget, named as not applied, while the run stays
    put; once the run moves (another client, the timeline), the widget shows the run's value."""
    app = _watching(fake_run)
    _ok(_knob(app, "number_input", "rate_per_s").set_value(0.0).run())
    assert any(e.value.startswith("Not sent: control/arrival_rate") for e in app.error)
    fake_run.snapshot(2.0, knobs=KNOBS)  # the run stays at 0.5/s: the edit is the user's, and stays
    _until(app, lambda a: "Last snapshot: t = 2.00 s" in _texts(a))
    assert _knob(app, "number_input", "rate_per_s").value == 0.0
    assert any("Not applied: Arrival rate (req/s) (the run is at 0.5)" in w.value for w in app.warning)
    fake_run.snapshot(3.0, knobs=KNOBS.model_copy(update={"rate_per_s": 1.5}))  # someone else moved it
    _until(app, lambda a: _knob(a, "number_input", "rate_per_s").value == 1.5)
    assert not any("Not applied" in w.value for w in app.warning)


def test_a_refused_knob_shows_refused_with_the_runs_reason_and_the_widget_returns(fake_run) -> None:
    """live-quickstart runs no scheduler: turning its short-term loop on is refused, not taken."""
    app = _watching(fake_run)
    fake_run.snapshot(1.5, knobs=KNOBS)
    _until(app, lambda a: "Last snapshot: t = 1.50 s" in _texts(a))
    _ok(_knob(app, "toggle", "short_term").set_value(True).run())
    assert fake_run.control("scheduler") == {"v": 1, "short_term": True, "long_term": False}
    why = "control/scheduler: this scenario runs no scheduler, so no loop can be turned on"
    fake_run.note(1.6, "control", f"refused scheduler: {why}")
    fake_run.snapshot(1.7, knobs=KNOBS)
    _until(app, lambda a: any(f"scheduler short-term on, long-term off**: refused: {why}" in e.value
                              for e in a.error))
    assert not app.success
    _until(app, lambda a: _knob(a, "toggle", "short_term").value is False)
    assert fake_run.sent("scheduler") == [{"v": 1, "short_term": True, "long_term": False}]  # sent once


def test_a_late_rerun_from_the_browser_with_a_retired_widget_sends_nothing(fake_run) -> None:
    """The run moved the rate twice while the page was open: each move made its widget anew. A rerun
    the browser sent before it drew the new widget carries the retired one's value; Streamlit reads
    a retired widget's value as changed, and its callback once sent the old rate back to the run
    (a burst set over MQTT, reverted by the page 0.6-1.1 s later, with nobody at the page)."""
    app, in_flight, _ = _rate_moved_twice(fake_run)
    _ok(app._run(in_flight))  # the browser's late rerun: the retired widget at 1.5
    _ok(app.run())
    time.sleep(0.5)  # a message sent would be on the probe by now
    assert fake_run.sent("arrival_rate") == []
    assert _knob(app, "number_input", "rate_per_s").value == 2.5
    assert not app.error


def test_an_edit_the_runs_move_overtook_is_not_sent_and_says_so(fake_run) -> None:
    """The user typed 3 into the rate as the run moved it to 2.5: the edit was chosen against a rate
    the run has left, so it is not sent; the sidebar says so, with the run's rate."""
    app, in_flight, retired_id = _rate_moved_twice(fake_run)
    for widget in in_flight.widgets:
        if widget.id == retired_id:
            widget.double_value = 3.0
    _ok(app._run(in_flight))
    time.sleep(0.5)
    assert fake_run.sent("arrival_rate") == []
    assert any(e.value.startswith("Not sent: the run moved this knob as you changed it (Arrival rate (req/s) "
                                  "is now 2.5)") for e in app.error), [e.value for e in app.error]
    assert _knob(app, "number_input", "rate_per_s").value == 2.5


def _rate_moved_twice(fake_run) -> tuple[AppTest, WidgetStates, str]:
    """The page after the run moved the rate to 1.5, then to 2.5; the widget states the browser held
    in between; the id of the 1.5 widget in them, retired since."""
    app = _watching(fake_run)
    fake_run.snapshot(2.0, knobs=KNOBS.model_copy(update={"rate_per_s": 1.5}))
    _until(app, lambda a: _knob(a, "number_input", "rate_per_s").value == 1.5)
    retired = _knob(app, "number_input", "rate_per_s")
    in_flight = app._tree.get_widget_states()  # what the browser holds before the next move is drawn
    fake_run.snapshot(3.0, knobs=KNOBS.model_copy(update={"rate_per_s": 2.5}))
    _until(app, lambda a: _knob(a, "number_input", "rate_per_s").value == 2.5)
    assert _knob(app, "number_input", "rate_per_s").key != retired.key
    return app, in_flight, retired.id
