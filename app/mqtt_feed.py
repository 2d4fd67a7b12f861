"""The dashboard's one MQTT connection per server: a daemon thread with its own asyncio loop runs an
aiomqtt client subscribed to every run's metrics, events and status, and files each message in a
bounded `FeedBuffer`; the same client publishes the knobs' control messages.

Streamlit reruns never block on it: pages read copies of the buffer and `publish` waits at most a
couple of seconds. `get_feed` and `embedded_broker` are `st.cache_resource`s, so they survive
reruns and are shared by every session of the server.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import threading
import time
from dataclasses import dataclass

import aiomqtt
import streamlit as st

from app.live_view import FeedBuffer
from emulator.errors import RunIdError, TelemetryError
from emulator.net.names import check_run_id
from emulator.paths import Env, broker_url
from emulator.telemetry.broker import EmbeddedBroker, parse_broker_url
from emulator.telemetry.schemas import KINDS, TOPIC_ROOT, parse_message

log = logging.getLogger(__name__)

BROKER_ENV = Env.BROKER_URL.value  # use this broker instead of starting the embedded one
SUBSCRIPTIONS = tuple(f"{TOPIC_ROOT}/+/{kind}" for kind in KINDS)
CONNECT_TIMEOUT_S = 3.0
PUBLISH_TIMEOUT_S = 2.0
BACKOFF_S = (0.5, 5.0)


class MqttFeed:
    """Subscribes in the background from `start()` until `close()`; reconnects after any loss."""

    def __init__(self, url: str, buffer: FeedBuffer | None = None) -> None:
        self.address = parse_broker_url(url)
        self.buffer = buffer or FeedBuffer()
        self.connected = False
        self.reason = "not started"
        self.num_received = 0
        self.num_malformed = 0
        self.num_retained_ignored = 0  # retained messages: left on a topic before, not news of a run
        self._client: aiomqtt.Client | None = None
        self._loop = asyncio.new_event_loop()
        self._task: asyncio.Task[None] | None = None
        self._first_attempt = threading.Event()
        self._thread = threading.Thread(target=self._main, name="prfaas-mqtt-feed", daemon=True)

    @property
    def url(self) -> str:
        return self.address.url

    def start(self, wait_s: float = CONNECT_TIMEOUT_S + 1.0) -> MqttFeed:
        """Start the thread; return after the first connection attempt (or `wait_s`)."""
        if not self._thread.is_alive():
            self._thread.start()
            self._first_attempt.wait(wait_s)
        return self

    def close(self) -> None:
        if self._task is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._task.cancel)
        self._thread.join(5.0)

    def publish(self, topic: str, data: bytes) -> None:
        """Send one message at QoS 0; TelemetryError (one line) when it cannot go out now."""
        client = self._client
        if client is None or not self.connected:
            raise TelemetryError(f"mqtt: not connected to {self.url} ({self.reason}); nothing was sent, "
                                 "try again once the broker is back")
        future = asyncio.run_coroutine_threadsafe(client.publish(topic, data, qos=0), self._loop)
        try:
            future.result(PUBLISH_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TelemetryError(f"mqtt: publishing to {self.url} took over {PUBLISH_TIMEOUT_S:g} s; "
                                 "the message may not have gone out") from None
        except aiomqtt.MqttError as err:
            raise TelemetryError(f"mqtt: publishing to {self.url} failed ({err}); try again") from None

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._task = self._loop.create_task(self._run())
        try:
            self._loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            pass
        self._loop.close()

    async def _run(self) -> None:
        delay_s = BACKOFF_S[0]
        while True:
            try:
                client = aiomqtt.Client(self.address.host, self.address.port,
                                        username=self.address.username, password=self.address.password,
                                        timeout=CONNECT_TIMEOUT_S,
                                        logger=logging.getLogger(f"{__name__}.client"))
                async with client:
                    for name in SUBSCRIPTIONS:
                        await client.subscribe(name, qos=0)
                    self._client, self.connected, self.reason = client, True, "connected"
                    self._first_attempt.set()
                    delay_s = BACKOFF_S[0]
                    async for message in client.messages:
                        if message.retain:  # runs never retain; this was left by someone, earlier
                            self.num_retained_ignored += bool(message.payload)
                        elif message.payload:  # empty: a run clearing its topics at its start
                            self._on_message(str(message.topic), message.payload)
            except (aiomqtt.MqttError, OSError) as err:
                self._lost(str(err) or type(err).__name__)
            except RuntimeError as err:  # the connect's thread pool is shut: the interpreter exits
                self._lost(f"stopped ({err})")
                return
            else:
                self._lost("the broker ended the session")
            await asyncio.sleep(delay_s)
            delay_s = min(delay_s * 2, BACKOFF_S[1])

    def _lost(self, reason: str) -> None:
        if self.connected:
            log.warning("mqtt feed: lost %s (%s); reconnecting", self.url, reason)
        self._client, self.connected, self.reason = None, False, reason
        self._first_attempt.set()

    def _on_message(self, topic: str, payload: object) -> None:
        """File one message; a malformed one is counted and dropped, never raised."""
        root, _, rest = topic.partition("/")
        run_id, _, kind = rest.partition("/")
        raw = payload if isinstance(payload, bytes | bytearray) else str(payload or "").encode()
        try:
            if root != TOPIC_ROOT or not run_id:
                raise TelemetryError(f"mqtt: unexpected topic {topic!r}")
            check_run_id(run_id, "topic run id")  # the Live page lists it and publishes knobs to it
            message = parse_message(kind, bytes(raw))
        except (TelemetryError, RunIdError) as err:
            self.num_malformed += 1
            log.debug("mqtt feed: dropped a message on %s: %s", topic, err)
            return
        self.num_received += 1
        self.buffer.add(run_id, message, time.monotonic())


@dataclass(frozen=True, slots=True)
class BrokerChoice:
    """The broker the dashboard uses, and why (or why there is none)."""

    url: str | None  # as given, password included: the runs started here need it too
    how: str

    @property
    def shown(self) -> str:
        """The URL without its password, for the page."""
        return parse_broker_url(self.url).url if self.url else "none"


@st.cache_resource(show_spinner=False)
def embedded_broker() -> EmbeddedBroker:
    """One embedded amqtt broker per server, stopped when the server exits."""
    broker = EmbeddedBroker().start()
    atexit.register(broker.stop)
    return broker


def choose_broker() -> BrokerChoice:
    """$PRFAAS_BROKER_URL when set, else the embedded broker (started on first use)."""
    given = broker_url()
    if given:
        try:
            parse_broker_url(given)
            return BrokerChoice(given, f"from ${BROKER_ENV}")
        except TelemetryError as err:
            return BrokerChoice(None, f"${BROKER_ENV}: {err}")
    try:
        return BrokerChoice(embedded_broker().url, "embedded, started by the dashboard")
    except TelemetryError as err:
        return BrokerChoice(None, str(err))


@st.cache_resource(show_spinner=False)
def get_feed(url: str) -> MqttFeed:
    """The server's subscriber to `url`, started once and kept across reruns and sessions."""
    feed = MqttFeed(url).start()
    atexit.register(feed.close)
    return feed
