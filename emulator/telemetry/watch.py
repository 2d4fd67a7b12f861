"""A blocking MQTT client for scripts, tests and benchmarks: it subscribes from a thread with its own
asyncio loop, keeps every message with the wall time it arrived, publishes, and waits for a payload.
(The dashboard's reconnecting feed is app/mqtt_feed.py; a run's own bus is telemetry/bus.py.)
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiomqtt
from pydantic import BaseModel

from emulator.telemetry.broker import parse_broker_url

CONNECT_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Received:
    at_s: float  # time.time() when it arrived
    topic: str
    payload: dict[str, Any]


class TopicWatch:
    """`with TopicWatch(url, "prfaas/+/status") as watch:` records what arrives on the filters."""

    def __init__(self, url: str, *filters: str) -> None:
        self.address = parse_broker_url(url)
        self.filters = filters
        self.messages: list[Received] = []
        self._cond = threading.Condition()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._client: aiomqtt.Client | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._run(),),
                                        name="topic-watch", daemon=True)

    def __enter__(self) -> TopicWatch:
        self._thread.start()
        if not self._ready.wait(CONNECT_TIMEOUT_S):
            raise TimeoutError(f"mqtt: could not subscribe to {', '.join(self.filters)} on {self.address.url} "
                               f"within {CONNECT_TIMEOUT_S:g} s")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(CONNECT_TIMEOUT_S)
        if not self._thread.is_alive():  # closed here, not by the collector at exit (its self-pipe gone by then)
            self._loop.close()

    async def _run(self) -> None:
        self._stop = asyncio.Event()
        async with aiomqtt.Client(self.address.host, self.address.port, username=self.address.username,
                                  password=self.address.password) as client:
            for name in self.filters:
                await client.subscribe(name)
            self._client = client
            reader = asyncio.create_task(self._read(client))
            self._ready.set()
            await self._stop.wait()
            reader.cancel()

    async def _read(self, client: aiomqtt.Client) -> None:
        async for message in client.messages:
            if not message.payload:  # a retained message being cleared (a run does so at its start)
                continue
            received = Received(time.time(), str(message.topic), json.loads(message.payload))
            with self._cond:
                self.messages.append(received)
                self._cond.notify_all()

    def publish(self, topic: str, model_or_payload: BaseModel | dict) -> None:
        data = (model_or_payload.model_dump_json() if isinstance(model_or_payload, BaseModel)
                else json.dumps(model_or_payload))
        assert self._client is not None, "publish inside the with block"
        asyncio.run_coroutine_threadsafe(self._client.publish(topic, data.encode()), self._loop).result(5)

    def on(self, topic: str) -> list[dict[str, Any]]:
        """Every payload received on `topic` so far, in order."""
        with self._cond:
            return [m.payload for m in self.messages if m.topic == topic]

    def wait_for(self, topic: str, match: Callable[[dict[str, Any]], bool] = lambda _: True,
                 timeout_s: float = 10.0) -> dict[str, Any]:
        """The first payload on `topic` that `match` accepts, waiting up to `timeout_s` for it."""
        def first() -> dict[str, Any] | None:
            return next((m.payload for m in self.messages if m.topic == topic and match(m.payload)), None)

        with self._cond:
            found = self._cond.wait_for(first, timeout_s)
            if found is None:
                raise TimeoutError(f"nothing matching on {topic} within {timeout_s:g} s; "
                                   f"last there: {self.on(topic)[-5:]}")
            return found
