"""A host link without sch_netem on the rehearsed hosts (driver, remote, local), against the kernel: the
host relay gives each direction its delay (the RTT is the sum), its loss, and htb still its rate; it is
reshaped in place; after close, and after a SIGKILLed owner and `net down`, no TUN, /32 route, qdisc or
loosened rp_filter is left. What is left is judged by iproute2's `ip` and `tc` and /proc, not by the code
under test.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulator.errors import TopologyError
from emulator.net.host_link import HostLink
from emulator.net.host_rehearsal import HostRehearsal, RehearsalHost
from emulator.net.ledger import process_start_time
from emulator.net.netem_backend import NetemSupport
from emulator.net.netns import list_netns, netns_socket
from emulator.net.probe import measure_connect_times, measure_rtt, measure_throughput
from emulator.net.spec import LinkShape

pytestmark = [
    pytest.mark.root,
    pytest.mark.live,  # each link starts a relay process
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces, bridge, tc, TUN)"),
    pytest.mark.skipif(not (shutil.which("ip") and shutil.which("tc")),
                       reason="needs iproute2's ip and tc to check the kernel independently"),
    pytest.mark.skipif(not os.path.exists("/dev/net/tun"), reason="needs /dev/net/tun (kernel module tun)"),
]
REPO = Path(__file__).resolve().parents[3]
SO_RCVBUFFORCE = 33
NO_NETEM = NetemSupport(False, False, "kernel lacks sch_netem")  # the relay, even on a kernel with netem


def sh(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True, timeout=30).stdout


def in_host(host: RehearsalHost, *args: str) -> str:
    return sh("ip", "netns", "exec", host.netns, *args)


def rp_filter(host: RehearsalHost, ifname: str) -> int:
    return int(in_host(host, "cat", f"/proc/sys/net/ipv4/conf/{ifname}/rp_filter"))


def relay_state(host: RehearsalHost) -> dict:
    """What a host relay adds to a host, as `ip` and `tc` show it."""
    return {"devices": [line.split(":")[1].strip() for line in in_host(host, "ip", "-o", "link").splitlines()
                        if "-hr" in line],
            "routes": [r for r in in_host(host, "ip", "-4", "route", "show").splitlines() if "/" not in r.split()[0]],
            "qdisc": "htb" in in_host(host, "tc", "qdisc", "show", "dev", host.ifname),
            "rp_filter": rp_filter(host, host.ifname)}


def leftovers(run_id: str) -> list[str]:
    links = [line.split(":")[1].strip().split("@")[0] for line in sh("ip", "-o", "link", "show").splitlines()]
    return [*list_netns(f"prf-{run_id}-"), *(n for n in links if n.startswith(f"prf-{run_id}-"))]


@pytest.fixture
def hosts(run_id: str) -> Iterator[HostRehearsal]:
    rehearsal = HostRehearsal.up(run_id)
    try:
        yield rehearsal
    finally:
        rehearsal.down()
    assert leftovers(run_id) == []


def rtt_ms(remote: RehearsalHost, local: RehearsalHost) -> tuple[float, float]:
    """Least SYN/SYN-ACK time and least TCP echo time of 15 each, in ms: the path's own delay, as a
    sender's minimum RTT reads it. A median also holds the relay's late wake-ups on a loaded machine
    (CI once read the echo 1.17 ms over 2 x 10 ms at the median), which are load, not the shape."""
    syn = min(measure_connect_times(remote.netns, local.netns, local.addr, 15)) * 1e3
    echo = min(measure_rtt(remote.netns, local.netns, local.addr, samples=15)) * 1e3
    return syn, echo


@pytest.mark.slow
def test_delay_each_way_sums_to_the_rtt_rate_holds_and_close_restores_both_hosts(hosts: HostRehearsal):
    remote, local = hosts.host("remote"), hosts.host("local")
    for host in (remote, local):  # strict reverse-path filtering, as many distributions set it
        in_host(host, "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=1")
    before = {h.name: relay_state(h) for h in (remote, local)}
    base_syn, base_echo = rtt_ms(remote, local)  # the hosts' own time, CPU load included
    shape = LinkShape(bandwidth_mbit=50, delay_ms=10)
    links = [HostLink.open(remote.netns, remote.ifname, local.addr, shape, hosts.ledger, netem=NO_NETEM),
             HostLink.open(local.netns, local.ifname, remote.addr, shape, hosts.ledger, netem=NO_NETEM)]
    try:
        pids = [link.relay_pid for link in links]
        assert all(pids) and "host relay" in links[0].describe() and links[0].notes == []
        during = relay_state(remote)
        assert during["devices"] and during["rp_filter"] == 2 and during["qdisc"]
        assert any(r.startswith(f"{local.addr} dev {during['devices'][0]}") and f"src {remote.addr}" in r
                   for r in during["routes"]), during
        syn, echo = rtt_ms(remote, local)
        print(f"2 x 10 ms: SYN/SYN-ACK {syn:.2f} ms, echo {echo:.2f} ms "
              f"(unshaped {base_syn:.2f} / {base_echo:.2f} ms)")
        assert abs(syn - base_syn - 20) <= 1 and abs(echo - base_echo - 20) <= 1

        counted = links[0].counters().bytes
        shaped = measure_throughput(remote.netns, local.netns, local.addr, seconds=3.0, warmup_s=1.0)
        print(f"50 Mbit/s with 10 ms each way: {shaped['bits_per_s'] / 1e6:.2f} Mbit/s")
        assert abs(shaped["bits_per_s"] / 50e6 - 1) <= 0.05
        assert links[0].counters().bytes - counted >= shaped["bytes"]  # relayed, then through htb's class

        for link in links:
            link.update(LinkShape(bandwidth_mbit=50, delay_ms=2.5))
        assert [link.relay_pid for link in links] == pids  # reshaped in place, not restarted
        syn, echo = rtt_ms(remote, local)
        print(f"2 x 2.5 ms after update: SYN/SYN-ACK {syn:.2f} ms, echo {echo:.2f} ms")
        assert abs(syn - base_syn - 5) <= 1 and abs(echo - base_echo - 5) <= 1
    finally:
        for link in links:
            link.close()
    assert {h.name: relay_state(h) for h in (remote, local)} == before
    assert all(process_start_time(pid) is None for pid in pids)


@pytest.mark.slow
def test_one_percent_loss_drops_about_one_percent_of_2000_datagrams(hosts: HostRehearsal):
    remote, local = hosts.host("remote"), hosts.host("local")
    with HostLink.open(remote.netns, remote.ifname, local.addr, LinkShape(loss_pct=1), hosts.ledger,
                       netem=NO_NETEM, seed=30) as link:
        assert link.relay_pid is not None
        receiver = netns_socket(local.netns, kind=socket.SOCK_DGRAM)
        receiver.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)  # holds all 2000 until read
        receiver.bind((local.addr, 0))
        receiver.settimeout(1.0)
        sender = netns_socket(remote.netns, kind=socket.SOCK_DGRAM)
        drops_before = link.counters().drops
        try:
            for i in range(2000):
                sender.sendto(i.to_bytes(4, "big"), receiver.getsockname())
                time.sleep(0.0003)  # well under the socket buffers either side
            got = set()
            while True:
                try:
                    got.add(int.from_bytes(receiver.recv(64), "big"))
                except TimeoutError:
                    break
        finally:
            sender.close()
            receiver.close()
        lost = 2000 - len(got)
        print(f"1 % loss: {lost} of 2000 datagrams lost ({lost / 20:.2f} %), relay counted "
              f"{link.counters().drops - drops_before} drops")
        assert 10 <= lost <= 30  # 0.5-1.5 %: binomial(2000, 0.01) is 20 +- 4.4
        assert link.counters().drops - drops_before >= lost


CRASH = """
import json, os, signal, sys
from emulator.net.host_link import HostLink
from emulator.net.host_rehearsal import HostRehearsal
from emulator.net.netem_backend import NetemSupport
from emulator.net.spec import LinkShape
hosts = HostRehearsal.up(sys.argv[1])
remote, local = hosts.host("remote"), hosts.host("local")
os.system(f"ip netns exec {remote.netns} sysctl -qw net.ipv4.conf.all.rp_filter=1")
link = HostLink.open(remote.netns, remote.ifname, local.addr, LinkShape(bandwidth_mbit=50, delay_ms=5), hosts.ledger,
                     netem=NetemSupport(False, False, "-"))
