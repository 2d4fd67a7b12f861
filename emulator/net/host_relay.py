"""The host relay process: delay, jitter and loss on one host's egress toward one peer where the kernel
lacks sch_netem (issue 30). A TUN device takes the peer's /32 route; each packet read from it is
shaped (PacketPump, DirectionShaper) and sent out on the real interface by an AF_PACKET socket with the
peer's MAC, which the kernel does not route again. The interface's htb class (host_link.py) still
paces the rate after the relay, as it paces netem's output when netem sits under it.

    python -m emulator.net.host_relay --control SOCK --path RELAYPATH_JSON --spec LINKSPEC_JSON

Run by `host_relay_link.HostRelay`, not by hand; the spec's forward direction is this host's egress.
Exit closes the TUN fd, which removes the device and the route with it.
"""

from __future__ import annotations

import json
import logging
import os
import random
import socket
import struct
import time
from dataclasses import asdict, dataclass
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from emulator.errors import PrfaasError, TopologyError
from emulator.net.netns import run_in_netns
from emulator.net.packet_pump import PacketPump
from emulator.net.relay_control import ControlServer, RequestError, spec_from_update
from emulator.net.relay_process import RelayLifecycle, parse_relay_args, startup_failed
from emulator.net.spec import LinkShape, parse_link_spec
from emulator.net.tun_device import TX_QUEUE_LEN, _disable_ipv6, open_tun
from emulator.net.vnet_header import VNET_HDR, VNET_HDR_LEN

log = logging.getLogger(__name__)
SOL_PACKET, PACKET_VNET_HDR = 263, 15
SO_SNDBUFFORCE = 32
SEND_BUFFER_BYTES = 64 * 1024 * 1024  # room for htb's queue behind the socket, so a send never blocks
ETH_HEADER_BYTES = 14
ETH_P_IP = b"\x08\x00"
NEEDS_CSUM = 0x01  # VIRTIO_NET_HDR_F_NEEDS_CSUM
RT_SCOPE_LINK = 253


@dataclass(frozen=True, slots=True)
class RelayPath:
    """Where one host's relay sits: its namespace ('' = the host's own), its TUN, the real interface,
    the peer's address and the next hop's MAC on that interface, and this host's own address and MAC."""

    netns: str
    tun: str
    ifname: str
    peer_addr: str
    src_addr: str
    peer_mac: str
    src_mac: str
    mtu: int


def parse_path(text: str) -> RelayPath:
    try:
        return RelayPath(**json.loads(text))
    except (json.JSONDecodeError, TypeError) as err:
        raise RequestError(f"--path: not a RelayPath JSON object ({err})") from None


def link_header(path: RelayPath) -> bytes:
    """The Ethernet header every relayed packet gets: next hop, this interface, IPv4."""
    return bytes.fromhex(path.peer_mac.replace(":", "")) + bytes.fromhex(path.src_mac.replace(":", "")) + ETH_P_IP


def to_frame(buf: bytes, header: bytes) -> bytes:
    """A TUN read (virtio-net header + IP packet) as AF_PACKET with PACKET_VNET_HDR takes it: the same
    header, its offsets moved past the Ethernet header (they count from the frame's first byte), then
    the frame. A partial checksum or an unsegmented burst is thus finished by the sending interface."""
    flags, gso_type, hdr_len, gso_size, csum_start, csum_offset = VNET_HDR.unpack_from(buf)
    if flags & NEEDS_CSUM:
        csum_start += ETH_HEADER_BYTES
    if hdr_len:
        hdr_len += ETH_HEADER_BYTES
    return VNET_HDR.pack(flags, gso_type, hdr_len, gso_size, csum_start, csum_offset) + header + buf[VNET_HDR_LEN:]


def relay_shape(shape: LinkShape) -> LinkShape:
    """What the relay applies: delay, jitter and loss; the rate stays htb's (bandwidth unshaped here)."""
    return shape.model_copy(update={"bandwidth_mbit": None})


