"""Fixtures shared by the emulator's tests: run ids, and MQTT brokers (embedded amqtt and Debian's
mosquitto)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulator.net.ledger import sweep
from emulator.net.names import new_run_id
from emulator.telemetry.broker import EmbeddedBroker, free_port


@pytest.fixture
def run_id():
    """A fresh run id; whatever the test leaves under it (namespaces, relays) is swept afterwards."""
    rid = new_run_id()
    yield rid
    sweep(rid, force=True)


MOSQUITTO = shutil.which("mosquitto") or shutil.which("mosquitto", path="/usr/sbin:/usr/bin")


def wait_accepting(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"broker not accepting on {port} after {timeout_s} s")


@pytest.fixture
def embedded_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as broker:
        yield broker


@pytest.fixture
def mosquitto(tmp_path: Path) -> Iterator[str]:
    """A mosquitto of our own on a free port; skipped where Debian's binary is not installed."""
    if MOSQUITTO is None:
        pytest.skip("mosquitto is not installed (apt-get install mosquitto)")
    port = free_port()
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")
    proc = subprocess.Popen([MOSQUITTO, "-c", str(conf)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_accepting(port, proc)
        yield f"mqtt://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(params=["embedded", "mosquitto"])
def broker_url(request: pytest.FixtureRequest) -> str:
    """Each bus test runs against both brokers."""
    if request.param == "embedded":
        return request.getfixturevalue("embedded_broker").url
    return request.getfixturevalue("mosquitto")
