"""Congestion signals: the pure function against hand-computed cases, the monitor on loopback
sockets, and (root) the monitor watching a bulk stream across a lossy, then clean, shaped link."""

from __future__ import annotations

import dataclasses
import os
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from emulator.net.ledger import sweep
from emulator.net.names import new_run_id
from emulator.net.spec import parse_link_spec
from emulator.net.topology import LOCAL, REMOTE, Topology
from emulator.transport.congestion import CongestionMonitor, CongestionSignal, signal_from_samples
from emulator.transport.tcp_info import (
    KNOWN_INFO_BYTES,
    TcpInfoError,
    decode_tcp_info,
    read_tcp_info,
)

ZERO = decode_tcp_info(bytes(KNOWN_INFO_BYTES))
U32 = 1 << 32


def info(**fields):
    """A synthetic sample: every counter 0 except `fields`."""
    return dataclasses.replace(ZERO, **fields)


# ---- the pure function ----

def test_two_connections_hand_computed():
    prev = [info(bytes_acked=1_000, total_retrans=2, data_segs_out=100, rtt_us=30_000,
                 min_rtt_us=20_000, snd_cwnd=10, send_queue_bytes=5_000),
            info()]
    cur = [info(bytes_acked=1_001_000, total_retrans=5, data_segs_out=200, rtt_us=30_000,
                min_rtt_us=20_000, snd_cwnd=40, send_queue_bytes=8_000),
           info(bytes_acked=500_000, total_retrans=1, data_segs_out=100, rtt_us=10_000,
                min_rtt_us=10_000, snd_cwnd=20, notsent_bytes=3_000)]  # no SIOCOUTQ reading
    assert signal_from_samples(prev, cur, 0.5, at_s=7.25) == CongestionSignal(
        at_s=7.25, num_connections=2,
        goodput_bytes_per_s=1_500_000 / 0.5,   # (1_000_000 + 500_000) acked in 0.5 s
        retrans_rate=4 / 200,                  # (3 + 1) retransmitted of (100 + 100) sent
        num_retrans=4,
        rtt_inflation=(30_000 / 20_000 + 1.0) / 2,
        send_queue_bytes=8_000 + 3_000,
        cwnd=60)


def case(prev: dict, cur: dict, **expected):
    return pytest.param(prev, cur, expected, id=",".join(expected))


@pytest.mark.parametrize("prev,cur,expected", [
    case(dict(data_segs_out=U32 - 10, total_retrans=U32 - 1),
         dict(data_segs_out=40, total_retrans=4),
         retrans_rate=5 / 50, num_retrans=5),
    case(dict(data_segs_out=None, segs_out=10),
         dict(data_segs_out=None, segs_out=110, total_retrans=1),
         retrans_rate=0.01),
    case(dict(bytes_acked=None), dict(bytes_acked=None), goodput_bytes_per_s=0.0),
    case(dict(rtt_us=20_000), dict(rtt_us=30_000, min_rtt_us=None), rtt_inflation=1.5),
    case(dict(rtt_us=0), dict(rtt_us=0), rtt_inflation=1.0),
    case(dict(), dict(rtt_us=9_000, min_rtt_us=10_000), rtt_inflation=1.0),
    case(dict(data_segs_out=5), dict(data_segs_out=5), retrans_rate=0.0, num_retrans=0),
    case(dict(bytes_acked=10), dict(bytes_acked=5), goodput_bytes_per_s=0.0),
])
def test_single_connection_edge_cases(prev, cur, expected):
    signal = signal_from_samples([info(**prev)], [info(**cur)], 1.0)
    assert {k: getattr(signal, k) for k in expected} == pytest.approx(expected)


def test_no_connections_is_a_quiet_signal():
    assert signal_from_samples([], [], 0.25, at_s=1.0) == CongestionSignal(
        at_s=1.0, num_connections=0, goodput_bytes_per_s=0.0, retrans_rate=0.0, num_retrans=0,
        rtt_inflation=1.0, send_queue_bytes=0, cwnd=0)


@pytest.mark.parametrize("prev,cur,dt_s,match", [
    ([ZERO], [], 1.0, "one pair per connection"),
    ([ZERO], [ZERO], 0.0, "must be positive"),
    ([ZERO], [ZERO], float("nan"), "must be positive"),
])
def test_bad_arguments_are_refused(prev, cur, dt_s, match):
    with pytest.raises(ValueError, match=match):
        signal_from_samples(prev, cur, dt_s)


# ---- the monitor on loopback ----

def _send_and_wait_acked(client: socket.socket, server: socket.socket, nbytes: int) -> None:
    start = read_tcp_info(client).bytes_acked
    reader = threading.Thread(target=_drain, args=(server, nbytes), daemon=True)
    reader.start()
    client.sendall(bytes(nbytes))
    reader.join(10)
    deadline = time.monotonic() + 5
    while read_tcp_info(client).bytes_acked < start + nbytes and time.monotonic() < deadline:
        time.sleep(0.01)


def _drain(sock: socket.socket, nbytes: int | None) -> None:
    """Read `nbytes` (None: until EOF or error)."""
    sock.settimeout(10)
    try:
        while nbytes is None or nbytes > 0:
            chunk = sock.recv(1 << 20)
            if not chunk:
                return
            if nbytes is not None:
                nbytes -= len(chunk)
    except OSError:
        return


