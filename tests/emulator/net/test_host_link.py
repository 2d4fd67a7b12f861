"""A host link on a one-machine rehearsal of three hosts (driver, remote, local), against the kernel:
the rate a real TCP transfer gets, which destinations it applies to, the class counters, the RTT where
netem exists, the refusal of a foreign root qdisc, and that nothing is left after close, down, or a
crash followed by `net down`. What is left is judged by iproute2's `ip` and `tc`, not by the code under test.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulator.errors import TopologyError
from emulator.net.backend import DirectionCounters
from emulator.net.host_link import HostLink
from emulator.net.host_rehearsal import HostRehearsal, RehearsalHost
from emulator.net.netem_backend import NetemSupport, probe_netem_support
from emulator.net.netns import list_netns, netns_socket
from emulator.net.probe import measure_connect_times, measure_throughput
from emulator.net.spec import LinkShape

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces, bridge, tc qdiscs)"),
    pytest.mark.skipif(not (shutil.which("ip") and shutil.which("tc")),
                       reason="needs iproute2's ip and tc to check the kernel independently"),
]
REPO = Path(__file__).resolve().parents[3]
RATE_MBIT = 50.0
NO_NETEM = NetemSupport(False, False, "kernel lacks sch_netem")


def sh(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True, timeout=30).stdout


def qdiscs(host: RehearsalHost) -> str:
    return sh("ip", "netns", "exec", host.netns, "tc", "qdisc", "show", "dev", host.ifname)


def leftovers(run_id: str) -> list[str]:
    """The run's namespaces, and its links in this namespace (bridge, veth ends), as `ip` lists them."""
    links = [line.split(":")[1].strip().split("@")[0] for line in sh("ip", "-o", "link", "show").splitlines()]
    return [*list_netns(f"prf-{run_id}-"), *(n for n in links if n.startswith(f"prf-{run_id}-"))]


def settled(link: HostLink) -> DirectionCounters:
    """The shaped class's counters once they stop moving (at most 3 s)."""
    last, deadline = link.counters(), time.monotonic() + 3.0
    while time.monotonic() < deadline:
        time.sleep(0.3)
        if (now := link.counters()) == last:
            return now
        last = now
    return last


@pytest.fixture
def hosts(run_id: str) -> Iterator[HostRehearsal]:
    rehearsal = HostRehearsal.up(run_id)
    try:
        yield rehearsal
    finally:
        rehearsal.down()
    assert leftovers(run_id) == []


@pytest.mark.slow
def test_only_the_peers_traffic_is_shaped_counted_and_reshaped_and_close_restores(hosts: HostRehearsal):
    driver, remote, local = (hosts.host(n) for n in ("driver", "remote", "local"))
    assert len({driver.addr, remote.addr, local.addr}) == 3
    link = HostLink.open(remote.netns, remote.ifname, local.addr, LinkShape(bandwidth_mbit=RATE_MBIT), hosts.ledger,
                         netem=NO_NETEM)
    assert "htb" in qdiscs(remote) and "rate 50Mbit" in sh(
        "ip", "netns", "exec", remote.netns, "tc", "class", "show", "dev", remote.ifname)

    before = link.counters()
    shaped = measure_throughput(remote.netns, local.netns, local.addr, seconds=3.0)
    mid = settled(link)  # the sender's tail drains after the receiver stops counting
    print(f"shaped: {shaped['bits_per_s'] / 1e6:.2f} Mbit/s over {shaped['seconds']:.2f} s, {shaped['bytes']} B")
    assert abs(shaped["bits_per_s"] / (RATE_MBIT * 1e6) - 1) <= 0.05
    assert mid.bytes - before.bytes >= shaped["bytes"]  # every byte the receiver counted left through the class

    other_before = link.unshaped_counters()
    other = measure_throughput(remote.netns, driver.netns, driver.addr, seconds=2.0)
    after = link.counters()
    print(f"to the driver: {other['bits_per_s'] / 1e6:.0f} Mbit/s; shaped class grew {after.bytes - mid.bytes} B")
    assert other["bits_per_s"] > 3 * RATE_MBIT * 1e6  # intra-cluster: not held to the link's rate
    assert after.bytes - mid.bytes < 1500  # none of it went through the shaped class (not one frame)
    assert link.unshaped_counters().bytes - other_before.bytes >= other["bytes"]

    link.update(LinkShape(bandwidth_mbit=20))
    reshaped = measure_throughput(remote.netns, local.netns, local.addr, seconds=3.0)
    print(f"reshaped: {reshaped['bits_per_s'] / 1e6:.2f} Mbit/s")
    assert abs(reshaped["bits_per_s"] / 20e6 - 1) <= 0.05

    assert link.close() is True and link.close() is False
    assert "htb" not in qdiscs(remote)


