"""ProxyBackend with real TCP through its relay process on 127.0.0.1 (no root needed).

Shaping is checked within wide bands (rate 90-102 %, RTT within 2 ms of twice the delay); the
fidelity numbers themselves belong to bench/link_fidelity.py.
"""

from __future__ import annotations

import socket
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulator.errors import TopologyError
from emulator.net import probe
from emulator.net.backend import TO_LOCAL, TO_REMOTE, LinkEnds
from emulator.net.proxy_backend import ProxyBackend
from emulator.net.spec import LinkSpec

pytestmark = pytest.mark.live  # every test here starts a process

ENDS = LinkEnds("beef01", None, None, "prf-beef01-rem", "prf-beef01-loc")
HOST = "127.0.0.1"


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[ProxyBackend]:
    backend = ProxyBackend(ENDS, run_dir=tmp_path)
    yield backend
    backend.close()


def test_rate_is_followed_and_counted(proxy: ProxyBackend) -> None:
    proxy.apply(LinkSpec(bandwidth_mbit=20))
    result = probe.measure_throughput(None, None, HOST, 2.0, warmup_s=0.3, route=proxy.route)
    assert 0.90 <= result["bits_per_s"] / 20e6 <= 1.02
    counters = proxy.counters().directions
    assert counters[TO_LOCAL].bytes >= result["bytes"] and counters[TO_LOCAL].drops == 0


def test_rtt_is_twice_the_delay(proxy: ProxyBackend) -> None:
    proxy.apply(LinkSpec(delay_ms=10))
    rtts = probe.measure_rtt(None, None, HOST, 15, route=proxy.route)
    assert statistics.median(rtts) == pytest.approx(0.020, abs=0.002)
    assert min(rtts) >= 0.0199


def test_reverse_shape_applies_server_to_client(proxy: ProxyBackend) -> None:
    proxy.apply(LinkSpec(delay_ms=2, reverse={"delay_ms": 20}))
    rtts = probe.measure_rtt(None, None, HOST, 10, route=proxy.route)
    assert statistics.median(rtts) == pytest.approx(0.022, abs=0.002)
    assert proxy.counters().directions[TO_REMOTE].packets >= 10


def test_live_update_changes_the_rate_of_a_running_stream(proxy: ProxyBackend) -> None:
    proxy.apply(LinkSpec(bandwidth_mbit=100))
    marks: list[tuple[float, int]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            marks.append((time.monotonic(), proxy.counters().directions[TO_LOCAL].bytes))
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    stream = threading.Thread(target=probe.measure_throughput,
                              args=(None, None, HOST, 2.6), kwargs={"warmup_s": 0.2,
                                                                   "route": proxy.route})
    stream.start()
    sampler.start()
    time.sleep(1.0)
    changed_at = time.monotonic()
    proxy.update(LinkSpec(bandwidth_mbit=20))
    stream.join()
    done.set()
    sampler.join()
    before = _rate_between(marks, changed_at - 0.6, changed_at)
    after = _rate_between(marks, changed_at + 0.5, changed_at + 1.5)
    assert before == pytest.approx(100e6, rel=0.1)
    assert after == pytest.approx(20e6, rel=0.1)


def test_loss_is_accepted_but_reported_as_ignored(proxy: ProxyBackend) -> None:
    proxy.apply(LinkSpec(loss_pct=2))
    assert proxy.ignored_settings == ["loss_pct", "reverse.loss_pct"]
    assert proxy.status()["ignored"] == ["loss_pct", "reverse.loss_pct"]
    proxy.update(LinkSpec())
    assert proxy.ignored_settings == [] and proxy.status()["ignored"] == []
    assert "cannot drop" in proxy.description


def test_half_close_and_refused_destination(proxy: ProxyBackend) -> None:
    proxy.apply(LinkSpec(delay_ms=1))
    with socket.socket() as server:
        server.bind((HOST, 0))
        server.listen(1)
        client = socket.create_connection(proxy.route(server.getsockname()[1]), timeout=5)
        conn, _ = server.accept()
        client.sendall(b"kv-bytes")
        client.shutdown(socket.SHUT_WR)
        conn.settimeout(5)
        assert _read_all(conn) == b"kv-bytes"  # the EOF travels after the delayed bytes
        conn.close()
        client.close()
    with socket.socket() as unused:
        unused.bind((HOST, 0))
        port = unused.getsockname()[1]
    client = socket.create_connection(proxy.route(port), timeout=5)
    client.settimeout(5)
    assert client.recv(1) == b""  # nobody listens there: the relay closes the client side
    client.close()


def test_close_stops_the_relay_and_is_idempotent(proxy: ProxyBackend) -> None:
    proxy.apply(LinkSpec())
    pid = proxy.pid
    assert pid is not None and Path(f"/proc/{pid}").exists()
    proxy.close()
    proxy.close()
    assert not Path(f"/proc/{pid}").exists()
    with pytest.raises(TopologyError, match="not applied"):
        proxy.update(LinkSpec())


def _rate_between(marks: list[tuple[float, int]], start: float, end: float) -> float:
    inside = [(t, b) for t, b in marks if start <= t <= end]
    assert len(inside) >= 2, f"no counter samples between {start} and {end}"
    (t0, b0), (t1, b1) = inside[0], inside[-1]
    return (b1 - b0) * 8 / (t1 - t0)


def _read_all(conn: socket.socket) -> bytes:
    data = b""
    while chunk := conn.recv(4096):
        data += chunk
    return data
