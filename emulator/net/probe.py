"""Probes across a shaped link: TCP goodput, connect and echo round trips, paced UDP loss.

Receivers live in `dst_netns`, senders in `src_netns` (sockets from `netns_socket`; None is this
namespace). Through the proxy backend both are None and `route` maps the receiver's port to the
relay's listener (`ProxyBackend.route`). Every loop is bounded in count and time. Tests and
`bench/link_fidelity.py` share these; they measure, they do not judge.
"""

from __future__ import annotations

import logging
import math
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any, TypedDict

from emulator.errors import TopologyError
from emulator.net.netns import netns_socket

log = logging.getLogger(__name__)

Route = Callable[[int], tuple[str, int]]
CHUNK_BYTES = 256 * 1024
CONNECT_TIMEOUT_S = 5.0


class Throughput(TypedDict):
    bits_per_s: float
    bytes: int
    seconds: float


class UdpLoss(TypedDict):
    sent: int
    received: int


def measure_throughput(src_netns: str | None, dst_netns: str | None, dst_addr: str,
                       seconds: float, congestion: str | None = "cubic", *,
                       warmup_s: float = 0.5, route: Route | None = None) -> Throughput:
    """Goodput of one TCP stream src -> dst, measured at the receiver over `seconds` after the
    first byte plus `warmup_s` (slow start excluded). The receiver then closes, which ends the
    sender."""
    result = _stream(src_netns, dst_netns, dst_addr, congestion, route, warmup_s + seconds,
                     lambda conn: _count_window(conn, warmup_s, seconds))
    if not result.get("bytes"):
        raise TopologyError(f"probe: no TCP stream reached {dst_addr} ({result.get('error', '')})")
    return Throughput(bits_per_s=result["bytes"] * 8 / result["seconds"],
                      bytes=int(result["bytes"]), seconds=result["seconds"])


def measure_rate_series(src_netns: str | None, dst_netns: str | None, dst_addr: str,
                        seconds: float, interval_s: float = 0.25,
                        congestion: str | None = "cubic", *,
                        route: Route | None = None) -> list[tuple[float, float]]:
    """Goodput of one TCP stream over time, for watching live changes: (t, bits_per_s) per
    `interval_s`, t being the end of the interval in seconds since this call started."""
    started = time.monotonic()
    result = _stream(src_netns, dst_netns, dst_addr, congestion, route, seconds,
                     lambda conn: _count_series(conn, started, seconds, interval_s))
    if "series" not in result:
        raise TopologyError(f"probe: no TCP stream reached {dst_addr} ({result.get('error', '')})")
    return [(round((i + 1) * interval_s, 9), n * 8 / interval_s)
            for i, n in enumerate(result["series"])]


def measure_connect_times(src_netns: str | None, dst_netns: str | None, dst_addr: str,
                          samples: int, *, timeout_s: float = CONNECT_TIMEOUT_S) -> list[float]:
    """`samples` TCP connect times (seconds): one SYN / SYN-ACK round trip each, answered by the
    kernel, so no user process's scheduling is in them."""
    listener = netns_socket(dst_netns)
    times: list[float] = []
    try:
        listener.bind((dst_addr, 0))
        listener.listen(samples)
        for _ in range(samples):
            client = netns_socket(src_netns)
            try:
                client.settimeout(timeout_s)
                start = time.monotonic()
                client.connect((dst_addr, listener.getsockname()[1]))
                times.append(time.monotonic() - start)
            finally:
                client.close()
            listener.accept()[0].close()
    except OSError as err:
        raise TopologyError(f"probe: connect to {dst_addr} failed after {len(times)} samples ({err})") \
            from None
    finally:
        listener.close()
    return times


def measure_rtt(src_netns: str | None, dst_netns: str | None, dst_addr: str, samples: int,
                *, payload_bytes: int = 64, interval_s: float = 0.01,
                route: Route | None = None, timeout_s: float = 5.0) -> list[float]:
    """`samples` TCP echo round trips (seconds) on one connection with TCP_NODELAY: the time
    from sending `payload_bytes` to having all of them back. Connect time is not used, since a
    proxy accepts at once."""
    listener, target = _listen(dst_netns, dst_addr, socket.SOCK_STREAM, route)
    echo = threading.Thread(target=_echo, args=(listener, timeout_s), name="probe-echo",
                            daemon=True)
    echo.start()
    client = netns_socket(src_netns)
    rtts: list[float] = []
    try:
        client.settimeout(timeout_s)
        client.connect(target)
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        message = bytes(payload_bytes)
        for _ in range(samples):
            start = time.monotonic()
            client.sendall(message)
            _recv_exactly(client, payload_bytes)
            rtts.append(time.monotonic() - start)
            time.sleep(interval_s)
    except OSError as err:
        raise TopologyError(f"probe: echo to {target} failed after {len(rtts)} samples ({err})") \
            from None
    finally:
        client.close()
        echo.join(timeout_s)
        listener.close()
    return rtts


