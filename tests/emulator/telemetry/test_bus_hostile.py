"""The bus against hostile control messages and its own failures, on real brokers: whatever
arrives, metrics keep flowing, later knobs still arrive, and an outage is recorded, never hidden."""

from __future__ import annotations

import asyncio
import logging

import pytest

from emulator.net.spec import LinkSpec
from emulator.telemetry.broker import EmbeddedBroker
from emulator.telemetry.bus import TelemetryBus
from emulator.telemetry.control_messages import ControlCommand, Knob
from emulator.telemetry.schemas import ErrorEvent, MetricsSnapshot, control_topic, parse_message, topic

from .mqtt_helpers import client_for, next_events, run, until

HOSTILE = [
    ("threshold", b'{"v":1,"tokens":' + b"[" * 30_000 + b"]" * 30_000 + b"}"),  # 60 KB nested
    ("threshold", b'{"v":1,"tokens":' + b"[" * 2_000 + b"]" * 2_000 + b"}"),  # under the size cap
    ("threshold", b'{"v":1,"tokens":' + b"9" * 400 + b"}"),
    ("link", b'{"v":1,"delay_ms":' + b"9" * 400 + b"}"),
    ("threshold", b'{"tokens":5}'),  # no "v"
    ("pause", b"\xff" * 100),
    ("k" * 3000, b'{"v": 1}'),  # an unknown knob with a 3 KB name
]


def test_hostile_messages_leave_metrics_and_later_knobs_working(broker_url: str,
                                                                 mqtt_run_id: str) -> None:
    async def scenario() -> tuple[ControlCommand, list[ErrorEvent], int, str]:
        # every refusal answered at once, to read each answer (the once-a-second default is
        # test_bus_hygiene.py's)
        async with TelemetryBus(broker_url, mqtt_run_id, echo_period_s=0.0) as bus, \
                client_for(broker_url) as ui:
            await ui.subscribe(topic(mqtt_run_id, "events"))
            await ui.subscribe(topic(mqtt_run_id, "metrics"))
            for knob, payload in HOSTILE:
                await ui.publish(control_topic(mqtt_run_id, knob), payload, qos=1)
            await ui.publish(control_topic(mqtt_run_id, "threshold"), b'{"v": 1, "tokens": 4096}',
                             qos=1)
            command = await anext(bus.commands())
            assert await bus.publish_metrics(MetricsSnapshot(run_id=mqtt_run_id, t_s=3.0))
            errors: list[ErrorEvent] = []
            num_metrics = 0
            async for msg in ui.messages:
                kind = str(msg.topic).rsplit("/", 1)[1]
                if kind == "metrics":
                    num_metrics += 1
                else:
                    errors.append(parse_message("events", msg.payload))
                if num_metrics and len(errors) == len(HOSTILE):
                    return command, errors, num_metrics, bus.status_note
        raise AssertionError("subscription ended early")

    command, errors, num_metrics, note = run(scenario())
    assert command == ControlCommand(Knob.THRESHOLD, 4096)
    assert num_metrics == 1
    topics = [control_topic(mqtt_run_id, k) for k, _ in HOSTILE]
    assert [e.topic for e in errors[:-1]] == topics[:-1]
    assert topics[-1].startswith(errors[-1].topic.removesuffix("...")) and len(errors[-1].topic) <= 200
    assert all("\n" not in e.error and len(e.error) < 400 for e in errors)
    assert "byte limit" in errors[0].error and "deeper than" in errors[1].error
    assert 'v: missing; add "v": 1' in errors[4].error
    assert note == f"mqtt: connected to {broker_url}; {len(HOSTILE)} control messages refused"


def test_a_handler_bug_is_logged_once_and_answered_with_an_error_event(
        embedded_broker: EmbeddedBroker, mqtt_run_id: str, caplog: pytest.LogCaptureFixture) -> None:
    def broken_link_base() -> LinkSpec:
        raise RuntimeError("the link's state is unavailable")

    url = embedded_broker.url

    async def scenario() -> tuple[ControlCommand, list[ErrorEvent]]:
        async with TelemetryBus(url, mqtt_run_id, link_base=broken_link_base) as bus, \
                client_for(url) as ui:
            await ui.subscribe(topic(mqtt_run_id, "events"))
            for delay_ms in (5, 6):
                await ui.publish(control_topic(mqtt_run_id, "link"),
                                 f'{{"v": 1, "delay_ms": {delay_ms}}}'.encode(), qos=1)
            await ui.publish(control_topic(mqtt_run_id, "pause"), b'{"v": 1}', qos=1)
            command = await anext(bus.commands())
            return command, await next_events(ui, 2)

    with caplog.at_level(logging.DEBUG, logger="emulator.telemetry.bus"):
        command, errors = run(scenario())
    assert command == ControlCommand(Knob.PAUSE, None)
    assert [e.topic for e in errors] == [control_topic(mqtt_run_id, "link")] * 2
    assert all("RuntimeError" in e.error and "\n" not in e.error for e in errors)
    bugs = [r for r in caplog.records if r.name == "emulator.telemetry.bus"
            and r.levelno >= logging.ERROR]
    assert len(bugs) == 1 and bugs[0].exc_info is not None


def test_a_bus_task_that_dies_is_restarted_and_the_outage_recorded(
        embedded_broker: EmbeddedBroker, mqtt_run_id: str) -> None:
    """A stray cancellation from a dependency ends the task however the handler guards itself."""
    calls = 0

    def link_base() -> LinkSpec:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise asyncio.CancelledError
        return LinkSpec()

    url = embedded_broker.url

    async def scenario() -> tuple[str, ControlCommand, str, int]:
        async with TelemetryBus(url, mqtt_run_id, link_base=link_base,
                                backoff_s=(1.0, 2.0)) as bus, client_for(url) as ui:
            await ui.publish(control_topic(mqtt_run_id, "link"), b'{"v": 1, "delay_ms": 5}', qos=1)
            await until(lambda: not bus.connected)
            note_while_dead = bus.status_note
            await until(lambda: bus.connected)  # restarted, reconnected, subscribed again
            await ui.publish(control_topic(mqtt_run_id, "link"), b'{"v": 1, "delay_ms": 7}', qos=1)
            command = await anext(bus.commands())
            return note_while_dead, command, bus.status_note, bus.num_outages

    note_while_dead, command, note, num_outages = run(scenario())
    assert not note_while_dead.startswith("mqtt: connected"), note_while_dead
    assert "task" in note_while_dead
    assert command.value.changes == (("delay_ms", 7.0),)
    assert num_outages == 1
    assert note.startswith(f"mqtt: connected to {url} (lost it 1x") and "restarted 1x" in note
