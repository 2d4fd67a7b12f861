"""The `tun` link backend: a userspace packet relay between two TUN devices, for kernels without
sch_netem. Root is needed (devices in namespaces); `proxy_backend` is the no-root fallback.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from emulator.errors import LinkBackendUnavailable, TopologyError
from emulator.net.backend import LinkEnds
from emulator.net.ceiling import CEILINGS
from emulator.net.relay_backend import RelayBackend
from emulator.net.spec import LinkSpec
from emulator.net.tun_device import tun_unavailable_reason

_CEILING = CEILINGS["tun"]


class TunRelayBackend(RelayBackend):
    """A relay process (`emulator.net.tun_relay`) owns a TUN device in each namespace, addressed
    from `LinkEnds`, and moves IP packets between them through one `DirectionShaper` per
    direction: netem's rate, queue, delay, jitter and loss, timed in userspace. A lossless,
    jitter-free direction lets the stack hand over TCP bursts unsegmented (vnet_header.py), which
    is what carries it past 2 Gbit/s. The devices are not persistent, so they vanish with the relay.
    """

    name = "tun"
    relay_module = "emulator.net.tun_relay"
    description = ("tun: userspace relay between TUN devices in the two namespaces; emulates rate, "
                   "queue, delay, jitter and correlated loss per direction without reordering, "
                   "to within ~0.1 ms; moves lossless TCP as unsegmented bursts, shaped accurately "
                   f"up to ~{_CEILING.rate_mbit:g} Mbit/s; with loss or jitter packet by packet, up "
                   f"to ~{_CEILING.per_packet_mbit:g} Mbit/s at MTU 9000 (a Python relay pays per "
                   "packet, so small MTUs cap it lower)")

    def __init__(self, ends: LinkEnds, run_dir: Path | None = None, seed: int | None = None,
                 start_timeout_s: float = 10.0) -> None:
        if ends.remote_netns is None or ends.local_netns is None:
            raise TopologyError("tun backend: both ends need a namespace "
                                "(remote_netns, local_netns); use the proxy backend without")
        super().__init__(ends, run_dir, seed, start_timeout_s)

    @staticmethod
    def unavailable_reason() -> str | None:
        """Why this backend cannot run here (no root, no /dev/net/tun), or None."""
        return tun_unavailable_reason()

    def _relay_args(self, spec: LinkSpec) -> list[str]:
        if (reason := self.unavailable_reason()) is not None:
            raise LinkBackendUnavailable(reason)
        return ["--ends", json.dumps(asdict(self.ends)), "--spec", spec.model_dump_json()]
