"""The dashboard's MQTT subscriber against a real broker: files messages by run, drops malformed
ones, publishes, and refuses to publish while it has no connection."""

from __future__ import annotations

import time

import pytest

from app.mqtt_feed import BROKER_ENV, MqttFeed, choose_broker
from emulator.errors import TelemetryError
from emulator.telemetry.broker import free_port


def _wait(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_files_each_runs_messages_and_drops_malformed_ones(live_env: str, fake_run) -> None:
    feed = MqttFeed(live_env).start()
    try:
        assert feed.connected
        fake_run.status("running")
        fake_run.snapshot(0.5)
        fake_run.event("rq-1", "arrived", 0.4)
        fake_run.probe.publish(f"prfaas/{fake_run.run_id}/metrics", {"v": 2, "nonsense": True})
        fake_run.probe.publish(f"prfaas/{fake_run.run_id}/control/threshold", {"v": 1, "tokens": 1})
        _wait(lambda: feed.buffer.version(fake_run.run_id) == 3 and feed.num_malformed == 1)
        view = feed.buffer.view(fake_run.run_id)
        assert view.status.link_backend == "proxy" and view.latest.t_s == 0.5
        assert [e.request_id for e in view.events] == ["rq-1"]
        feed.publish(f"prfaas/{fake_run.run_id}/control/pause", b'{"v": 1}')
        assert fake_run.control("pause") == {"v": 1}
    finally:
        feed.close()


def test_publishing_without_a_broker_says_why() -> None:
    feed = MqttFeed(f"mqtt://127.0.0.1:{free_port()}").start(wait_s=5.0)
    try:
        assert not feed.connected
        with pytest.raises(TelemetryError, match="mqtt: not connected to mqtt://127.0.0.1:.*nothing was sent"):
            feed.publish("prfaas/abc123/control/pause", b'{"v": 1}')
    finally:
        feed.close()


def test_broker_choice_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BROKER_ENV, "mqtt://user:secret@127.0.0.1:1999")
    choice = choose_broker()
    assert choice.url == "mqtt://user:secret@127.0.0.1:1999"  # the runs need the password
    assert choice.shown == "mqtt://user@127.0.0.1:1999" and choice.how == "from $PRFAAS_BROKER_URL"
    monkeypatch.setenv(BROKER_ENV, "http://nope")
    choice = choose_broker()
    assert choice.url is None and "use mqtt://host:port" in choice.how


def test_without_a_setting_the_embedded_broker_starts_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BROKER_ENV, raising=False)
    first, second = choose_broker(), choose_broker()
    assert first == second and first.how == "embedded, started by the dashboard"
    assert first.url.startswith("mqtt://127.0.0.1:")
