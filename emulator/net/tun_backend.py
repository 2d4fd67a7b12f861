"""The `tun` link backend: a userspace packet relay between two TUN devices, for kernels without
sch_netem. Root is needed (devices in namespaces); `proxy_backend` is the no-root fallback.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

from emulator.errors import LinkBackendUnavailable, TopologyError
from emulator.net.backend import TO_LOCAL, TO_REMOTE, DirectionCounters, LinkCounters, LinkEnds
from emulator.net.relay_process import RelayProcess, default_run_dir
from emulator.net.spec import LinkSpec
from emulator.net.tun_device import tun_unavailable_reason

log = logging.getLogger(__name__)


def counters_from_reply(reply: dict[str, Any]) -> LinkCounters:
    """LinkCounters from a relay's `counters` reply (both relays use the same shape)."""
    raw = reply.get("counters", {})
    directions = {}
    for direction in (TO_LOCAL, TO_REMOTE):
        entry = raw.get(direction, {})
        directions[direction] = DirectionCounters(bytes=int(entry.get("bytes", 0)),
                                                  packets=int(entry.get("packets", 0)),
                                                  drops=int(entry.get("drops", 0)))
    return LinkCounters(directions=directions)


class TunRelayBackend:
    """LinkBackend over a relay process (`emulator.net.tun_relay`) that owns a TUN device in each
    namespace, addressed from `LinkEnds`, and moves IP packets between them through one
    `DirectionShaper` per direction: netem's rate, queue, delay, jitter and loss, timed in
    userspace. `apply` starts the relay and waits until the devices are up; `update` swaps the
    shape live over the control socket; `close` stops the relay, and the devices vanish with it.
    """

    name = "tun"
    description = ("tun: userspace relay between TUN devices in the two namespaces; emulates rate, "
                   "queue, delay, jitter and correlated loss per direction without reordering, "
                   "to within ~0.1 ms; shapes accurately up to ~1 Gbit/s at MTU 9000 (a Python "
                   "relay pays per packet, so small MTUs cap it lower)")

    def __init__(self, ends: LinkEnds, run_dir: Path | None = None, seed: int | None = None,
                 start_timeout_s: float = 10.0) -> None:
        if ends.remote_netns is None or ends.local_netns is None:
            raise TopologyError("tun backend: both ends need a namespace "
                                "(remote_netns, local_netns); use the proxy backend without")
        self.ends = ends
        self._run_dir = run_dir
        self._seed = seed
        self._start_timeout_s = start_timeout_s
        self._relay: RelayProcess | None = None

    @staticmethod
    def unavailable_reason() -> str | None:
        """Why this backend cannot run here (no root, no /dev/net/tun), or None."""
        return tun_unavailable_reason()

    @property
    def pid(self) -> int | None:
        """The relay's pid while it runs, for the cleanup ledger."""
        return self._relay.pid if self._relay is not None else None

    def apply(self, spec: LinkSpec) -> None:
        """Start the relay with `spec`; on a running link this is `update`."""
        if self._relay is not None:
            self.update(spec)
            return
        reason = self.unavailable_reason()
        if reason is not None:
            raise LinkBackendUnavailable(reason)
        run_dir = self._run_dir or default_run_dir(self.ends.run_id)
        args = ["--ends", json.dumps(asdict(self.ends)), "--spec", spec.model_dump_json()]
        if self._seed is not None:
            args += ["--seed", str(self._seed)]
        name = f"tun-{self.ends.remote_ifname or 'link'}"
        self._relay = RelayProcess("emulator.net.tun_relay", name, args, run_dir,
                                   self._start_timeout_s)
        log.info("link backend: tun relay pid %d, %s <-> %s", self._relay.pid,
                 self.ends.remote_ifname, self.ends.local_ifname)

    def update(self, spec: LinkSpec) -> None:
        self._running().request("update", spec=spec.model_dump(mode="json"))

    def counters(self) -> LinkCounters:
        return counters_from_reply(self._running().request("counters"))

    def status(self) -> dict[str, Any]:
        """The relay's own view: pid, uptime, current spec, devices, MTU."""
        return self._running().request("status")["status"]

    def close(self) -> None:
        if self._relay is not None:
            relay, self._relay = self._relay, None
            relay.stop()

    def _running(self) -> RelayProcess:
        if self._relay is None:
            raise TopologyError("tun backend: link is not applied; call apply(spec) first")
        if not self._relay.is_alive():
            raise TopologyError(f"tun backend: relay {self._relay.pid} died; "
                                f"see {self._relay.log_path}")
        return self._relay
