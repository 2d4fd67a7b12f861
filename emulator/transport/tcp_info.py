"""Linux `TCP_INFO` for one socket, decoded by an explicit layout of `struct tcp_info`.

Holds the layout (offsets from include/uapi/linux/tcp.h), a decoder that copes with the shorter
structs of older kernels, and the send-queue depth from SIOCOUTQ. It does not interpret the
numbers: rates and ratios over time are `emulator.transport.congestion`'s job.
"""

from __future__ import annotations

import enum
import fcntl
import logging
import socket
import struct
import sys
import termios
from dataclasses import dataclass

from emulator.errors import TcpInfoError

log = logging.getLogger(__name__)

# Ask for more than any known kernel fills: the kernel copies min(asked, its sizeof) and says how
# much, so a newer kernel's extra tail is simply not decoded.
MAX_INFO_BYTES = 512
# The struct as of Linux 2.6.x ends after tcpi_total_retrans; every later field is optional.
BASE_INFO_BYTES = 104
# SIOCOUTQ is TIOCOUTQ (linux/sockios.h); termios has the right value for this architecture.
SIOCOUTQ = termios.TIOCOUTQ


class TcpState(enum.IntEnum):
    """`tcpi_state` values (include/net/tcp_states.h)."""

    ESTABLISHED = 1
    SYN_SENT = 2
    SYN_RECV = 3
    FIN_WAIT1 = 4
    FIN_WAIT2 = 5
    TIME_WAIT = 6
    CLOSE = 7
    CLOSE_WAIT = 8
    LAST_ACK = 9
    LISTEN = 10
    CLOSING = 11
    NEW_SYN_RECV = 12


@dataclass(frozen=True, slots=True)
class _Field:
    """One decoded member: `TcpInfo` attribute, byte offset in `struct tcp_info`, struct code."""

    name: str
    offset: int
    code: str  # B, H, I or Q: __u8, __u16, __u32, __u64

    @property
    def end(self) -> int:
        return self.offset + struct.calcsize("=" + self.code)


# fmt: off
# Offsets are written out, not derived, so a reader can check them against linux/tcp.h and the
# test can check them against ctypes' own layout. Not decoded: the bitfield byte at 6
# (snd/rcv_wscale), tcpi_fackets (40) and tcpi_last_ack_sent (48), both always 0, and the
# AccECN tail from 248 (Linux 6.18).
LAYOUT: tuple[_Field, ...] = (
    _Field("state", 0, "B"), _Field("ca_state", 1, "B"), _Field("retransmits", 2, "B"),
    _Field("probes", 3, "B"), _Field("backoff", 4, "B"), _Field("options", 5, "B"),
    _Field("rto_us", 8, "I"), _Field("ato_us", 12, "I"),
    _Field("snd_mss", 16, "I"), _Field("rcv_mss", 20, "I"),
    _Field("unacked", 24, "I"), _Field("sacked", 28, "I"), _Field("lost", 32, "I"),
    _Field("retrans", 36, "I"),
    _Field("last_data_sent_ms", 44, "I"), _Field("last_data_recv_ms", 52, "I"),
    _Field("last_ack_recv_ms", 56, "I"),
    _Field("pmtu", 60, "I"), _Field("rcv_ssthresh", 64, "I"),
    _Field("rtt_us", 68, "I"), _Field("rttvar_us", 72, "I"),
    _Field("snd_ssthresh", 76, "I"), _Field("snd_cwnd", 80, "I"),
    _Field("advmss", 84, "I"), _Field("reordering", 88, "I"),
    _Field("rcv_rtt_us", 92, "I"), _Field("rcv_space", 96, "I"),
    _Field("total_retrans", 100, "I"),
    # ---- BASE_INFO_BYTES: everything below may be missing ----
    _Field("pacing_rate_bytes_per_s", 104, "Q"), _Field("max_pacing_rate_bytes_per_s", 112, "Q"),
    _Field("bytes_acked", 120, "Q"), _Field("bytes_received", 128, "Q"),
    _Field("segs_out", 136, "I"), _Field("segs_in", 140, "I"),
    _Field("notsent_bytes", 144, "I"), _Field("min_rtt_us", 148, "I"),
    _Field("data_segs_in", 152, "I"), _Field("data_segs_out", 156, "I"),
    _Field("delivery_rate_bytes_per_s", 160, "Q"),
    _Field("busy_time_us", 168, "Q"), _Field("rwnd_limited_us", 176, "Q"),
    _Field("sndbuf_limited_us", 184, "Q"),
    _Field("delivered", 192, "I"), _Field("delivered_ce", 196, "I"),
    _Field("bytes_sent", 200, "Q"), _Field("bytes_retrans", 208, "Q"),
    _Field("dsack_dups", 216, "I"), _Field("reord_seen", 220, "I"),
    _Field("rcv_ooopack", 224, "I"), _Field("snd_wnd", 228, "I"),
    _Field("rcv_wnd", 232, "I"), _Field("rehash", 236, "I"),
    _Field("total_rto", 240, "H"), _Field("total_rto_recoveries", 242, "H"),
    _Field("total_rto_time_ms", 244, "I"),
)
# fmt: on
KNOWN_INFO_BYTES = max(f.end for f in LAYOUT)  # 248
# Byte 7 holds `tcpi_delivery_rate_app_limited:1` (Linux 4.9+; zero padding before). C bitfields
# fill from the least significant bit on little-endian ABIs and from the most significant on
# big-endian ones.
_APP_LIMITED_MASK = 0x01 if sys.byteorder == "little" else 0x80


