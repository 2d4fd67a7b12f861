"""The bus's hygiene on real brokers (embedded amqtt and mosquitto): retained messages planted on a
run's topics before it starts are never applied and are cleared, and a flood of bad control
messages is answered at most once a second, with counts, while good messages still get through."""

from __future__ import annotations

import asyncio
import time

from emulator.telemetry.bus import TelemetryBus
from emulator.telemetry.control_messages import ControlCommand, Knob
from emulator.telemetry.schemas import TOPIC_ROOT, ErrorEvent, control_topic, parse_message, topic

from .mqtt_helpers import client_for, run

PLANTED = [  # what an attacker leaves retained before the run starts
    ("pause", b'{"v": 1}'),
    ("link", b'{"v": 1, "loss_pct": 100}'),
    ("pause/again", b'{"v": 1}'),  # not a knob: cleared because it was seen, not because it is known
]
NUM_FLOOD = 5000


async def _retained(url: str, run_id: str) -> list[tuple[str, bytes]]:
    """What a fresh subscriber to everything of the run gets retained (it waits for a round trip
    of its own, so whatever the broker held has arrived by then)."""
    async with client_for(url) as probe:
        await probe.subscribe(f"{TOPIC_ROOT}/{run_id}/#", qos=1)
        marker = f"{TOPIC_ROOT}/{run_id}/zz-marker"
        await probe.publish(marker, b"end", qos=1)
        held = []
        async for message in probe.messages:
            if str(message.topic) == marker:
                return held
            if str(message.topic).startswith(f"{TOPIC_ROOT}/{run_id}/") and message.payload:
                held.append((str(message.topic), bytes(message.payload)))
    raise AssertionError("subscription ended early")


async def _plant(url: str, run_id: str) -> None:
    async with client_for(url) as attacker:
        for knob, payload in PLANTED:
            await attacker.publish(f"{TOPIC_ROOT}/{run_id}/control/{knob}", payload, qos=1, retain=True)
        await attacker.publish(topic(run_id, "status"), b'{"v": 1}', qos=1, retain=True)


def test_retained_control_planted_before_the_run_is_ignored_and_cleared(broker_url: str,
                                                                        mqtt_run_id: str) -> None:
    async def scenario() -> tuple[list, ControlCommand, list, int, str, list]:
        await _plant(broker_url, mqtt_run_id)
        before = await _retained(broker_url, mqtt_run_id)
        async with TelemetryBus(broker_url, mqtt_run_id) as bus, client_for(broker_url) as ui:
            await ui.subscribe(topic(mqtt_run_id, "events"))
            await ui.publish(control_topic(mqtt_run_id, "threshold"), b'{"v": 1, "tokens": 4096}', qos=1)
            command = await anext(bus.commands())
            after = await _retained(broker_url, mqtt_run_id)
            await ui.publish(control_topic(mqtt_run_id, "threshold"), b'{"v": 1, "tokens": -1}', qos=1)
            errors = []
            async for message in ui.messages:  # the first answer is the refusal of tokens = -1:
                if str(message.topic) == topic(mqtt_run_id, "events"):  # no retained one was echoed
                    errors.append(parse_message("events", message.payload))
                    break
            return before, command, after, bus.num_retained_ignored, bus.status_note, errors

    before, command, after, num_ignored, note, errors = run(scenario())
    assert len(before) == len(PLANTED) + 1  # the attack was in place (and a planted status)
    assert command == ControlCommand(Knob.THRESHOLD, 4096)  # the first command: no pause, no link
    assert {name for name, _ in after} == {topic(mqtt_run_id, "status")}  # no control is retained
    assert num_ignored == len(PLANTED)
    assert f"{len(PLANTED)} retained control messages from before the run ignored" in note
    assert [e.topic for e in errors] == [control_topic(mqtt_run_id, "threshold")]
    assert "tokens = -1" in errors[0].error


def test_a_flood_of_bad_control_is_echoed_once_a_second_with_counts(broker_url: str,
                                                                   mqtt_run_id: str) -> None:
    bad = [b'{"v": 1, "tokens": -1}', b'{"v": true, "tokens": 5}', b'{"v": 1, "tokens": 5, "tokens": 6}']

    async def scenario() -> tuple[ControlCommand, list[ErrorEvent], float, TelemetryBus]:
        async with TelemetryBus(broker_url, mqtt_run_id) as bus, client_for(broker_url) as ui:
            await ui.subscribe(topic(mqtt_run_id, "events"))
            errors: list[ErrorEvent] = []

            async def collect() -> None:
                async for message in ui.messages:
                    if str(message.topic) == topic(mqtt_run_id, "events"):
                        errors.append(parse_message("events", message.payload))

            collector = asyncio.create_task(collect())
            started = time.monotonic()
            for i in range(NUM_FLOOD):
                await ui.publish(control_topic(mqtt_run_id, "threshold"), bad[i % len(bad)], qos=0)
            await ui.publish(control_topic(mqtt_run_id, "threshold"), b'{"v": 1, "tokens": 4096}', qos=1)
            command = await anext(bus.commands())  # applied after the flood: the run still listens
            while sum(1 + e.num_suppressed for e in errors) < bus.num_refused:  # the last count arrives
                await asyncio.sleep(0.05)
            elapsed_s = time.monotonic() - started
            collector.cancel()
            return command, errors, elapsed_s, bus

    command, errors, elapsed_s, bus = run(scenario())
    assert command == ControlCommand(Knob.THRESHOLD, 4096)
    assert bus.num_refused > NUM_FLOOD // 2  # most of the flood reached the bus (QoS 0 may drop some)
    assert len(errors) <= elapsed_s + 2, (len(errors), elapsed_s)
    assert sum(1 + e.num_suppressed for e in errors) == bus.num_refused  # every refusal is counted
    assert errors[0].num_suppressed == 0 and "tokens = -1" in errors[0].error
    assert errors[-1].num_suppressed > 0 and "not shown" in errors[-1].error
    assert all("\n" not in e.error and len(e.error) < 600 for e in errors)
    assert f"{bus.num_refused} control messages refused" in bus.status_note
