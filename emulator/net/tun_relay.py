"""The TUN relay process: two TUN devices, one per namespace, joined by two shaped packet pumps.

    python -m emulator.net.tun_relay --control SOCK --ends LINKENDS_JSON --spec LINKSPEC_JSON

Run by `TunRelayBackend`, not by hand. Threads: a reader and a writer per direction, the control
server, and a parent watch; the main thread only waits for a stop. Exit closes the TUN fds, which
removes the devices.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from typing import Any

from emulator.errors import PrfaasError
from emulator.net.backend import TO_LOCAL, TO_REMOTE, LinkEnds
from emulator.net.packet_pump import PacketPump
from emulator.net.relay_control import ControlServer, RequestError, spec_from_update
from emulator.net.relay_process import (
    RelayLifecycle,
    parse_relay_args,
    startup_failed,
)
from emulator.net.spec import LinkSpec, parse_link_spec
from emulator.net.tun_device import configure_tun, open_tun

log = logging.getLogger(__name__)


def parse_ends(text: str) -> LinkEnds:
    """LinkEnds from the JSON the backend passes; unknown or missing fields are refused."""
    try:
        data = json.loads(text)
        return LinkEnds(**data)
    except (json.JSONDecodeError, TypeError) as err:
        raise RequestError(f"--ends: not a LinkEnds JSON object ({err})") from None


class TunRelay:
    """Owns the two TUN fds and the pumps; answers control requests."""

    def __init__(self, ends: LinkEnds, spec: LinkSpec, lifecycle: RelayLifecycle,
                 seed: int | None) -> None:
        self.ends = ends
        self.spec = spec
        self._lifecycle = lifecycle
        self._fds: list[int] = []
        rng = random.Random(seed)
        remote_fd = self._open(ends.remote_netns, ends.remote_ifname, ends.remote_addr)
        local_fd = self._open(ends.local_netns, ends.local_ifname, ends.local_addr)
        self.pumps = {
            TO_LOCAL: PacketPump("to-local", remote_fd, local_fd, spec.to_local,
                                 random.Random(rng.random())),
            TO_REMOTE: PacketPump("to-remote", local_fd, remote_fd, spec.to_remote,
                                  random.Random(rng.random())),
        }

    def start(self) -> None:
        for pump in self.pumps.values():
            pump.start()

    def close(self) -> None:
        for pump in self.pumps.values():
            pump.stop()
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request["op"]
        if op == "update":
            spec = spec_from_update(request)
            self.pumps[TO_LOCAL].reshape(spec.to_local)
            self.pumps[TO_REMOTE].reshape(spec.to_remote)
            self.spec = spec
            log.info("link reshaped: %s", spec.model_dump_json(exclude_defaults=True))
            return {}
        if op == "counters":
            return {"counters": self._counters(), "at": time.monotonic()}  # when they were read
        if op == "status":
            return {"status": {"backend": "tun", "pid": os.getpid(),
                               "uptime_s": round(self._lifecycle.uptime_s(), 3),
                               "spec": self.spec.model_dump(mode="json"),
                               "devices": [self.ends.remote_ifname, self.ends.local_ifname],
                               "mtu": self.ends.mtu}}
        if op == "stop":
            self._lifecycle.stop.set()
            return {}
        raise RequestError("route: only the proxy relay routes ports; the tun link carries IP")

    def _counters(self) -> dict[str, dict[str, int]]:
        result = {}
        for direction, pump in self.pumps.items():
            c = pump.counters()
            result[direction] = {"bytes": c.bytes, "packets": c.packets, "drops": c.drops,
                                 "loss_drops": c.loss_drops, "queue_drops": c.queue_drops,
                                 "write_errors": c.write_errors,
                                 "late_us_mean": round(c.late_s_mean * 1e6, 1),
                                 "late_us_max": round(c.late_s_max * 1e6, 1)}
        return result

    def _open(self, netns: str | None, ifname: str, addr: str) -> int:
        fd = open_tun(netns, ifname)
        self._fds.append(fd)
        configure_tun(netns, ifname, addr, self.ends.prefixlen, self.ends.mtu)
        return fd


def main(argv: list[str] | None = None) -> None:
    args = parse_relay_args("python -m emulator.net.tun_relay", argv, extra=("ends",))
    lifecycle = RelayLifecycle()
    lifecycle.install_signal_handlers()
    lifecycle.watch_parent()
    relay: TunRelay | None = None
    server: ControlServer | None = None
    try:
        spec = parse_link_spec(json.loads(args.spec), where="spec")
        relay = TunRelay(parse_ends(args.ends), spec, lifecycle, args.seed)
        server = ControlServer(args.control, relay.handle)
        server.start()
        relay.start()
    except (PrfaasError, OSError, json.JSONDecodeError) as err:
        if relay is not None:
            relay.close()
        startup_failed(f"tun relay: {err}")
    lifecycle.announce_ready(control=args.control, devices=[relay.ends.remote_ifname,
                                                            relay.ends.local_ifname])
    log.info("tun relay up: %s <-> %s, %s", relay.ends.remote_ifname, relay.ends.local_ifname,
             relay.spec.model_dump_json(exclude_defaults=True))
    while not lifecycle.stop.wait(0.5):
        pass
    server.close()
    relay.close()
    log.info("tun relay stopped")


if __name__ == "__main__":
    main()
