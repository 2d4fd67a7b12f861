"""NetemBackend against the real kernel: the probe, the refusal path, tbf readback and counters.

Whether this kernel has sch_netem is decided independently of the code under test, by running
`tc` in a throwaway namespace; the netem-only test skips after a real probe_netem().
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pyroute2 import IPRoute

from emulator.errors import LinkBackendUnavailable
from emulator.net.backend import TO_LOCAL, TO_REMOTE, LinkEnds
from emulator.net.names import PREFIX, ifname, netns_name, new_run_id
from emulator.net.netem_backend import (
    NetemBackend,
    create_veth,
    delete_veth,
    observed_params,
    probe_netem,
    read_back,
    run_ops,
)
from emulator.net.netem_plan import ROOT_HANDLE, QdiscOp, tbf_op, tbf_params
from emulator.net.netns import create_netns, list_netns, netns_socket, remove_netns
from emulator.net.spec import LinkShape, LinkSpec

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces, tc qdiscs)"),
]


@pytest.fixture
def ledger_netns() -> Iterator[Callable[[str, str], str]]:
    """Creates project-named namespaces on demand and always removes them, newest first."""
    made: list[str] = []

    def make(run_id: str, role: str) -> str:
        name = netns_name(run_id, role)
        made.append(name)
        create_netns(name)
        return name

    yield make
    for name in reversed(made):
        remove_netns(name)


@pytest.fixture
def ends(ledger_netns: Callable[[str, str], str]) -> LinkEnds:
    run_id = new_run_id()
    remote, local = ledger_netns(run_id, "remote"), ledger_netns(run_id, "local")
    return LinkEnds(run_id, remote, local, ifname(run_id, "rmt"), ifname(run_id, "loc"), mtu=1500)


@pytest.fixture(scope="module")
def kernel_has_netem() -> bool:
    """Independent of probe_netem(): ask the `tc` binary in a scratch namespace."""
    if Path("/sys/module/sch_netem").exists():
        return True
    tc = shutil.which("tc")
    if tc is None or shutil.which("ip") is None:
        pytest.skip("needs iproute2's tc and ip to check for sch_netem independently")
    name = netns_name(new_run_id(), "chk")
    create_netns(name)
    try:
        add_netem = [tc, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"]
        done = subprocess.run(
            ["ip", "netns", "exec", name, *add_netem], capture_output=True, text=True, timeout=30
        )
    finally:
        remove_netns(name)
    return done.returncode == 0


@pytest.fixture
def netem_kernel() -> None:
    is_available, reason = probe_netem()
    if not is_available:
        pytest.skip(reason if "sch_netem" in reason else f"kernel lacks sch_netem? {reason}")


def _links(netns: str) -> list[str]:
    """Device names in `netns`, read with `ip -o link` rather than through the code under test."""
    out = subprocess.run(
        ["ip", "-n", netns, "-o", "link"], capture_output=True, text=True, check=True
    )
    return [line.split(":")[1].strip().split("@")[0] for line in out.stdout.splitlines()]


def _qdisc(netns: str, name: str, handle: int) -> dict[str, float]:
    with IPRoute(netns=netns, flags=0) as ipr:
        index = ipr.link_lookup(ifname=name)[0]
        found = [q for q in ipr.get_qdiscs(index) if q["handle"] == handle]
    assert found, f"no qdisc {handle:#x} on {name}"
    return observed_params(found[0])


def _root_tbf(netns: str, name: str, shape: LinkShape, mtu: int, command: str = "add") -> QdiscOp:
    return tbf_op(netns, name, tbf_params(shape, mtu), command, handle=ROOT_HANDLE, parent=None)


def test_probe_agrees_with_the_kernel(kernel_has_netem: bool, ends: LinkEnds) -> None:
    before = set(list_netns(PREFIX + "-"))
    is_available, reason = probe_netem()
    assert is_available == kernel_has_netem
    if kernel_has_netem:
        assert reason.startswith("kernel accepts netem")
        assert NetemBackend.from_probe(ends).name == "netem"
    else:
        assert reason == "kernel lacks sch_netem (unknown qdisc kind)"
        with pytest.raises(LinkBackendUnavailable, match=r"^kernel lacks sch_netem \("):
            NetemBackend.from_probe(ends)
    assert not [n for n in set(list_netns(PREFIX + "-")) - before if n.endswith("-probe")]


def test_apply_is_refused_without_netem_and_leaves_no_veth(
    ends: LinkEnds, kernel_has_netem: bool
) -> None:
    if kernel_has_netem:
        pytest.skip("kernel has sch_netem: the refusal path cannot be reached here")
    backend = NetemBackend(ends)
    with pytest.raises(LinkBackendUnavailable) as refused:
        backend.apply(LinkSpec(bandwidth_mbit=800, delay_ms=10, loss_pct=1))
    line = str(refused.value)
    assert line.startswith("kernel lacks sch_netem: tc add netem on ") and "ENOENT" in line
    assert "\n" not in line
    assert _links(ends.remote_netns) == ["lo"] and _links(ends.local_netns) == ["lo"]
    backend.close()  # nothing left to close: still fine


def test_tbf_plan_applies_reads_back_and_changes_live(ends: LinkEnds) -> None:
    create_veth(ends)
    try:
        assert ends.remote_ifname in _links(ends.remote_netns)
        assert ends.local_ifname in _links(ends.local_netns)
        shape, slow = LinkShape(bandwidth_mbit=80, queue_packets=100), LinkShape(bandwidth_mbit=8)
        ops = [
            _root_tbf(ends.remote_netns, ends.remote_ifname, shape, ends.mtu),
            _root_tbf(ends.local_netns, ends.local_ifname, slow, ends.mtu),
        ]
        run_ops(ops)
        read_back(ops)
        seen = _qdisc(ends.remote_netns, ends.remote_ifname, 0x10000)
        assert (seen["rate"], seen["limit"]) == (10_000_000, 150_000)
        assert seen["burst"] == pytest.approx(10_000, rel=1e-3)
        assert _qdisc(ends.local_netns, ends.local_ifname, 0x10000)["rate"] == 1_000_000
        fast = LinkShape(bandwidth_mbit=400)
        faster = _root_tbf(ends.remote_netns, ends.remote_ifname, fast, ends.mtu, "replace")
        run_ops([faster])
        read_back([faster])
        assert _qdisc(ends.remote_netns, ends.remote_ifname, 0x10000)["rate"] == 50_000_000
    finally:
        assert delete_veth(ends) is True
    assert delete_veth(ends) is False
    assert _links(ends.remote_netns) == ["lo"] and _links(ends.local_netns) == ["lo"]


def _send(ends: LinkEnds, count: int, size: int) -> socket.socket:
    """A receiver in the local namespace, and `count` datagrams of `size` bytes sent to it."""
    rx = netns_socket(ends.local_netns, socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind((ends.local_addr, 0))
    rx.settimeout(5.0)
    with netns_socket(ends.remote_netns, socket.AF_INET, socket.SOCK_DGRAM) as tx:
        for _ in range(count):
            tx.sendto(b"k" * size, rx.getsockname())
    return rx


def _wait_for(read: Callable[[], int], at_least: int) -> int:
    deadline = time.monotonic() + 10.0  # a bound on the wait, not an assertion about time
    while (value := read()) < at_least and time.monotonic() < deadline:
        time.sleep(0.05)
    return value


def test_counters_read_real_qdisc_stats(ends: LinkEnds) -> None:
    create_veth(ends)
    try:
        shape = LinkShape(bandwidth_mbit=10)
        run_ops([_root_tbf(ends.remote_netns, ends.remote_ifname, shape, ends.mtu)])
        backend = NetemBackend(ends)
        with _send(ends, 1, 100) as rx:  # ARP first, so no datagram waits in the neighbour queue
            rx.recv(2048)
        with _send(ends, 50, 1000) as rx:
            assert all(len(rx.recv(2048)) == 1000 for _ in range(50))
        packets = _wait_for(lambda: backend.counters().directions[TO_LOCAL].packets, 51)
        to_local = backend.counters().directions[TO_LOCAL]
        assert packets >= 51 and to_local.bytes >= 51 * 1000 and to_local.drops == 0
        assert set(backend.counters().directions) == {TO_LOCAL, TO_REMOTE}

        tight = LinkShape(bandwidth_mbit=1, queue_packets=2)  # 3000 B of queue at 1 Mbit/s
        run_ops([_root_tbf(ends.remote_netns, ends.remote_ifname, tight, ends.mtu, "replace")])
        _send(ends, 300, 1400).close()
        drops = _wait_for(lambda: backend.counters().directions[TO_LOCAL].drops, 1)
        assert drops > 0
    finally:
        delete_veth(ends)


def test_close_before_apply_is_a_no_op(ends: LinkEnds) -> None:
    backend = NetemBackend(ends)
    backend.close()
    backend.close()
    assert backend.name == "netem" and "\n" not in backend.description


@pytest.mark.netem
@pytest.mark.parametrize("netem_rate", [True, False], ids=["netem-rate", "tbf-fallback"])
def test_netem_link_applies_updates_live_and_closes(
    ends: LinkEnds, netem_kernel: None, netem_rate: bool
) -> None:
    reverse = LinkShape(bandwidth_mbit=100, delay_ms=5)
    spec = LinkSpec(
        bandwidth_mbit=800, delay_ms=10, loss_pct=1, loss_correlation_pct=25, reverse=reverse
    )
    backend = NetemBackend(ends, netem_rate=netem_rate)
    backend.apply(spec)
    try:
        remote = _qdisc(ends.remote_netns, ends.remote_ifname, 0x10000)
        local = _qdisc(ends.local_netns, ends.local_ifname, 0x10000)
        assert remote["delay"] == pytest.approx(10_000, abs=1)
        assert local["delay"] == pytest.approx(5000, abs=1)
        assert remote["loss"] == pytest.approx(1.0, abs=1e-6)
        assert remote["loss_corr"] == pytest.approx(25.0, abs=1e-6)
        if netem_rate:
            assert (remote["rate"], local["rate"]) == (100_000_000, 12_500_000)
        else:
            assert _qdisc(ends.remote_netns, ends.remote_ifname, 0x100000)["rate"] == 100_000_000

        backend.update(LinkSpec(delay_ms=20, reverse=reverse))
        remote = _qdisc(ends.remote_netns, ends.remote_ifname, 0x10000)
        assert remote["delay"] == pytest.approx(20_000, abs=1)
        assert remote["loss"] == 0 and remote["loss_corr"] == 0  # the correlation was cleared too
        if netem_rate:
            assert remote["rate"] == 0
        counters = backend.counters()
        assert set(counters.directions) == {TO_LOCAL, TO_REMOTE}
    finally:
        backend.close()
    assert _links(ends.remote_netns) == ["lo"] and _links(ends.local_netns) == ["lo"]
    backend.close()
