"""The run's MQTT bus: publishes metrics, events and status; yields validated control commands.

Telemetry must never stop a run: an unreachable or lost broker is announced once per outage, the
bus keeps reconnecting in the background, and publishes meanwhile are dropped (counted, not
raised). No control message can raise out of the bus, and a bus task that ends for any other reason
is restarted and counted as an outage. Nothing from before the run is applied: on each connection
the bus subscribes, then clears what is retained on the run's control topics, and a control message
the broker flags as retained (it was sent before this subscription; sessions are clean, so nothing
else from before reaches it) is ignored and counted. Refusals are echoed at most once a second
(error_echo.py). What the gateway does with a command, and what it records on disk, live elsewhere.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from types import TracebackType

import aiomqtt
from pydantic import BaseModel

from emulator.errors import TelemetryError
from emulator.net.spec import LinkSpec
from emulator.telemetry.broker import BrokerAddress, parse_broker_url
from emulator.telemetry.control_messages import ControlCommand, Knob, parse_control
from emulator.telemetry.error_echo import ERROR_ECHO_PERIOD_S, Echo, ErrorEchoLimiter
from emulator.telemetry.schemas import (
    ErrorEvent,
    MetricsSnapshot,
    NoteEvent,
    RequestEvent,
    StatusMessage,
    control_topic,
    knob_of,
    topic,
)

log = logging.getLogger(__name__)

MAX_PENDING_COMMANDS = 1024
MAX_SHOWN_TOPIC_CHARS = 200
_CLOSED = object()  # ends commands() when the bus closes


class TelemetryBus:
    """One aiomqtt client per run, behind an async context manager.

    `url=None` runs without a broker (everything is recorded locally only). `clock` gives the
    `t_s` stamped on the bus's own error events (default: seconds since the bus was made).
    `link_base` is the current link spec that link control messages are validated against.
    `echo_period_s`: at most one refused control message is answered on the events topic per period.
    """

    def __init__(
        self,
        url: str | None,
        run_id: str,
        *,
        listen_control: bool = True,
        connect_timeout_s: float = 3.0,
        backoff_s: tuple[float, float] = (0.5, 10.0),
        clock: Callable[[], float] | None = None,
        link_base: Callable[[], LinkSpec] | None = None,
        echo_period_s: float = ERROR_ECHO_PERIOD_S,
    ) -> None:
        topic(run_id, "status")  # refuses a run id that cannot be a topic segment
        self.run_id = run_id
        self.address: BrokerAddress | None = parse_broker_url(url) if url is not None else None
        self.connected = False
        self.num_dropped = 0
        self.num_outages = 0
        self.num_attempts = 0
        self.num_restarts = 0  # times the bus task ended by itself and was started again
        self.num_handler_bugs = 0  # control messages whose handling raised something unexpected
        self.num_refused = 0  # control messages refused (answered, or counted when over the echo rate)
        self.num_retained_ignored = 0  # retained control messages: from before the run, never applied
        self._echoes = ErrorEchoLimiter(echo_period_s)
        self._echo_task: asyncio.Task[None] | None = None
        self._control_prefix = control_topic(run_id, "#").removesuffix("#")
        self._retained_topics: set[str] = set()  # seen on this connection (amqtt may hand one over twice)
        self._listen_control = listen_control
        self._connect_timeout_s = connect_timeout_s
        self._backoff_s = backoff_s
        t0 = time.monotonic()
        self._clock = clock or (lambda: time.monotonic() - t0)
        self._link_base = link_base or LinkSpec
        self._client: aiomqtt.Client | None = None
        self._reason = ""
        self._is_outage_announced = False
        self._first_attempt = asyncio.Event()
        self._commands: asyncio.Queue[object] = asyncio.Queue(MAX_PENDING_COMMANDS)
        self._task: asyncio.Task[None] | None = None
        self._is_closing = False
        self._note_at_close: str | None = None  # the note keeps telling how the run went

    @property
    def url(self) -> str | None:
        return self.address.url if self.address is not None else None

    @property
    def status_note(self) -> str:
        """One line for summary.json and the status topic: where telemetry went."""
        if self._note_at_close is not None:
            return self._note_at_close
        if self.address is None:
            return "mqtt: off (no broker given), recorded locally only"
        if self.connected:
            troubles = [f"lost it {self.num_outages}x"] if self.num_outages else []
            if self.num_restarts:
                troubles.append(f"its task failed and was restarted {self.num_restarts}x")
            lost = f" ({'; '.join(troubles)}; {self.num_dropped} messages dropped)" if troubles else ""
            return f"mqtt: connected to {self.url}{lost}{self._control_note()}"
        return (f"mqtt: unreachable ({self._reason or 'not connected yet'}), recorded locally only"
                f"{self._control_note()}")

    def _control_note(self) -> str:
        """What the run refused or ignored on its control topics, when anything: `; ...`."""
        parts = []
        if self.num_refused:
            unshown = self._echoes.num_suppressed
            parts.append(f"{self.num_refused} control messages refused" + (
                f" ({unshown} not echoed: at most one error a second)" if unshown else ""))
        if self.num_retained_ignored:
            parts.append(f"{self.num_retained_ignored} retained control messages from before the run ignored")
        return "".join(f"; {part}" for part in parts)

    async def __aenter__(self) -> TelemetryBus:
        """Start connecting; return after the first attempt, whether or not it succeeded."""
        if self.address is None:
            log.info("mqtt: no broker given; the run records locally only")
            return self
        self._is_closing = False
        self._start_task(self.address, delay_s=0.0)
        try:
            await asyncio.wait_for(self._first_attempt.wait(), self._connect_timeout_s + 1.0)
        except TimeoutError:
            self._on_lost(f"no answer within {self._connect_timeout_s:g} s")
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self._note_at_close = None
        if self._task is not None:
            # Let the loop read a pending EOF first: if the broker just went away, the client
            # then knows and skips its DISCONNECT, whose write aiomqtt would otherwise schedule
            # on an already-closed socket (asyncio then logs a spurious "Bad file descriptor").
            for _ in range(2):
                await asyncio.sleep(0)
            self._echoes.drop_held()
            if self._echo_task is not None:
                self._echo_task.cancel()
            self._note_at_close = self.status_note
            self._is_closing = True
            task, self._task = self._task, None
            task.cancel()
            await asyncio.wait([task])  # never raises: a task that failed was already recorded
            if not task.cancelled():
                task.exception()
        self._client, self.connected = None, False
        while self._commands.full():
            self._commands.get_nowait()
        self._commands.put_nowait(_CLOSED)

    async def publish(self, kind: str, model: BaseModel) -> bool:
        """Send `model` as JSON on `prfaas/<run>/<kind>` at QoS 0; False when it was dropped."""
        name = topic(self.run_id, kind)
        client = self._client
        if client is None:
            self.num_dropped += 1
            return False
        try:
            await client.publish(name, model.model_dump_json().encode(), qos=0)
        except aiomqtt.MqttError as err:
            self.num_dropped += 1
            log.debug("mqtt: dropped a message on %s: %s", name, err)
            return False
        return True

    async def publish_metrics(self, snapshot: MetricsSnapshot) -> bool:
        return await self.publish("metrics", snapshot)

    async def publish_event(self, event: RequestEvent | ErrorEvent | NoteEvent) -> bool:
        return await self.publish("events", event)

    async def publish_status(self, status: StatusMessage) -> bool:
        return await self.publish("status", status)

    async def commands(self) -> AsyncIterator[ControlCommand]:
        """Validated control commands, in arrival order, until the bus closes."""
        while (item := await self._commands.get()) is not _CLOSED:
            assert isinstance(item, ControlCommand)
            yield item

    def _start_task(self, address: BrokerAddress, delay_s: float) -> None:
        self._task = asyncio.create_task(self._run(address, delay_s), name=f"mqtt-{self.run_id}")
        self._task.add_done_callback(self._on_task_done)

    def _on_task_done(self, task: asyncio.Task[None]) -> None:
        """The task only ends on close; anything else ending it is an outage: record, restart."""
        if self._is_closing or task is not self._task or self.address is None:
            return
        if task.cancelled() and task.cancelling():  # asked to stop from outside (a closing loop)
            self._on_lost("bus task cancelled")
            return
        error = None if task.cancelled() else task.exception()
        reason = "cancelled" if error is None else _describe(error)
        if self.num_restarts == 0:
            log.error("mqtt: the bus task ended (%s); restarting it", reason, exc_info=error)
        else:
            log.warning("mqtt: the bus task ended again (%s); restarting it", reason)
        self.num_restarts += 1
        self._on_lost(f"bus task failed: {reason}")
        delay_s = min(self._backoff_s[0] * 2 ** (self.num_restarts - 1), self._backoff_s[1])
        self._start_task(self.address, delay_s)

    async def _run(self, address: BrokerAddress, first_delay_s: float) -> None:
        """Connect, listen, and on any loss wait (doubling up to the cap) and connect again."""
        await asyncio.sleep(first_delay_s)
        delay_s = self._backoff_s[0]
        while True:
            self.num_attempts += 1
            try:
                client = aiomqtt.Client(
                    address.host, address.port, username=address.username,
                    password=address.password, timeout=self._connect_timeout_s,
                    logger=logging.getLogger(f"{__name__}.client"),
                )
                async with client:
                    if self._listen_control:
                        # QoS 0: sessions are clean, so QoS 1 would redeliver nothing after a
                        # reconnect, and an unacked QoS 1 delivery can stall amqtt's shutdown.
                        await client.subscribe(control_topic(self.run_id, "#"), qos=0)
                        self._retained_topics.clear()
                        await self._clear_retained(client)
                    self._on_connected(client)
                    delay_s = self._backoff_s[0]
                    async for message in client.messages:
                        await self._handle(str(message.topic), message.payload, bool(message.retain))
            except (aiomqtt.MqttError, OSError) as err:
                self._on_lost(str(err) or type(err).__name__)
            else:
                self._on_lost("the broker ended the session")
            await asyncio.sleep(delay_s)
            delay_s = min(delay_s * 2, self._backoff_s[1])

    def _on_connected(self, client: aiomqtt.Client) -> None:
        if self._is_outage_announced:
            log.warning("mqtt: reconnected to %s", self.url)
        else:
            log.info("mqtt: connected to %s", self.url)
        self._client, self.connected = client, True
        self._is_outage_announced = False
        self._first_attempt.set()

    def _on_lost(self, reason: str) -> None:
        was_connected = self.connected
        self._client, self.connected, self._reason = None, False, reason
        self.num_outages += was_connected
        if not self._is_outage_announced:
            what = "lost" if was_connected else "unreachable"
            log.warning("mqtt: broker %s %s (%s); the run goes on, records locally and retries "
                        "in the background", self.url, what, reason)
            self._is_outage_announced = True
        else:
            log.debug("mqtt: still no broker at %s (%s)", self.url, reason)
        self._first_attempt.set()

    async def _clear_retained(self, client: aiomqtt.Client) -> None:
        """Clear what is retained on each knob's topic (an empty retained payload), after subscribing:
        what was there has been delivered flagged and is ignored, never applied; one retained on any
        other control topic is cleared when it arrives. QoS 1: the broker has done it before the run
        goes on. (The outgoing topics are left alone: subscribers ignore what is retained there.)"""
        for knob in Knob:
            await client.publish(control_topic(self.run_id, knob.value), b"", qos=1, retain=True)

    async def _handle(self, topic_name: str, payload: object, is_retained: bool = False) -> None:
        """Validate one control message; a bad one becomes an ErrorEvent and changes nothing.

        A message outside the run's control topics (amqtt hands a new client what is retained for
        anyone's subscriptions) and an empty payload (a retained message being cleared) are not
        control messages: dropped. A retained one was sent before this subscription: ignored.
        Nothing raises out of here: a refusal is answered, and so is a bug (logged once with its
        traceback), since an exception would end the listening task with it."""
        if not topic_name.startswith(self._control_prefix) or not payload:
            log.debug("mqtt: dropped a message on %s (not a control message)", topic_name[:MAX_SHOWN_TOPIC_CHARS])
            return
        if is_retained:
            await self._ignore_retained(topic_name)
            return
        try:
            command = self._parse(topic_name, payload)
        except TelemetryError as err:
            await self._refuse(topic_name, str(err))
            return
        except Exception as err:  # noqa: BLE001 - see the docstring
            self.num_handler_bugs += 1
            if self.num_handler_bugs == 1:
                log.error("mqtt: checking a message on %s failed; later failures are logged at "
                          "debug level", topic_name, exc_info=err)
            else:
                log.debug("mqtt: checking a message on %s failed: %s", topic_name, _describe(err))
            await self._refuse(topic_name, f"control: the run failed to check this message "
                                           f"({_describe(err)}); nothing changed; report the bug")
            return
        try:
            self._commands.put_nowait(command)
        except asyncio.QueueFull:
            await self._refuse(topic_name, f"control: {MAX_PENDING_COMMANDS} commands are waiting "
                                           "unread; slow down and send it again")

    def _parse(self, topic_name: str, payload: object) -> ControlCommand:
        raw = payload if isinstance(payload, bytes | bytearray) else str(payload or "").encode()
        knob = knob_of(self.run_id, topic_name)
        link_base = self._link_base() if knob == Knob.LINK.value else None
        return parse_control(knob, bytes(raw), link_base)

    async def _ignore_retained(self, topic_name: str) -> None:
        """A control message from before this subscription: counted once per topic and connection,
        logged once, and cleared from the broker so that a reconnect does not hand it over again."""
        if topic_name in self._retained_topics:
            return
        if len(self._retained_topics) < MAX_PENDING_COMMANDS:
            self._retained_topics.add(topic_name)
        self.num_retained_ignored += 1
        shown = topic_name[:MAX_SHOWN_TOPIC_CHARS]
        if self.num_retained_ignored == 1:
            log.warning("mqtt: ignored a retained control message on %s: it was sent before the run "
                        "subscribed, and control acts only on messages sent during the run (later ones "
                        "are counted in the run's mqtt note)", shown)
        client = self._client
        if client is not None:
            try:
                await client.publish(topic_name, b"", qos=0, retain=True)
            except aiomqtt.MqttError as err:
                log.debug("mqtt: could not clear the retained message on %s: %s", shown, err)

    async def _refuse(self, topic_name: str, error: str) -> None:
        """Count a refusal; answer it now, or at the end of the echo period (error_echo.py)."""
        self.num_refused += 1
        if len(topic_name) > MAX_SHOWN_TOPIC_CHARS:  # a topic may be 64 KiB; the answer stays short
            topic_name = topic_name[:MAX_SHOWN_TOPIC_CHARS - 3] + "..."
        echo = self._echoes.offer(time.monotonic(), topic_name, error)
        if echo is not None:
            await self._echo(echo)
        elif self._echo_task is None or self._echo_task.done():
            self._echo_task = asyncio.create_task(self._echo_held(), name=f"mqtt-echo-{self.run_id}")

    async def _echo_held(self) -> None:
        while (due_at_s := self._echoes.due_at_s) is not None:
            await asyncio.sleep(max(due_at_s - time.monotonic(), 0.0))
            if (echo := self._echoes.flush(time.monotonic())) is not None:
                await self._echo(echo)

    async def _echo(self, echo: Echo) -> None:
        log.info("mqtt: refused %s: %s", echo.topic, echo.line)
        try:
            event = ErrorEvent(run_id=self.run_id, t_s=max(self._clock(), 0.0), topic=echo.topic,
                               error=echo.line, num_suppressed=echo.num_suppressed)
            await self.publish_event(event)
        except Exception as err:  # noqa: BLE001 - an answer that cannot be sent is only dropped
            self.num_dropped += 1
            log.debug("mqtt: could not answer %s: %s", echo.topic, _describe(err))


def _describe(error: BaseException) -> str:
    """`Type: first line of the message`, short enough for one log or status line."""
    text = str(error).splitlines()[0][:120] if str(error) else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