def measure_udp_loss(src_netns: str | None, dst_netns: str | None, dst_addr: str, packets: int,
                     *, payload_bytes: int = 200, rate_pps: float = 2000.0,
                     drain_s: float = 0.5) -> UdpLoss:
    """Send `packets` numbered datagrams, paced at `rate_pps` so the link's queue does not
    overflow, and count the distinct ones that arrive within `drain_s` of the last send. Needs a
    packet link (netem, tun): the proxy carries TCP only and never drops."""
    listener, target = _listen(dst_netns, dst_addr, socket.SOCK_DGRAM, None)
    seen: set[int] = set()
    done = threading.Event()
    counter = threading.Thread(target=_count_datagrams, args=(listener, seen, done, packets),
                               name="probe-udp", daemon=True)
    counter.start()
    sender = netns_socket(src_netns, kind=socket.SOCK_DGRAM)
    payload_bytes = max(payload_bytes, 8)
    try:
        start = time.monotonic()
        for seq in range(packets):
            pause = start + seq / rate_pps - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            sender.sendto(struct.pack("!Q", seq).ljust(payload_bytes, b"\0"), target)
        time.sleep(drain_s)
    finally:
        done.set()
        sender.close()
        counter.join(CONNECT_TIMEOUT_S)
        listener.close()
    return UdpLoss(sent=packets, received=len(seen))


def _listen(netns: str | None, addr: str, kind: int, route: Route | None
            ) -> tuple[socket.socket, tuple[str, int]]:
    listener = netns_socket(netns, kind=kind)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((addr, 0))
    if kind == socket.SOCK_STREAM:
        listener.listen(1)
    port = listener.getsockname()[1]
    return listener, (route(port) if route is not None else (addr, port))


def _set_congestion(sock: socket.socket, name: str) -> None:
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, name.encode())
    except OSError as err:
        log.warning("probe: TCP congestion control %s unavailable (%s); using the default",
                    name, err)


def _stream(src_netns: str | None, dst_netns: str | None, dst_addr: str,
            congestion: str | None, route: Route | None, max_s: float,
            count: Callable[[socket.socket], dict[str, Any]]) -> dict[str, Any]:
    """Send zeros from src to dst until the receiver, running `count` on the accepted
    connection, has seen enough and closes; returns what `count` returned."""
    listener, target = _listen(dst_netns, dst_addr, socket.SOCK_STREAM, route)
    result: dict[str, Any] = {}

    def receive() -> None:
        listener.settimeout(CONNECT_TIMEOUT_S)
        try:
            conn, _ = listener.accept()
        except OSError as err:
            result["error"] = f"accept: {err}"
            return
        conn.settimeout(CONNECT_TIMEOUT_S)
        try:
            result.update(count(conn))
        except OSError as err:
            result["error"] = f"recv: {err}"
        finally:
            conn.close()

    receiver = threading.Thread(target=receive, name="probe-recv", daemon=True)
    receiver.start()
    sender = netns_socket(src_netns)
    try:
        if congestion:
            _set_congestion(sender, congestion)
        sender.settimeout(CONNECT_TIMEOUT_S)
        sender.connect(target)
        sender.settimeout(1.0)
        payload = bytes(CHUNK_BYTES)
        deadline = time.monotonic() + max_s + 2 * CONNECT_TIMEOUT_S
        while receiver.is_alive() and time.monotonic() < deadline:
            try:
                sender.sendall(payload)
            except TimeoutError:
                continue
            except OSError:  # the receiver closed: measurement over
                break
    finally:
        sender.close()
        receiver.join(CONNECT_TIMEOUT_S)
        listener.close()
    return result


def _count_window(conn: socket.socket, warmup_s: float, seconds: float) -> dict[str, Any]:
    """Bytes received in [first byte + warmup_s, + seconds], and that window's length."""
    buffer = memoryview(bytearray(CHUNK_BYTES * 4))
    counted = 0
    start: float | None = None
    end = now = time.monotonic()
    while n := conn.recv_into(buffer):
        now = time.monotonic()
        if start is None:
            start = now + warmup_s
            end = start + seconds
        elif now >= start:
            counted += n
            if now >= end:
                break
    if start is None:
        return {}
    return {"bytes": counted, "seconds": max(min(now, end) - start, 1e-9)}


def _count_series(conn: socket.socket, started: float, seconds: float,
                  interval_s: float) -> dict[str, Any]:
    """Bytes received per `interval_s` bucket from `started` until `started + seconds`."""
    buffer = memoryview(bytearray(CHUNK_BYTES * 4))
    series = [0] * max(1, math.ceil(seconds / interval_s - 1e-9))
    while n := conn.recv_into(buffer):
        index = int((time.monotonic() - started) / interval_s)
        if index >= len(series):
            break
        series[index] += n
    return {"series": series}


def _echo(listener: socket.socket, timeout_s: float) -> None:
    listener.settimeout(timeout_s)
    try:
        conn, _ = listener.accept()
    except OSError:
        return
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn.settimeout(timeout_s)
    try:
        while data := conn.recv(65536):
            conn.sendall(data)
    except OSError:
        pass
    finally:
        conn.close()


def _recv_exactly(sock: socket.socket, size: int) -> None:
    remaining = size
    while remaining:
        chunk = sock.recv(remaining)
        if not chunk:
            raise ConnectionError("peer closed during an echo")
        remaining -= len(chunk)


def _count_datagrams(sock: socket.socket, seen: set[int], done: threading.Event,
                     limit: int) -> None:
    sock.settimeout(0.05)
    while not done.is_set() and len(seen) < limit:
        try:
            data = sock.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            return
        if len(data) >= 8:
            seq = struct.unpack("!Q", data[:8])[0]
            if seq < limit:
                seen.add(seq)
