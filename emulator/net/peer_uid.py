"""Which local user holds the other end of a TCP connection on this host (issue 25).

The gateway's worker port keeps handshake slots for its own user, whose processes (the run's
workers) no other user can impersonate to the kernel. The kernel names the owner of the peer's
socket through sock_diag: one exact lookup by the connection's four addresses over
NETLINK_SOCK_DIAG (about 20 us, no privilege needed; `ss` asks the same). A peer in another network
namespace or on another host, or one no process holds any more, is not found: None, never a guess.
"""

from __future__ import annotations

import socket
import struct

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 1
NLMSG_ERROR = 2
_NLMSG = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port id
_REQ = struct.Struct("=BBBBI")  # inet_diag_req_v2: family, protocol, extensions, pad, states
_PORTS = struct.Struct("!HH")  # inet_diag_sockid: source and destination port (big-endian)
_TAIL = struct.Struct("=III")  # inet_diag_sockid: interface, cookie (INET_DIAG_NOCOOKIE: all ones)
_MSG_UID = struct.Struct("=IIIII")  # inet_diag_msg after its 4 flag bytes and the sockid: ..., uid, inode
_SOCKID_BYTES = _PORTS.size + 32 + _TAIL.size
_ALL_STATES = 0xFFFFFFFF
_NO_COOKIE = 0xFFFFFFFF
_TIMEOUT_S = 1.0


def _address(family: int, host: str) -> bytes:
    return socket.inet_pton(family, host).ljust(16, b"\0")


def peer_uid(sock: socket.socket) -> int | None:
    """The uid owning the socket at the other end of TCP connection `sock`, if it is on this host
    and in this network namespace; None otherwise (not TCP, not connected, remote, gone)."""
    try:
        if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM:
            return None
        local, remote = sock.getsockname(), sock.getpeername()
    except OSError:
        return None
    # the peer's socket: its source is our peer, its destination us
    sockid = (_PORTS.pack(remote[1], local[1]) + _address(sock.family, remote[0]) + _address(sock.family, local[0])
              + _TAIL.pack(0, _NO_COOKIE, _NO_COOKIE))
    request = _REQ.pack(sock.family, socket.IPPROTO_TCP, 0, 0, _ALL_STATES) + sockid
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG) as netlink:
            netlink.settimeout(_TIMEOUT_S)
            netlink.send(_NLMSG.pack(_NLMSG.size + len(request), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, 1, 0) + request)
            reply = netlink.recv(4096)
    except OSError:
        return None
    offset = _NLMSG.size + 4 + _SOCKID_BYTES
    if len(reply) < offset + _MSG_UID.size or _NLMSG.unpack_from(reply)[1] != SOCK_DIAG_BY_FAMILY:
        return None  # NLMSG_ERROR (ENOENT: no such socket here) or a short reply
    *_, uid, inode = _MSG_UID.unpack_from(reply, offset)
    # No inode: no process holds the socket any more (closed, TIME_WAIT, whose uid reads 0): no owner.
    return uid if inode else None