print(json.dumps({"netns": remote.netns, "ifname": remote.ifname, "relay": link.relay_pid,
                  "tun": link.relay.path.tun}), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.slow
def test_net_down_after_a_sigkilled_owner_removes_the_relay_and_puts_rp_filter_back(run_id: str):
    crashed = subprocess.run([sys.executable, "-c", CRASH, run_id], cwd=REPO, capture_output=True, text=True,
                             timeout=60)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    made = json.loads(crashed.stdout)
    assert sh("ip", "netns", "exec", made["netns"], "cat",
              f"/proc/sys/net/ipv4/conf/{made['ifname']}/rp_filter").strip() == "2"  # the crash left it loose

    down = subprocess.run([sys.executable, "-m", "emulator", "net", "down", "--run-id", run_id], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert down.returncode == 0, down.stderr
    removed = json.loads(down.stdout)["removed"]
    print("removed:", removed)
    assert f"sysctl net.ipv4.conf.{made['ifname']}.rp_filter=0 (netns {made['netns']})" in removed
    assert any(item.startswith("qdisc ") and made["ifname"] in item for item in removed), removed
    assert process_start_time(made["relay"]) is None  # gone: by itself on its parent's death, or by the ledger
    assert leftovers(run_id) == []


@pytest.mark.slow
def test_a_relay_that_cannot_resolve_the_peer_is_refused_in_one_line_and_leaves_nothing(hosts: HostRehearsal):
    remote = hosts.host("remote")
    absent = str(remote.addr).rsplit(".", 1)[0] + ".200"  # on the subnet, no host there
    before = relay_state(remote)
    with pytest.raises(TopologyError) as err:
        HostLink.open(remote.netns, remote.ifname, absent, LinkShape(delay_ms=5), hosts.ledger, netem=NO_NETEM)
    assert "\n" not in str(err.value) and f"no MAC for {absent}" in str(err.value)
    assert relay_state(remote) == before
