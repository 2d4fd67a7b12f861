"""The virtio-net header a TUN device with IFF_VNET_HDR puts before each packet, and what one read
is on the wire: a plain packet, or a TCP burst the kernel left unsegmented (GSO).

With segmentation offload on, the sending stack hands the device bursts of up to 64 KiB that it
would otherwise have cut into MTU-sized segments; the relay moves each burst in one read and one
write, and the receiving stack takes it whole (as it takes a GRO-merged burst). The link still
carries segments: `wire_size` counts each segment's own IP and TCP headers, so rates and counters
are those of the segmented stream. Pure functions, no I/O.
"""

from __future__ import annotations

import struct
import sys

from emulator.net.spec import LinkShape

# struct virtio_net_hdr (include/uapi/linux/virtio_net.h): flags u8, gso_type u8, hdr_len,
# gso_size, csum_start, csum_offset (u16, native byte order on a legacy TUN device).
VNET_HDR = struct.Struct("=BBHHHH")
VNET_HDR_LEN = VNET_HDR.size  # 10
GSO_NONE = 0
GSO_ECN = 0x80  # a flag on gso_type, not a type
MAX_IP_PACKET_BYTES = 65535
READ_BYTES = VNET_HDR_LEN + MAX_IP_PACKET_BYTES  # the largest read one burst needs
_IPPROTO_TCP = 6
_IPV6_HEADER_BYTES = 40
_BYTE_ORDER = sys.byteorder


def carries_bursts(shape: LinkShape) -> bool:
    """Whether a direction may move unsegmented TCP bursts: rate, queue and delay act on bytes and
    time, so a burst carries them exactly; loss and jitter act on each packet, so those links get
    single MTU-sized packets, and the lower per-packet ceiling (emulator/net/ceiling.py)."""
    return shape.loss_pct == 0 and shape.jitter_ms == 0


def wire_size(buf: bytes) -> tuple[int, int]:
    """(bytes, packets) that one read `buf` (header included) puts on the wire.

    A plain packet is itself. A burst of payload P with headers H cut at `gso_size` G is
    ceil(P / G) segments, each with its own H bytes of headers: P + n * H on the wire.
    """
    size = len(buf) - VNET_HDR_LEN
    if buf[1] & ~GSO_ECN == GSO_NONE:
        return size, 1
    gso_size = int.from_bytes(buf[4:6], _BYTE_ORDER)
    headers = _tcp_headers_len(buf, VNET_HDR_LEN)
    if gso_size <= 0 or headers is None or headers >= size:
        return size, 1  # not a TCP burst this module understands: count it as one packet
    segments = -(-(size - headers) // gso_size)
    return size + (segments - 1) * headers, segments


def _tcp_headers_len(buf: bytes, start: int) -> int | None:
    """IP plus TCP header bytes of the packet at `start`, or None when it is not plain TCP."""
    if len(buf) < start + 1:
        return None
    version = buf[start] >> 4
    if version == 4:
        ip_len = (buf[start] & 0x0F) * 4
        is_tcp = len(buf) > start + 9 and buf[start + 9] == _IPPROTO_TCP
    elif version == 6:
        ip_len = _IPV6_HEADER_BYTES
        is_tcp = len(buf) > start + 6 and buf[start + 6] == _IPPROTO_TCP
    else:
        return None
    offset = start + ip_len + 12  # TCP's data offset, in 32-bit words, in the high nibble
    if not is_tcp or len(buf) <= offset:
        return None
    return ip_len + (buf[offset] >> 4) * 4