def test_monitor_reports_what_was_acked_between_samples(loopback_pair):
    client, server = loopback_pair
    monitor = CongestionMonitor()
    monitor.add(client)
    monitor.add(client)  # no-op
    assert monitor.sample(10.0) is None  # baseline
    _send_and_wait_acked(client, server, 1 << 20)
    signal = monitor.sample(10.5)
    assert signal.num_connections == 1 and signal.at_s == 10.5
    assert signal.goodput_bytes_per_s * 0.5 == 1 << 20
    assert signal.rtt_inflation >= 1.0 and signal.cwnd > 0 and signal.send_queue_bytes == 0
    assert monitor.history == (signal,)
    assert monitor.sample(10.5) is None  # no time passed
    with pytest.raises(ValueError, match="before the previous sample"):
        monitor.sample(10.0)


def test_monitor_drops_closed_and_removed_sockets(loopback_pair):
    client, server = loopback_pair
    monitor = CongestionMonitor()
    monitor.add(client)
    monitor.add(server)
    monitor.sample(0.0)
    assert monitor.remove(server) and not monitor.remove(server)
    client.close()
    assert monitor.sample(1.0).num_connections == 0
    assert monitor.num_connections == 0
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp, \
            pytest.raises(TcpInfoError):
        monitor.add(udp)


def test_history_is_bounded_and_egress_is_counted():
    monitor = CongestionMonitor(max_num_history=3)
    for t in range(6):
        monitor.sample(float(t))
    assert [s.at_s for s in monitor.history] == [3.0, 4.0, 5.0]
    monitor.record_sent("dc-b", 100)
    monitor.record_sent("dc-b", 50)
    monitor.record_sent("dc-c", 0)
    snapshot = monitor.bytes_sent_to
    monitor.record_sent("dc-b", 1)
    assert dict(snapshot) == {"dc-b": 150, "dc-c": 0}
    assert monitor.bytes_sent_to["dc-b"] == 151
    with pytest.raises(ValueError, match="negative"):
        monitor.record_sent("dc-b", -1)
    with pytest.raises(ValueError, match="at least 1"):
        CongestionMonitor(max_num_history=0)


def test_run_samples_until_stopped(loopback_pair):
    client, _ = loopback_pair
    monitor = CongestionMonitor()
    monitor.add(client)
    signals: list[CongestionSignal] = []
    stop = threading.Event()
    sampler = threading.Thread(target=monitor.run, args=(0.02, stop, signals.append), daemon=True)
    sampler.start()
    deadline = time.monotonic() + 5
    while len(signals) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    stop.set()
    sampler.join(5)
    assert not sampler.is_alive()
    assert len(signals) >= 3 and all(s.num_connections == 1 for s in signals)
    assert [s.at_s for s in signals] == sorted({s.at_s for s in signals})
    assert list(monitor.history) == signals


# ---- across a shaped link (root) ----

LINK = {"bandwidth_mbit": 100, "delay_ms": 10}
LINK_BYTES_PER_S = 100e6 / 8
needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="needs root: namespaces and TUN need CAP_NET_ADMIN")


@pytest.fixture
def lossy_link() -> Iterator[Topology]:
    run_id = new_run_id()
    topo = Topology(parse_link_spec({**LINK, "loss_pct": 1.0}), backend="tun", run_id=run_id)
    try:
        yield topo.up()
    finally:
        topo.down()
        sweep(run_id, force=True)


def _monitored_stream(topo: Topology, seconds: float) -> list[CongestionSignal]:
    """One cubic bulk stream remote -> local for `seconds`, sampled every 0.25 s by a monitor."""
    listener = topo.socket(LOCAL)
    listener.bind((topo.address(LOCAL), 0))
    listener.listen(1)
    sender = topo.socket(REMOTE)
    sender.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b"cubic")
    sender.settimeout(5)
    sender.connect(topo.target(LOCAL, listener.getsockname()[1]))
    receiver, _ = listener.accept()
    reader = threading.Thread(target=_drain, args=(receiver, None), daemon=True)
    reader.start()
    monitor = CongestionMonitor()
    monitor.add(sender)
    stop = threading.Event()
    sampler = threading.Thread(target=monitor.run, args=(0.25, stop), daemon=True)
    sampler.start()
    try:
        chunk = bytes(256 << 10)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            sender.sendall(chunk)
    finally:
        stop.set()
        sampler.join(5)
        sender.close()
        reader.join(5)
        receiver.close()
        listener.close()
    return list(monitor.history)


@needs_root
@pytest.mark.root
@pytest.mark.slow
def test_monitor_sees_loss_then_none_on_a_shaped_link(lossy_link):
    lossy = _monitored_stream(lossy_link, 2.0)
    lossy_link.update(parse_link_spec({**LINK, "loss_pct": 0.0}))
    clean = _monitored_stream(lossy_link, 2.0)
    for signals in (lossy, clean):
        assert len(signals) >= 4, signals
        assert all(s.rtt_inflation >= 1.0 and s.num_connections == 1 for s in signals), signals
        mean_goodput = sum(s.goodput_bytes_per_s for s in signals) / len(signals)
        assert mean_goodput <= 1.1 * LINK_BYTES_PER_S, signals  # shaped, not loopback speed
    assert sum(s.num_retrans for s in lossy) > 0 and max(s.retrans_rate for s in lossy) > 0, lossy
    assert sum(s.num_retrans for s in clean) <= 2, clean
    # loss-free cubic grows into the link's 1000-packet queue, and the RTT shows it
    assert max(s.rtt_inflation for s in clean) > 1.2, clean
    assert sum(s.goodput_bytes_per_s for s in clean) / len(clean) >= 0.3 * LINK_BYTES_PER_S, clean