class HostRelay:
    """Owns the TUN fd, the AF_PACKET socket and one pump; answers control requests."""

    def __init__(self, path: RelayPath, shape: LinkShape, lifecycle: RelayLifecycle, seed: int | None) -> None:
        self.path, self.shape, self._lifecycle = path, relay_shape(shape), lifecycle
        netns = path.netns or None
        self._tun = open_tun(netns, path.tun)
        self._sock: socket.socket | None = None
        try:
            run_in_netns(netns, self._route)
            self._sock = run_in_netns(netns, self._packet_socket)
        except BaseException:
            self.close()
            raise
        header = link_header(path)
        self.pump = PacketPump("to-peer", self._tun, self._sock.fileno(), self.shape, random.Random(seed),
                               frame=lambda buf: to_frame(buf, header))

    def _route(self) -> None:
        """The TUN up without an address, IPv6 off, and the peer's /32 through it from this host's address."""
        _disable_ipv6(self.path.tun)
        with IPRoute() as ipr:
            index = ipr.link_lookup(ifname=self.path.tun)[0]
            step = "mtu"
            try:
                ipr.link("set", index=index, mtu=self.path.mtu, txqlen=TX_QUEUE_LEN)
                step = "up"
                ipr.link("set", index=index, state="up")
                step = f"route {self.path.peer_addr}/32 src {self.path.src_addr}"
                ipr.route("add", dst=f"{self.path.peer_addr}/32", oif=index, prefsrc=self.path.src_addr,
                          scope=RT_SCOPE_LINK)
            except NetlinkError as err:
                raise TopologyError(f"host relay {self.path.tun}: setting {step} failed ({err})") from None

    def _packet_socket(self) -> socket.socket:
        """Bound to the real interface with protocol 0: it sends only, and receives nothing."""
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        try:
            sock.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, SEND_BUFFER_BYTES)
            sock.bind((self.path.ifname, 0))
        except OSError as err:
            sock.close()
            raise TopologyError(f"host relay: AF_PACKET socket on {self.path.ifname} failed ({err.strerror}); "
                                "run as root") from None
        return sock

    def start(self) -> None:
        self.pump.start()

    def close(self) -> None:
        if hasattr(self, "pump"):
            self.pump.stop()
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._tun >= 0:
            os.close(self._tun)
            self._tun = -1

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request["op"]
        if op == "update":
            self.shape = relay_shape(spec_from_update(request).to_local)
            self.pump.reshape(self.shape)
            log.info("relay reshaped: %s", self.shape.model_dump_json(exclude_defaults=True))
            return {}
        if op == "counters":
            c = self.pump.counters()
            return {"counters": {"bytes": c.bytes, "packets": c.packets, "loss_drops": c.loss_drops,
                                 "queue_drops": c.queue_drops, "write_errors": c.write_errors,
                                 "late_us_mean": round(c.late_s_mean * 1e6, 1)}, "at": time.monotonic()}
        if op == "status":
            return {"status": {"backend": "host-relay", "pid": os.getpid(), "path": asdict(self.path),
                               "uptime_s": round(self._lifecycle.uptime_s(), 3),
                               "shape": self.shape.model_dump(mode="json")}}
        if op == "stop":
            self._lifecycle.stop.set()
            return {}
        raise RequestError("route: the host relay carries IP to one peer; it routes no ports")


def main(argv: list[str] | None = None) -> None:
    args = parse_relay_args("python -m emulator.net.host_relay", argv, extra=("path",))
    lifecycle = RelayLifecycle()
    lifecycle.install_signal_handlers()
    lifecycle.watch_parent()
    relay: HostRelay | None = None
    server: ControlServer | None = None
    try:
        path = parse_path(args.path)
        relay = HostRelay(path, parse_link_spec(json.loads(args.spec), where="spec").to_local, lifecycle, args.seed)
        server = ControlServer(args.control, relay.handle)
        server.start()
        relay.start()
    except (PrfaasError, OSError, json.JSONDecodeError, struct.error) as err:
        if relay is not None:
            relay.close()
        startup_failed(f"host relay: {err}")
    lifecycle.announce_ready(control=args.control, device=relay.path.tun)
    log.info("host relay up: %s -> %s via %s, %s", relay.path.tun, relay.path.peer_addr, relay.path.ifname,
             relay.shape.model_dump_json(exclude_defaults=True))
    while not lifecycle.stop.wait(0.5):
        pass
    server.close()
    relay.close()
    log.info("host relay stopped")


if __name__ == "__main__":
    main()
