"""vnet_header.wire_size against bursts built by hand: what a segmented stream would put on the
wire, header by header, and which link shapes may carry bursts at all."""

from __future__ import annotations

import struct

import pytest

from emulator.net.spec import LinkShape
from emulator.net.vnet_header import GSO_ECN, VNET_HDR, VNET_HDR_LEN, carries_bursts, wire_size

GSO_TCPV4, GSO_UDP, GSO_TCPV6 = 1, 3, 4  # include/uapi/linux/virtio_net.h
TCP, UDP = 6, 17


def ipv4(payload: int, proto: int = TCP, ihl_words: int = 5, tcp_words: int = 8) -> bytes:
    """An IPv4 packet: `ihl_words` * 4 bytes of IP header, a TCP header of `tcp_words` words."""
    ip = bytearray(ihl_words * 4)
    ip[0], ip[9] = 0x40 | ihl_words, proto
    tcp = bytearray(tcp_words * 4)
    tcp[12] = tcp_words << 4
    return bytes(ip + tcp) + bytes(payload)


def ipv6(payload: int, tcp_words: int = 5) -> bytes:
    ip = bytearray(40)
    ip[0], ip[6] = 0x60, TCP
    tcp = bytearray(tcp_words * 4)
    tcp[12] = tcp_words << 4
    return bytes(ip + tcp) + bytes(payload)


def read(packet: bytes, gso_type: int = 0, gso_size: int = 0) -> bytes:
    """What a TUN device with IFF_VNET_HDR hands the relay for `packet`."""
    return VNET_HDR.pack(1, gso_type, 0, gso_size, 0, 0) + packet


def segmented(payload: int, headers: int, gso_size: int) -> tuple[int, int]:
    """The reference: cut the payload into gso_size pieces and give each its own headers."""
    pieces = [min(gso_size, payload - start) for start in range(0, payload, gso_size)]
    return sum(piece + headers for piece in pieces), len(pieces)


def test_the_header_is_the_ten_bytes_of_struct_virtio_net_hdr() -> None:
    assert VNET_HDR_LEN == 10 == len(struct.pack("=BBHHHH", 0, 0, 0, 0, 0, 0))


@pytest.mark.parametrize("size", [52, 1500, 9000])
def test_a_plain_packet_is_itself(size: int) -> None:
    packet = ipv4(size - 52)
    assert wire_size(read(packet)) == (size, 1)


@pytest.mark.parametrize(("payload", "gso_size"), [(20_000, 8948), (8948 * 7, 8948), (64_000, 1448), (100, 1448)])
def test_a_tcp4_burst_counts_every_segments_headers(payload: int, gso_size: int) -> None:
    packet = ipv4(payload)  # 20 + 32 bytes of headers (TCP with timestamps)
    assert wire_size(read(packet, GSO_TCPV4, gso_size)) == segmented(payload, 52, gso_size)


def test_ip_options_and_ecn_are_read_from_the_headers() -> None:
    packet = ipv4(30_000, ihl_words=6, tcp_words=10)  # 24 + 40 bytes of headers
    assert wire_size(read(packet, GSO_TCPV4 | GSO_ECN, 8936)) == segmented(30_000, 64, 8936)


def test_a_tcp6_burst_counts_every_segments_headers() -> None:
    packet = ipv6(50_000)  # 40 + 20 bytes of headers
    assert wire_size(read(packet, GSO_TCPV6, 8940)) == segmented(50_000, 60, 8940)


@pytest.mark.parametrize("packet", [ipv4(5000, proto=UDP), b"\x00" * 64, ipv4(5000)[:30]])
def test_what_is_not_a_whole_tcp_burst_counts_as_one_packet(packet: bytes) -> None:
    assert wire_size(read(packet, GSO_UDP, 1400)) == (len(packet), 1)


@pytest.mark.parametrize(("shape", "expected"), [
    (LinkShape(bandwidth_mbit=5000, delay_ms=10, queue_packets=10), True),
    (LinkShape(), True),
    (LinkShape(loss_pct=0.01), False),
    (LinkShape(loss_pct=100), False),
    (LinkShape(delay_ms=5, jitter_ms=0.01), False),
])
def test_only_links_without_per_packet_effects_carry_bursts(shape: LinkShape, expected: bool) -> None:
    assert carries_bursts(shape) is expected
