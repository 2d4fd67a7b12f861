"""TunRelayBackend with real TCP and UDP between two namespaces this module creates (root only).

Shaping is checked within wide bands (rate 90-102 %, RTT within 2 ms of twice the delay, loss
within binomial tolerance); the fidelity numbers themselves belong to bench/link_fidelity.py.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from pyroute2.ethtool import Ethtool

from emulator.errors import TopologyError
from emulator.net import probe
from emulator.net.backend import TO_LOCAL, TO_REMOTE, LinkEnds
from emulator.net.names import ifname, netns_name, new_run_id
from emulator.net.netns import create_netns, netns_socket, remove_netns, run_in_netns
from emulator.net.relay_process import REPO_ROOT
from emulator.net.spec import LinkSpec
from emulator.net.tun_backend import TunRelayBackend
from emulator.net.tun_device import link_names

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create namespaces and TUN devices"),
    pytest.mark.skipif(not os.path.exists("/dev/net/tun"), reason="kernel has no /dev/net/tun"),
]


@pytest.fixture(scope="module")
def ends() -> Iterator[LinkEnds]:
    """Two fresh namespaces for the module, always removed, and the link's ends between them."""
    run_id = new_run_id()
    remote, local = netns_name(run_id, "remote"), netns_name(run_id, "local")
    try:
        create_netns(remote)
        create_netns(local)
        yield LinkEnds(run_id, remote, local, ifname(run_id, "rem"), ifname(run_id, "loc"))
    finally:
        remove_netns(remote)
        remove_netns(local)


@pytest.fixture
def tun(ends: LinkEnds, tmp_path: Path) -> Iterator[TunRelayBackend]:
    backend = TunRelayBackend(ends, run_dir=tmp_path, seed=7)
    yield backend
    backend.close()


def throughput(ends: LinkEnds, seconds: float = 2.0) -> float:
    assert ends.remote_netns and ends.local_netns
    result = probe.measure_throughput(ends.remote_netns, ends.local_netns, ends.local_addr,
                                      seconds, warmup_s=0.3)
    return result["bits_per_s"]


def devices_left(ends: LinkEnds) -> set[str]:
    mine = {ends.remote_ifname, ends.local_ifname}
    return mine & (set(link_names(ends.remote_netns)) | set(link_names(ends.local_netns)))


@pytest.mark.parametrize("mbit", [20, 100])
def test_tcp_stream_follows_the_rate(tun: TunRelayBackend, ends: LinkEnds, mbit: int) -> None:
    tun.apply(LinkSpec(bandwidth_mbit=mbit, delay_ms=1))
    assert 0.90 <= throughput(ends) / (mbit * 1e6) <= 1.02
    counters = tun.counters().directions
    assert counters[TO_LOCAL].bytes > 0 and counters[TO_REMOTE].packets > 0


def test_rtt_is_twice_the_delay(tun: TunRelayBackend, ends: LinkEnds) -> None:
    tun.apply(LinkSpec(delay_ms=10))
    assert ends.remote_netns and ends.local_netns
    rtts = probe.measure_rtt(ends.remote_netns, ends.local_netns, ends.local_addr, 15)
    assert statistics.median(rtts) == pytest.approx(0.020, abs=0.002)
    assert min(rtts) >= 0.0199


