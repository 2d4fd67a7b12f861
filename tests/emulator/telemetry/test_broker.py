"""The embedded broker process and broker URLs."""

from __future__ import annotations

import asyncio
import socket

import aiomqtt
import pytest

from emulator.errors import TelemetryError
from emulator.telemetry.broker import BrokerAddress, EmbeddedBroker, parse_broker_url


def _is_alive(pid: int) -> bool:
    """True while the pid exists and is not a zombie (a reaped child is gone entirely)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def _echo(port: int) -> bytes:
    async with aiomqtt.Client("127.0.0.1", port, timeout=5) as client:
        await client.subscribe("echo/#")
        await client.publish("echo/x", b"hello")
        async for message in client.messages:
            return message.payload


@pytest.mark.live
def test_embedded_broker_serves_mqtt_and_leaves_no_process() -> None:
    with EmbeddedBroker() as broker:
        pid = broker.pid
        assert pid is not None and _is_alive(pid)
        assert broker.url == f"mqtt://127.0.0.1:{broker.port}"
        assert asyncio.run(asyncio.wait_for(_echo(broker.port), 10)) == b"hello"
    assert broker.pid is None
    assert not _is_alive(pid)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", broker.port), timeout=1).close()


@pytest.mark.live
def test_stop_is_idempotent_and_start_after_stop_works() -> None:
    broker = EmbeddedBroker().start()
    first_pid = broker.pid
    broker.stop()
    broker.stop()
    broker.start()
    try:
        assert broker.pid != first_pid and _is_alive(broker.pid)
    finally:
        broker.stop()
    assert not _is_alive(first_pid)


@pytest.mark.live
def test_busy_port_is_a_clear_error_and_no_process_is_left() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # The port accepts connections but is not our broker: bind fails, the child exits.
        broker = EmbeddedBroker(port=port)
        with pytest.raises(TelemetryError, match="embedded broker: exited"):
            broker.start()
    assert broker.pid is None


@pytest.mark.live
def test_broker_exits_when_its_parent_closes_stdin() -> None:
    broker = EmbeddedBroker().start()
    proc = broker._proc  # noqa: SLF001 - the parent-death path is what is under test
    proc.stdin.close()
    assert proc.wait(10) == 0
    broker.stop()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("mqtt://127.0.0.1:1884", BrokerAddress("127.0.0.1", 1884)),
        ("mqtt://broker.lan", BrokerAddress("broker.lan", 1883)),
        ("mqtt://ann:s%40cret@host:2000", BrokerAddress("host", 2000, "ann", "s@cret")),
        ("mqtt://[::1]:1885", BrokerAddress("::1", 1885)),
    ],
)
def test_parse_broker_url(url: str, expected: BrokerAddress) -> None:
    assert parse_broker_url(url) == expected


def test_url_never_shows_the_password() -> None:
    assert parse_broker_url("mqtt://ann:secret@host:2000").url == "mqtt://ann@host:2000"


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("http://host:1883", "scheme 'http'"),
        ("host:1883", "scheme"),
        ("mqtt://:1883", "names no host"),
        ("mqtt://host:99999", "not a valid URL"),
        ("mqtt://host:abc", "not a valid URL"),
        ("mqtt://host:0", "port 0"),
        ("mqtt://host:1883/topic", "path or query"),
        ("mqtt://:pw@host:1883", "password but no user"),
    ],
)
def test_bad_broker_urls_are_one_line_errors(url: str, fragment: str) -> None:
    with pytest.raises(TelemetryError) as err:
        parse_broker_url(url)
    assert fragment in str(err.value) and "\n" not in str(err.value)
    assert "mqtt://" in str(err.value)
