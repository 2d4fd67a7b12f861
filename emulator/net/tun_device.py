"""TUN devices in a network namespace: open one, then set MTU, address and state via pyroute2.

Devices are not persistent (no TUNSETPERSIST): the kernel removes each one when the last fd on it
closes, so a relay that dies for any reason leaves nothing behind. This module does not move
packets; `packet_pump` does.
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from emulator.errors import LinkBackendUnavailable, TopologyError
from emulator.net.netns import run_in_netns

log = logging.getLogger(__name__)

TUN_DEVICE = "/dev/net/tun"
TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
IFF_VNET_HDR = 0x4000  # each packet read or written carries a virtio-net header (vnet_header.py)
TUNSETOFFLOAD = 0x400454D0
TUN_F_CSUM, TUN_F_TSO4, TUN_F_TSO6 = 0x01, 0x02, 0x04
MAX_MTU = 65535
TX_QUEUE_LEN = 1000  # packets the kernel holds while the relay's reader catches up


def tun_unavailable_reason() -> str | None:
    """Why TUN devices cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "tun needs root (CAP_NET_ADMIN) to create devices in namespaces"
    if not os.path.exists(TUN_DEVICE):
        return f"tun needs {TUN_DEVICE} (kernel module tun)"
    return None


def open_tun(netns: str | None, ifname: str) -> int:
    """A non-blocking fd on a new TUN device `ifname` (IFF_TUN | IFF_NO_PI | IFF_VNET_HDR) in
    `netns`, its checksum offload on and segmentation off until `set_segmentation` says.

    The device lands in the namespace of the thread that opens /dev/net/tun, hence run_in_netns.
    """

    def make() -> int:
        try:
            fd = os.open(TUN_DEVICE, os.O_RDWR | os.O_CLOEXEC)
        except OSError as err:
            raise LinkBackendUnavailable(
                f"tun: cannot open {TUN_DEVICE} ({err.strerror})") from None
        try:
            request = struct.pack("16sH", ifname.encode(), IFF_TUN | IFF_NO_PI | IFF_VNET_HDR)
            fcntl.ioctl(fd, TUNSETIFF, request)
        except OSError as err:
            os.close(fd)
            raise TopologyError(f"tun {ifname}: TUNSETIFF failed ({err.strerror})") from None
        try:
            set_segmentation(fd, False)
        except TopologyError:
            os.close(fd)
            raise
        os.set_blocking(fd, False)
        return fd

    return run_in_netns(netns, make)


def set_segmentation(fd: int, is_on: bool) -> None:
    """Let the stack send TCP bursts of up to 64 KiB unsegmented through this device, or not.

    On, one read carries a whole burst (vnet_header.wire_size counts its segments); off, the stack
    segments to the MTU first, which per-packet effects (loss, jitter) need. Checksum offload
    stays on either way: the receiving stack trusts a checksum the sending stack left to do.
    Packets already queued in the device keep the form they were sent in.
    """
    flags = TUN_F_CSUM | (TUN_F_TSO4 | TUN_F_TSO6 if is_on else 0)
    try:
        fcntl.ioctl(fd, TUNSETOFFLOAD, flags)
    except OSError as err:
        raise TopologyError(f"tun: TUNSETOFFLOAD {flags:#x} failed ({err.strerror})") from None


def configure_tun(netns: str | None, ifname: str, addr: str, prefixlen: int, mtu: int) -> None:
    """Set MTU and queue length, add `addr/prefixlen` and bring `ifname` up in `netns`.

    The address's connected route sends the peer's address through the device; IPv6 is turned
    off on it so router solicitations and DAD do not ride the shaped link.
    """
    if not 68 <= mtu <= MAX_MTU:
        raise TopologyError(f"link mtu: {mtu} is out of range; use 68..{MAX_MTU}")

    def configure() -> None:
        _disable_ipv6(ifname)
        with IPRoute() as ipr:
            found = ipr.link_lookup(ifname=ifname)
            if not found:
                raise TopologyError(f"tun {ifname}: device vanished before it was configured")
            index = found[0]
            step = "mtu"
            try:
                ipr.link("set", index=index, mtu=mtu, txqlen=TX_QUEUE_LEN)
                step = f"address {addr}/{prefixlen}"
                ipr.addr("add", index=index, address=addr, prefixlen=prefixlen)
                step = "up"
                ipr.link("set", index=index, state="up")
            except NetlinkError as err:
                raise TopologyError(f"tun {ifname}: setting {step} failed ({err})") from None

    run_in_netns(netns, configure)


def link_names(netns: str | None) -> list[str]:
    """Interface names in `netns`: what tests and status use to check for leftovers."""

    def names() -> list[str]:
        with IPRoute() as ipr:
            return [link.get("ifname") for link in ipr.get_links()]

    return run_in_netns(netns, names)


def _disable_ipv6(ifname: str) -> None:
    # /proc/sys/net follows the opening thread's namespace, which run_in_netns has set.
    path = f"/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6"
    try:
        with open(path, "w") as knob:
            knob.write("1")
    except OSError as err:
        log.debug("%s: IPv6 left on (%s)", ifname, err)
