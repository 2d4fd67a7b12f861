"""What the tun and proxy backends share: a relay process driven over its control socket.

Subclasses say which module runs the relay and with which arguments; starting, live updates,
counters, status and stopping are the same for both.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

from emulator.errors import TopologyError
from emulator.net.backend import TO_LOCAL, TO_REMOTE, DirectionCounters, LinkCounters, LinkEnds
from emulator.net.relay_process import RelayProcess, default_run_dir
from emulator.net.spec import LinkSpec

log = logging.getLogger(__name__)


def counters_from_reply(reply: dict[str, Any]) -> LinkCounters:
    """LinkCounters from a relay's `counters` reply (both relays use the same shape)."""
    raw = reply.get("counters", {})
    directions = {}
    for direction in (TO_LOCAL, TO_REMOTE):
        entry = raw.get(direction, {})
        directions[direction] = DirectionCounters(
            bytes=int(entry.get("bytes", 0)), packets=int(entry.get("packets", 0)), drops=int(entry.get("drops", 0))
        )
    at = reply.get("at")
    is_time = isinstance(at, int | float) and not isinstance(at, bool) and math.isfinite(at)
    return LinkCounters(directions=directions, read_at_monotonic=float(at) if is_time else None)


class RelayBackend:
    """A LinkBackend whose link is a relay process; `relay_module` and `_relay_args` define it."""

    name: str
    relay_module: str

    def __init__(self, ends: LinkEnds, run_dir: Path | None = None, seed: int | None = None,
                 start_timeout_s: float = 10.0) -> None:
        self.ends = ends
        self._run_dir = run_dir
        self._seed = seed
        self._start_timeout_s = start_timeout_s
        self._relay: RelayProcess | None = None

    def _relay_args(self, spec: LinkSpec) -> list[str]:
        raise NotImplementedError

    def _started(self, info: dict[str, Any]) -> None:
        """Hook: the relay's ready line, once it is up."""

    @property
    def pid(self) -> int | None:
        """The relay's pid while it runs, for the cleanup ledger."""
        return self._relay.pid if self._relay is not None else None

    def apply(self, spec: LinkSpec) -> None:
        """Start the relay with `spec`; on a running link this is `update`."""
        if self._relay is not None:
            self.update(spec)
            return
        args = self._relay_args(spec)
        if self._seed is not None:
            args += ["--seed", str(self._seed)]
        run_dir = self._run_dir or default_run_dir(self.ends.run_id)
        name = f"{self.name}-{self.ends.remote_ifname or 'link'}"
        self._relay = RelayProcess(self.relay_module, name, args, run_dir, self._start_timeout_s)
        log.info("link backend: %s relay pid %d", self.name, self._relay.pid)
        self._started(self._relay.info)

    def update(self, spec: LinkSpec) -> None:
        self._request("update", spec=spec.model_dump(mode="json"))

    def counters(self) -> LinkCounters:
        return counters_from_reply(self._request("counters"))

    def status(self) -> dict[str, Any]:
        """The relay's own view: pid, uptime, current spec, and what it does not emulate."""
        return self._request("status")["status"]

    def close(self) -> None:
        if self._relay is not None:
            relay, self._relay = self._relay, None
            relay.stop()

    def _request(self, op: str, **fields: Any) -> dict[str, Any]:
        if self._relay is None:
            raise TopologyError(f"{self.name} backend: link is not applied; call apply(spec) first")
        if not self._relay.is_alive():
            raise TopologyError(f"{self.name} backend: relay {self._relay.pid} died; see {self._relay.log_path}")
        return self._relay.request(op, **fields)
