"""Helpers of the bus tests: a hang guard around each scenario, a UI-side client, a polling wait."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import aiomqtt

from emulator.telemetry.broker import parse_broker_url

GUARD_S = 30.0  # a hang guard, not a timing assert


def run(coro: Awaitable[object]) -> object:
    return asyncio.run(asyncio.wait_for(coro, GUARD_S))


def client_for(url: str) -> aiomqtt.Client:
    address = parse_broker_url(url)
    return aiomqtt.Client(address.host, address.port, timeout=5)


async def until(predicate: Callable[[], bool]) -> None:
    while not predicate():
        await asyncio.sleep(0.02)
