"""The host relay's pure parts: a TUN read turned into the frame AF_PACKET sends (offsets moved past the
Ethernet header), what the relay applies and when a HostLink needs it, and the ledger's rp_filter entry."""

from __future__ import annotations

import pytest

from emulator.net.host_relay import RelayPath, link_header, relay_shape, to_frame
from emulator.net.host_relay_link import needs_relay
from emulator.net.kernel_entries import describe, entry_problem
from emulator.net.spec import LinkShape
from emulator.net.vnet_header import VNET_HDR

PATH = RelayPath("", "prf-abcdef-hr", "eth0", "10.1.0.3", "10.1.0.2", "02:00:00:00:00:03", "02:00:00:00:00:02",
                 1500)
IP_PACKET = bytes([0x45]) + bytes(59)


def test_a_partial_checksum_burst_keeps_its_fields_with_offsets_past_the_ethernet_header():
    header = link_header(PATH)
    assert header == bytes.fromhex("020000000003" "020000000002" "0800")
    read = VNET_HDR.pack(0x01, 1, 54, 1448, 20, 16) + IP_PACKET  # NEEDS_CSUM, GSO TCPv4
    frame = to_frame(read, header)
    assert VNET_HDR.unpack_from(frame) == (0x01, 1, 68, 1448, 34, 16)
    assert frame[10:24] == header and frame[24:] == IP_PACKET


def test_a_plain_packet_with_its_checksum_done_keeps_zero_offsets():
    read = VNET_HDR.pack(0, 0, 0, 0, 0, 0) + IP_PACKET
    assert VNET_HDR.unpack_from(to_frame(read, link_header(PATH))) == (0, 0, 0, 0, 0, 0)


@pytest.mark.parametrize(("shape", "needed"), [
    (LinkShape(bandwidth_mbit=50), False),
    (LinkShape(bandwidth_mbit=50, delay_ms=10), True),
    (LinkShape(jitter_ms=1, delay_ms=5), True),
    (LinkShape(loss_pct=1), True),
])
def test_the_relay_is_needed_for_delay_jitter_or_loss_and_leaves_the_rate_to_htb(shape: LinkShape, needed: bool):
    assert needs_relay(shape) is needed
    applied = relay_shape(shape)
    assert applied.bandwidth_mbit is None
    assert (applied.delay_ms, applied.jitter_ms, applied.loss_pct) == (shape.delay_ms, shape.jitter_ms, shape.loss_pct)


def test_an_rp_filter_entry_is_checked_before_it_is_trusted():
    entry = {"kind": "sysctl", "netns": "prf-abcdef-remote", "name": "prf-abcdef-e1", "key": "rp_filter",
             "value": 1, "set": 2}
    assert entry_problem("abcdef", entry) is None
    assert describe(entry) == "sysctl net.ipv4.conf.prf-abcdef-e1.rp_filter=1 (netns prf-abcdef-remote)"
    assert "key must be" in entry_problem("abcdef", {**entry, "key": "forwarding"})
    assert "rp_filter values" in entry_problem("abcdef", {**entry, "value": 7})
    assert "rp_filter values" in entry_problem("abcdef", {**entry, "set": "2"})
    assert "netns must be" in entry_problem("abcdef", {**entry, "netns": "other"})
    assert "interface name" in entry_problem("abcdef", {**entry, "name": "../all"})