def test_update_is_followed_within_a_second_and_a_half(tun: TunRelayBackend,
                                                       ends: LinkEnds) -> None:
    tun.apply(LinkSpec(bandwidth_mbit=100, delay_ms=1))
    marks: list[tuple[float, int]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            marks.append((time.monotonic(), tun.counters().directions[TO_LOCAL].bytes))
            time.sleep(0.1)

    stream = threading.Thread(target=throughput, args=(ends, 2.8))
    sampler = threading.Thread(target=sample, daemon=True)
    stream.start()
    sampler.start()
    time.sleep(1.0)
    changed_at = time.monotonic()
    tun.update(LinkSpec(bandwidth_mbit=20, delay_ms=1))
    stream.join()
    done.set()
    sampler.join()
    assert _rate_between(marks, changed_at - 0.6, changed_at) == pytest.approx(100e6, rel=0.1)
    assert _rate_between(marks, changed_at + 0.5, changed_at + 1.5) == pytest.approx(20e6, rel=0.1)
    assert tun.status()["spec"]["bandwidth_mbit"] == 20


def test_udp_loss_matches_the_spec(tun: TunRelayBackend, ends: LinkEnds) -> None:
    tun.apply(LinkSpec(loss_pct=10, reverse={}))
    assert ends.remote_netns and ends.local_netns
    n = 2000
    result = probe.measure_udp_loss(ends.remote_netns, ends.local_netns, ends.local_addr, n,
                                    rate_pps=4000, drain_s=0.2)
    lost = n - result["received"]
    assert abs(lost - 0.1 * n) <= 4.5 * math.sqrt(n * 0.1 * 0.9)
    assert tun.counters().directions[TO_LOCAL].drops == lost
    assert tun.counters().directions[TO_REMOTE].drops == 0


def tcp_segmentation(netns: str | None, name: str) -> bool:
    """Whether the kernel lets TCP bursts through `name` unsegmented (ethtool's tx-tcp-segmentation)."""

    def read() -> bool:
        with closing(Ethtool()) as ethtool:
            return ethtool.get_features(name).features["tx-tcp-segmentation"].enable

    return run_in_netns(netns, read)


def test_lossless_directions_carry_bursts_and_lossy_ones_single_packets(tun: TunRelayBackend,
                                                                        ends: LinkEnds) -> None:
    tun.apply(LinkSpec(bandwidth_mbit=1000, reverse={"bandwidth_mbit": 1000, "loss_pct": 1}))
    assert tcp_segmentation(ends.remote_netns, ends.remote_ifname)  # sends remote -> local
    assert not tcp_segmentation(ends.local_netns, ends.local_ifname)
    tun.update(LinkSpec(bandwidth_mbit=1000, jitter_ms=0.5, reverse={"bandwidth_mbit": 1000}))
    assert not tcp_segmentation(ends.remote_netns, ends.remote_ifname)
    assert tcp_segmentation(ends.local_netns, ends.local_ifname)


def send_exactly(ends: LinkEnds, num_bytes: int) -> int:
    """Send `num_bytes` remote -> local over one TCP connection; the bytes the receiver got."""
    listener = netns_socket(ends.local_netns)
    listener.bind((ends.local_addr, 0))
    listener.listen(1)
    listener.settimeout(10)
    client = netns_socket(ends.remote_netns)
    client.connect((ends.local_addr, listener.getsockname()[1]))
    conn, _ = listener.accept()
    received = 0

    def drain() -> None:
        nonlocal received
        while chunk := conn.recv(1 << 20):
            received += len(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    with client:
        client.sendall(bytes(num_bytes))
        client.shutdown(socket.SHUT_WR)
        reader.join(30)
    conn.close()
    listener.close()
    return received


def test_bursts_are_counted_as_the_segments_they_stand_for(tun: TunRelayBackend,
                                                           ends: LinkEnds) -> None:
    tun.apply(LinkSpec(bandwidth_mbit=2000, delay_ms=1))
    num_bytes = 50_000_000
    assert send_exactly(ends, num_bytes) == num_bytes
    sent = tun.counters().directions[TO_LOCAL]
    # at most an MSS of data per segment, each with 52 bytes of IP and TCP headers (timestamps on)
    mss = ends.mtu - 52
    assert sent.packets >= math.ceil(num_bytes / mss)
    assert sent.bytes >= num_bytes + 52 * math.ceil(num_bytes / mss)
    assert sent.bytes <= sent.packets * ends.mtu


def test_close_leaves_no_relay_and_no_device(tun: TunRelayBackend, ends: LinkEnds) -> None:
    tun.apply(LinkSpec())
    pid = tun.pid
    assert pid is not None and devices_left(ends) == {ends.remote_ifname, ends.local_ifname}
    assert tun.status()["devices"] == [ends.remote_ifname, ends.local_ifname]
    assert tun._relay is not None
    with pytest.raises(TopologyError, match="only the proxy relay routes ports"):
        tun._relay.request("route", dst_port=80)
    tun.close()
    tun.close()
    assert not Path(f"/proc/{pid}").exists()
    assert devices_left(ends) == set()
    with pytest.raises(TopologyError, match="not applied"):
        tun.counters()


def test_killed_relay_leaves_no_device(tun: TunRelayBackend, ends: LinkEnds) -> None:
    tun.apply(LinkSpec())
    assert tun.pid is not None
    os.kill(tun.pid, signal.SIGKILL)
    _wait_gone(tun.pid)
    assert _wait_no_devices(ends) == set()
    with pytest.raises(TopologyError, match="died"):
        tun.update(LinkSpec(delay_ms=1))


def test_killed_parent_leaves_no_relay_and_no_device(ends: LinkEnds, tmp_path: Path) -> None:
    script = (
        "import json, pathlib, sys\n"
        "from emulator.net.backend import LinkEnds\n"
        "from emulator.net.spec import LinkSpec\n"
        "from emulator.net.tun_backend import TunRelayBackend\n"
        "ends = LinkEnds(**json.loads(sys.argv[1]))\n"
        "b = TunRelayBackend(ends, run_dir=pathlib.Path(sys.argv[2]))\n"
        "b.apply(LinkSpec())\n"
        "print(b.pid, flush=True)\n"
        "sys.stdin.read()\n"
    )
    ends_json = json.dumps(dataclasses.asdict(ends))
    parent = subprocess.Popen([sys.executable, "-c", script, ends_json, str(tmp_path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO_ROOT)
    try:
        assert parent.stdout is not None
        relay_pid = int(parent.stdout.readline())
        assert devices_left(ends) == {ends.remote_ifname, ends.local_ifname}
        parent.send_signal(signal.SIGKILL)
        parent.wait(5)
        _wait_gone(relay_pid)
        assert _wait_no_devices(ends) == set()
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_start_up_errors_come_back_as_one_line(ends: LinkEnds, tmp_path: Path) -> None:
    missing = dataclasses.replace(ends, local_netns=netns_name(ends.run_id, "nope"))
    with pytest.raises(TopologyError, match=r"exited with 2 .*prf-\w+-nope") as err:
        TunRelayBackend(missing, run_dir=tmp_path).apply(LinkSpec())
    assert "\n" not in str(err.value)
    with pytest.raises(TopologyError, match="link mtu: 70000"):
        TunRelayBackend(dataclasses.replace(ends, mtu=70000), run_dir=tmp_path).apply(LinkSpec())
    assert devices_left(ends) == set()


def test_needs_two_namespaces() -> None:
    with pytest.raises(TopologyError, match="namespace"):
        TunRelayBackend(LinkEnds("abcdef", None, None, "a", "b"))


def _wait_gone(pid: int, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return
        if state == "Z":  # dead, fds closed; waiting only to be reaped
            return
        time.sleep(0.05)
    raise AssertionError(f"relay {pid} still running after {timeout_s} s")


def _wait_no_devices(ends: LinkEnds, timeout_s: float = 3.0) -> set[str]:
    """The devices still there after `timeout_s`: a killed relay's threads close its fds (and
    with them the devices) just after the leader thread turns zombie."""
    deadline = time.monotonic() + timeout_s
    while (left := devices_left(ends)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _rate_between(marks: list[tuple[float, int]], start: float, end: float) -> float:
    inside = [(t, b) for t, b in marks if start <= t <= end]
    assert len(inside) >= 2, f"no counter samples between {start} and {end}"
    (t0, b0), (t1, b1) = inside[0], inside[-1]
    return (b1 - b0) * 8 / (t1 - t0)