@dataclass(frozen=True, slots=True)
class TcpInfo:
    """One reading of a socket's TCP state. Counts of segments unless the name has a unit.

    Fields up to `total_retrans` exist on every kernel; the rest are None when the kernel's
    struct ended before them (`info_len`). `send_queue_bytes` comes from SIOCOUTQ, not TCP_INFO:
    bytes written and not yet acknowledged, sent or not.
    """

    info_len: int
    state: int
    ca_state: int
    retransmits: int
    probes: int
    backoff: int
    options: int
    delivery_rate_app_limited: bool
    rto_us: int
    ato_us: int
    snd_mss: int
    rcv_mss: int
    unacked: int
    sacked: int
    lost: int
    retrans: int
    last_data_sent_ms: int
    last_data_recv_ms: int
    last_ack_recv_ms: int
    pmtu: int
    rcv_ssthresh: int
    rtt_us: int
    rttvar_us: int
    snd_ssthresh: int
    snd_cwnd: int
    advmss: int
    reordering: int
    rcv_rtt_us: int
    rcv_space: int
    total_retrans: int
    pacing_rate_bytes_per_s: int | None = None
    max_pacing_rate_bytes_per_s: int | None = None
    bytes_acked: int | None = None
    bytes_received: int | None = None
    segs_out: int | None = None
    segs_in: int | None = None
    notsent_bytes: int | None = None
    min_rtt_us: int | None = None
    data_segs_in: int | None = None
    data_segs_out: int | None = None
    delivery_rate_bytes_per_s: int | None = None
    busy_time_us: int | None = None
    rwnd_limited_us: int | None = None
    sndbuf_limited_us: int | None = None
    delivered: int | None = None
    delivered_ce: int | None = None
    bytes_sent: int | None = None
    bytes_retrans: int | None = None
    dsack_dups: int | None = None
    reord_seen: int | None = None
    rcv_ooopack: int | None = None
    snd_wnd: int | None = None
    rcv_wnd: int | None = None
    rehash: int | None = None
    total_rto: int | None = None
    total_rto_recoveries: int | None = None
    total_rto_time_ms: int | None = None
    send_queue_bytes: int | None = None

    @property
    def unacked_bytes(self) -> int | None:
        """Bytes in flight: the send queue less what has not been sent yet.

        The two numbers come from two syscalls, so a racing ACK can make the difference negative
        for an instant; it is clamped at 0.
        """
        if self.send_queue_bytes is None:
            return None
        return max(0, self.send_queue_bytes - (self.notsent_bytes or 0))


def decode_tcp_info(buf: bytes, *, send_queue_bytes: int | None = None) -> TcpInfo:
    """Decode the bytes getsockopt(TCP_INFO) returned; `len(buf)` is what the kernel filled.

    A field is read only when it lies wholly inside `buf`; the others are None. Bytes past
    `KNOWN_INFO_BYTES` (a newer kernel's additions) are ignored.
    """
    size = len(buf)
    if size < BASE_INFO_BYTES:
        raise TcpInfoError(f"tcp_info: {size} bytes is shorter than the {BASE_INFO_BYTES}-byte "
                           "struct every Linux kernel returns; pass the getsockopt result whole")
    values: dict[str, int | None] = {
        f.name: struct.unpack_from("=" + f.code, buf, f.offset)[0] if f.end <= size else None
        for f in LAYOUT
    }
    return TcpInfo(info_len=size, delivery_rate_app_limited=bool(buf[7] & _APP_LIMITED_MASK),
                   send_queue_bytes=send_queue_bytes, **values)  # type: ignore[arg-type]


def read_send_queue_bytes(sock: socket.socket) -> int | None:
    """SIOCOUTQ: bytes written to `sock` and not yet acknowledged; None where unsupported
    (a listening socket answers EINVAL)."""
    try:
        out = fcntl.ioctl(sock.fileno(), SIOCOUTQ, struct.pack("=i", 0))
    except OSError as err:
        log.debug("SIOCOUTQ on fd %d: %s", sock.fileno(), err)
        return None
    return struct.unpack("=i", out)[0]


def read_tcp_info(sock: socket.socket) -> TcpInfo:
    """Sample a TCP socket now: TCP_INFO plus the SIOCOUTQ send-queue depth."""
    try:
        buf = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, MAX_INFO_BYTES)
    except OSError as err:
        raise TcpInfoError(f"tcp_info: fd {sock.fileno()} cannot be sampled ({err.strerror}); "
                           "pass an open TCP socket") from None
    return decode_tcp_info(buf, send_queue_bytes=read_send_queue_bytes(sock))
