"""The host link's tc tree and its netlink encoding, and the ledger's link/qdisc entries; no root needed."""

from __future__ import annotations

import socket

import pytest
from pyroute2.netlink.rtnl.tcmsg import tcmsg

from emulator.errors import LinkSpecError
from emulator.net.host_link import encode_class, encode_filter, u32_keys
from emulator.net.host_link_plan import (
    HIGH_CEIL_BYTES_PER_S,
    plan_change,
    plan_open,
    root_major,
    unapplied_note,
)
from emulator.net.ledger import check_entries
from emulator.net.netem_backend import parse_handle
from emulator.net.spec import LinkShape
from emulator.net.state_files import StateFileError

RUN = "abc123"
MAJOR = root_major(RUN)


def plan(shape: LinkShape, has_netem: bool = False, netem_rate: bool = False):
    return plan_open("prf-abc123-remote", "prf-abc123-e1", "10.7.0.3", shape, 9000, MAJOR, has_netem, netem_rate)


def decoded(msg: tcmsg) -> tcmsg:
    msg.encode()
    back = tcmsg(msg.data)
    back.decode()
    return back


def test_root_major_is_even_below_the_kernels_automatic_handles_and_differs_between_runs():
    majors = {root_major(f"{i:06x}") for i in range(0, 2**24, 9973)}
    assert all(0x100 <= m < 0x7F00 and m % 2 == 0 for m in majors)
    assert len(majors) > 1000  # 1683 run ids sampled: they spread over the range
    assert root_major("abc123") == 0x100 + (0xABC123 % 0x3F00) * 2


def test_the_peer_gets_the_shaped_class_and_everything_else_the_unshaped_default():
    p = plan(LinkShape(bandwidth_mbit=50))
    assert p.root.kind == "htb" and p.root.parent is None and p.root.kwargs() == {"default": 2}
    shaped, default = p.classes
    assert shaped.classid == f"{MAJOR:x}:1" and p.filter.target == shaped.classid
    assert shaped.kwargs()["rate"] == shaped.kwargs()["ceil"] == 6_250_000  # 50 Mbit/s in bytes/s
    assert shaped.kwargs()["burst"] == 18_000  # two 9000-byte frames beat 1 ms at 6.25 MB/s
    assert default.classid == f"{MAJOR:x}:2" and default.kwargs()["ceil"] == HIGH_CEIL_BYTES_PER_S
    assert p.netem is None  # no sch_netem: rate only


def test_the_u32_key_matches_the_peers_ipv4_destination_on_the_wire():
    back = decoded(encode_filter(plan(LinkShape(bandwidth_mbit=50)).filter, 7))
    opts = back.get_attr("TCA_OPTIONS")
    assert u32_keys(opts.get_attr("TCA_U32_SEL")) == [(0x0A070003, 0xFFFFFFFF, 16)]  # 10.7.0.3, /32, dst
    assert opts.get_attr("TCA_U32_CLASSID") == parse_handle(f"{MAJOR:x}:1")
    assert back["info"] == socket.htons(0x0800) | (1 << 16)  # IPv4 only, prio 1
    assert back["parent"] == MAJOR << 16 and back["index"] == 7


def test_a_rate_above_32_bits_goes_in_htbs_64_bit_field():
    back = decoded(encode_class(plan(LinkShape()).classes[1], 3))
    opts = back.get_attr("TCA_OPTIONS")
    assert opts.get_attr("TCA_HTB_RATE64") == opts.get_attr("TCA_HTB_CEIL64") == 12_500_000_000
    assert opts.get_attr("TCA_HTB_PARMS")["rate"] == 2**32 - 1


def test_netem_sits_under_the_shaped_class_and_an_update_changes_both_in_place():
    shape = LinkShape(bandwidth_mbit=50, delay_ms=10, loss_pct=1)
    p = plan(shape, has_netem=True, netem_rate=True)
    assert (p.netem.parent, p.netem.handle) == (f"{MAJOR:x}:1", f"{MAJOR + 1:x}:")
    assert p.netem.kwargs()["delay"] == 10_000 and p.netem.kwargs()["rate"] == 6_250_000
    cls, netem = plan_change(p, LinkShape(bandwidth_mbit=20), 9000, MAJOR, netem_rate=False)
    assert (cls.command, cls.kwargs()["rate"]) == ("change", 2_500_000)
    assert netem.command == "change" and netem.kwargs()["delay"] == 0 and netem.kwargs()["rate"] == 0
    assert plan_change(plan(shape), LinkShape(bandwidth_mbit=20), 9000, MAJOR, False)[1] is None


def test_without_netem_a_delay_or_loss_gets_one_note_with_the_fix():
    note = unapplied_note("eth1", LinkShape(bandwidth_mbit=50, delay_ms=5), has_netem=False)
    assert note is not None and "\n" not in note and "eth1" in note
    assert "sch_netem" in note and "userspace relay" in note
    assert unapplied_note("eth1", LinkShape(bandwidth_mbit=50), has_netem=False) is None
    assert unapplied_note("eth1", LinkShape(delay_ms=5), has_netem=True) is None


def test_a_peer_that_is_not_ipv4_is_refused_in_one_line_naming_the_field():
    with pytest.raises(LinkSpecError) as err:
        plan_open("", "eth0", "fe80::1", LinkShape(), 1500, MAJOR, False, False)
    assert str(err.value).startswith("host link peer_addr: 'fe80::1' is not an IPv4 address")


GOOD = [{"kind": "owner", "pid": 1},
        {"kind": "link", "netns": "", "name": "prf-abc123-br"},
        {"kind": "qdisc", "netns": "prf-abc123-remote", "name": "prf-abc123-e1", "handle": 0x1230000},
        {"kind": "qdisc", "netns": "", "name": "eth0", "handle": 0x1230000}]


def test_the_ledger_takes_links_and_qdiscs_it_writes():
    assert check_entries(RUN, GOOD) == GOOD


@pytest.mark.parametrize("entry, problem", [
    ({"kind": "link", "netns": "", "name": "eth0"}, "a link not named prf-abc123-*"),
    ({"kind": "link", "netns": "prf-ffffff-x", "name": "prf-abc123-br"}, "netns must be"),
    ({"kind": "qdisc", "netns": "", "name": "../etc", "handle": 0x10000}, "name must be an interface name"),
    ({"kind": "qdisc", "netns": "", "name": "eth0" * 4, "handle": 0x10000}, "name must be an interface name"),
    ({"kind": "qdisc", "netns": "", "name": "eth0", "handle": 0x10001}, "handle must be"),
    ({"kind": "qdisc", "netns": "", "name": "eth0", "handle": True}, "handle must be"),
    ({"kind": "qdisc", "netns": None, "name": "eth0", "handle": 0x10000}, "netns must be"),
])
def test_the_ledger_refuses_a_link_or_qdisc_entry_it_would_not_write(entry, problem):
    with pytest.raises(StateFileError) as err:
        check_entries(RUN, [GOOD[0], entry])
    assert str(err.value).startswith("ledger.json: entry 1: ") and problem in str(err.value)