def test_a_root_qdisc_the_link_did_not_add_is_refused_and_left_alone(hosts: HostRehearsal):
    remote, local = hosts.host("remote"), hosts.host("local")
    sh("ip", "netns", "exec", remote.netns, "tc", "qdisc", "add", "dev", remote.ifname, "root", "handle", "1:",
       "tbf", "rate", "1mbit", "burst", "32kbit", "latency", "400ms")
    shown = qdiscs(remote)
    entries = len(hosts.ledger.entries)
    with pytest.raises(TopologyError) as err:
        HostLink.open(remote.netns, remote.ifname, local.addr, LinkShape(bandwidth_mbit=RATE_MBIT), hosts.ledger,
                      netem=NO_NETEM)
    message = str(err.value)
    assert "\n" not in message and f"interface {remote.ifname} " in message and "tbf 1:" in message
    assert qdiscs(remote) == shown and "tbf 1: root" in shown  # untouched
    assert len(hosts.ledger.entries) == entries  # nothing recorded: nothing was added


def test_a_second_link_on_the_same_interface_is_refused_and_the_first_keeps_shaping(hosts: HostRehearsal):
    remote, local, driver = hosts.host("remote"), hosts.host("local"), hosts.host("driver")
    shape = LinkShape(bandwidth_mbit=RATE_MBIT)
    with HostLink.open(remote.netns, remote.ifname, local.addr, shape, hosts.ledger, netem=NO_NETEM):
        shown = qdiscs(remote)
        with pytest.raises(TopologyError, match=f"interface {remote.ifname} .* of this run"):
            HostLink.open(remote.netns, remote.ifname, driver.addr, shape, hosts.ledger, netem=NO_NETEM)
        assert qdiscs(remote) == shown
    assert "htb" not in qdiscs(remote)


CRASH = """
import json, os, signal, sys
from emulator.net.host_link import HostLink
from emulator.net.host_rehearsal import HostRehearsal
from emulator.net.netem_backend import NetemSupport
from emulator.net.spec import LinkShape
hosts = HostRehearsal.up(sys.argv[1])
remote, local = hosts.host("remote"), hosts.host("local")
HostLink.open(remote.netns, remote.ifname, local.addr, LinkShape(bandwidth_mbit=50), hosts.ledger,
              netem=NetemSupport(False, False, "-"))
print(json.dumps({"netns": remote.netns, "ifname": remote.ifname, "bridge": hosts.bridge}), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.slow
def test_net_down_removes_a_crashed_runs_shaping_hosts_and_bridge(run_id: str):
    crashed = subprocess.run([sys.executable, "-c", CRASH, run_id], cwd=REPO, capture_output=True, text=True,
                             timeout=60)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    made = json.loads(crashed.stdout)
    assert made["bridge"] in leftovers(run_id) and made["netns"] in leftovers(run_id)
    assert "htb" in sh("ip", "netns", "exec", made["netns"], "tc", "qdisc", "show", "dev", made["ifname"])

    down = subprocess.run([sys.executable, "-m", "emulator", "net", "down", "--run-id", run_id], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert down.returncode == 0, down.stderr
    removed = json.loads(down.stdout)["removed"]
    assert any(item.startswith("qdisc ") and made["ifname"] in item for item in removed), removed
    assert f"link {made['bridge']}" in removed and f"netns {made['netns']}" in removed
    assert leftovers(run_id) == []


@pytest.mark.slow
@pytest.mark.netem
def test_rtt_across_two_shaped_hosts_is_twice_the_delay(hosts: HostRehearsal):
    support = probe_netem_support()
    if not support.is_available:
        pytest.skip("no sch_netem in this kernel")
    remote, local = hosts.host("remote"), hosts.host("local")
    shape = LinkShape(bandwidth_mbit=RATE_MBIT, delay_ms=10)
    with HostLink.open(remote.netns, remote.ifname, local.addr, shape, hosts.ledger, netem=support), \
            HostLink.open(local.netns, local.ifname, remote.addr, shape, hosts.ledger, netem=support):
        rtt_s = sorted(measure_connect_times(remote.netns, local.netns, local.addr, 20))[10]
    print(f"median connect time {rtt_s * 1e3:.2f} ms for 2 x 10 ms")
    assert abs(rtt_s - 0.020) <= 0.001


def test_the_hosts_reach_each_other_on_their_own_addresses(hosts: HostRehearsal):
    driver, remote = hosts.host("driver"), hosts.host("remote")
    listener = netns_socket(driver.netns)
    listener.bind((driver.addr, 0))
    listener.listen(1)
    client = netns_socket(remote.netns)
    try:
        client.settimeout(5)
        client.connect((driver.addr, listener.getsockname()[1]))
        conn, (peer, _) = listener.accept()
        conn.close()
        assert peer == remote.addr  # the driver sees the remote host's own address
    finally:
        client.close()
        listener.close()
    routes = [line.split()[0] for line in sh("ip", "-4", "route", "show").splitlines() if line[0].isdigit()]
    here = [ipaddress.IPv4Network(r) for r in routes if r != "default"]
    assert not any(ipaddress.IPv4Network(hosts.subnet).overlaps(net) for net in here), (hosts.subnet, routes)
