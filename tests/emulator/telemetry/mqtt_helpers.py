"""Helpers of the bus tests: a hang guard around each scenario, a UI-side client, a polling wait."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import aiomqtt

from emulator.telemetry.broker import parse_broker_url
from emulator.telemetry.schemas import parse_message

GUARD_S = 30.0  # a hang guard, not a timing assert


def run(coro: Awaitable[object]) -> object:
    return asyncio.run(asyncio.wait_for(coro, GUARD_S))


def client_for(url: str) -> aiomqtt.Client:
    address = parse_broker_url(url)
    return aiomqtt.Client(address.host, address.port, timeout=5)


async def until(predicate: Callable[[], bool]) -> None:
    while not predicate():
        await asyncio.sleep(0.02)


async def next_events(ui: aiomqtt.Client, count: int) -> list[object]:
    """The next `count` messages of the events topic the client subscribed to, parsed."""
    events = []
    async for msg in ui.messages:
        events.append(parse_message("events", msg.payload))
        if len(events) == count:
            return events
    raise AssertionError("subscription ended early")
