"""TCP_INFO decoding: the layout against ctypes' reading of linux/tcp.h, real loopback sockets,
and truncated buffers from older kernels."""

from __future__ import annotations

import ctypes
import socket
import struct
import threading
import time

import pytest

from emulator.transport.tcp_info import (
    BASE_INFO_BYTES,
    KNOWN_INFO_BYTES,
    LAYOUT,
    TcpInfoError,
    TcpState,
    decode_tcp_info,
    read_tcp_info,
)

PAYLOAD_BYTES = 4 << 20


class CTcpInfo(ctypes.Structure):
    """`struct tcp_info` as include/uapi/linux/tcp.h declares it (to tcpi_total_rto_time), laid
    out by ctypes' C rules: the independent reference for LAYOUT's hand-written offsets."""

    _fields_ = [
        ("state", ctypes.c_uint8), ("ca_state", ctypes.c_uint8), ("retransmits", ctypes.c_uint8),
        ("probes", ctypes.c_uint8), ("backoff", ctypes.c_uint8), ("options", ctypes.c_uint8),
        ("wscale", ctypes.c_uint8), ("app_limited", ctypes.c_uint8),
        *((n, ctypes.c_uint32) for n in (
            "rto_us", "ato_us", "snd_mss", "rcv_mss", "unacked", "sacked", "lost", "retrans",
            "fackets", "last_data_sent_ms", "last_ack_sent", "last_data_recv_ms",
            "last_ack_recv_ms", "pmtu", "rcv_ssthresh", "rtt_us", "rttvar_us", "snd_ssthresh",
            "snd_cwnd", "advmss", "reordering", "rcv_rtt_us", "rcv_space", "total_retrans")),
        ("pacing_rate_bytes_per_s", ctypes.c_uint64),
        ("max_pacing_rate_bytes_per_s", ctypes.c_uint64),
        ("bytes_acked", ctypes.c_uint64), ("bytes_received", ctypes.c_uint64),
        *((n, ctypes.c_uint32) for n in (
            "segs_out", "segs_in", "notsent_bytes", "min_rtt_us", "data_segs_in", "data_segs_out")),
        *((n, ctypes.c_uint64) for n in (
            "delivery_rate_bytes_per_s", "busy_time_us", "rwnd_limited_us", "sndbuf_limited_us")),
        ("delivered", ctypes.c_uint32), ("delivered_ce", ctypes.c_uint32),
        ("bytes_sent", ctypes.c_uint64), ("bytes_retrans", ctypes.c_uint64),
        *((n, ctypes.c_uint32) for n in (
            "dsack_dups", "reord_seen", "rcv_ooopack", "snd_wnd", "rcv_wnd", "rehash")),
        ("total_rto", ctypes.c_uint16), ("total_rto_recoveries", ctypes.c_uint16),
        ("total_rto_time_ms", ctypes.c_uint32),
    ]


def test_layout_matches_the_c_struct():
    for field in LAYOUT:
        c_field = getattr(CTcpInfo, field.name)
        assert (field.offset, field.end - field.offset) == (c_field.offset, c_field.size), field
    assert KNOWN_INFO_BYTES == ctypes.sizeof(CTcpInfo) == 248
    assert CTcpInfo.pacing_rate_bytes_per_s.offset == BASE_INFO_BYTES


def test_every_field_decodes_from_its_own_offset():
    """Each member gets a distinct value in a ctypes-built buffer and comes back unchanged."""
    c_info = CTcpInfo()
    expected = {}
    for i, field in enumerate(LAYOUT):
        wide = 1 << 40 if field.code == "Q" else 0  # a u64 value that does not fit in 32 bits
        value = (i + 1) * 3 if field.code == "B" else (i + 1) * 1000 + wide
        setattr(c_info, field.name, value)
        expected[field.name] = value
    c_info.app_limited = 1
    info = decode_tcp_info(bytes(c_info), send_queue_bytes=4096)
    assert {name: getattr(info, name) for name in expected} == expected
    assert info.delivery_rate_app_limited is True
    assert info.info_len == 248 and info.send_queue_bytes == 4096


def _drain(sock: socket.socket, nbytes: int) -> None:
    sock.settimeout(5)
    while nbytes > 0:
        chunk = sock.recv(min(nbytes, 1 << 20))
        assert chunk
        nbytes -= len(chunk)


def test_real_socket_after_sending(loopback_pair):
    client, server = loopback_pair
    reader = threading.Thread(target=_drain, args=(server, PAYLOAD_BYTES), daemon=True)
    reader.start()
    client.sendall(bytes(PAYLOAD_BYTES))
    reader.join(10)
    deadline = time.monotonic() + 5  # the last ACK may still be on its way
    while (((info := read_tcp_info(client)).bytes_acked < PAYLOAD_BYTES or info.send_queue_bytes)
           and time.monotonic() < deadline):
        time.sleep(0.01)
    assert info.state == TcpState.ESTABLISHED
    assert info.bytes_acked >= PAYLOAD_BYTES
    assert info.bytes_sent is None or info.bytes_sent >= PAYLOAD_BYTES
    assert info.rtt_us > 0 and info.min_rtt_us > 0 and info.snd_mss > 0 and info.snd_cwnd > 0
    assert info.info_len >= BASE_INFO_BYTES
    assert info.send_queue_bytes == 0 and info.unacked_bytes == 0 and info.notsent_bytes == 0
    assert info.busy_time_us is None or info.busy_time_us >= 0  # loopback can finish within one tick
    received = read_tcp_info(server)
    assert received.bytes_received is None or received.bytes_received >= PAYLOAD_BYTES


def test_send_queue_counts_unread_bytes(loopback_pair):
    """With the reader asleep the sender's queue fills; SIOCOUTQ reports it."""
    client, _ = loopback_pair
    client.setblocking(False)
    queued = 0
    try:
        while True:
            queued += client.send(bytes(1 << 16))
    except BlockingIOError:
        pass
    info = read_tcp_info(client)
    assert 0 < info.send_queue_bytes <= queued
    assert info.unacked_bytes <= info.send_queue_bytes


@pytest.mark.parametrize("cut", [BASE_INFO_BYTES, 120, 127, 128, 160, 200, 232, 247])
def test_truncated_buffer_leaves_missing_fields_none(loopback_pair, cut):
    client, _ = loopback_pair
    full = client.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 512)
    if len(full) < cut:
        pytest.skip(f"this kernel returns {len(full)} bytes")
    info = decode_tcp_info(full[:cut])
    assert info.info_len == cut
    for field in LAYOUT:
        value = getattr(info, field.name)
        if field.end <= cut:
            assert value == struct.unpack_from("=" + field.code, full, field.offset)[0], field
        else:
            assert value is None, field
    assert info.state == TcpState.ESTABLISHED and info.rtt_us > 0


def test_longer_buffer_from_a_newer_kernel_is_decoded_to_what_is_known():
    info = decode_tcp_info(bytes(CTcpInfo()) + b"\xff" * 64)
    assert info.info_len == 248 + 64 and info.total_rto_time_ms == 0


@pytest.mark.parametrize("size", [0, 8, BASE_INFO_BYTES - 1])
def test_buffer_shorter_than_any_kernel_struct_is_refused(size):
    with pytest.raises(TcpInfoError, match="shorter than"):
        decode_tcp_info(bytes(size))


def test_non_tcp_or_closed_socket_is_refused():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        with pytest.raises(TcpInfoError, match="cannot be sampled"):
            read_tcp_info(udp)
    closed = socket.socket()
    closed.close()
    with pytest.raises(TcpInfoError, match="cannot be sampled"):
        read_tcp_info(closed)
