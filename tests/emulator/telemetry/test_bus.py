"""The telemetry bus against real brokers (embedded amqtt and mosquitto), and without one."""

from __future__ import annotations

import asyncio
import logging

import pytest

from emulator.errors import TelemetryError
from emulator.telemetry.broker import EmbeddedBroker, free_port
from emulator.telemetry.bus import TelemetryBus
from emulator.telemetry.control_messages import ControlCommand, Knob
from emulator.telemetry.schemas import (
    ErrorEvent,
    MetricsSnapshot,
    RequestEvent,
    StatusMessage,
    control_topic,
    parse_message,
    topic,
)

from .mqtt_helpers import client_for, next_events, run, until


def messages_of(run_id: str) -> list[tuple[str, object]]:
    return [
        ("metrics", MetricsSnapshot(run_id=run_id, t_s=1.0, ttft_p50_s=0.5, egress_bit_per_s=12e6,
                                    threshold_tokens=2048, roles={"local-decode-0": "decode"})),
        ("events", RequestEvent(run_id=run_id, t_s=1.5, request_id="q1", event="first_token",
                                route="local", node="local-decode-0", detail={"ttft_s": 0.4})),
        ("events", ErrorEvent(run_id=run_id, t_s=2.0, topic="x", error="why")),
        ("status", StatusMessage(run_id=run_id, t_s=2.5, state="finished", engine="live",
                                 link_backend="proxy", note="mqtt: connected")),
    ]


def test_each_schema_round_trips_through_the_broker(broker_url: str, mqtt_run_id: str) -> None:
    sent = messages_of(mqtt_run_id)

    bus = TelemetryBus(broker_url, mqtt_run_id)

    async def scenario() -> list[tuple[str, object]]:
        async with client_for(broker_url) as sub, bus:
            await sub.subscribe(f"prfaas/{mqtt_run_id}/+")
            assert bus.connected
            publishers = {"metrics": bus.publish_metrics, "events": bus.publish_event,
                          "status": bus.publish_status}
            for kind, message in sent:
                assert await publishers[kind](message) is True
            received = []
            async for msg in sub.messages:
                kind = str(msg.topic).rsplit("/", 1)[1]
                received.append((kind, parse_message(kind, msg.payload)))
                if len(received) == len(sent):
                    return received
        raise AssertionError("subscription ended early")

    assert run(scenario()) == sent
    assert bus.status_note == f"mqtt: connected to {broker_url}"  # still true after closing
    assert not bus.connected


def test_bad_control_is_answered_with_an_error_event_and_the_next_good_one_arrives(
        broker_url: str, mqtt_run_id: str) -> None:
    async def scenario() -> tuple[list[ControlCommand], list[ErrorEvent]]:
        async with TelemetryBus(broker_url, mqtt_run_id) as bus, client_for(broker_url) as ui:
            await ui.subscribe(topic(mqtt_run_id, "events"))
            await ui.publish(control_topic(mqtt_run_id, "threshold"), b'{"v": 1, "tokens": -1}',
                             qos=1)
            await ui.publish(control_topic(mqtt_run_id, "speed"), b'{"v": 1}', qos=1)
            await ui.publish(control_topic(mqtt_run_id, "threshold"), b'{"v": 1, "tokens": 4096}',
                             qos=1)
            await ui.publish(control_topic(mqtt_run_id, "link"), b'{"v": 1, "delay_ms": 40}',
                             qos=1)
            commands = bus.commands()
            got = [await anext(commands), await anext(commands)]
            return got, await next_events(ui, 2)

    commands, errors = run(scenario())
    assert [c.knob for c in commands] == [Knob.THRESHOLD, Knob.LINK]
    assert commands[0] == ControlCommand(Knob.THRESHOLD, 4096)
    assert commands[1].value.changes == (("delay_ms", 40.0),)
    assert [e.topic for e in errors] == [control_topic(mqtt_run_id, "threshold"),
                                        control_topic(mqtt_run_id, "speed")]
    assert "tokens = -1" in errors[0].error and "knob 'speed' is unknown" in errors[1].error


def test_unreachable_broker_warns_once_and_publishing_is_a_no_op(
        mqtt_run_id: str, caplog: pytest.LogCaptureFixture) -> None:
    url = f"mqtt://127.0.0.1:{free_port()}"  # nothing listens there

    async def scenario() -> tuple[bool, bool, str, int]:
        async with TelemetryBus(url, mqtt_run_id, backoff_s=(0.05, 0.1)) as bus:
            published = await bus.publish_metrics(MetricsSnapshot(run_id=mqtt_run_id, t_s=0.0))
            await until(lambda: bus.num_attempts >= 3)  # it keeps retrying in the background
            return bus.connected, published, bus.status_note, bus.num_dropped

    with caplog.at_level(logging.WARNING, logger="emulator.telemetry.bus"):
        connected, published, note, dropped = run(scenario())
    assert (connected, published, dropped) == (False, False, 1)
    assert note.startswith("mqtt: unreachable (") and note.endswith("recorded locally only")
    assert len([r for r in caplog.records if r.name == "emulator.telemetry.bus"]) == 1


def test_bus_without_broker_records_locally(mqtt_run_id: str) -> None:
    async def scenario() -> tuple[bool, str]:
        async with TelemetryBus(None, mqtt_run_id) as bus:
            published = await bus.publish_status(StatusMessage(
                run_id=mqtt_run_id, t_s=0.0, state="running", engine="virtual"))
            return published, bus.status_note

    assert run(scenario()) == (False, "mqtt: off (no broker given), recorded locally only")


@pytest.mark.live
def test_bus_survives_a_broker_restart(mqtt_run_id: str) -> None:
    first = EmbeddedBroker().start()
    second = EmbeddedBroker(port=first.port)
    url = first.url

    async def scenario() -> tuple[ControlCommand, str]:
        async with TelemetryBus(url, mqtt_run_id, backoff_s=(0.05, 0.2)) as bus:
            assert bus.connected
            first.stop()
            await until(lambda: not bus.connected)
            assert await bus.publish_metrics(MetricsSnapshot(run_id=mqtt_run_id, t_s=1.0)) is False
            second.start()
            await until(lambda: bus.connected)
            async with client_for(url) as ui:  # the control subscription came back too
                await ui.publish(control_topic(mqtt_run_id, "pause"), b'{"v": 1}', qos=1)
                return await anext(bus.commands()), bus.status_note

    try:
        command, note = run(scenario())
    finally:
        first.stop()
        second.stop()
    assert command == ControlCommand(Knob.PAUSE, None)
    assert note.startswith(f"mqtt: connected to {url} (lost it 1x;")


def test_bad_url_or_run_id_is_refused_up_front() -> None:
    async def make(url: str, run_id: str) -> None:
        TelemetryBus(url, run_id)

    with pytest.raises(TelemetryError, match="scheme"):
        asyncio.run(make("tcp://127.0.0.1:1883", "r1"))
    with pytest.raises(TelemetryError, match="run id"):
        asyncio.run(make("mqtt://127.0.0.1:1883", "a/b"))
