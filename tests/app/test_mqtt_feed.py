"""The dashboard's MQTT subscriber against a real broker: files messages by run, drops malformed
ones, publishes, and refuses to publish while it has no connection."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import aiomqtt
import pytest

from app.mqtt_feed import BROKER_ENV, MqttFeed, choose_broker
from emulator.errors import TelemetryError
from emulator.net.names import new_run_id
from emulator.telemetry.broker import free_port, parse_broker_url
from emulator.telemetry.schemas import MetricsSnapshot, StatusMessage

ROOT = Path(__file__).resolve().parents[2]


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


@pytest.mark.live
def test_without_a_setting_the_embedded_broker_starts_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BROKER_ENV, raising=False)
    first, second = choose_broker(), choose_broker()
    assert first == second and first.how == "embedded, started by the dashboard"
    assert first.url.startswith("mqtt://127.0.0.1:")


def test_retained_messages_from_before_the_feed_are_not_filed(live_env: str, fake_run) -> None:
    """A status or snapshot left retained on a run's topics (by anyone) is no news of the run: the
    feed files only what a run sends while the feed listens; an empty payload (a retained message
    being cleared, as a run does at its start) is not malformed either."""
    planted = new_run_id()
    retained = [(f"prfaas/{planted}/status", StatusMessage(run_id=planted, t_s=0.0, state="finished",
                                                            engine="live")),
                (f"prfaas/{fake_run.run_id}/metrics", MetricsSnapshot(run_id=fake_run.run_id, t_s=99.0))]

    async def publish(pairs: list[tuple[str, bytes]]) -> None:
        address = parse_broker_url(live_env)
        async with aiomqtt.Client(address.host, address.port) as client:
            for name, data in pairs:
                await client.publish(name, data, qos=1, retain=True)

    asyncio.run(publish([(name, model.model_dump_json().encode()) for name, model in retained]))
    feed = MqttFeed(live_env).start()
    try:
        fake_run.status("running")
        fake_run.snapshot(0.5)
        _wait(lambda: feed.buffer.version(fake_run.run_id) == 2)
        asyncio.run(publish([(f"prfaas/{fake_run.run_id}/status", b"")]))  # a run clearing its topics
        fake_run.snapshot(1.0)
        _wait(lambda: feed.buffer.version(fake_run.run_id) == 3)
        assert feed.buffer.version(planted) == 0 and planted not in feed.buffer.run_ids()
        assert feed.buffer.view(fake_run.run_id).latest.t_s == 1.0  # never the planted t = 99
        # at least once each: amqtt 0.12 also hands a new client what is retained for other clients'
        # subscriptions, at connect
        assert feed.num_retained_ignored >= len(retained) and feed.num_malformed == 0
    finally:
        feed.close()
        asyncio.run(publish([(name, b"") for name, _ in retained]))  # the broker is the session's


EXITING_WHILE_RECONNECTING = """
import threading, time
# Exit work registered before the thread pools' own runs after it, as a server's or a test
# runner's does: the interpreter sits in its shutdown, pools stopped and the main thread still
# alive, while the feed's next reconnect comes due.
threading._register_atexit(lambda: time.sleep(3.0))
from app.mqtt_feed import MqttFeed
feed = MqttFeed("mqtt://127.0.0.1:{port}").start(wait_s=5.0)
assert not feed.connected
"""


@pytest.mark.live
@pytest.mark.slow
def test_a_server_exiting_while_the_feed_reconnects_ends_it_quietly() -> None:
    """At exit the thread pools stop before the last threads are joined: a reconnect due then finds
    its connect pool shut, and ends the feed with a reason, not a thread traceback."""
    script = EXITING_WHILE_RECONNECTING.format(port=free_port())
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
