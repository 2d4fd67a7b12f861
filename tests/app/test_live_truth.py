"""The Live page shows what the run is doing (issue 26), headless (AppTest) against a real broker
with a probe playing the run: the knobs follow the run's own values whoever moved them, a knob the
run refuses shows refused with its reason, and the tiles carry the run's threshold, link and arrivals."""

from __future__ import annotations

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
